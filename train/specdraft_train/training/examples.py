"""What `distill` trains on: the reference stage's training shards (written by `reference`, read here by `distill`),
the examples a run keeps, how an epoch's rows become steps and a step's rows the model's input, the replay text beside
them, and the checks that all of it is in the drafter's vocabulary (:func:`read_inputs` reads a run's examples and dev
set, verified).

A shard ``train-NNNNN.safetensors`` holds a run of prompts, the target's greedy continuation of each and its top-k
token ids and log-probs (fp16) at every continuation position, flattened with offsets; its one metadata key lists the
prompts' ids and categories. An `onpolicy` shard holds the drafter's continuations instead, and ``labels``: the
target's greedy token at each of their positions, what training predicts there. A distill run keeps the examples of
its categories (prefixes) and a hash-chosen share of them (`DistillConfig.categories`, `data_fraction`). Each epoch
takes every row once, in a seeded order cut into steps of equal tokens (`batch_tokens`, or `batch_size` rows' worth);
a step's rows go to the ranks balanced by tokens and each rank's rows, with rows of replay text (the base's
pretraining tokens) after them, are packed into one sequence (packing.py) or right-padded:

    examples = select_examples(read_train_examples("runs/lab/reference"), config)
    steps = epoch_steps(widths, epoch_order(widths, seed, epoch, config.batch_size, 0), steps_per_epoch(widths, config))
    batch = collate([examples[i] for i in steps[0]], pad_id, device, replay.chunks(step))   # inputs, index, labels…
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..config import DistillConfig, serving_context_note
from ..formats.artifacts import AtomicFile, input_record, read_manifest, sha256_file, verify_stage_dir
from ..formats.documents import load_token_stream, token_file
from ..formats.prompts import Prompt
from ..formats.vocabulary import tokenizer_fingerprint
from ..modeling.models import checkpoint_info, load_tokenizer, verify_checkpoint
from ..modeling.packing import layout, to_device
from ..modeling.tau import Conversation, read_conversations
from .loop import ChunkSampler, DistributedContext, rank_slice

# ---------------------------------------------------------------------------------------------------------------------
# The training shards


@dataclass(frozen=True)
class Continuation:
    tokens: list[int]
    topk_ids: np.ndarray | None  # (L, K) int32
    topk_logprobs: np.ndarray | None  # (L, K) float16
    # The target's greedy token at each position where the continuation is not the target's own (the drafter's, in
    # an `onpolicy` shard): what training predicts there. None: the tokens are the target's, their own labels.
    labels: np.ndarray | None = None  # (L,) int


@dataclass(frozen=True)
class TrainExample:
    """One distillation example: the target's continuation of a prompt and its top-k distribution per position."""

    prompt_tokens: list[int]
    continuation_tokens: list[int]
    topk_ids: np.ndarray  # (L, K) int32
    topk_logprobs: np.ndarray  # (L, K) float32
    id: str = ""  # the prompt's id, e.g. "train/<sha256 prefix>/<start>"
    category: str = ""  # the prompt's category (held-out categories name the same kinds)
    # The target's greedy token at each continuation position, where the continuation is another model's (on-policy
    # data: the drafter wrote it, the target scored it); None: the continuation is the target's, its own labels.
    labels: list[int] | None = None

    @property
    def targets(self) -> list[int]:
        """What each continuation position is trained to predict."""
        return self.continuation_tokens if self.labels is None else self.labels


