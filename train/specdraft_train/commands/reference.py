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
default with the static engine of `static_engine.py` (prompts bucketed by length, packed prefill, a preallocated KV
cache, the decode step as a CUDA graph; one engine serves every training shard, each written by a thread while the
next generates), or with HF ``generate`` (`--engine hf`), its tested peer.

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
import os
import shutil
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from ..config import (
    CorpusConfig,
    EvalConfig,
    ReferenceConfig,
    add_device_argument,
    announce,
    override,
    serving_context_note,
)
from ..engine.eval_sets import (
    EVAL_SPLITS,
    EvalPool,
    corpus_eval_pools,
    generate_eval_sets,
    given_eval_pools,
    write_conversations,
)
from ..engine.generation import ENGINES, engine_summary, generate_continuations
from ..engine.static_engine import EngineStats, StaticGreedyEngine
from ..formats.artifacts import atomic_write_json, input_record, sha256_file, verify_stage_dir, write_manifest
from ..formats.documents import read_documents
from ..formats.prompts import Prompt, corpus_categories, given_prompts, select_prompts, train_category_counts
from ..formats.provenance import model_pin
from ..formats.vocabulary import tokenizer_fingerprint
from ..modeling.models import (
    DTYPES,
    add_dtype_argument,
    checkpoint_info,
    load_causal_lm,
    load_tokenizer,
    verify_checkpoint,
)
from ..presets import add_preset_argument, get_preset
from ..training.examples import write_train_shard
from ..training.loop import DistributedContext, finish_distributed, init_distributed

# ---------------------------------------------------------------------------------------------------------------------
# Files


def _plan_fingerprint(target: dict[str, Any], prompts: dict[str, list[Prompt]], config: ReferenceConfig) -> str:
    digest = hashlib.sha256(json.dumps([target, config.__dict__], sort_keys=True, default=str).encode())
    for split in sorted(prompts):
        for p in prompts[split]:
            digest.update(json.dumps([split, p.id, p.category, p.tokens]).encode())
    return digest.hexdigest()


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
# The stage, in its steps: the prompts, the output directory's plan, generation (eval sets, then shards), the manifest


@dataclass
class PromptPlan:
    """Every prompt a run continues: the training prompts in shard order, the held-out/dev pools, how many training
    prompts each corpus category asked for, and the inputs the manifest records (target, corpus, prompts file)."""

    inputs: dict[str, Any]
    train: list[Prompt] = field(default_factory=list)
    train_asked: dict[str, int] = field(default_factory=dict)
    pools: list[EvalPool] = field(default_factory=list)


def add_corpus_prompts(
    plan: PromptPlan, corpus_dir: Path, tokenizer: PreTrainedTokenizerBase, config: ReferenceConfig
) -> None:
    """The corpus's training prompts by category (a shortfall said, not fatal) and its held-out/dev candidates."""
    plan.inputs["corpus"] = input_record(corpus_dir, verify_stage_dir(corpus_dir, "corpus"))
    documents = {split: read_documents(corpus_dir, split) for split in ("train", *EVAL_SPLITS)}
    categories = corpus_categories({d.kind for docs in documents.values() for d in docs}, config.prompt_lengths)
    train_counts = train_category_counts(categories, config)
    selected = select_prompts(documents["train"], tokenizer, train_counts, "train", config.seed)
    for category in categories:
        plan.train += selected[category]
        plan.train_asked[category.name] = train_counts[category]
        if len(selected[category]) < train_counts[category]:
            print(
                f"reference: train category {category.name}: {len(selected[category])} prompts of "
                f"{train_counts[category]} asked (too few long-enough train files)",
                file=sys.stderr,
            )
    plan.pools += corpus_eval_pools(documents, tokenizer, categories, config)


def add_given_prompts(
    plan: PromptPlan,
    prompts: Path,
    tokenizer: PreTrainedTokenizerBase,
    config: ReferenceConfig,
    corpus_config: CorpusConfig,
    ctx: DistributedContext,
) -> None:
    """A prompts file's lines by split (training lines beyond `train_prompts` left out, and said), with a note for
    those the serving context cannot walk."""
    plan.inputs["prompts"] = {"path": str(prompts), "sha256": sha256_file(prompts)}
    rows = given_prompts(prompts, tokenizer, corpus_config, config.enable_thinking)
    if len(rows["train"]) > config.train_prompts and ctx.is_main:
        print(
            f"reference: {len(rows['train']):,} train lines in {prompts}, reference.train_prompts is "
            f"{config.train_prompts:,}: the last {len(rows['train']) - config.train_prompts:,} are left out "
            "(--train-prompts N takes more)",
            file=sys.stderr,
        )
    plan.train += rows["train"][: config.train_prompts]
    plan.pools += given_eval_pools(rows)
    if ctx.is_main:
        for split in ("train", *EVAL_SPLITS):
            lines = plan.train if split == "train" else rows[split]
            items = [(p.id, len(p.tokens), config.max_new_tokens) for p in lines]
            serving_context_note("reference", f"{split} prompts", items, EvalConfig.k)


