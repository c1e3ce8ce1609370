"""Stage `onpolicy`: training data from the drafter's own text. The drafter continues the reference's training prompts
greedily, on its own; the target reads each continuation teacher-forced and gives, at every position, its greedy token
(what the drafter should have written there) and its top-k log-probs. `distill --onpolicy DIR` then trains on these
rows beside the reference's: the drafter's inputs are its own continuations, its labels the target's.

Why free-running and not drafts along the target's answers: at temperature 0 a draft is judged along the target's
greedy path, and a drafted token after the first rejected one is never accepted, so the states acceptance visits are
exactly the reference's teacher-forced ones. What on-policy data adds is text the drafter itself goes to — where its
errors take it — scored by the target at the cost of one forward per row, not a generation.

    python -m specdraft_train onpolicy --drafter runs/x/distilled --target runs/x/target --reference runs/x/reference \\
        --out runs/x/onpolicy-1 --preset smollm2-chat

Outputs: ``train-NNNNN.safetensors`` shards in the reference's format plus ``labels`` (examples.py), written a shard
at a time (a cut run goes on at the next shard), and ``manifest.json`` with how often the target's greedy token was
the drafter's own, overall and per category (the drafter's free-running top-1 agreement).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import (
    OnPolicyConfig,
    ReferenceConfig,
    add_device_argument,
    add_settings_argument,
    announce,
    apply_settings,
)
from ..engine.generation import generate_continuations
from ..engine.scoring import score_continuations
from ..formats.artifacts import input_record, verify_stage_dir, write_manifest
from ..formats.prompts import Prompt
from ..modeling.models import (
    DTYPES,
    add_dtype_argument,
    checkpoint_info,
    load_causal_lm,
    load_tokenizer,
    resolve_device,
    verify_checkpoint,
)
from ..presets import add_preset_argument, get_preset
from ..progress import progress_bar
from ..training.examples import (
    Continuation,
    TrainExample,
    read_shard,
    read_train_examples,
    share_of_ids,
    write_train_shard,
)
from ..training.loop import halt_for_test


@dataclass(frozen=True)
class OnPolicyJob:
    drafter: str | Path
    target: str | Path
    reference: Path
    out: Path
    config: OnPolicyConfig
    device: str = "auto"
    dtype: str = "float32"  # both models' weights (models.DTYPES); bfloat16 for real models, as `reference --dtype`
    halt_after_shards: int | None = None  # tests: SIGKILL after this many shards (a cut to resume from)


def reference_settings(manifest: dict[str, Any]) -> ReferenceConfig:
    """The settings the reference data was made with (its verified manifest's): its rows' top-k, which on-policy rows
    must match to train beside them, its continuations' length and its shards' size."""
    return ReferenceConfig(**manifest["params"]["config"])


def shard_path(out: Path, index: int) -> Path:
    return out / f"train-{index:05d}.safetensors"


def training_prompts(reference: Path, share: float) -> list[Prompt]:
    """The reference's training prompts (its shards' order), a hash-chosen ``share`` of them."""
    examples = read_train_examples(reference)
    prompts = [Prompt(e.id, e.category, e.prompt_tokens) for e in examples]
    return [prompts[i] for i in share_of_ids([p.id for p in prompts], share)]


def agreement(rows: list[TrainExample]) -> dict[str, Any]:
    """How often the target's greedy token is the drafter's own along its continuation, overall and per category."""
    by_category: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        by_category[row.category][0] += int(np.sum(np.asarray(row.continuation_tokens) == np.asarray(row.targets)))
        by_category[row.category][1] += len(row.continuation_tokens)
    same, total = sum(v[0] for v in by_category.values()), sum(v[1] for v in by_category.values())
    return {
        "tokens": total,
        "drafter_top1": same / max(total, 1),
        "by_category": {c: {"tokens": n, "drafter_top1": s / max(n, 1)} for c, (s, n) in sorted(by_category.items())},
    }


def run(job: OnPolicyJob) -> dict[str, Any]:
    """Write the on-policy shards and the manifest; returns the manifest."""
    start_time = time.time()
    reference_manifest = verify_stage_dir(job.reference, "reference")
    drafter_manifest, target_manifest = verify_checkpoint(job.drafter), verify_checkpoint(job.target)
    device = resolve_device(job.device)
    prompts = training_prompts(job.reference, job.config.prompt_share)
    if not prompts:
        raise ValueError(f"{job.reference}: no training prompts (prompt_share {job.config.prompt_share})")
    settings = reference_settings(reference_manifest)
    max_new_tokens = job.config.max_new_tokens or settings.max_new_tokens
    shard_size = settings.shard_prompts
    shards = [prompts[i : i + shard_size] for i in range(0, len(prompts), shard_size)]
    job.out.mkdir(parents=True, exist_ok=True)
    drafter = load_causal_lm(job.drafter, device, DTYPES[job.dtype])
    target = load_causal_lm(job.target, device, DTYPES[job.dtype])
    tokenizer = load_tokenizer(job.target)
    stats: dict[str, Any] = {"prompts": 0, "tokens": 0, "drafting_seconds": 0.0, "scoring_seconds": 0.0}
    done = [shard_path(job.out, i).is_file() for i in range(len(shards))]  # written atomically by a cut run
    bar = progress_bar(len(prompts), "onpolicy", "prompt", initial=sum(len(s) for s, d in zip(shards, done) if d))
    for index, shard in enumerate(shards):
        path = shard_path(job.out, index)
        if done[index]:
            continue
        began = time.time()
        drafted = generate_continuations(
            drafter, tokenizer, shard, max_new_tokens, job.config.batch_size, device, top_k=None
        )
        kept = [(p, d) for p, d in zip(shard, drafted) if d.tokens]  # a drafter that stops at once leaves nothing
        if not kept:
            raise ValueError(f"{job.drafter} ended every continuation of shard {index + 1} at once: nothing to score")
        scoring = time.time()
        scored = score_continuations(
            target, [p.tokens for p, _ in kept], [d.tokens for _, d in kept], device, settings.top_k
        )
        rows = [Continuation(d.tokens, s.topk_ids, s.topk_logprobs, s.labels) for (_, d), s in zip(kept, scored)]
        write_train_shard(path, [p for p, _ in kept], rows)
        stats["drafting_seconds"] += scoring - began
        stats["scoring_seconds"] += time.time() - scoring
        bar.update(len(shard))
        bar.write(f"onpolicy: shard {index + 1} of {len(shards)}: {len(kept)} continuations", file=sys.stderr)
        halt_for_test(index + 1, job.halt_after_shards)
    bar.close()
    rows = [row for index in range(len(shards)) for row in read_shard(shard_path(job.out, index))]  # any run's
    stats["prompts"], stats["tokens"] = len(rows), sum(len(row.continuation_tokens) for row in rows)
    outputs = [shard_path(job.out, i).name for i in range(len(shards))]
    inputs = {
        "drafter": checkpoint_info(job.drafter),
        "target": checkpoint_info(job.target),
        "reference": input_record(job.reference, reference_manifest),
    }
    extra = {
        # distill checks a drafter's vocabulary against this, as against a reference's
        "vocab_fingerprint": reference_manifest.get("vocab_fingerprint"),
        "drafter_verified": drafter_manifest is not None,
        "target_verified": target_manifest is not None,
        "agreement": agreement(rows),
        "stats": {**stats, "seconds": time.time() - start_time},
    }
    params = {"config": job.config.__dict__, "max_new_tokens": max_new_tokens, "top_k": settings.top_k}
    params["dtype"] = job.dtype
    return write_manifest(job.out, "onpolicy", outputs=outputs, params=params, inputs=inputs, extra=extra)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "onpolicy",
        help="training rows from the drafter's own continuations, scored by the target",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--drafter", required=True, help="the drafter that writes: a checkpoint directory or HF id")
    p.add_argument("--target", required=True, help="the target that scores: a checkpoint directory or HF id")
    p.add_argument("--reference", required=True, type=Path, help="the reference stage whose training prompts to use")
    p.add_argument("--out", required=True, type=Path, help="output directory (run again to resume)")
    add_preset_argument(p)
    add_device_argument(p)
    add_settings_argument(p)
    add_dtype_argument(p, "both models' weights")
    p.add_argument("--halt-after-shards", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def job_from_args(args: argparse.Namespace) -> OnPolicyJob:
    preset = apply_settings(get_preset(args.preset), args.settings)
    return OnPolicyJob(
        args.drafter,
        args.target,
        args.reference,
        args.out,
        preset.onpolicy,
        args.device,
        args.dtype,
        args.halt_after_shards,
    )


def budget(job: OnPolicyJob) -> dict[str, Any]:
    return {
        "prompt share": job.config.prompt_share,
        "new tokens": job.config.max_new_tokens or "the reference's",
        "batch at most": job.config.batch_size,
        "dtype": job.dtype,
    }


def main(args: argparse.Namespace) -> int:
    job = job_from_args(args)
    announce("onpolicy", args.preset, budget(job))
    manifest = run(job)
    print(json.dumps({"prompts": manifest["stats"]["prompts"], "drafter_top1": manifest["agreement"]["drafter_top1"]}))
    return 0