def _flat(rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    flat = np.concatenate([np.asarray(r, dtype=np.int32) for r in rows]) if rows else np.zeros(0, dtype=np.int32)
    return torch.from_numpy(flat), torch.from_numpy(offsets)


def write_train_shard(path: Path, prompts: Sequence[Prompt], continuations: Sequence[Continuation]) -> None:
    prompt_flat, prompt_offsets = _flat([p.tokens for p in prompts])
    cont_flat, cont_offsets = _flat([c.tokens for c in continuations])
    tensors = {
        "prompt_tokens": prompt_flat,  # (ΣP,)
        "prompt_offsets": prompt_offsets,  # (N + 1,)
        "continuation_tokens": cont_flat,  # (ΣL,)
        "continuation_offsets": cont_offsets,  # (N + 1,)
        "topk_ids": torch.from_numpy(np.concatenate([c.topk_ids for c in continuations])),  # (ΣL, K)
        "topk_logprobs": torch.from_numpy(np.concatenate([c.topk_logprobs for c in continuations])),  # (ΣL, K)
    }
    labelled = [c.labels is not None for c in continuations]
    if any(labelled):
        if not all(labelled):
            raise ValueError("a shard's continuations carry labels all or none")
        labels = np.concatenate([np.asarray(c.labels, dtype=np.int32) for c in continuations])
        tensors["labels"] = torch.from_numpy(labels)  # (ΣL,)
    # One metadata key: safetensors writes several in hash-map order, which would change the file's bytes per process.
    metadata = {"examples": json.dumps({"ids": [p.id for p in prompts], "categories": [p.category for p in prompts]})}
    with AtomicFile(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def read_shard(shard: Path) -> list[TrainExample]:
    """One training shard's examples, in its order."""
    with safe_open(str(shard), framework="np") as f:
        t = {name: f.get_tensor(name) for name in f.keys()}
        described = json.loads((f.metadata() or {}).get("examples", "{}"))
    po, co = t["prompt_offsets"], t["continuation_offsets"]
    ids = described.get("ids") or [""] * (len(po) - 1)
    categories = described.get("categories") or [""] * (len(po) - 1)
    return [
        TrainExample(
            t["prompt_tokens"][po[i] : po[i + 1]].tolist(),
            t["continuation_tokens"][co[i] : co[i + 1]].tolist(),
            t["topk_ids"][co[i] : co[i + 1]],
            t["topk_logprobs"][co[i] : co[i + 1]].astype(np.float32),
            ids[i],
            categories[i],
            t["labels"][co[i] : co[i + 1]].tolist() if "labels" in t else None,
        )
        for i in range(len(po) - 1)
    ]


def read_train_examples(stage_dir: str | Path) -> list[TrainExample]:
    """All training examples of a finished reference (or onpolicy) stage (callers verify its manifest first)."""
    return [e for shard in sorted(Path(stage_dir).glob("train-*.safetensors")) for e in read_shard(shard)]


# ---------------------------------------------------------------------------------------------------------------------
# Which examples a run keeps


def _id_fraction(example_id: str) -> float:
    """A stable number in [0, 1) per example id; a data fraction f keeps the ids below f."""
    return int(hashlib.sha256(example_id.encode("utf-8")).hexdigest()[:8], 16) / 16**8


def share_of_ids(ids: Sequence[str], share: float, what: str = "data_fraction") -> list[int]:
    """The indices of the ids a ``share`` keeps (those whose hash falls below it): smaller shares nest in larger."""
    if not 0 < share <= 1:
        raise ValueError(f"{what} {share}: expected 0 < share ≤ 1")
    if share == 1:
        return list(range(len(ids)))
    if any(not i for i in ids):
        raise ValueError(f"{what} < 1 needs example ids, and these shards carry none")
    return [n for n, i in enumerate(ids) if _id_fraction(i) < share]


def select_examples(examples: Sequence[TrainExample], config: DistillConfig) -> list[TrainExample]:
    """The examples training uses: those of the configured category prefixes, then the configured share of them."""
    kept = [e for e in examples if not config.categories or e.category.startswith(tuple(config.categories))]
    return [kept[i] for i in share_of_ids([e.id for e in kept], config.data_fraction)]


# ---------------------------------------------------------------------------------------------------------------------
# Steps and batches


def row_width(example: TrainExample) -> int:
    """The tokens a training row holds: the prompt and the continuation but its last token (collate's P + C[:-1])."""
    return len(example.prompt_tokens) + len(example.continuation_tokens) - 1


def epoch_order(widths: Sequence[int], seed: int, epoch: int, batch_size: int, group: int) -> np.ndarray:
    """The epoch's order of the rows: a seeded permutation; with ``group`` > 0, runs of ``group`` × ``batch_size`` rows
    of it are sorted by width (longest first), cut into runs of ``batch_size`` and those shuffled, as transformers'
    ``group_by_length``: padded rows of like widths pad little (packed rows never pad: grouping only matters to the
    padded layout). The rows past the epoch's last whole run of ``batch_size`` keep their place at the end."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(widths))
    if group <= 0 or batch_size <= 0:
        return order
    n_batches = len(order) // batch_size
    run = group * batch_size
    by_width = np.asarray(widths)
    batches = []
    for start in range(0, n_batches * batch_size, run):
        rows = order[start : min(start + run, n_batches * batch_size)]
        rows = rows[np.argsort(-by_width[rows], kind="stable")]
        batches += [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]
    shuffled = [batches[i] for i in rng.permutation(len(batches))]
    return np.concatenate(shuffled + [order[n_batches * batch_size :]])


def steps_per_epoch(widths: Sequence[int], config: DistillConfig, world_size: int = 1) -> int:
    """Optimizer steps an epoch takes: its tokens ÷ ``batch_tokens``, or with ``batch_tokens`` 0 (and for rows grouped
    by length) its rows ÷ ``batch_size`` (a step holds ``batch_size`` rows' tokens on average); at least one row per
    rank a step."""
    if config.batch_tokens > 0 and config.group_by_length <= 0:
        steps = math.ceil(int(np.sum(widths)) / config.batch_tokens)
    else:
        steps = len(widths) // max(config.batch_size, 1)
    return max(1, min(steps, len(widths) // world_size))


def epoch_steps(widths: Sequence[int], order: np.ndarray, steps: int, world_size: int = 1) -> list[np.ndarray]:
    """The epoch's ``order`` cut into ``steps`` runs of consecutive rows holding equal shares of its tokens: each row
    goes to the step whose share holds its middle token, and every step keeps at least ``world_size`` rows. Every row
    trains once an epoch; steps differ in tokens by at most about one row."""
    if len(order) < steps * world_size:
        raise ValueError(f"{len(order)} rows cannot fill {steps} steps of {world_size} ranks")
    by_width = np.asarray(widths, dtype=np.int64)[order]
    through = np.cumsum(by_width)  # (n,): tokens up to and including each row
    middle = through - by_width / 2
    step_of = np.minimum((middle * steps / through[-1]).astype(np.int64), steps - 1)  # (n,), non-decreasing
    bounds = np.searchsorted(step_of, np.arange(1, steps), side="left")  # each later step's first row
    for i in range(len(bounds)):  # at least world_size rows a step, never more than leaves the later ones theirs
        low = (bounds[i - 1] if i else 0) + world_size
        bounds[i] = min(max(bounds[i], low), len(order) - (steps - 1 - i) * world_size)
    return np.split(order, bounds)


def rank_rows(rows: np.ndarray, widths: Sequence[int], world_size: int, rank: int) -> np.ndarray:
    """This rank's share of a step's rows: the widest first, each to the rank holding the fewest tokens so far (the
    lowest on ties), so the ranks' tokens differ by at most one row's; in the step's order. Every rank gets a row when
    the step has ``world_size`` of them."""
    if world_size == 1:
        return rows
    loads = [0] * world_size
    owner = np.empty(len(rows), dtype=np.int64)
    for i in sorted(range(len(rows)), key=lambda i: -widths[rows[i]]):
        owner[i] = min(range(world_size), key=lambda r: (loads[r], r))
        loads[owner[i]] += widths[rows[i]]
    return rows[owner == rank]


def padding_factor(widths: Sequence[int], steps: Sequence[np.ndarray]) -> float:
    """Tokens the steps would hold as right-padded rows ÷ the tokens of their rows (1.0: no padding; packed: 1.0)."""
    by_width = np.asarray(widths)
    real = sum(int(by_width[rows].sum()) for rows in steps)
    padded = sum(int(by_width[rows].max()) * len(rows) for rows in steps if len(rows))
    return padded / real if real else 1.0


def collate(
    examples: Sequence[TrainExample],
    pad_id: int,
    device: torch.device,
    replay_chunks: np.ndarray | None = None,
    packed: bool = True,
) -> dict[str, Any]:
    """The model inputs of rows P + C[:-1] (packed or right-padded: packing.layout) and, for every continuation
    token, where its prediction sits: ``index`` into the batch's flat positions, its label and the target's top-k.

    ``replay_chunks`` (R, S + 1) of pretraining text become R more rows of the same forward (one forward per step,
    which DDP needs), predicting tokens 1…S of each chunk.
    """
    sequences = [e.prompt_tokens + e.continuation_tokens[:-1] for e in examples]  # row_width tokens each
    if replay_chunks is not None:
        sequences += [chunk[:-1].tolist() for chunk in replay_chunks]
    inputs, starts = layout(sequences, packed, pad_id)
    # The prediction for C[j] sits at position p − 1 + j of its row.
    index = [
        starts[b] + len(e.prompt_tokens) - 1 + np.arange(len(e.continuation_tokens)) for b, e in enumerate(examples)
    ]
    batch: dict[str, Any] = {
        **to_device(inputs, device),
        "index": torch.from_numpy(np.concatenate(index)).to(device),  # (N,) N = continuation tokens in the batch
        "positions": torch.from_numpy(  # (N,) j: the position inside its continuation
            np.concatenate([np.arange(len(e.continuation_tokens)) for e in examples])
        ).to(device),
        "labels": torch.from_numpy(np.concatenate([np.asarray(e.targets) for e in examples])).long().to(device),
        "topk_ids": torch.from_numpy(np.concatenate([e.topk_ids for e in examples])).long().to(device),  # (N, K)
        "topk_logprobs": torch.from_numpy(np.concatenate([e.topk_logprobs for e in examples])).to(device),  # (N, K)
    }
    if replay_chunks is not None:
        chunks = torch.from_numpy(replay_chunks.astype(np.int64))  # (R, S + 1)
        width = chunks.shape[1] - 1
        replay_starts = torch.from_numpy(starts[len(examples) :])  # (R,)
        batch["replay_index"] = (replay_starts[:, None] + torch.arange(width)).reshape(-1).to(device)  # (M,) M = R·S
        batch["replay_labels"] = chunks[:, 1:].reshape(-1).to(device)  # (M,)
    return batch


# ---------------------------------------------------------------------------------------------------------------------
# Replay text


def load_replay_tokens(source: Path) -> tuple[np.ndarray, dict[str, Any]]:
    """Token ids of replay text and how to record them: a lab tokenizer stage directory (its train split), a
    `pretrain --init` directory or a `run`'s ``replay`` stage (the train split in that checkpoint's tokenizer), a
    ``.npy`` token array, or a directory of ``.npy`` arrays (concatenated in name order)."""
    if source.is_dir() and (source / token_file("train")).is_file() and read_manifest(source) is not None:
        manifest = verify_stage_dir(source, ("tokenizer", "pretrain", "replay"))
        record = {"kind": f"{manifest['stage']} stage", **input_record(source, manifest)}
        return load_token_stream(source, "train"), record
    files = sorted(source.glob("*.npy")) if source.is_dir() else [source]
    if not files or not all(f.is_file() and f.suffix == ".npy" for f in files):
        raise ValueError(
            f"--replay-tokens {source}: expected a tokenizer stage directory, a pretrain --init directory, a .npy "
            "token array, or a directory of .npy token arrays"
        )
    arrays = [np.load(f).astype(np.int32).reshape(-1) for f in files]
    return np.concatenate(arrays), {"kind": "token arrays", "files": {str(f): sha256_file(f) for f in files}}


class ReplayText:
    """The replay text cut into ``replay_seq_len + 1``-token chunks; step → this rank's chunks, fixed in advance
    (pretrain's sampler: the same for any world size and any restart)."""

    def __init__(self, source: Path, config: DistillConfig, vocab_size: int, ctx: DistributedContext):
        self.tokens, self.record = load_replay_tokens(source)
        top = int(self.tokens.max(initial=0))
        if top >= vocab_size:
            raise ValueError(f"replay text {source} uses token id {top}; the drafter's vocabulary has {vocab_size}")
        self.seq_len = config.replay_seq_len
        self.sampler = ChunkSampler(len(self.tokens), config.replay_seq_len, config.replay_batch_size, config.seed)
        self.my_rows = rank_slice(config.replay_batch_size, ctx)
        self.tokens_per_step = config.replay_batch_size * config.replay_seq_len  # global

    def chunks(self, step: int) -> np.ndarray:
        starts = self.sampler.batch_indices(step)[self.my_rows] * self.seq_len
        return np.stack([self.tokens[s : s + self.seq_len + 1] for s in starts])  # (R, S + 1)


# ---------------------------------------------------------------------------------------------------------------------
# A run's inputs


@dataclass(frozen=True)
class DistillInputs:
    """What a run reads before any model: the verified manifests, the training examples it keeps, the dev set."""

    reference_manifest: dict[str, Any]
    drafter_manifest: dict[str, Any] | None  # None for a drafter without a manifest (an HF id, a local HF model)
    available: list[TrainExample]  # every training example of the reference data (and of the on-policy data)
    examples: list[TrainExample]  # those of the configured categories and data fraction
    dev: list[Conversation]
    onpolicy: tuple[dict[str, Any], ...] = ()  # input records of the on-policy folders read


def read_onpolicy(folders: Sequence[Path], reference_manifest: dict[str, Any]) -> tuple[list[TrainExample], list[Any]]:
    """The examples of `onpolicy` folders made for this reference data's target (the same vocabulary fingerprint),
    and their input records."""
    examples: list[TrainExample] = []
    records = []
    for folder in folders:
        manifest = verify_stage_dir(folder, "onpolicy")
        if manifest.get("vocab_fingerprint") != reference_manifest.get("vocab_fingerprint"):
            raise ValueError(f"--onpolicy {folder}: made for another target's vocabulary than the reference data's")
        examples += read_train_examples(folder)
        records.append(input_record(folder, manifest))
    return examples, records


def read_inputs(
    drafter: str | Path,
    reference_dir: Path,
    config: DistillConfig,
    ctx: DistributedContext,
    onpolicy: Sequence[Path] = (),
) -> DistillInputs:
    """Verify the reference data (and any on-policy data) and the drafter, pick the training examples; refuse a run
    that would train on none."""
    reference_manifest = verify_stage_dir(reference_dir, "reference")
    drafter_manifest = verify_checkpoint(drafter)
    onpolicy_examples, onpolicy_records = read_onpolicy(onpolicy, reference_manifest)
    available = read_train_examples(reference_dir) + onpolicy_examples
    examples = select_examples(available, config)
    dev = read_conversations(reference_dir / "dev.jsonl")
    if not examples:
        have = f" of categories {list(config.categories)} (it has {sorted({e.category for e in available})})"
        raise ValueError(f"{reference_dir}: no training examples" + (have if available else ""))
    if ctx.is_main:
        items = [(e.id or "?", len(e.prompt_tokens), len(e.continuation_tokens)) for e in examples]
        serving_context_note("distill", "training examples", items, config.eval_k)
    return DistillInputs(reference_manifest, drafter_manifest, available, examples, dev, tuple(onpolicy_records))


# ---------------------------------------------------------------------------------------------------------------------
# In the drafter's vocabulary


def check_vocabularies(
    drafter: str | Path, reference_manifest: dict[str, Any], vocab_size: int, examples: Sequence[TrainExample]
) -> None:
    """Refuse a drafter whose token ids cannot be the target's, before any training: another tokenizer.json, another
    vocabulary (its fingerprint, the GGUF token list a server of it would report, against the one the reference
    recorded: this catches a drafter without a manifest too), or ids out of range."""
    drafter_info = checkpoint_info(drafter)
    target_info = reference_manifest["inputs"].get("target", {})
    ours = drafter_info.get("outputs", {}).get("tokenizer.json")
    theirs = target_info.get("outputs", {}).get("tokenizer.json")
    if ours and theirs and ours != theirs:
        raise ValueError(
            f"drafter {drafter} has another tokenizer.json than the target of the reference data "
            f"(sha256 {ours[:12]}… vs {theirs[:12]}…)"
        )
    if expected := reference_manifest.get("vocab_fingerprint"):
        found = tokenizer_fingerprint(load_tokenizer(drafter), vocab_size)
        if found != expected:
            raise ValueError(
                f"drafter {drafter} has another vocabulary than the target of the reference data (fingerprint "
                f"{found[:12]}… vs {expected[:12]}…): `drafter --target TARGET` makes one with the target's"
            )
    top = max((max(e.continuation_tokens + e.prompt_tokens + e.targets) for e in examples), default=0)
    if top >= vocab_size:
        raise ValueError(f"reference data uses token id {top}; the drafter's vocabulary has {vocab_size}")


def check_replay_tokenizer(drafter: str | Path, replay: ReplayText) -> None:
    """Replay text from a lab tokenizer stage must be in the drafter's own tokenizer."""
    ours = checkpoint_info(drafter).get("outputs", {}).get("tokenizer.json")
    theirs = replay.record.get("outputs", {}).get("tokenizer.json")
    if ours and theirs and ours != theirs:
        raise ValueError(
            f"replay text {replay.record.get('path')} was tokenized with another tokenizer.json than "
            f"drafter {drafter}'s (sha256 {theirs[:12]}… vs {ours[:12]}…)"
        )
