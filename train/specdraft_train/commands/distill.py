"""Stage `distill`: teach the drafter the target's continuations (knowledge distillation), optionally with Q4_0 QAT.

Starts from a drafter checkpoint (`--drafter`: the lab's base drafter, or any HF id/path such as Qwen/Qwen3-1.7B) and
the `reference` stage's training shards, and trains it on every continuation position with the loss
`DistillConfig.loss` names: kl (KL to the target's renormalized top-k plus CE on its greedy token), ce, tvd,
reverse_kl or prefix (an expected-accepted-prefix weighting); losses.py defines each (and `--help` shows them below).
Losses are divided by the step's continuation tokens over all ranks, so DDP ranks with unequal shares still average
to the one-process gradient. Optional replay (`replay_weight` > 0 and `--replay-tokens`): each step also takes
`replay_batch_size` chunks of `replay_seq_len` tokens of the base's pretraining text (the lab tokenizer stage's
``train.tokens.npy``, or a `pretrain --init`
directory's; a ``.npy`` token array, or a directory of them) and adds replay_weight · (mean next-token CE
over them), so the drafter keeps what it knew about text the reference data does not cover (an LM loss, not a KL to
a frozen base: no second 1.7B model in memory).

Steps are sized by tokens: each epoch takes every row once, in a seeded random order, cut into steps of equal shares
of its tokens — `batch_size` rows' worth on average, or `batch_tokens` (`--batch-tokens`) — and a step's rows are
packed into one sequence per rank (positions restarting per row, attention inside each row: packing.py), so no token
is padding. Each decoder layer is recomputed in the backward pass only where the largest step would not fit the GPU
otherwise (`activation_checkpointing` auto: two short steps at the start measure the memory a token costs; the line
before the first step says what was decided and why); `compile` compiles each layer.

Training examples can be restricted to categories (`categories`: prefixes such as ``code/inner``) and to a share of
them (`data_fraction`, chosen by a hash of each example's id so that smaller fractions are subsets of larger ones).
The dev split's τ is measured every `eval_every` steps (0: every epoch end) by the validator's walk (fast exact
method, one packed forward per conversation: tau.py); the checkpoint with the best **macro τ** (mean of per-category
τ) is kept, the starting drafter (step 0) included, and `patience` evaluations without a new best stop the run early
(a plateau). Progress: a tqdm bar (loss, top-1 agreement, dev τ); TensorBoard events in ``OUT/tb/`` (loss and its
parts, top-1 agreement, dev τ by category and macro). Under `--qat` the drafter's forward uses weights
fake-quantized exactly as a GGUF Q4_0 file stores them (specdraft_train.training.quant), the token embedding as
`--embedding-type` says (the preset's `export.embedding_type`: Q8_0, or Q4_0 for an all-Q4_0 file); the output then
also holds ``qat_state.safetensors`` for `export --qat-state`.
Resumable (``OUT/resume/``). Under torchrun: DDP like pretrain (NCCL between GPUs, gloo on the CPU; each step's rows
are split over the ranks, so N ranks train what one process would), or FSDP with ``--fsdp`` (the drafter's weights,
gradients and AdamW moments sharded over the ranks, for a drafter whose training state does not fit one GPU; not
with --qat). The teacher is the stored top-k of the reference data either way (no target in memory):

    python -m specdraft_train distill --drafter runs/lab/base --reference runs/lab/reference --out runs/lab/distilled \\
        --replay-tokens runs/lab/tokenizer --set replay_weight=0.2 --set loss=prefix
    python -m specdraft_train distill --drafter runs/lab/distilled --reference runs/lab/reference \\
        --out runs/lab/distilled-qat --qat [--embedding-type Q4_0]
    torchrun --nproc-per-node 8 -m specdraft_train distill ...
    torchrun --nproc-per-node 8 -m specdraft_train distill --fsdp --drafter Qwen/Qwen3-8B ...
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..config import add_device_argument, add_embedding_type_argument, announce, apply_settings, override
from ..formats.artifacts import input_record, write_manifest
from ..formats.provenance import chain_provenance
from ..modeling.models import QAT_STATE_FILE, architecture_summary, checkpoint_info, load_causal_lm, save_checkpoint
from ..presets import add_preset_argument, get_preset
from ..training.distillation import Distillation, DistillJob, check_job
from ..training.examples import read_inputs
from ..training.loop import finish_distributed, init_distributed, warm_throughput
from ..training.losses import LOSSES

# What the command prints as JSON when it is done (the manifest's metrics hold these and more).
SUMMARY_METRICS = ("best_dev_macro_tau", "best_dev_tau", "best_dev_top1", "best_step", "steps", "train_tokens")
SUMMARY_METRICS += ("train_seconds",)


# ---------------------------------------------------------------------------------------------------------------------
# The outputs: the best checkpoint, the manifest, the last line


def manifest_params(run: Distillation) -> dict[str, Any]:
    job = run.job
    return {
        "config": job.config.__dict__,
        "qat": job.qat,
        "embedding_type": run.qat_state.embedding_type if run.qat_state is not None else None,
        "clip_search": job.clip_search,
        "epochs": run.epochs,
        "lr": run.peak_lr,
        "global_batch": round(len(run.widths) / run.steps_per_epoch, 2),  # rows a step, on average
        "step_tokens": round(float(run.widths.sum()) / run.steps_per_epoch),  # tokens a step, on average
        "activation_checkpointing": run.recompute,
        "activation_checkpointing_why": run.recompute_why,
        "world_size": run.ctx.world_size,
        "fsdp": run.sharded,
        "replay": run.replay is not None,
    }


def manifest_metrics(run: Distillation) -> dict[str, Any]:
    extra, best, device = run.extra, run.extra["best"], run.ctx.device
    return {
        "steps": run.step,
        "steps_per_epoch": run.steps_per_epoch,
        "examples": len(run.inputs.examples),
        "examples_available": len(run.inputs.available),
        "train_tokens": extra["train_tokens"],
        "input_tokens": extra["input_tokens"],
        "replay_tokens": extra["replay_tokens"],
        "best_dev_macro_tau": best["dev_macro_tau"],
        "best_dev_tau": best["dev_tau"],
        "best_dev_top1": best["dev_top1"],
        "best_step": best["step"],
        "best_epoch": best["epoch"],
        "history": extra["history"],
        "stopped_by_time_budget": run.stopped_by_budget,
        "stopped_by_plateau": run.stopped_by_plateau,
        "train_seconds": run.train_seconds,
        "tokens_per_s": warm_throughput(extra.get("timed_from"), run.loop_end),  # continuation tokens
        "input_tokens_per_s": warm_throughput(extra.get("timed_from"), run.loop_end, column=2),
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
    }


def write_outputs(run: Distillation, start_time: float) -> dict[str, Any]:
    """Rank 0: the best dev checkpoint (with its QAT state under QAT) and the manifest; returns the manifest."""
    job, model = run.job, run.model
    if run.sharded:  # the FSDP model holds only this rank's shards: the best weights go into a plain CPU copy
        model = load_causal_lm(job.drafter, torch.device("cpu"))
    run.resume.load_best(model)
    outputs: list[str]
    if run.qat_state is not None:
        with run.qat_state.unwrapped():  # latent fp32 weights under their HF names; export quantizes them exactly
            outputs = save_checkpoint(model, job.out, job.drafter)
        run.qat_state.save(job.out / QAT_STATE_FILE)
        outputs.append(QAT_STATE_FILE)
    else:
        outputs = save_checkpoint(model, job.out, job.drafter)
    reference_manifest, drafter_manifest = run.inputs.reference_manifest, run.inputs.drafter_manifest
    inputs = {"drafter": checkpoint_info(job.drafter), "reference": input_record(job.reference, reference_manifest)}
    if run.replay is not None:
        inputs["replay"] = run.replay.record
    if run.inputs.onpolicy:
        inputs["onpolicy"] = list(run.inputs.onpolicy)
    if job.select_reference is not None and job.config.select_tokens < 1:
        inputs["select_reference"] = checkpoint_info(job.select_reference)
    provenance = chain_provenance(job.drafter, drafter_manifest, inputs, reference_manifest)
    metrics = {
        **manifest_metrics(run),
        "seconds": time.time() - start_time,
        "drafter_verified": drafter_manifest is not None,
    }
    return write_manifest(
        job.out,
        "distill",
        outputs=outputs,
        params=manifest_params(run),
        inputs=inputs,
        extra={**provenance, "architecture": architecture_summary(model), "metrics": metrics},
    )


def finish_line(run: Distillation) -> str:
    """The stage's last line: the kept checkpoint (step 0 is the starting drafter), the steps run of those planned,
    and why it stopped short of them."""
    best, steps = run.extra["best"], run.step
    why = " (plateau)" if run.stopped_by_plateau else " (time budget)" if run.stopped_by_budget else ""
    start = " (the starting drafter: no evaluation beat it)" if best["step"] == 0 and steps > 0 else ""
    return (
        f"distill: best dev macro τ {best['dev_macro_tau']:.3f} (τ {best['dev_tau']:.3f}, top-1 "
        f"{best['dev_top1']:.3f}) at step {best['step']}{start} after {steps:,} of {run.max_steps:,} steps{why}; "
        f"{run.extra['train_tokens']:,} continuation tokens in {run.train_seconds:.1f} s"
    )


# ---------------------------------------------------------------------------------------------------------------------
# The stage


def run(job: DistillJob) -> dict[str, Any] | None:
    """Distill into ``job.drafter`` and write the best dev checkpoint to ``job.out``; returns the manifest (rank 0)."""
    check_job(job)  # before any model is loaded
    ctx = init_distributed(job.device)
    start_time = time.time()
    distillation = Distillation(job, ctx, read_inputs(job.drafter, job.reference, job.config, ctx, job.onpolicy))
    distillation.train()
    manifest = None
    if ctx.is_main:
        manifest = write_outputs(distillation, start_time)
        print(finish_line(distillation), file=sys.stderr)
        shutil.rmtree(job.out / "resume", ignore_errors=True)
    del distillation  # with its DDP model, before the group goes (finish_distributed says why)
    finish_distributed(ctx)
    return manifest


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "distill",
        help="distill the target's continuations into the drafter (+ --qat)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--drafter", required=True, help="starting drafter: lab checkpoint, local HF model, or HF id")
    p.add_argument("--reference", required=True, type=Path, help="output directory of the reference stage")
    p.add_argument("--out", required=True, type=Path, help="checkpoint directory to write")
    p.add_argument("--qat", action="store_true", help="train through GGUF Q4_0 fake quantization (quant.py)")
    p.add_argument("--clip-search", action="store_true", help="with --qat: per-block clip search, refreshed each epoch")
    p.add_argument(
        "--fsdp",
        action="store_true",
        help="under torchrun: shard weights, gradients and optimizer over the ranks (FSDP) instead of DDP "
        "(default: the preset's distill.fsdp, false)",
    )
    add_embedding_type_argument(
        p,
        "with --qat: the token embedding's type in the Q4_0 file (default: the preset's export.embedding_type)",
    )
    add_preset_argument(p)
    add_device_argument(p)
    p.add_argument("--epochs", type=int, default=None, help="epochs (default: preset's; qat_epochs with --qat)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: preset's; qat_lr with --qat)")
    p.add_argument("--batch-size", type=int, default=None, help="rows a step on average (default: preset's)")
    p.add_argument(
        "--batch-tokens", type=int, default=None, help="tokens a step instead, 0 = batch-size rows' (default: preset's)"
    )
    p.add_argument(
        "--time-budget", type=float, default=None, help="stop after this many training seconds (default: preset's)"
    )
    p.add_argument(
        "--ckpt-every", type=int, default=None, help="steps between resumable checkpoints (default: preset's)"
    )
    p.add_argument("--loss", choices=LOSSES, default=None, help="per-position loss (default: preset's)")
    p.add_argument(
        "--eval-every", type=int, default=None, help="steps between dev evaluations, 0 = epoch ends (default: preset's)"
    )
    p.add_argument(
        "--patience",
        type=int,
        default=None,
        help="evaluations without a new best before stopping, 0 = never (default: preset's)",
    )
    p.add_argument(
        "--replay-tokens",
        type=Path,
        default=None,
        help="replay text: a lab tokenizer directory, a `pretrain --init` directory, a .npy "
        "token array or a directory of them (used when replay_weight > 0)",
    )
    p.add_argument("--replay-weight", type=float, default=None, help="weight of the replay LM loss (default: preset's)")
    p.add_argument(
        "--onpolicy",
        type=Path,
        action="append",
        default=[],
        help="an `onpolicy` folder: the drafter's own continuations scored by the target, trained on beside the "
        "reference's rows (repeatable)",
    )
    p.add_argument(
        "--select-reference",
        default=None,
        help="token selection's reference drafter (a drafter distilled from the same start), for --set "
        "select_tokens=SHARE < 1: each step trains on the positions whose loss exceeds its most",
    )
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any DistillConfig field, e.g. --set ce_weight=1 --set 'categories=[\"code/inner\"]' "
        "--set activation_checkpointing=on --set compile=off (repeatable; JSON values)",
    )
    p.add_argument("--halt-after-steps", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def budget(job: DistillJob) -> dict[str, Any]:
    """What bounds a distill run, for the line it prints before it starts."""
    config = job.config
    replay = "off"
    if config.replay_weight > 0:
        replay = f"{config.replay_weight} on {job.replay_tokens}" if job.replay_tokens else "off (no --replay-tokens)"
    epochs, lr = config.schedule(job.qat)
    settings: dict[str, Any] = {
        "epochs": epochs,
        "batch": f"{config.batch_tokens:,} tokens" if config.batch_tokens > 0 else f"{config.batch_size} rows' tokens",
        "lr": lr,
        "warmup_steps": config.warmup_steps,
        "loss": config.loss,
        "eval_every": config.eval_every or "epoch end",
        "patience": config.patience or "none",
        "time budget": f"{config.time_budget_s:g} s" if config.time_budget_s > 0 else "none",
        "replay": replay,
    }
    if job.onpolicy:
        settings["on-policy folders"] = len(job.onpolicy)
    if config.select_tokens < 1:
        settings["token selection"] = f"{config.select_tokens:g} of positions by {job.select_reference}"
    if job.qat:
        settings["embedding"] = job.embedding_type
    return settings


def job_from_args(args: argparse.Namespace) -> DistillJob:
    """The run the command line asks for: the preset's DistillConfig with --set and the flags applied, the epochs and
    learning rate of --epochs and --lr where the run reads them (QAT's under --qat)."""
    preset = apply_settings(get_preset(args.preset), [f"distill.{s}" for s in args.settings])
    config = override(
        preset.distill,
        batch_size=args.batch_size,
        batch_tokens=args.batch_tokens,
        time_budget_s=args.time_budget,
        ckpt_every=args.ckpt_every,
        loss=args.loss,
        eval_every=args.eval_every,
        patience=args.patience,
        replay_weight=args.replay_weight,
        fsdp=True if args.fsdp else None,
    ).with_schedule(args.qat, args.epochs, args.lr)
    return DistillJob(
        drafter=args.drafter,
        reference=args.reference,
        out=args.out,
        config=config,
        qat=args.qat,
        clip_search=args.clip_search,
        embedding_type=args.embedding_type or preset.export.resolved_embedding_type(),
        replay_tokens=args.replay_tokens,
        device=args.device,
        halt_after_steps=args.halt_after_steps,
        onpolicy=tuple(args.onpolicy),
        select_reference=args.select_reference,
    )


def main(args: argparse.Namespace) -> int:
    job = job_from_args(args)
    if int(os.environ.get("RANK", "0")) == 0:
        announce("distill --qat" if args.qat else "distill", args.preset, budget(job))
    manifest = run(job)
    if manifest is not None:
        print(json.dumps({k: manifest["metrics"][k] for k in SUMMARY_METRICS}))
    return 0
