"""Artifacts that stages hand each other: atomic writes, sha256 manifests, and input verification.

Every stage writes its outputs into one directory and, last, a ``manifest.json`` listing each output file with its
sha256. A stage is complete exactly when that manifest exists and every listed file still hashes to its value; a
stage that consumes another stage's directory calls :func:`verify_stage_dir` first and refuses it on any mismatch.

    from specdraft_train.formats.artifacts import verify_stage_dir, write_manifest
    manifest = verify_stage_dir("runs/lab/corpus", stage="corpus")
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"
# The Q4_0 GGUF a drafter ships as: the lab's ``export/`` and each `ablate` variant's directory hold one of this name.
DRAFTER_GGUF = "drafter-q4_0.gguf"
HASH_CHUNK_BYTES = 1 << 20  # 1 MiB reads: hashing speed plateaus well before this


class ArtifactError(RuntimeError):
    """An input artifact is missing, incomplete, or does not match the hash its manifest recorded."""


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _temp_path_beside(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a temp file beside ``path``, fsync it, then ``os.replace`` it into place."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path_beside(target)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


class AtomicFile:
    """Context manager yielding a temp path beside ``path``; on success the temp file replaces ``path``.

    For writers that want a filename (``torch.save``, ``safetensors.save_file``) rather than bytes.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.tmp: Path | None = None

    def __enter__(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = _temp_path_beside(self.path)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        assert self.tmp is not None
        try:
            if exc_type is None:
                with open(self.tmp, "rb+") as f:
                    os.fsync(f.fileno())
                os.replace(self.tmp, self.path)
        finally:
            self.tmp.unlink(missing_ok=True)


def write_dir_atomically(final_dir: Path, fill: Any) -> None:
    """Create ``final_dir`` by filling a temp directory with ``fill(tmp_dir)`` and renaming it into place.

    ``final_dir`` must not exist yet (callers use fresh names such as ``step-000120``), so the rename is atomic.
    """
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{final_dir.name}.", suffix=".tmp", dir=final_dir.parent))
    try:
        fill(tmp_dir)
        for child in tmp_dir.iterdir():
            if child.is_file():
                with open(child, "rb+") as f:
                    os.fsync(f.fileno())
        if final_dir.exists():
            shutil.rmtree(final_dir)
        os.replace(tmp_dir, final_dir)
    finally:
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir, ignore_errors=True)


def hash_outputs(out_dir: Path, relative_paths: Iterable[str]) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = {}
    for rel in sorted(set(relative_paths)):
        path = out_dir / rel
        files[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return files


def write_manifest(
    out_dir: str | os.PathLike[str],
    stage: str,
    outputs: Iterable[str],
    params: dict[str, Any] | None = None,
    inputs: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Hash ``outputs`` (paths relative to ``out_dir``) and write the stage's manifest last, atomically."""
    root = Path(out_dir)
    manifest = {
        "stage": stage,
        "created_unix": time.time(),
        "params": params or {},
        "inputs": inputs or {},
        "outputs": hash_outputs(root, outputs),
        **(extra or {}),
    }
    atomic_write_json(root / MANIFEST_NAME, manifest)
    return manifest


def read_manifest(stage_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    path = Path(stage_dir) / MANIFEST_NAME
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def verify_stage_dir(stage_dir: str | os.PathLike[str], stage: str | tuple[str, ...] | None = None) -> dict[str, Any]:
    """Return the manifest of a finished stage after checking every output's sha256; raise ArtifactError otherwise."""
    root = Path(stage_dir)
    manifest = read_manifest(root)
    if manifest is None:
        raise ArtifactError(f"{root}: no {MANIFEST_NAME}; the stage that writes it has not finished")
    allowed = (stage,) if isinstance(stage, str) else stage
    if allowed is not None and manifest.get("stage") not in allowed:
        raise ArtifactError(
            f"{root}: expected output of stage {'/'.join(allowed)}, found stage {manifest.get('stage')!r}"
        )
    for rel, info in manifest["outputs"].items():
        path = root / rel
        if not path.is_file():
            raise ArtifactError(f"{path}: listed in {MANIFEST_NAME} but missing")
        actual = sha256_file(path)
        if actual != info["sha256"]:
            raise ArtifactError(f"{path}: sha256 {actual[:16]}… does not match the manifest's {info['sha256'][:16]}…")
    return manifest


def stage_complete(stage_dir: str | os.PathLike[str], stage: str | None = None) -> bool:
    try:
        verify_stage_dir(stage_dir, stage)
        return True
    except ArtifactError:
        return False


def input_record(stage_dir: str | os.PathLike[str], manifest: dict[str, Any] | None) -> dict[str, Any]:
    """What a consuming stage records about one input directory: its path and its outputs' hashes."""
    if manifest is None:
        return {"path": str(stage_dir), "verified": False}
    return {
        "path": str(stage_dir),
        "stage": manifest["stage"],
        "verified": True,
        "outputs": {rel: info["sha256"] for rel, info in manifest["outputs"].items()},
    }


def add_stage_seconds(state: dict[str, Any], stage: str, seconds: float, finished: bool, key: str) -> None:
    """A run's wall seconds of ``stage`` into a resumable command's JSON ``state`` (the lab's lab_state.json, an
    ablation variant's progress.json): added to the stage's earlier interrupted runs (``interrupted_seconds``), and
    counted under ``state[key]`` once the stage finishes."""
    interrupted = state.setdefault("interrupted_seconds", {})
    total = interrupted.pop(stage, 0.0) + seconds
    if finished:
        state[key][stage] = round(total, 2)
    else:
        interrupted[stage] = total
