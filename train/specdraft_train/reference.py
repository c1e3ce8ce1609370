"""Stage `reference`: prompts → the target's greedy continuations (and, for training data, its top-k log-probs).

Corpus prompts fall into categories ``<kind>/<position>/<length>``: kind ``code`` | ``prose`` (the corpus's document
kinds), position ``open`` (a file's first `length` tokens) | ``inner`` (a window at a seeded random start ≥ 1 inside
the file), and each of the preset's prompt lengths (lab: 64 / 192 / 512; e.g. ``prose/inner/512``). Held-out and dev
have a fixed number per category, each prompt's continuation at least `min_continuation_tokens` long: candidates are
oversampled and, per category, the first that reach the minimum are kept (the target is never forced past
<|endoftext|>). Training prompts cover every category in the proportions `train_prose_share` / `train_open_share` set
(lengths evenly). Prompts may also come from a JSONL of given prompts (`--prompts`, alias `--chat`), one per line:
``{"messages": [...]}`` rendered with the target tokenizer's chat template (thinking off unless `--thinking on`), or
``{"text": "..."}`` taken as plain text (its first ``"prompt_tokens"`` tokens when the line says how many), each with
optional ``"id"``, ``"category"`` and ``"split"``; every held-out and dev line is kept, whatever its continuation's
length (the per-category counts size the corpus categories). Text lines are how a drafter is checked on
prompts nobody's generator made (data/unseen-texts.jsonl: other languages and formats than the lab corpus's).
The target continues each prompt greedily for at most `max_new_tokens`, stopping at end-of-text / end-of-turn: by
default with the static engine of `generation.py` (prompts bucketed by length, a preallocated KV cache, the decode
step as a CUDA graph), or with HF ``generate`` (`--engine hf`), its tested peer.

Outputs: ``heldout.jsonl`` and ``dev.jsonl`` in the validator's format (`id`, `category`, `prompt_tokens`,
`continuation_tokens`); ``train-NNNNN.safetensors`` shards with prompts, continuations and the target's top-k token ids
and log-probs at every continuation position (written one shard at a time, so a killed run resumes at the next shard);
``manifest.json`` (prompts per split and category, candidates generated). The target is a lab checkpoint or any HF
id / local path (real path: e.g. Qwen/Qwen3-8B):

    python -m specdraft_train reference --target runs/lab/target --corpus runs/lab/corpus --out runs/lab/reference \
        --preset micro
    python -m specdraft_train reference --target Qwen/Qwen3-8B --prompts chat.jsonl --out runs/real/reference \
        --dtype bfloat16
    torchrun --nproc-per-node 8 -m specdraft_train reference --target Qwen/Qwen3-8B ...

Under torchrun every rank selects the same prompts and loads the whole target on its own GPU; rank 0 generates the
held-out and dev sets, and every rank takes the next training shard nobody has claimed yet (an exclusive file
create in ``OUT/.claims/``), so a rank that is free takes the next shard, whoever was faster. A shard is the same
``generate_continuations`` call over the same prompts whichever rank runs it, so the files are the ones one process
writes, byte for byte wherever the batches are the same (on a GPU that needs batches bounded by ``batch_size``
rather than by free memory; the lab's are). Each rank writes its shards atomically into OUT (a filesystem every
rank sees), a rerun (with any number of ranks) generates only the missing ones, and rank 0 writes the manifest
once every rank is done. The ranks exchange only the list of missing shards and counts: gloo (CPU), even between
GPUs. The manifest's ``generation`` records the generation phase's wall time and tokens (tokens/s over all ranks).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from .artifacts import atomic_write_json, atomic_write_text, input_record, verify_stage_dir, write_manifest
from .config import (
    CorpusConfig,
    EvalConfig,
    ReferenceConfig,
    add_preset_argument,
    announce,
    get_preset,
    override,
    serving_context_note,
)
from .documents import Document, read_documents
from .examples import Continuation, write_train_shard
from .generation import EngineStats, StaticGreedyEngine, generate_greedy_hf
from .models import DTYPES, checkpoint_info, load_causal_lm, load_tokenizer, verify_checkpoint
from .prompts import Category, Prompt, corpus_categories, given_prompts, select_prompts, train_category_counts
from .provenance import model_pin
from .tau import Conversation, conversation_json
from .training import finish_distributed, init_distributed
from .vocabulary import tokenizer_fingerprint

EVAL_SPLITS = ("dev", "heldout")
# Held-out/dev: at most this many candidates per kept prompt are drawn for a category; a category whose target
# continuations stop early more often than that fails with a message instead of shrinking.
MAX_CANDIDATES_PER_KEPT = 4


# ---------------------------------------------------------------------------------------------------------------------
# Generation


ENGINES = ("static", "hf")


def stop_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None) or tokenizer.eos_token_id
    return [int(t) for t in (eos if isinstance(eos, list) else [eos])]


@torch.no_grad()
def generate_continuations(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Prompt],
    max_new_tokens: int,
    batch_size: int,
    device: torch.device,
    top_k: int | None,
    engine: str = "static",
    progress: bool = False,
    stats: list[EngineStats] | None = None,
) -> list[Continuation]:
    """Greedy continuations up to and including the first stop token, with the top-k log-probs when ``top_k``.

    ``engine="static"``: :class:`generation.StaticGreedyEngine` (static KV cache, CUDA-graph decode, batches of up to
    ``batch_size`` rows as the memory budget allows); ``"hf"``: HF ``generate`` in batches of ``batch_size``, the
    peer both are tested against. Either way, equal-length prompts share batches unpadded, others are left-padded.
    ``stats`` collects the static engine's EngineStats (batch shapes, graph captures, row budgets).
    """
    eos = stop_ids(model, tokenizer)
    tokens = [p.tokens for p in prompts]
    if engine == "static":
        static = StaticGreedyEngine(model, device)
        outputs = static.generate(tokens, max_new_tokens, eos, top_k, max_batch_size=batch_size, progress=progress)
        if stats is not None:
            stats.append(static.stats)
    elif engine == "hf":
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        outputs = generate_greedy_hf(
            model, tokens, max_new_tokens, eos, pad, top_k, batch_size, device, progress=progress
        )
    else:
        raise ValueError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    return [
        Continuation(o.tokens, o.topk_ids, o.topk_logprobs.astype(np.float16) if o.topk_logprobs is not None else None)
        for o in outputs
    ]


def engine_summary(stats: Sequence[EngineStats]) -> dict[str, Any]:
    """What the static engine did over a rank's training shards: batches and their rows, graph captures, and the rows
    its KV budget allowed (the largest batch that fits, by its rule) at the narrowest and widest bucket."""
    rows = [r for s in stats for r, _ in s.batch_shapes]
    budgets = {w: r for s in stats for w, r in s.row_budgets.items()}
    return {
        "batches": len(rows),
        "padded_batches": sum(s.padded_batches for s in stats),
        "rows_max": max(rows, default=0),
        "rows_mean": sum(rows) / len(rows) if rows else 0.0,
        "decode_steps": sum(s.decode_steps for s in stats),
        "graph_captures": sum(s.graph_captures for s in stats),
        "graph_capture_seconds": sum(s.graph_capture_seconds for s in stats),
        "cuda_graph_failure": next((s.cuda_graph_failure for s in stats if s.cuda_graph_failure), None),
        "row_budget_by_width": {str(w): budgets[w] for w in sorted(budgets)[:1] + sorted(budgets)[-1:]},
    }


# ---------------------------------------------------------------------------------------------------------------------
# Files


def write_conversations(path: Path, prompts: Sequence[Prompt], continuations: Sequence[Continuation]) -> None:
    lines = [
        conversation_json(Conversation(p.id, p.category, p.tokens, c.tokens)) for p, c in zip(prompts, continuations)
    ]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def _plan_fingerprint(target: dict[str, Any], prompts: dict[str, list[Prompt]], config: ReferenceConfig) -> str:
    digest = hashlib.sha256(json.dumps([target, config.__dict__], sort_keys=True, default=str).encode())
    for split in sorted(prompts):
        for p in prompts[split]:
            digest.update(json.dumps([split, p.id, p.category, p.tokens]).encode())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------------------
# Held-out and dev sets


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
) -> int:
    """Fill every pool with its first `keep` candidates whose continuation has at least `min_tokens` tokens (the target
    stops where it stops: a continuation is never forced past <|endoftext|>). Returns the prompts generated.

    The first round generates ceil(keep × eval_oversample) candidates of every pool; each later round, for the pools
    still short, ceil(missing × 2 × eval_oversample) more (they pass less often than the oversample assumed). All
    pools of a round share one generation: a round costs max_new_tokens sequential decode steps whatever its size.
    """
    generated = 0
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
        continuations = generate_continuations(
            model,
            tokenizer,
            [prompt for _, prompt in batch],
            config.max_new_tokens,
            config.batch_size,
            device,
            top_k=None,
            engine=config.engine,
        )
        generated += len(batch)
        for (pool, prompt), continuation in zip(batch, continuations):  # in candidate order within each pool
            pool.generated_tokens += len(continuation.tokens)
            if len(continuation.tokens) >= pool.min_tokens and len(pool.kept) < pool.keep:
                pool.kept.append((prompt, continuation))


# ---------------------------------------------------------------------------------------------------------------------
# Ranks

CLAIMS_DIR = ".claims"  # in OUT: one empty file per training shard a rank has taken in this run


def claim(path: Path) -> bool:
    """Whether this rank is the first to claim ``path``: an exclusive create, which exactly one rank wins.

    Dynamic rather than a fixed plan: rank 0 starts late (it generates the eval sets first), continuations stop at
    different lengths, and a fixed plan would leave the ranks that finish first waiting. A file rather than a
    counter in torch.distributed's store: the store's handle is private API, and OUT is shared by the ranks anyway.
    """
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


# ---------------------------------------------------------------------------------------------------------------------
# The stage


def run(
    target: str | Path,
    out_dir: Path,
    config: ReferenceConfig,
    corpus_dir: Path | None = None,
    prompts: Path | None = None,
    corpus_config: CorpusConfig | None = None,
    device_name: str = "auto",
    dtype: str = "float32",
    halt_after_shards: int | None = None,
) -> dict[str, Any] | None:
    """Generate the reference data into ``out_dir``; returns the manifest (rank 0; None on the other ranks)."""
    if corpus_dir is None and prompts is None:
        raise ValueError("reference needs prompts: give --corpus, --prompts (alias --chat), or both")
    if corpus_dir is not None and config.min_continuation_tokens > config.max_new_tokens:
        raise ValueError(
            f"reference.min_continuation_tokens {config.min_continuation_tokens} > max_new_tokens "
            f"{config.max_new_tokens}: no held-out continuation could qualify"
        )
    start_time = time.time()
    ctx = init_distributed(device_name, backend="gloo", tf32=False)
    device = ctx.device
    target_manifest = verify_checkpoint(target)
    # pinned (revision or content hash) for the packed folder's data manifest (provenance.py)
    inputs: dict[str, Any] = {"target": {**checkpoint_info(target), "pin": model_pin(target, target_manifest)}}
    tokenizer = load_tokenizer(target)
    train: list[Prompt] = []
    train_asked: dict[str, int] = {}
    pools: list[EvalPool] = []
    if corpus_dir is not None:
        inputs["corpus"] = input_record(corpus_dir, verify_stage_dir(corpus_dir, "corpus"))
        documents = {split: read_documents(corpus_dir, split) for split in ("train", *EVAL_SPLITS)}
        categories = corpus_categories({d.kind for docs in documents.values() for d in docs}, config.prompt_lengths)
        train_counts = train_category_counts(categories, config)
        selected = select_prompts(documents["train"], tokenizer, train_counts, "train", config.seed)
        for category in categories:
            train += selected[category]
            train_asked[category.name] = train_counts[category]
            if len(selected[category]) < train_counts[category]:
                print(
                    f"reference: train category {category.name}: {len(selected[category])} prompts of "
                    f"{train_counts[category]} asked (too few long-enough train files)",
                    file=sys.stderr,
                )
        pools += corpus_eval_pools(documents, tokenizer, categories, config)
    if prompts is not None:
        from .artifacts import sha256_file

        inputs["prompts"] = {"path": str(prompts), "sha256": sha256_file(prompts)}
        rows = given_prompts(prompts, tokenizer, corpus_config or CorpusConfig(), config.enable_thinking)
        if len(rows["train"]) > config.train_prompts and ctx.is_main:
            print(
                f"reference: {len(rows['train']):,} train lines in {prompts}, reference.train_prompts is "
                f"{config.train_prompts:,}: the last {len(rows['train']) - config.train_prompts:,} are left out "
                "(--train-prompts N takes more)",
                file=sys.stderr,
            )
        train += rows["train"][: config.train_prompts]
        pools += given_eval_pools(rows)
        if ctx.is_main:
            for split in ("train", *EVAL_SPLITS):
                lines = train if split == "train" else rows[split]
                items = [(p.id, len(p.tokens), config.max_new_tokens) for p in lines]
                serving_context_note("reference", f"{split} prompts", items, EvalConfig.k)
    # Held-out is what every use needs; dev only training does (distill picks its checkpoint by dev τ), so a set made
    # only to evaluate on (given held-out lines, no training prompts) needs no dev split.
    for split in EVAL_SPLITS if train else ("heldout",):
        if not any(pool.keep for pool in pools if pool.split == split):
            where = "no file long enough for the prompt lengths" if corpus_dir is not None else "no line"
            raise ValueError(f"no {split} prompts: the {split} split has {where}")
    out_dir.mkdir(parents=True, exist_ok=True)
    candidates = {
        "train": train,
        **{split: [p for pool in pools if pool.split == split for p in pool.candidates] for split in EVAL_SPLITS},
    }
    fingerprint = _plan_fingerprint(inputs["target"], candidates, config)
    shards = [train[i : i + config.shard_prompts] for i in range(0, len(train), config.shard_prompts)]
    shard_names = [f"train-{index:05d}.safetensors" for index in range(len(shards))]
    claims = out_dir / CLAIMS_DIR
    if ctx.is_main:  # alone, before any rank writes
        shutil.rmtree(claims, ignore_errors=True)  # an interrupted run's: its unfinished shards are missing again
        claims.mkdir()
        progress_path = out_dir / "progress.json"
        if progress_path.is_file() and json.loads(progress_path.read_text()).get("plan") != fingerprint:
            for stale in out_dir.glob("train-*.safetensors"):  # another target or other prompts: start over
                stale.unlink()
        for partial in out_dir.glob(".train-*.tmp"):  # a shard being written when its rank was killed
            partial.unlink()
        atomic_write_json(progress_path, {"plan": fingerprint})
    # Shards finished before a restart (written atomically, under the same plan) are kept; rank 0's view decides.
    pending = ctx.broadcast_object([i for i, name in enumerate(shard_names) if not (out_dir / name).is_file()])
    model = load_causal_lm(target, device, DTYPES[dtype])
    # What a server of a drafter on this tokenizer reports as vocab_fingerprint; validate checks the two agree.
    vocab_fingerprint = tokenizer_fingerprint(tokenizer, model.config.vocab_size)
    tag = f"reference[rank {ctx.rank}]" if ctx.distributed else "reference"
    ctx.barrier()  # the generation phase, which the manifest times, starts on every rank at once
    generation_start = time.time()
    eval_generated = 0
    if ctx.is_main:
        eval_generated = generate_eval_sets(model, tokenizer, pools, config, device)
        for split in EVAL_SPLITS:
            kept = [pair for pool in pools if pool.split == split for pair in pool.kept]
            write_conversations(
                out_dir / f"{split}.jsonl", [prompt for prompt, _ in kept], [continuation for _, continuation in kept]
            )
    train_tokens = done = 0
    engine_stats: list[EngineStats] = []
    for index in pending:
        if not claim(claims / shard_names[index]):
            continue  # another rank has it
        shard_start = time.time()
        continuations = generate_continuations(
            model,
            tokenizer,
            shards[index],
            config.max_new_tokens,
            config.batch_size,
            device,
            top_k=config.top_k,
            engine=config.engine,
            progress=ctx.is_main,
            stats=engine_stats,
        )
        write_train_shard(out_dir / shard_names[index], shards[index], continuations)
        tokens = sum(len(c.tokens) for c in continuations)
        train_tokens += tokens
        done += 1
        print(
            f"{tag}: shard {index + 1}/{len(shards)}: {len(shards[index])} continuations, {tokens} tokens, "
            f"{tokens / (time.time() - shard_start):,.0f} tok/s",
            file=sys.stderr,
        )
        if halt_after_shards is not None and done >= halt_after_shards:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)  # tests: a crash between shards
    eval_tokens = sum(pool.generated_tokens for pool in pools)
    mine = {
        "rank": ctx.rank,
        "shards": done,
        "train_tokens": train_tokens,
        "eval_tokens": eval_tokens,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "engine": engine_summary(engine_stats),
    }
    per_rank = ctx.all_gather_object({**mine, "seconds": time.time() - generation_start})  # waits for all
    generation_seconds = time.time() - generation_start
    if not ctx.is_main:
        finish_distributed(ctx)
        return None
    shutil.rmtree(claims)
    outputs = [f"{split}.jsonl" for split in EVAL_SPLITS] + shard_names
    generated_tokens = sum(r["train_tokens"] + r["eval_tokens"] for r in per_rank)
    by_category: dict[str, dict[str, int]] = {split: {} for split in ("train", *EVAL_SPLITS)}
    for prompt in train:
        by_category["train"][prompt.category] = by_category["train"].get(prompt.category, 0) + 1
    for pool in pools:
        by_category[pool.split][pool.category] = len(pool.kept)
    manifest = write_manifest(
        out_dir,
        "reference",
        outputs=outputs,
        params={"config": config.__dict__, "dtype": dtype, "device": str(device), "world_size": ctx.world_size},
        inputs=inputs,
        extra={
            "prompts": {split: sum(counts.values()) for split, counts in by_category.items()},
            "categories": by_category,
            "train_asked": train_asked,
            "eval_candidates": {"generated": eval_generated, "kept": sum(len(pool.kept) for pool in pools)},
            "target_verified": target_manifest is not None,
            "vocab_fingerprint": vocab_fingerprint,
            "seconds": time.time() - start_time,
            # This run's generation phase (a resumed run's covers only what it generated), over all ranks.
            "generation": {
                "world_size": ctx.world_size,
                "seconds": generation_seconds,
                "tokens": generated_tokens,
                "tokens_per_s": generated_tokens / max(generation_seconds, 1e-9),
                "train_shards": sum(r["shards"] for r in per_rank),
                "per_rank": per_rank,
            },
        },
    )
    finish_distributed(ctx)
    return manifest


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reference",
        help="the target's greedy continuations (+ top-k log-probs for training)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", required=True, help="target: lab checkpoint directory, local HF model, or HF id")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--corpus", type=Path, default=None, help="corpus stage directory (prompts from its files)")
    p.add_argument(
        "--prompts",
        "--chat",
        dest="prompts",
        type=Path,
        default=None,
        help='given prompts JSONL, {"messages": [...]} (chat template) or {"text": "..."} per line',
    )
    add_preset_argument(p)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument(
        "--thinking",
        choices=("on", "off"),
        default=None,
        help="chat prompts' enable_thinking (Qwen3's default: on; off suits a greedy drafter, see "
        "ReferenceConfig.enable_thinking) (default: the preset's, off)",
    )
    p.add_argument(
        "--dtype",
        default="float32",
        choices=sorted(DTYPES),
        help="weights' dtype (default: float32; bfloat16 for real models)",
    )
    p.add_argument("--train-prompts", type=int, default=None, help="training continuations (default: preset's)")
    p.add_argument(
        "--dev-per-category", type=int, default=None, help="dev conversations per category (default: preset's)"
    )
    p.add_argument(
        "--heldout-per-category", type=int, default=None, help="held-out conversations per category (default: preset's)"
    )
    p.add_argument(
        "--min-continuation-tokens",
        type=int,
        default=None,
        help="held-out/dev continuations shorter than this are dropped, more candidates generated (default: preset's)",
    )
    p.add_argument("--max-new-tokens", type=int, default=None, help="continuation cap (default: preset's)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="prompts per batch; the static engine takes fewer "
        "when its KV-cache budget holds fewer (default: preset's)",
    )
    p.add_argument("--shard-prompts", type=int, default=None, help="prompts per resumable shard (default: preset's)")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="static: static KV cache + CUDA-graph decode; hf: "
        "HF generate, the slower peer (default: preset's, static)",
    )
    p.add_argument("--halt-after-shards", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def stage_config(args: argparse.Namespace) -> ReferenceConfig:
    """The preset's reference settings with the command's flags over them."""
    return override(
        get_preset(args.preset).reference,
        train_prompts=args.train_prompts,
        dev_per_category=args.dev_per_category,
        heldout_per_category=args.heldout_per_category,
        max_new_tokens=args.max_new_tokens,
        min_continuation_tokens=args.min_continuation_tokens,
        batch_size=args.batch_size,
        shard_prompts=args.shard_prompts,
        engine=args.engine,
        enable_thinking=None if args.thinking is None else args.thinking == "on",
    )


def main(args: argparse.Namespace) -> int:
    config = stage_config(args)
    if int(os.environ.get("RANK", "0")) == 0:
        announce(
            "reference",
            args.preset,
            {
                "train prompts at most": config.train_prompts,
                "max_new_tokens": config.max_new_tokens,
                "top-k": config.top_k,
                "batch at most": config.batch_size,
                "shards of": config.shard_prompts,
                "dtype": args.dtype,
                "engine": config.engine,
                "thinking": "on" if config.enable_thinking else "off",
            },
        )
    manifest = run(
        args.target,
        args.out,
        config,
        args.corpus,
        args.prompts,
        get_preset(args.preset).corpus,
        args.device,
        args.dtype,
        args.halt_after_shards,
    )
    if manifest is not None:
        print(json.dumps(manifest["prompts"]))
    return 0
