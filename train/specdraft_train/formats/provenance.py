"""Where a drafter's training data came from: the sources of a packed folder's data_manifest.json, and its base model.

`pack --manifest` takes ``{"format": "specdraft-data-manifest/1", "complete", "sources": [{name, split, uri,
revision | sha256}]}`` (src/pack/dataManifest.ts checks it). Every `distill` manifest carries the ``sources`` of its
chain — the model it started from (a base model by revision or content hash), the reference data it learned from (the
target as teacher, the prompts file or corpus, the training shards, dev and held-out sets, each by sha256), replay
text — and the chain's ``base_model``; `export` writes them beside the GGUF (``<name>.data_manifest.json``) and the
base model into ``general.base_model``, so the real path needs no hand-written manifest.

A model is pinned by :func:`model_pin`: its stage manifest's hashes (lab checkpoints), the hub revision it was read
at (an HF id found in the local cache), or the sha256 of its files (any other local directory; an 8B's 16 GB hash in
~10 s, its shards in parallel).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .artifacts import sha256_file

DATA_MANIFEST_FORMAT = "specdraft-data-manifest/1"  # src/pack/dataManifest.ts dataManifestFormat
DATA_MANIFEST_SUFFIX = ".data_manifest.json"
MODEL_FILE_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".jinja")  # what loading a model directory reads


def hub_revision(repo_id: str) -> str | None:
    """The commit an HF id's files were downloaded at, from the local cache (no network), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # not an id the hub library accepts, or no cache
        return None
    if not isinstance(cached, str):
        return None
    parts = Path(cached).parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts else None


def directory_sha256(directory: Path) -> str:
    """sha256 over the sorted (name, sha256) of a model directory's files: one hash for its whole content."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in MODEL_FILE_SUFFIXES)
    with ThreadPoolExecutor(max_workers=8) as pool:  # hashlib releases the GIL: shards hash in parallel
        digests = list(pool.map(sha256_file, files))
    return hashlib.sha256("".join(f"{p.name} {d}\n" for p, d in zip(files, digests)).encode()).hexdigest()


def model_pin(name_or_path: str | Path, manifest: dict[str, Any] | None) -> dict[str, str]:
    """{"sha256": …} or {"revision": …} pinning a model input; {} when nothing pins it (an HF id not in the cache)."""
    if manifest is not None:  # a stage's checkpoint: its outputs' hashes, verified when it was read
        outputs = {rel: info["sha256"] for rel, info in manifest["outputs"].items()}
        return {"sha256": hashlib.sha256(json.dumps(outputs, sort_keys=True).encode()).hexdigest()}
    if Path(name_or_path).is_dir():
        return {"sha256": directory_sha256(Path(name_or_path))}
    revision = hub_revision(str(name_or_path))
    return {"revision": revision} if revision else {}


def source(name: str, split: str, uri: str, **pin: str) -> dict[str, Any]:
    """A data-manifest source: what it is, which split it fed, where it was read, and its pin (sha256 or revision)."""
    return {"name": name, "split": split, "uri": uri, **pin}


def model_source(info: dict[str, Any], split: str) -> dict[str, Any]:
    """A model input (models.checkpoint_info with its "pin") as a data-manifest source."""
    path = str(info["path"])
    return source(Path(path).name or path, split, path, **info.get("pin", {}))


def reference_sources(reference: dict[str, Any], reference_manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """What a reference stage contributes: its teacher, its prompts (file or corpus) and the data it wrote."""
    inputs = reference_manifest.get("inputs", {})
    sources = []
    if "target" in inputs:
        sources.append(model_source(inputs["target"], "teacher"))
    if "prompts" in inputs:
        prompts = inputs["prompts"]
        sources.append(source(Path(prompts["path"]).name, "prompts", prompts["path"], sha256=prompts["sha256"]))
    for rel, digest in inputs.get("corpus", {}).get("outputs", {}).items():
        sources.append(source(f"corpus/{rel}", "prompts", inputs["corpus"]["path"], sha256=digest))
    splits = {"heldout.jsonl": "held_out", "dev.jsonl": "dev"}
    for rel, info in reference_manifest.get("outputs", {}).items():
        split = splits.get(rel, "distill")
        sources.append(source(f"reference/{rel}", split, reference["path"], sha256=info["sha256"]))
    return sources


def merge_sources(*groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sources in order, each (name, split, pin) once."""
    seen, merged = set(), []
    for source in (s for group in groups for s in group):
        key = (source["name"], source["split"], source.get("sha256"), source.get("revision"))
        if key not in seen:
            seen.add(key)
            merged.append(source)
    return merged


def data_manifest(sources: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """data_manifest.json from the sources: those nothing pins are left out and the manifest marked incomplete."""
    pinned = [s for s in sources if s.get("sha256") or s.get("revision")]
    unpinned = [s["uri"] for s in sources if not (s.get("sha256") or s.get("revision"))]
    manifest: dict[str, Any] = {"format": DATA_MANIFEST_FORMAT, "complete": not unpinned, "sources": pinned}
    if unpinned:
        manifest["note"] = f"not pinned by a revision or hash, so left out: {', '.join(unpinned)}"
    return manifest


def data_manifest_path(gguf_path: Path) -> Path:
    """``drafter-q4_0.gguf`` → ``drafter-q4_0.data_manifest.json``, for ``specdraft pack --manifest``."""
    return gguf_path.with_name(gguf_path.stem + DATA_MANIFEST_SUFFIX)


def chain_provenance(
    drafter: str | Path,
    drafter_manifest: dict[str, Any] | None,
    inputs: dict[str, Any],
    reference_manifest: dict[str, Any],
) -> dict[str, Any]:
    """The manifest's ``sources`` and ``base_model`` (provenance.py): a distilled drafter's inherited, with this run's
    reference data (and replay text) added; otherwise the drafter, pinned, is the base model."""
    if drafter_manifest is not None and "base_model" in drafter_manifest:
        inherited, base = drafter_manifest.get("sources", []), drafter_manifest["base_model"]
    else:
        pin = model_pin(drafter, drafter_manifest)
        inputs["drafter"]["pin"] = pin
        inherited = [model_source(inputs["drafter"], "base model")]
        base = {"name": str(drafter), "revision": pin.get("revision") or pin.get("sha256", "")[:16] or None}
    replay = inputs.get("replay")
    replay_sources = [
        {"name": Path(path).name, "split": "distill (replay)", "uri": path, "sha256": digest}
        for path, digest in (replay or {}).get("files", {}).items()
    ] + [
        {"name": f"replay/{rel}", "split": "distill (replay)", "uri": replay["path"], "sha256": digest}
        for rel, digest in (replay or {}).get("outputs", {}).items()
    ]
    sources = merge_sources(inherited, reference_sources(inputs["reference"], reference_manifest), replay_sources)
    return {"sources": sources, "base_model": base}