def check_eval_splits(plan: PromptPlan, from_corpus: bool) -> None:
    """Held-out is what every use needs; dev only training does (distill picks its checkpoint by dev τ), so a set made
    only to evaluate on (given held-out lines, no training prompts) needs no dev split."""
    for split in EVAL_SPLITS if plan.train else ("heldout",):
        if not any(pool.keep for pool in plan.pools if pool.split == split):
            where = "no file long enough for the prompt lengths" if from_corpus else "no line"
            raise ValueError(f"no {split} prompts: the {split} split has {where}")


def pending_shards(
    out_dir: Path, plan: PromptPlan, shard_names: list[str], config: ReferenceConfig, ctx: DistributedContext
) -> list[int]:
    """The training shards still to generate. Rank 0 alone, before any rank writes, clears an interrupted run's claims
    and partial files and, when the plan changed (another target or other prompts), its finished shards; shards
    finished under the same plan (written atomically) are kept, and rank 0's view of them decides for every rank."""
    if ctx.is_main:
        candidates = {
            "train": plan.train,
            **{
                split: [p for pool in plan.pools if pool.split == split for p in pool.candidates]
                for split in EVAL_SPLITS
            },
        }
        fingerprint = _plan_fingerprint(plan.inputs["target"], candidates, config)
        claims = out_dir / CLAIMS_DIR
        shutil.rmtree(claims, ignore_errors=True)  # an interrupted run's: its unfinished shards are missing again
        claims.mkdir()
        progress_path = out_dir / "progress.json"
        if progress_path.is_file() and json.loads(progress_path.read_text()).get("plan") != fingerprint:
            for stale in out_dir.glob("train-*.safetensors"):  # another target or other prompts: start over
                stale.unlink()
        for partial in out_dir.glob(".train-*.tmp"):  # a shard being written when its rank was killed
            partial.unlink()
        atomic_write_json(progress_path, {"plan": fingerprint})
    return ctx.broadcast_object([i for i, name in enumerate(shard_names) if not (out_dir / name).is_file()])


@dataclass
class ShardWork:
    """What one rank generated of the training shards."""

    shards: int = 0
    tokens: int = 0
    seconds: float = 0.0  # the shards' wall time on this rank (generation and writing; claims and waits included)
    engine_stats: list[EngineStats] = field(default_factory=list)


def generate_train_shards(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    shards: list[list[Prompt]],
    pending: list[int],
    out_dir: Path,
    config: ReferenceConfig,
    ctx: DistributedContext,
    halt_after_shards: int | None,
) -> ShardWork:
    """Every pending shard this rank claims first (:func:`claim`), generated by one static engine (its KV cache and
    decode graphs serve every shard) and written atomically by a writer thread while the next shard generates."""
    work = ShardWork()
    tag = f"reference[rank {ctx.rank}]" if ctx.distributed else "reference"
    static = StaticGreedyEngine(model, ctx.device) if config.engine == "static" else None
    if static is not None:
        work.engine_stats.append(static.stats)
    started = time.time()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-writer") as writer:
        written: Future[None] | None = None  # the shard being written: one at a time, its error stops the stage
        for index in pending:
            name = shard_name(index)
            if not claim(out_dir / CLAIMS_DIR / name):
                continue  # another rank has it
            shard_start = time.time()
            continuations = generate_continuations(
                model,
                tokenizer,
                shards[index],
                config.max_new_tokens,
                config.batch_size,
                ctx.device,
                top_k=config.top_k,
                engine=config.engine,
                progress=ctx.is_main,
                static=static,
            )
            if written is not None:
                written.result()
            written = writer.submit(write_train_shard, out_dir / name, shards[index], continuations)
            tokens = sum(len(c.tokens) for c in continuations)
            work.tokens += tokens
            work.shards += 1
            print(
                f"{tag}: shard {index + 1}/{len(shards)}: {len(shards[index])} continuations, {tokens} tokens, "
                f"{tokens / (time.time() - shard_start):,.0f} tok/s",
                file=sys.stderr,
            )
            if halt_after_shards is not None and work.shards >= halt_after_shards:
                import signal

                written.result()
                os.kill(os.getpid(), signal.SIGKILL)  # tests: a crash between shards
        if written is not None:
            written.result()
    if static is not None:
        static.release()
    work.seconds = time.time() - started
    return work


def shard_name(index: int) -> str:
    return f"train-{index:05d}.safetensors"


