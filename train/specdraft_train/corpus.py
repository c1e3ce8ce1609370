"""Stage `corpus`: the lab's text — Python standard-library source on this machine, plus any `--extra` directories.

Files of 200 B–200 kB (preset) are deduplicated by content and split deterministically by their sha256 into
train / dev / held-out, so the same file lands in the same split on every machine. Outputs: ``train.jsonl``,
``dev.jsonl``, ``heldout.jsonl`` (one document per line: source, path, sha256, text), ``sources.json`` (every file
seen: relative path, bytes, sha256, the split it fed or why it was left out, the Python version), ``manifest.json``.

    python -m specdraft_train corpus --out runs/lab/corpus --preset micro [--extra DIR ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .artifacts import atomic_write_json, atomic_write_text, sha256_bytes, write_manifest
from .config import CorpusConfig, get_preset, override

SPLITS = ("train", "dev", "heldout")
EXCLUDED_DIR_NAMES = frozenset({"site-packages", "dist-packages", "__pycache__"})  # third-party code, not stdlib
SOURCE_SUFFIX = ".py"


@dataclass(frozen=True)
class Document:
    source: str  # "stdlib" or the --extra directory's name
    path: str  # relative to its source root
    sha256: str
    text: str

    @property
    def bytes(self) -> int:
        return len(self.text.encode("utf-8"))


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def split_of(sha256: str, config: CorpusConfig) -> str:
    """Deterministic split from the content hash: the first 8 hex digits as a number, per mille."""
    bucket = int(sha256[:8], 16) % 1000
    if bucket < config.heldout_per_mille:
        return "heldout"
    if bucket < config.heldout_per_mille + config.dev_per_mille:
        return "dev"
    return "train"


def _subset_rank(sha256: str) -> int:
    # Independent of split_of's digits, so a byte-capped subset keeps the split proportions.
    return int(sha256[8:16], 16)


def iter_source_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob(f"*{SOURCE_SUFFIX}")):
        rel_parts = path.relative_to(root).parts
        if any(part in EXCLUDED_DIR_NAMES for part in rel_parts):
            continue
        if path.is_file():
            yield path


def scan_sources(roots: list[tuple[str, Path]], config: CorpusConfig) -> tuple[list[Document], list[dict[str, Any]]]:
    """Read every candidate file; return kept documents and a record for every file seen."""
    documents: list[Document] = []
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for source, root in roots:
        for path in iter_source_files(root):
            data = path.read_bytes()
            sha = sha256_bytes(data)
            record: dict[str, Any] = {"source": source, "path": str(path.relative_to(root)), "bytes": len(data), "sha256": sha}
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
            documents.append(Document(source, record["path"], sha, text))
    if config.max_total_bytes > 0:
        chosen: set[str] = set()
        total = 0
        for doc in sorted(documents, key=lambda d: _subset_rank(d.sha256)):
            if total + doc.bytes > config.max_total_bytes:
                continue
            chosen.add(doc.sha256)
            total += doc.bytes
        documents = [d for d in documents if d.sha256 in chosen]
        for record in records:
            if record["split"] == "pending" and record["sha256"] not in chosen:
                record["split"] = "excluded:subset"
    for record in records:
        if record["split"] == "pending":
            record["split"] = split_of(record["sha256"], config)
    return documents, records


def read_documents(corpus_dir: str | Path, split: str) -> list[Document]:
    """Load one split written by this stage (callers verify the directory's manifest first)."""
    documents = []
    with open(Path(corpus_dir) / f"{split}.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            documents.append(Document(row["source"], row["path"], row["sha256"], row["text"]))
    return documents


def build_corpus(out_dir: str | Path, config: CorpusConfig, stdlib: Path | None, extras: list[Path]) -> dict[str, Any]:
    start = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    roots: list[tuple[str, Path]] = []
    if stdlib is not None:
        roots.append(("stdlib", stdlib))
    for extra in extras:
        if not extra.is_dir():
            raise FileNotFoundError(f"--extra {extra}: not a directory")
        roots.append((f"extra:{extra.name}", extra))
    documents, records = scan_sources(roots, config)
    if not documents:
        raise ValueError(f"no source files of {config.min_file_bytes}–{config.max_file_bytes} bytes under {roots}")
    by_split: dict[str, list[Document]] = {s: [] for s in SPLITS}
    for doc in documents:
        by_split[split_of(doc.sha256, config)].append(doc)
    for split in SPLITS:
        lines = [
            json.dumps({"source": d.source, "path": d.path, "sha256": d.sha256, "text": d.text}, ensure_ascii=False)
            for d in by_split[split]
        ]
        atomic_write_text(out / f"{split}.jsonl", "".join(line + "\n" for line in lines))
    summary = {
        split: {"files": len(docs), "bytes": sum(d.bytes for d in docs)} for split, docs in by_split.items()
    }
    atomic_write_json(
        out / "sources.json",
        {
            "python_version": platform.python_version(),
            "roots": [{"source": name, "path": str(path)} for name, path in roots],
            "summary": summary,
            "files": records,
        },
    )
    return write_manifest(
        out,
        "corpus",
        outputs=[*(f"{s}.jsonl" for s in SPLITS), "sources.json"],
        params={"config": config.__dict__, "python_version": platform.python_version()},
        extra={"summary": summary, "seconds": time.time() - start},
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("corpus", help="collect stdlib (+extra) source and split it train/dev/held-out",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--preset", default="lab", help="micro | lab (default: lab)")
    p.add_argument("--extra", action="append", default=[], type=Path, help="another source tree to include (repeatable)")
    p.add_argument("--stdlib", type=Path, default=None, help="stdlib directory (default: this interpreter's)")
    p.add_argument("--no-stdlib", action="store_true", help="use only --extra directories")
    p.add_argument("--max-total-bytes", type=int, default=None, help="cap the corpus (default: preset's; 0 = all)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    config = override(get_preset(args.preset).corpus, max_total_bytes=args.max_total_bytes)
    stdlib = None if args.no_stdlib else (args.stdlib or stdlib_root())
    manifest = build_corpus(args.out, config, stdlib, args.extra)
    print(json.dumps(manifest["summary"]))
    return 0
