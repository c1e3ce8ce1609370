"""Stage `corpus`: the lab's text by kind — code (this machine's Python standard library plus `--extra` directories,
``*.py``) and prose (`--prose` directories of technical English: ``*.rst``, ``*.txt``, ``*.md``, e.g. Debian's doc
packages fetched by ``train/scripts/data/fetch_prose.sh``).

Files of 200 B–200 kB (preset) are deduplicated by content and split deterministically by their sha256 into
train / dev / held-out, so the same file lands in the same split on every machine; a preset may cap
each kind's bytes (a hash-ordered subset). Outputs: ``train.jsonl``, ``dev.jsonl``, ``heldout.jsonl`` (one document
per line: kind, source, path, sha256, text), ``sources.json`` (every file seen: kind, source, relative path, bytes,
sha256, the split it fed or why it was left out; the Python version), ``manifest.json``.

    python -m specdraft_train corpus --out runs/lab/corpus --preset micro [--extra DIR ...] [--prose DIR ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import CorpusConfig, LabPreset, announce, override
from ..formats.artifacts import atomic_write_json, sha256_bytes, write_manifest
from ..formats.documents import KINDS, SPLITS, Document, document_file, split_of, subset_rank, write_documents
from ..presets import PRETRAIN_PRESETS, add_preset_argument, get_preset

SUFFIXES = {"code": (".py",), "prose": (".rst", ".txt", ".md")}  # .txt includes Sphinx's _sources/*.rst.txt
EXCLUDED_DIR_NAMES = frozenset({"site-packages", "dist-packages", "__pycache__"})  # third-party code, not stdlib
# Where `lab` looks for a preset's prose packages when given no --prose (fetch_prose.sh DEST; scripts/pytest.sh
# provisions git-doc there for the micro preset).
PROSE_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "prose"
FETCH_PROSE = Path(__file__).resolve().parents[2] / "scripts" / "data" / "fetch_prose.sh"


@dataclass(frozen=True)
class SourceRoot:
    name: str
    kind: str
    path: Path


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def preset_prose(preset: LabPreset, required: bool = True) -> list[Path]:
    """The preset's prose folders in the prose cache; where one is missing, a clear error naming the fetch command,
    or (not ``required``) the same words as a warning and the folders that are there."""
    folders = [PROSE_CACHE / name for name in preset.prose_packages]
    missing = [folder for folder in folders if not folder.is_dir()]
    if missing:
        said = (
            f"the {preset.name} preset's prose is missing ({', '.join(str(m) for m in missing)}): fetch it with "
            f"`bash {FETCH_PROSE} {PROSE_CACHE} {' '.join(m.name for m in missing)}`, or pass --prose DIR"
        )
        if required:
            raise FileNotFoundError(said)
        print(f"corpus: {said}; going on without it", file=sys.stderr)
    return [folder for folder in folders if folder.is_dir()]


def iter_source_files(root: Path, kind: str) -> Iterator[Path]:
    suffixes = SUFFIXES[kind]
    for path in sorted(p for p in root.rglob("*") if p.name.endswith(suffixes)):
        rel_parts = path.relative_to(root).parts
        if any(part in EXCLUDED_DIR_NAMES for part in rel_parts):
            continue
        if path.is_file():
            yield path


def _cap_kind(documents: list[Document], max_bytes: int) -> set[str]:
    """sha256 of the hash-ordered documents that fit in ``max_bytes``."""
    chosen: set[str] = set()
    total = 0
    for doc in sorted(documents, key=lambda d: subset_rank(d.sha256)):
        if total + doc.bytes > max_bytes:
            continue
        chosen.add(doc.sha256)
        total += doc.bytes
    return chosen


def scan_sources(roots: list[SourceRoot], config: CorpusConfig) -> tuple[list[Document], list[dict[str, Any]]]:
    """Read every candidate file; return kept documents and a record for every file seen."""
    documents: list[Document] = []
    records: list[dict[str, Any]] = []
    seen: set[str] = set()  # across kinds: a file is one document, whichever root held it first
    for root in roots:
        for path in iter_source_files(root.path, root.kind):
            data = path.read_bytes()
            sha = sha256_bytes(data)
            record: dict[str, Any] = {
                "kind": root.kind,
                "source": root.name,
                "path": str(path.relative_to(root.path)),
                "bytes": len(data),
                "sha256": sha,
            }
            records.append(record)
            if not config.min_file_bytes <= len(data) <= config.max_file_bytes:
                record["split"] = "excluded:size"
                continue
            if sha in seen:
                record["split"] = "excluded:duplicate"
                continue
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                record["split"] = "excluded:not-utf8"
                continue
            seen.add(sha)
            record["split"] = "pending"
            documents.append(Document(root.kind, root.name, record["path"], sha, text))
    for kind in KINDS:
        if config.max_bytes(kind) <= 0:
            continue
        chosen = _cap_kind([d for d in documents if d.kind == kind], config.max_bytes(kind))
        documents = [d for d in documents if d.kind != kind or d.sha256 in chosen]
        for record in records:
            if record["kind"] == kind and record["split"] == "pending" and record["sha256"] not in chosen:
                record["split"] = "excluded:subset"
    for record in records:
        if record["split"] == "pending":
            record["split"] = split_of(record["sha256"], config)
    return documents, records


def _summary(documents: list[Document]) -> dict[str, Any]:
    by_kind = {kind: [d for d in documents if d.kind == kind] for kind in KINDS}
    kinds = {kind: {"files": len(docs), "bytes": sum(d.bytes for d in docs)} for kind, docs in by_kind.items()}
    return {"files": len(documents), "bytes": sum(d.bytes for d in documents), "kinds": kinds}


def build_corpus(
    out_dir: str | Path, config: CorpusConfig, stdlib: Path | None, extras: list[Path], prose: list[Path] | None = None
) -> dict[str, Any]:
    start = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    roots: list[SourceRoot] = []
    if stdlib is not None:
        roots.append(SourceRoot("stdlib", "code", stdlib))
    for flag, kind, directories in (("--extra", "code", extras), ("--prose", "prose", prose or [])):
        for directory in directories:
            if not directory.is_dir():
                raise FileNotFoundError(f"{flag} {directory}: not a directory")
            roots.append(SourceRoot(f"{'extra' if kind == 'code' else 'prose'}:{directory.name}", kind, directory))
    documents, records = scan_sources(roots, config)
    if not documents:
        raise ValueError(
            f"no text files of {config.min_file_bytes}–{config.max_file_bytes} bytes under "
            f"{[str(r.path) for r in roots]}"
        )
    by_split: dict[str, list[Document]] = {s: [] for s in SPLITS}
    for doc in documents:
        by_split[split_of(doc.sha256, config)].append(doc)
    for split in SPLITS:
        write_documents(out, split, by_split[split])
    summary = {split: _summary(docs) for split, docs in by_split.items()}
    atomic_write_json(
        out / "sources.json",
        {
            "python_version": platform.python_version(),
            "roots": [{"source": r.name, "kind": r.kind, "path": str(r.path)} for r in roots],
            "summary": summary,
            "files": records,
        },
    )
    return write_manifest(
        out,
        "corpus",
        outputs=[*(document_file(s) for s in SPLITS), "sources.json"],
        params={"config": config.__dict__, "python_version": platform.python_version()},
        extra={"summary": summary, "seconds": time.time() - start},
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "corpus",
        help="collect code (stdlib + --extra) and prose (--prose), split by hash",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, type=Path, help="output directory")
    add_preset_argument(p, choices=PRETRAIN_PRESETS)
    p.add_argument("--extra", action="append", default=[], type=Path, help="another code tree, *.py (repeatable)")
    p.add_argument(
        "--prose",
        action="append",
        default=[],
        type=Path,
        help="a prose tree, *.rst/*.txt/*.md (repeatable; fetch_prose.sh makes one per Debian package)",
    )
    p.add_argument("--stdlib", type=Path, default=None, help="stdlib directory (default: this interpreter's)")
    p.add_argument("--no-stdlib", action="store_true", help="no stdlib: only --extra and --prose directories")
    p.add_argument("--max-code-bytes", type=int, default=None, help="cap the code (default: preset's; 0 = all)")
    p.add_argument("--max-prose-bytes", type=int, default=None, help="cap the prose (default: preset's; 0 = all)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    config = override(
        get_preset(args.preset).corpus, max_code_bytes=args.max_code_bytes, max_prose_bytes=args.max_prose_bytes
    )
    stdlib = None if args.no_stdlib else (args.stdlib or stdlib_root())
    caps = {kind: f"{config.max_bytes(kind):,} B" if config.max_bytes(kind) else "all" for kind in KINDS}
    shares = {"held out ‰": config.heldout_per_mille, "dev ‰": config.dev_per_mille}
    announce("corpus", args.preset, {"code": caps["code"], "prose": caps["prose"], **shares})
    manifest = build_corpus(args.out, config, stdlib, args.extra, args.prose)
    print(json.dumps(manifest["summary"]))
    return 0
