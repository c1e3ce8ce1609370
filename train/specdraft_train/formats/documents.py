"""The text the stages hand each other before any model exists: the corpus's documents (written by `corpus`, read by
`tokenizer` and `reference`) and the token streams made of them (written by `tokenizer`, and by `pretrain --init` in
a given checkpoint's tokenizer; read by `pretrain` and by `distill`'s replay). Each file's writer and reader live here,
beside the rules that place a document in a split and make a stream of the documents.

    documents = read_documents("runs/lab/corpus", "train")        # [Document(kind, source, path, sha256, text)]
    tokens = load_token_stream("runs/lab/tokenizer", "train")     # np.int32, each document followed by <|endoftext|>
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ..config import CorpusConfig, TokenizerConfig
from .artifacts import AtomicFile, atomic_write_text

SPLITS = ("train", "dev", "heldout")
KINDS = ("code", "prose")
STREAM_SPLITS = ("train", "dev")  # the splits pretraining reads as token streams
ENCODE_BATCH_DOCUMENTS = 2048


@dataclass(frozen=True)
class Document:
    kind: str  # "code" | "prose"
    source: str  # "stdlib", "extra:<dir name>" or "prose:<dir name>"
    path: str  # relative to its source root
    sha256: str
    text: str

    @property
    def bytes(self) -> int:
        return len(self.text.encode("utf-8"))


def split_of(sha256: str, config: CorpusConfig) -> str:
    """Deterministic split from the content hash: the first 8 hex digits as a number, per mille."""
    bucket = int(sha256[:8], 16) % 1000
    if bucket < config.heldout_per_mille:
        return "heldout"
    if bucket < config.heldout_per_mille + config.dev_per_mille:
        return "dev"
    return "train"


def subset_rank(sha256: str) -> int:
    """Order of byte-capped subsets; independent of split_of's digits, so a subset keeps the split proportions."""
    return int(sha256[8:16], 16)


def document_file(split: str) -> str:
    return f"{split}.jsonl"


def write_documents(corpus_dir: Path, split: str, documents: Sequence[Document]) -> None:
    """One split of the corpus stage, a document per line (atomically)."""
    lines = [
        json.dumps(
            {"kind": d.kind, "source": d.source, "path": d.path, "sha256": d.sha256, "text": d.text}, ensure_ascii=False
        )
        for d in documents
    ]
    atomic_write_text(corpus_dir / document_file(split), "".join(line + "\n" for line in lines))


def read_documents(corpus_dir: str | Path, split: str) -> list[Document]:
    """Load one split written by the corpus stage (callers verify the directory's manifest first)."""
    documents = []
    with open(Path(corpus_dir) / document_file(split), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            documents.append(Document(row["kind"], row["source"], row["path"], row["sha256"], row["text"]))
    return documents


# ---------------------------------------------------------------------------------------------------------------------
# Token streams


def token_file(split: str) -> str:
    return f"{split}.tokens.npy"


def save_token_stream(path: Path, tokens: np.ndarray) -> None:
    with AtomicFile(path) as tmp, open(tmp, "wb") as f:
        np.save(f, tokens.astype(np.uint16 if tokens.max(initial=0) < 2**16 else np.int32))


def load_token_stream(tokenizer_dir: str | Path, split: str) -> np.ndarray:
    return np.load(Path(tokenizer_dir) / token_file(split)).astype(np.int32)


def encode_documents(tokenizer: Tokenizer, texts: list[str], end_id: int) -> list[np.ndarray]:
    """Each text's token ids followed by ``end_id`` (how pretraining sees a document; the lab's <|endoftext|>)."""
    parts = []
    for start in range(0, len(texts), ENCODE_BATCH_DOCUMENTS):  # batches: Encoding objects are heavy (offsets etc.)
        for encoding in tokenizer.encode_batch(texts[start : start + ENCODE_BATCH_DOCUMENTS], add_special_tokens=False):
            parts.append(np.asarray([*encoding.ids, end_id], dtype=np.int32))
    return parts


def token_stream(tokenizer: Tokenizer, texts: list[str], end_id: int) -> np.ndarray:
    """The documents as one token array, each followed by ``end_id``."""
    parts = encode_documents(tokenizer, texts, end_id)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def stream_weight(kind: str, config: TokenizerConfig) -> int:
    """How many times a document of this kind appears in the pretraining stream."""
    return config.prose_repeats if kind == "prose" else 1


def pretraining_streams(
    tokenizer: Tokenizer, corpus_dir: str | Path, end_id: int, config: TokenizerConfig
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The corpus's train and dev splits as pretraining's token streams (each document followed by ``end_id``; in the
    train stream every prose document `prose_repeats` times), and the train split's tokens of each kind, once."""
    documents = read_documents(corpus_dir, "train")
    encoded = encode_documents(tokenizer, [d.text for d in documents], end_id)
    # Repeats follow the split once through: pretraining visits chunks in a seeded permutation, so where in the
    # stream a repeat sits does not matter.
    repeats = [part for doc, part in zip(documents, encoded) for _ in range(stream_weight(doc.kind, config) - 1)]
    streams = {
        "train": np.concatenate([*encoded, *repeats]) if encoded else np.zeros(0, dtype=np.int32),
        "dev": token_stream(tokenizer, [d.text for d in read_documents(corpus_dir, "dev")], end_id),
    }
    once = {kind: sum(len(p) for d, p in zip(documents, encoded) if d.kind == kind) for kind in KINDS}
    return streams, once
