"""The held-out and dev sets `reference` writes: per category a pool of candidate prompts, filled in rounds with the
first candidates whose target continuation is long enough (the target is never forced past <|endoftext|>), and
written as the validator's JSONL.

    pools = corpus_eval_pools(documents, tokenizer, categories, config) + given_eval_pools(given)
    generate_eval_sets(model, tokenizer, pools, config, device)     # each pool's .kept: [(Prompt, Continuation)]
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from ..config import ReferenceConfig
from ..formats.artifacts import atomic_write_text
from ..formats.documents import Document
from ..formats.prompts import Category, Prompt, select_prompts
from ..modeling.tau import Conversation, conversation_json
from ..training.examples import Continuation
from .generation import generate_continuations

EVAL_SPLITS = ("dev", "heldout")
# Held-out/dev: at most this many candidates per kept prompt are drawn for a category; a category whose target
# continuations stop early more often than that fails with a message instead of shrinking.
MAX_CANDIDATES_PER_KEPT = 4


@dataclass
class EvalPool:
    """One held-out/dev category: its candidates in draw order, how many to keep, the continuation length they need."""

    split: str
    category: str
    candidates: list[Prompt]
    keep: int
    min_tokens: int
    tried: int = 0
    kept: list[tuple[Prompt, Continuation]] = field(default_factory=list)
    generated_tokens: int = 0  # of every candidate generated, kept or not


def corpus_eval_pools(
    documents: dict[str, list[Document]],
    tokenizer: PreTrainedTokenizerBase,
    categories: Sequence[Category],
    config: ReferenceConfig,
) -> list[EvalPool]:
    """Every corpus category of dev and held-out, with up to MAX_CANDIDATES_PER_KEPT candidates per kept prompt."""
    pools = []
    for split, keep in (("dev", config.dev_per_category), ("heldout", config.heldout_per_category)):
        counts = {c: keep * MAX_CANDIDATES_PER_KEPT for c in categories}
        selected = select_prompts(documents[split], tokenizer, counts, split, config.seed)
        for category in categories:
            if len(selected[category]) < keep:
                shortest = category.length + (1 if category.position == "inner" else 0)
                raise ValueError(
                    f"{split} category {category.name}: {len(selected[category])} candidate prompts for "
                    f"{keep}: the {split} split has too few {category.kind} files of at least "
                    f"{shortest} tokens (a larger corpus or a larger {split} share)"
                )
            pools.append(EvalPool(split, category.name, selected[category], keep, config.min_continuation_tokens))
    return pools


def given_eval_pools(prompts: dict[str, list[Prompt]]) -> list[EvalPool]:
    """Given lines of dev and held-out, one pool per category, every line kept whatever its continuation's length:
    they are the user's own prompts and splits, so none is dropped (the per-category counts size corpus categories)."""
    pools = []
    for split in EVAL_SPLITS:
        names = list(dict.fromkeys(p.category for p in prompts[split]))
        for name in names:
            rows = [p for p in prompts[split] if p.category == name]
            pools.append(EvalPool(split, name, rows, len(rows), 0))
    return pools


def generate_eval_sets(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    pools: Sequence[EvalPool],
    config: ReferenceConfig,
    device: torch.device,
    progress: bool = False,
) -> int:
    """Fill every pool with its first `keep` candidates whose continuation has at least `min_tokens` tokens (the target
    stops where it stops: a continuation is never forced past <|endoftext|>). Returns the prompts generated.

    The first round generates ceil(keep × eval_oversample) candidates of every pool; each later round, for the pools
    still short, ceil(missing × 2 × eval_oversample) more (they pass less often than the oversample assumed). All
    pools of a round share one generation: a round costs max_new_tokens sequential decode steps whatever its size.
    With ``progress``, a line per round and the generation's progress (a bar, or lines in a log).
    """
    generated, rounds = 0, 0
    while True:
        batch: list[tuple[EvalPool, Prompt]] = []
        for pool in pools:
            missing = pool.keep - len(pool.kept)
            if missing <= 0:
                continue
            if pool.tried >= len(pool.candidates):
                raise ValueError(
                    f"{pool.split} category {pool.category}: only {len(pool.kept)} of {pool.keep} target "
                    f"continuations reached {pool.min_tokens} tokens, from all {len(pool.candidates)} "
                    "candidates (the target ends them early): lower reference.min_continuation_tokens "
                    "or give the corpus more files of this kind"
                )
            take = math.ceil(
                pool.keep * config.eval_oversample if pool.tried == 0 else missing * 2 * config.eval_oversample
            )
            batch += [(pool, prompt) for prompt in pool.candidates[pool.tried : pool.tried + take]]
            pool.tried = min(pool.tried + take, len(pool.candidates))
        if not batch:
            return generated
        rounds += 1
        if progress:
            short = len({id(pool) for pool, _ in batch})
            print(
                f"reference: held-out and dev sets, round {rounds}: {len(batch):,} candidates for {short} categories",
                file=sys.stderr,
            )
        continuations = generate_continuations(
            model,
            tokenizer,
            [prompt for _, prompt in batch],
            config.max_new_tokens,
            config.batch_size,
            device,
            top_k=None,
            engine=config.engine,
            progress=progress,
        )
        generated += len(batch)
        for (pool, prompt), continuation in zip(batch, continuations):  # in candidate order within each pool
            pool.generated_tokens += len(continuation.tokens)
            if len(continuation.tokens) >= pool.min_tokens and len(pool.kept) < pool.keep:
                pool.kept.append((prompt, continuation))


def write_conversations(path: Path, prompts: Sequence[Prompt], continuations: Sequence[Continuation]) -> None:
    lines = [
        conversation_json(Conversation(p.id, p.category, p.tokens, c.tokens)) for p, c in zip(prompts, continuations)
    ]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
