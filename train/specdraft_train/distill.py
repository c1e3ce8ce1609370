"""Stage `distill`: teach the drafter the target's continuations (knowledge distillation), optionally with Q4_0 QAT.

Starts from a drafter checkpoint (`--drafter`: the lab's base drafter, or any HF id/path such as Qwen/Qwen3-1.7B) and
the `reference` stage's training shards, and trains it on every continuation position with the loss
`DistillConfig.loss` names: kl (KL to the target's renormalized top-k plus CE on its greedy token), ce, tvd,
reverse_kl or prefix (an expected-accepted-prefix weighting); losses.py defines each (and `--help` shows them below).
Losses are divided by the global batch's continuation tokens, so DDP ranks with unequal shares still average to the
one-process gradient. Optional replay (`replay_weight` > 0 and `--replay-tokens`): each
step also takes `replay_batch_size` chunks of `replay_seq_len` tokens of the base's pretraining text (the lab
tokenizer stage's ``train.tokens.npy``, a ``.npy`` token array, or a directory of them) and adds
replay_weight · (mean next-token CE over those tokens), so the drafter keeps what it knew about text the reference
data does not cover. (An LM loss rather than a KL to a frozen copy of the base: no second model in memory or forward
per step, which for a 1.7B drafter is 3.4 GB and a third more compute.)

Training examples can be restricted to categories (`categories`: prefixes such as ``code/inner``) and to a share of
them (`data_fraction`, chosen by a hash of each example's id so that smaller fractions are subsets of larger ones).
The dev split's τ is measured every `eval_every` steps (0: every epoch end) by the validator's walk (fast exact
method, tau.py); the checkpoint with the best **macro τ** (mean of per-category τ) is kept, the starting drafter
(step 0) included, and `patience` evaluations without a new best stop the run early (a plateau). Progress: a tqdm
bar (loss, top-1 agreement, dev τ); TensorBoard events in ``OUT/tb/`` (loss and its parts, top-1 agreement, dev τ
by category and macro). Under `--qat` the drafter's forward uses weights fake-quantized exactly as a GGUF Q4_0 file
stores them (specdraft_train.quant), the token embedding as `--embedding-type` says (the preset's
`export.embedding_type`: Q8_0, or Q4_0 for an all-Q4_0 file); the output then also holds ``qat_state.safetensors``
for `export --qat-state`.
Resumable (``OUT/resume/``). Under torchrun: DDP like pretrain (NCCL between GPUs, gloo on the CPU; the global batch
is split over the ranks, so N ranks train what one process would), or FSDP with ``--fsdp`` (the drafter's weights,
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .artifacts import input_record, verify_stage_dir, write_manifest
from .config import (
    DistillConfig,
    ExportConfig,
    add_embedding_type_argument,
    add_preset_argument,
    announce,
    apply_settings,
    get_preset,
    override,
    serving_context_note,
)
from .examples import ReplayText, TrainExample, collate, read_train_examples, select_examples
from .losses import LOSSES, check_loss, loss_sums
from .models import (
    QAT_STATE_FILE,
    architecture_summary,
    autocast_context,
    checkpoint_info,
    load_causal_lm,
    save_checkpoint,
    verify_checkpoint,
)
from .provenance import chain_provenance
from .tau import TauResult, model_tau, read_conversations
from .training import (
    ResumeState,
    TrainWindow,
    finish_distributed,
    halt_for_test,
    init_distributed,
    lr_at,
    make_optimizer,
    open_summary_writer,
    progress_bar,
    rank_slice,
    set_lr,
    stop_by_budget,
    synced_clock,
    unwrap,
    warm_throughput,
    wrap_model,
)

LOG_EVERY_STEPS = 25  # also every evaluation and checkpoint step, so logged windows are the same after a resume
UNTIMED_STEPS = 5  # the manifest's tokens_per_s starts after these: the first steps pay cuBLAS set-up, allocator growth


# ---------------------------------------------------------------------------------------------------------------------
# Data: which examples, how they are batched, and the replay text


# ---------------------------------------------------------------------------------------------------------------------
# Losses


# ---------------------------------------------------------------------------------------------------------------------
# Dev evaluation, input checks


def dev_entry(result: TauResult) -> dict[str, Any]:
    """A dev evaluation as the history records it."""
    by_category = {name: {"tau": c["tau"], "top1": c.get("top1")} for name, c in result.by_category.items()}
    return {
        "dev_tau": result.tau,
        "dev_macro_tau": result.macro_tau,
        "dev_top1": result.top1,
        "dev_by_category": by_category,
    }


def log_dev(tb: Any, entry: dict[str, Any], step: int) -> None:
    tb.add_scalar("dev/tau", entry["dev_tau"], step)
    tb.add_scalar("dev/macro_tau", entry["dev_macro_tau"], step)
    tb.add_scalar("dev/top1", entry["dev_top1"], step)
    for name, category in entry["dev_by_category"].items():
        tb.add_scalar(f"dev/tau/{name}", category["tau"], step)
        tb.add_scalar(f"dev/top1/{name}", category["top1"], step)
    tb.flush()


def check_vocabularies(
    drafter: str | Path, reference_manifest: dict[str, Any], vocab_size: int, examples: Sequence[TrainExample]
) -> None:
    """Refuse a drafter whose token ids cannot be the target's: different lab tokenizer, or ids out of range."""
    drafter_info = checkpoint_info(drafter)
    target_info = reference_manifest["inputs"].get("target", {})
    ours = drafter_info.get("outputs", {}).get("tokenizer.json")
    theirs = target_info.get("outputs", {}).get("tokenizer.json")
    if ours and theirs and ours != theirs:
        raise ValueError(
            f"drafter {drafter} has another tokenizer.json than the target of the reference data "
            f"(sha256 {ours[:12]}… vs {theirs[:12]}…)"
        )
    top = max((max(e.continuation_tokens + e.prompt_tokens) for e in examples), default=0)
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