def write_reference_manifest(
    out_dir: Path,
    plan: PromptPlan,
    shard_names: list[str],
    per_rank: list[dict[str, Any]],
    generation_seconds: float,
    extra: dict[str, Any],
    params: dict[str, Any],
) -> dict[str, Any]:
    """Rank 0, once every rank is done: the manifest (prompts per split and category, the generation phase)."""
    outputs = [f"{split}.jsonl" for split in EVAL_SPLITS] + shard_names
    generated_tokens = sum(r["train_tokens"] + r["eval_tokens"] for r in per_rank)
    by_category: dict[str, dict[str, int]] = {split: {} for split in ("train", *EVAL_SPLITS)}
    for prompt in plan.train:
        by_category["train"][prompt.category] = by_category["train"].get(prompt.category, 0) + 1
    for pool in plan.pools:
        by_category[pool.split][pool.category] = len(pool.kept)
    return write_manifest(
        out_dir,
        "reference",
        outputs=outputs,
        params=params,
        inputs=plan.inputs,
        extra={
            "prompts": {split: sum(counts.values()) for split, counts in by_category.items()},
            "categories": by_category,
            "train_asked": plan.train_asked,
            "eval_candidates": {"generated": extra["eval_generated"], "kept": sum(len(p.kept) for p in plan.pools)},
            "target_verified": extra["target_verified"],
            "vocab_fingerprint": extra["vocab_fingerprint"],
            "seconds": extra["seconds"],
            # This run's generation phase (a resumed run's covers only what it generated), over all ranks.
            "generation": {
                "world_size": params["world_size"],
                "seconds": generation_seconds,
                "tokens": generated_tokens,
                "tokens_per_s": generated_tokens / max(generation_seconds, 1e-9),
                "train_shards": sum(r["shards"] for r in per_rank),
                "per_rank": per_rank,
            },
        },
    )


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
    plan = PromptPlan({"target": {**checkpoint_info(target), "pin": model_pin(target, target_manifest)}})
    tokenizer = load_tokenizer(target)
    if corpus_dir is not None:
        add_corpus_prompts(plan, corpus_dir, tokenizer, config)
    if prompts is not None:
        add_given_prompts(plan, prompts, tokenizer, config, corpus_config or CorpusConfig(), ctx)
    check_eval_splits(plan, corpus_dir is not None)
    out_dir.mkdir(parents=True, exist_ok=True)
    shards = [plan.train[i : i + config.shard_prompts] for i in range(0, len(plan.train), config.shard_prompts)]
    shard_names = [shard_name(index) for index in range(len(shards))]
    pending = pending_shards(out_dir, plan, shard_names, config, ctx)
    model = load_causal_lm(target, device, DTYPES[dtype])
    # What a server of a drafter on this tokenizer reports as vocab_fingerprint; validate checks the two agree.
    vocab_fingerprint = tokenizer_fingerprint(tokenizer, model.config.vocab_size)
    ctx.barrier()  # the generation phase, which the manifest times, starts on every rank at once
    generation_start = time.time()
    eval_generated = 0
    if ctx.is_main:
        eval_generated = generate_eval_sets(model, tokenizer, plan.pools, config, device, progress=True)
        for split in EVAL_SPLITS:
            kept = [pair for pool in plan.pools if pool.split == split for pair in pool.kept]
            write_conversations(out_dir / f"{split}.jsonl", [p for p, _ in kept], [c for _, c in kept])
    work = generate_train_shards(model, tokenizer, shards, pending, out_dir, config, ctx, halt_after_shards)
    mine = {
        "rank": ctx.rank,
        "shards": work.shards,
        "train_tokens": work.tokens,
        "train_seconds": work.seconds,
        "eval_tokens": sum(pool.generated_tokens for pool in plan.pools),
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "engine": engine_summary(work.engine_stats),
    }
    per_rank = ctx.all_gather_object({**mine, "seconds": time.time() - generation_start})  # waits for all
    generation_seconds = time.time() - generation_start
    if not ctx.is_main:
        finish_distributed(ctx)
        return None
    shutil.rmtree(out_dir / CLAIMS_DIR)
    params = {"config": config.__dict__, "dtype": dtype, "device": str(device), "world_size": ctx.world_size}
    extra = {
        "eval_generated": eval_generated,
        "target_verified": target_manifest is not None,
        "vocab_fingerprint": vocab_fingerprint,
        "seconds": time.time() - start_time,
    }
    manifest = write_reference_manifest(out_dir, plan, shard_names, per_rank, generation_seconds, extra, params)
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
        help='given prompts JSONL (or .jsonl.xz), {"messages": [...]} (chat template) or {"text": "..."} per line',
    )
    add_preset_argument(p)
    add_device_argument(p)
    p.add_argument(
        "--thinking",
        choices=("on", "off"),
        default=None,
        help="chat prompts' enable_thinking (Qwen3's default: on; off suits a greedy drafter, see "
        "ReferenceConfig.enable_thinking) (default: the preset's, off)",
    )
    add_dtype_argument(p, "the target's weights")
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