def finish_line(
    best: dict[str, Any], steps: int, max_steps: int, tokens: int, seconds: float, plateau: bool, budget: bool
) -> str:
    """The stage's last line: the kept checkpoint (step 0 is the starting drafter), the steps run of those planned,
    and why it stopped short of them."""
    why = " (plateau)" if plateau else " (time budget)" if budget else ""
    start = " (the starting drafter: no evaluation beat it)" if best["step"] == 0 and steps > 0 else ""
    return (
        f"distill: best dev macro τ {best['dev_macro_tau']:.3f} (τ {best['dev_tau']:.3f}, top-1 "
        f"{best['dev_top1']:.3f}) at step {best['step']}{start} after {steps:,} of {max_steps:,} steps{why}; "
        f"{tokens:,} continuation tokens in {seconds:.1f} s"
    )


# ---------------------------------------------------------------------------------------------------------------------
# The stage


def run(
    drafter: str | Path,
    reference_dir: Path,
    out_dir: Path,
    config: DistillConfig,
    qat: bool = False,
    clip_search: bool = False,
    device_name: str = "auto",
    halt_after_steps: int | None = None,
    epochs: int | None = None,
    lr: float | None = None,
    replay_tokens: Path | None = None,
    embedding_type: str | None = None,
) -> dict[str, Any] | None:
    """Distill into ``drafter`` and write the best dev checkpoint to ``out_dir``; returns the manifest (rank 0).

    ``replay_tokens`` is the replay text (see the module docstring); replay runs only when it is given and
    ``config.replay_weight`` > 0. ``embedding_type`` (with ``qat``): the token embedding's type in the Q4_0 file
    QAT trains for (config.EMBEDDING_TYPES). Defaults to ``ExportConfig().resolved_embedding_type()``, Q8_0.
    """
    ctx = init_distributed(device_name)
    start_time = time.time()
    check_loss(config)  # before any model is loaded
    epochs = epochs if epochs is not None else (config.qat_epochs if qat else config.epochs)
    peak_lr = lr if lr is not None else (config.qat_lr if qat else config.lr)
    reference_manifest = verify_stage_dir(reference_dir, "reference")
    drafter_manifest = verify_checkpoint(drafter)
    available = read_train_examples(reference_dir)
    examples = select_examples(available, config)
    dev = read_conversations(reference_dir / "dev.jsonl")
    if not examples:
        raise ValueError(
            f"{reference_dir}: no training examples"
            + (
                f" of categories {list(config.categories)} (it has {sorted({e.category for e in available})})"
                if available
                else ""
            )
        )
    if ctx.is_main:
        items = [(e.id or "?", len(e.prompt_tokens), len(e.continuation_tokens)) for e in examples]
        serving_context_note("distill", "training examples", items, config.eval_k)
    sharded = config.fsdp and ctx.distributed
    if config.fsdp and qat:
        raise ValueError("distill --fsdp with --qat: QAT's parametrized weights are not wired for FSDP; run QAT on DDP")
    # Under FSDP the full drafter is read into CPU memory and each rank moves only its shards to its GPU.
    model = load_causal_lm(drafter, torch.device("cpu") if sharded else ctx.device)
    vocab_size = model.get_input_embeddings().weight.shape[0]
    check_vocabularies(drafter, reference_manifest, vocab_size, examples)
    replay: ReplayText | None = None
    if replay_tokens is not None and config.replay_weight > 0:
        replay = ReplayText(Path(replay_tokens), config, vocab_size, ctx)
        check_replay_tokenizer(drafter, replay)
    elif config.replay_weight > 0 and ctx.is_main:
        print(f"distill: replay_weight {config.replay_weight} but no --replay-tokens: replay is off", file=sys.stderr)
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    qat_state = None
    if qat:
        from .quant import prepare_qat  # the GGUF-exact fake quantization (needs the `gguf` package)

        embedding_type = embedding_type or ExportConfig().resolved_embedding_type()
        qat_state = prepare_qat(model, clip_search=clip_search, embedding_type=embedding_type)
    model.train()
    ddp_model = wrap_model(model, ctx, fsdp=config.fsdp)  # before the optimizer: FSDP replaces the parameters
    optimizer = make_optimizer(model, peak_lr, config.weight_decay, ctx.device)
    global_batch = min(config.batch_size, len(examples) - len(examples) % ctx.world_size)
    steps_per_epoch = max(1, len(examples) // global_batch)
    max_steps = epochs * steps_per_epoch
    eval_every = config.eval_every or steps_per_epoch
    resume = ResumeState(out_dir / "resume", ctx)
    step = 0
    extra: dict[str, Any] = {
        "train_seconds": 0.0,
        "history": [],
        "best": None,
        "evals_since_best": 0,
        "last_eval_step": None,
        "train_tokens": 0,
        "replay_tokens": 0,
        "last": {},
    }
    if resume.exists():
        step, extra = resume.load(model, optimizer)
        if ctx.is_main:
            print(f"distill: resuming at step {step}", file=sys.stderr)
    my_rows = rank_slice(global_batch, ctx)
    bar = progress_bar(ctx, total=max_steps, initial=step, desc="distill --qat" if qat else "distill")
    tb = open_summary_writer(ctx, out_dir, step)
    window = TrainWindow()
    postfix = {"epoch": "", "loss": "", "top1": "", "dev_tau": "", "best": ""}  # the bar's; parts go to TensorBoard

    def evaluate_dev() -> bool:
        """Rank 0 measures dev τ, keeps the best checkpoint by macro τ; every rank learns whether it plateaued.

        Under FSDP every rank runs the same dev forwards (each layer's weights are gathered from all ranks) and
        gives its shards to rank 0 for a new best; rank 0's numbers decide.
        """
        extra["last_eval_step"] = step
        tau = model_tau(unwrap(ddp_model), dev, config.eval_k, ctx.device) if ctx.is_main or sharded else None
        new_best = False
        if ctx.is_main:
            entry = {"step": step, "epoch": step / steps_per_epoch, **dev_entry(tau), **extra["last"]}
            extra["history"].append(entry)
            best = extra["best"]
            new_best = best is None or entry["dev_macro_tau"] > best["dev_macro_tau"]
            if new_best:
                extra["best"] = {k: entry[k] for k in ("step", "epoch", "dev_macro_tau", "dev_tau", "dev_top1")}
                extra["evals_since_best"] = 0
            else:
                extra["evals_since_best"] += 1
        if ctx.broadcast_object(new_best) if sharded else new_best:
            resume.save_best(ddp_model)
        if ctx.is_main:
            log_dev(tb, entry, step)
            best = extra["best"]
            postfix.update(dev_tau=f"{entry['dev_macro_tau']:.3f}", best=f"{best['dev_macro_tau']:.3f}@{best['step']}")
            bar.set_postfix(postfix, refresh=False)  # a refresh now would bypass the bar's rate limit in log files
            bar.write(
                f"distill: step {step} (epoch {entry['epoch']:.2f}) dev macro τ {entry['dev_macro_tau']:.3f}, "
                f"τ {entry['dev_tau']:.3f}, top-1 {entry['dev_top1']:.3f} (best macro τ "
                f"{best['dev_macro_tau']:.3f} at step {best['step']})",
                file=sys.stderr,
            )
        if config.patience <= 0:
            return False
        plateau = ctx.is_main and extra["evals_since_best"] >= config.patience
        return bool(ctx.all_reduce_sum(torch.tensor([float(plateau)], device=ctx.device)).item() > 0)

    def log_window() -> None:
        means = window.read(ctx)  # every rank: it all-reduces
        if not means or not ctx.is_main:
            return
        extra["last"] = means
        for name, value in means.items():
            tb.add_scalar(f"train/{name}", value, step)
        tb.add_scalar("train/lr", optimizer.param_groups[0]["lr"], step)
        postfix.update(epoch=f"{step / steps_per_epoch:.2f}", loss=f"{means['loss']:.4f}", top1=f"{means['top1']:.3f}")
        bar.set_postfix(postfix, refresh=False)

    if step == 0 and extra["last_eval_step"] is None:
        evaluate_dev()  # the starting drafter competes too
    stopped_by_budget = stopped_by_plateau = False
    segment_start = time.time()
    while step < max_steps:
        elapsed = extra["train_seconds"] + time.time() - segment_start
        if stop_by_budget(ctx, elapsed, config.time_budget_s):
            stopped_by_budget = True
            break
        epoch, within = divmod(step, steps_per_epoch)
        if within == 0 and qat_state is not None and clip_search:
            qat_state.refresh_clip()
        order = np.random.default_rng([config.seed, epoch]).permutation(len(examples))
        global_indices = order[within * global_batch : (within + 1) * global_batch]
        # Every rank knows the whole global batch, so its token count needs no collective (nor a GPU sync).
        n_global = sum(len(examples[i].continuation_tokens) for i in global_indices)
        batch = collate(
            [examples[i] for i in global_indices[my_rows]],
            pad_id,
            ctx.device,
            replay.chunks(step) if replay is not None else None,
        )
        set_lr(optimizer, lr_at(step, max_steps, config.warmup_steps, peak_lr, config.min_lr_ratio))
        with autocast_context(ctx.device):
            sums = loss_sums(ddp_model, batch, config)
        loss = sums.distill / n_global
        if replay is not None and sums.replay is not None:
            loss = loss + config.replay_weight * sums.replay / replay.tokens_per_step
        # DDP averages gradients over ranks; scaling by world size makes that the mean over all ranks' tokens.
        loss = loss * ctx.world_size
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(ddp_model.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        extra["train_tokens"] += n_global
        extra["replay_tokens"] += replay.tokens_per_step if replay is not None else 0
        if step == UNTIMED_STEPS:  # throughput is read from here on (tokens_per_s)
            extra["timed_from"] = [
                extra["train_seconds"] + synced_clock(ctx.device) - segment_start,
                extra["train_tokens"],
            ]
        window.add(
            loss / ctx.world_size,
            sums.parts,
            len(batch["labels"]),
            len(batch["replay_labels"]) if "replay_labels" in batch else 0,
        )
        bar.update(1)
        evaluating = step % eval_every == 0
        saving = (step % config.ckpt_every == 0 or evaluating) and step < max_steps
        if step % LOG_EVERY_STEPS == 0 or evaluating or saving or step == max_steps:
            log_window()
        if evaluating:
            stopped_by_plateau = evaluate_dev()
        # Also at every evaluation, so the saved state always agrees with best.pt and the history.
        if saving:
            extra["train_seconds"] += time.time() - segment_start
            segment_start = time.time()
            if ctx.is_main:
                tb.flush()  # events so far on disk before the state a rerun resumes from
            resume.save(model, optimizer, step, extra)  # every rank: under FSDP each gives rank 0 its shards
            ctx.barrier()
            halt_for_test(step, halt_after_steps)
        if stopped_by_plateau:
            break
    loop_end = [extra["train_seconds"] + synced_clock(ctx.device) - segment_start, extra["train_tokens"]]
    if extra["last_eval_step"] != step:  # stopped between evaluations: the last weights compete too
        log_window()
        evaluate_dev()
    bar.close()
    tb.close()
    train_seconds = extra["train_seconds"] + time.time() - segment_start
    manifest = None
    if ctx.is_main:
        if sharded:  # the FSDP model holds only this rank's shards: the best weights go into a plain CPU copy
            model = load_causal_lm(drafter, torch.device("cpu"))
        resume.load_best(model)
        outputs: list[str]
        if qat_state is not None:
            with qat_state.unwrapped():  # latent fp32 weights under their HF names; export quantizes them exactly
                outputs = save_checkpoint(model, out_dir, drafter)
            qat_state.save(out_dir / QAT_STATE_FILE)
            outputs.append(QAT_STATE_FILE)
        else:
            outputs = save_checkpoint(model, out_dir, drafter)
        best = extra["best"]
        inputs = {"drafter": checkpoint_info(drafter), "reference": input_record(reference_dir, reference_manifest)}
        if replay is not None:
            inputs["replay"] = replay.record
        provenance = chain_provenance(drafter, drafter_manifest, inputs, reference_manifest)
        manifest = write_manifest(
            out_dir,
            "distill",
            outputs=outputs,
            params={
                "config": config.__dict__,
                "qat": qat,
                "embedding_type": qat_state.embedding_type if qat_state is not None else None,
                "clip_search": clip_search,
                "epochs": epochs,
                "lr": peak_lr,
                "global_batch": global_batch,
                "world_size": ctx.world_size,
                "fsdp": sharded,
                "replay": replay is not None,
            },
            inputs=inputs,
            extra={
                **provenance,
                "architecture": architecture_summary(model),
                "metrics": {
                    "steps": step,
                    "steps_per_epoch": steps_per_epoch,
                    "examples": len(examples),
                    "examples_available": len(available),
                    "train_tokens": extra["train_tokens"],
                    "replay_tokens": extra["replay_tokens"],
                    "best_dev_macro_tau": best["dev_macro_tau"],
                    "best_dev_tau": best["dev_tau"],
                    "best_dev_top1": best["dev_top1"],
                    "best_step": best["step"],
                    "best_epoch": best["epoch"],
                    "history": extra["history"],
                    "stopped_by_time_budget": stopped_by_budget,
                    "stopped_by_plateau": stopped_by_plateau,
                    "train_seconds": train_seconds,
                    "tokens_per_s": warm_throughput(extra.get("timed_from"), loop_end),
                    "peak_gpu_bytes": torch.cuda.max_memory_allocated(ctx.device)
                    if ctx.device.type == "cuda"
                    else None,
                    "seconds": time.time() - start_time,
                    "drafter_verified": drafter_manifest is not None,
                },
            },
        )
        print(finish_line(best, step, max_steps, extra["train_tokens"], train_seconds, stopped_by_plateau,
                          stopped_by_budget), file=sys.stderr)  # fmt: skip
        shutil.rmtree(out_dir / "resume", ignore_errors=True)
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
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default: preset's; qat_epochs with --qat)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: preset's; qat_lr with --qat)")
    p.add_argument("--batch-size", type=int, default=None, help="global batch in continuations (default: preset's)")
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
        help="replay text: a lab tokenizer directory, a .npy "
        "token array or a directory of them (used when replay_weight > 0)",
    )
    p.add_argument("--replay-weight", type=float, default=None, help="weight of the replay LM loss (default: preset's)")
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any DistillConfig field, e.g. --set ce_weight=1 --set 'categories=[\"code/inner\"]' "
        "(repeatable; JSON values)",
    )
    p.add_argument("--halt-after-steps", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def budget(config: DistillConfig, args: argparse.Namespace, embedding_type: str) -> dict[str, Any]:
    """What bounds a distill run, for the line it prints before it starts."""
    replay = "off"
    if config.replay_weight > 0:
        replay = f"{config.replay_weight} on {args.replay_tokens}" if args.replay_tokens else "off (no --replay-tokens)"
    settings: dict[str, Any] = {
        "epochs": args.epochs if args.epochs is not None else config.qat_epochs if args.qat else config.epochs,
        "batch": config.batch_size,
        "lr": args.lr if args.lr is not None else config.qat_lr if args.qat else config.lr,
        "warmup_steps": config.warmup_steps,
        "loss": config.loss,
        "eval_every": config.eval_every or "epoch end",
        "patience": config.patience or "none",
        "time budget": f"{config.time_budget_s:g} s" if config.time_budget_s > 0 else "none",
        "replay": replay,
    }
    if args.qat:
        settings["embedding"] = embedding_type
    return settings


def main(args: argparse.Namespace) -> int:
    preset = apply_settings(get_preset(args.preset), [f"distill.{s}" for s in args.settings])
    config = override(
        preset.distill,
        batch_size=args.batch_size,
        time_budget_s=args.time_budget,
        ckpt_every=args.ckpt_every,
        loss=args.loss,
        eval_every=args.eval_every,
        patience=args.patience,
        replay_weight=args.replay_weight,
        fsdp=True if args.fsdp else None,
    )
    embedding_type = args.embedding_type or preset.export.resolved_embedding_type()
    if int(os.environ.get("RANK", "0")) == 0:
        announce("distill --qat" if args.qat else "distill", args.preset, budget(config, args, embedding_type))
    manifest = run(
        args.drafter,
        args.reference,
        args.out,
        config,
        args.qat,
        args.clip_search,
        args.device,
        args.halt_after_steps,
        args.epochs,
        args.lr,
        args.replay_tokens,
        embedding_type,
    )
    if manifest is not None:
        metrics = manifest["metrics"]
        print(
            json.dumps(
                {
                    k: metrics[k]
                    for k in (
                        "best_dev_macro_tau",
                        "best_dev_tau",
                        "best_dev_top1",
                        "best_step",
                        "steps",
                        "train_tokens",
                        "train_seconds",
                    )
                }
            )
        )
    return 0
