"""Stage `distill`: teach the drafter the target's continuations (knowledge distillation), optionally with Q4_0 QAT.

Starts from a drafter checkpoint (`--drafter`: the lab's base drafter, or any HF id/path such as Qwen/Qwen3-1.7B) and
the `reference` stage's training shards, and trains it on every continuation position with the loss
`DistillConfig.loss` names: kl (KL to the target's renormalized top-k plus CE on its greedy token), ce, tvd,
reverse_kl or prefix (an expected-accepted-prefix weighting); losses.py defines each (and `--help` shows them below).
Losses are divided by the global batch's continuation tokens, so DDP ranks with unequal shares still average to the
one-process gradient. Rows come in a seeded random order, or grouped by length (`group_by_length`). Optional replay
(`replay_weight` > 0 and `--replay-tokens`): each step also takes `replay_batch_size` chunks of `replay_seq_len`
tokens of the base's pretraining text (the lab tokenizer stage's ``train.tokens.npy``, or a `pretrain --init`
directory's; a ``.npy`` token array, or a directory of them) and adds replay_weight · (mean next-token CE over them),
so the drafter keeps what it knew about text the reference data does not cover (an LM loss, not a KL to a frozen
base: no second 1.7B model in memory).

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
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .artifacts import input_record, write_manifest
from .config import (
    DistillConfig,
    ExportConfig,
    add_embedding_type_argument,
    add_preset_argument,
    announce,
    apply_settings,
    get_preset,
    override,
)
from .examples import (
    DistillInputs,
    ReplayText,
    check_replay_tokenizer,
    check_vocabularies,
    collate,
    epoch_order,
    padding_factor,
    read_inputs,
    row_width,
)
from .losses import LOSSES, check_loss, loss_sums
from .models import (
    QAT_STATE_FILE,
    architecture_summary,
    autocast_context,
    checkpoint_info,
    enable_activation_checkpointing,
    load_causal_lm,
    save_checkpoint,
)
from .provenance import chain_provenance
from .tau import model_tau
from .training import (
    DistributedContext,
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
# What the command prints as JSON when it is done (the manifest's metrics hold these and more).
SUMMARY_METRICS = ("best_dev_macro_tau", "best_dev_tau", "best_dev_top1", "best_step", "steps", "train_tokens")
SUMMARY_METRICS += ("train_seconds",)


# ---------------------------------------------------------------------------------------------------------------------
# Dev evaluation


def log_dev(tb: Any, entry: dict[str, Any], step: int) -> None:
    tb.add_scalar("dev/tau", entry["dev_tau"], step)
    tb.add_scalar("dev/macro_tau", entry["dev_macro_tau"], step)
    tb.add_scalar("dev/top1", entry["dev_top1"], step)
    for name, category in entry["dev_by_category"].items():
        tb.add_scalar(f"dev/tau/{name}", category["tau"], step)
        tb.add_scalar(f"dev/top1/{name}", category["top1"], step)
    tb.flush()


# ---------------------------------------------------------------------------------------------------------------------
# The stage, in its steps: read the inputs, set up the run, train, write the best checkpoint


def new_history() -> dict[str, Any]:
    """The loop's state beside the weights and optimizer, saved with them (``extra`` of ResumeState)."""
    history: dict[str, Any] = {"train_seconds": 0.0, "history": [], "best": None, "evals_since_best": 0}
    return {**history, "last_eval_step": None, "train_tokens": 0, "replay_tokens": 0, "last": {}}


class Distillation:
    """One distill run on this rank: the drafter (wrapped for DDP or FSDP, fake-quantized under QAT), its optimizer,
    the data order, the resumable state and the logs. :meth:`train` runs the steps, evaluating dev τ and saving the
    resumable state on schedule; :meth:`write_outputs` (rank 0) writes the best checkpoint and the manifest.

    The loop's own state (``self.extra``: history, best, token counts, train seconds) is saved with the weights, so a
    resumed run continues the same history.
    """

    def __init__(
        self,
        ctx: DistributedContext,
        drafter: str | Path,
        inputs: DistillInputs,
        out_dir: Path,
        config: DistillConfig,
        qat: bool,
        clip_search: bool,
        epochs: int,
        peak_lr: float,
        replay_tokens: Path | None,
        embedding_type: str | None,
    ):
        self.ctx, self.drafter, self.inputs, self.out_dir, self.config = ctx, drafter, inputs, out_dir, config
        self.qat, self.clip_search, self.epochs, self.peak_lr = qat, clip_search, epochs, peak_lr
        self.sharded = config.fsdp and ctx.distributed
        self._load_drafter(replay_tokens, embedding_type)
        examples = inputs.examples
        self.global_batch = min(config.batch_size, len(examples) - len(examples) % ctx.world_size)
        self.steps_per_epoch = max(1, len(examples) // self.global_batch)
        self.max_steps = epochs * self.steps_per_epoch
        self.widths, self.order = [row_width(e) for e in examples], (-1, np.empty(0, dtype=np.int64))
        if ctx.is_main:
            padded = padding_factor(self.widths, self.epoch_rows(0), self.global_batch)
            grouping = f"in runs of {config.group_by_length}" if config.group_by_length > 0 else "in random order"
            print(
                f"distill: batches of {self.global_batch} rows {grouping} hold {padded:.2f}× their tokens",
                file=sys.stderr,
            )
        self.eval_every = config.eval_every or self.steps_per_epoch
        self.resume = ResumeState(out_dir / "resume", ctx)
        self.step, self.extra = 0, new_history()
        if self.resume.exists():
            self.step, self.extra = self.resume.load(self.model, self.optimizer)
            if ctx.is_main:
                print(f"distill: resuming at step {self.step}", file=sys.stderr)
        self.my_rows = rank_slice(self.global_batch, ctx)
        desc = "distill --qat" if qat else "distill"
        self.bar = progress_bar(ctx, total=self.max_steps, initial=self.step, desc=desc)
        self.tb = open_summary_writer(ctx, out_dir, self.step)
        self.window = TrainWindow()
        self.postfix = {"epoch": "", "loss": "", "top1": "", "dev_tau": "", "best": ""}  # the bar's; parts: TensorBoard
        self.stopped_by_budget = self.stopped_by_plateau = False

    def _load_drafter(self, replay_tokens: Path | None, embedding_type: str | None) -> None:
        """The drafter with its checks, the replay text, QAT's fake quantization, the wrapper and the optimizer."""
        ctx, config = self.ctx, self.config
        # Under FSDP the full drafter is read into CPU memory and each rank moves only its shards to its GPU.
        self.model = load_causal_lm(self.drafter, torch.device("cpu") if self.sharded else ctx.device)
        if config.activation_checkpointing:
            enable_activation_checkpointing(self.model)
        vocab_size = self.model.get_input_embeddings().weight.shape[0]
        check_vocabularies(self.drafter, self.inputs.reference_manifest, vocab_size, self.inputs.examples)
        self.replay: ReplayText | None = None
        if replay_tokens is not None and config.replay_weight > 0:
            self.replay = ReplayText(Path(replay_tokens), config, vocab_size, ctx)
            check_replay_tokenizer(self.drafter, self.replay)
        elif config.replay_weight > 0 and ctx.is_main:
            print(f"distill: replay_weight {config.replay_weight}, no --replay-tokens: replay is off", file=sys.stderr)
        self.pad_id = self.model.config.pad_token_id if self.model.config.pad_token_id is not None else 0
        self.qat_state = None
        if self.qat:
            from .quant import prepare_qat  # the GGUF-exact fake quantization (needs the `gguf` package)

            embedding_type = embedding_type or ExportConfig().resolved_embedding_type()
            self.qat_state = prepare_qat(self.model, clip_search=self.clip_search, embedding_type=embedding_type)
        self.model.train()
        # before the optimizer: FSDP replaces the parameters
        self.ddp_model = wrap_model(self.model, ctx, fsdp=config.fsdp)
        self.optimizer = make_optimizer(self.model, self.peak_lr, config.weight_decay, ctx.device)

    def train(self, halt_after_steps: int | None) -> None:
        """Steps until the planned epochs end, the time budget runs out or dev τ plateaus; the last weights are
        evaluated too when the run stopped between evaluations."""
        if self.step == 0 and self.extra["last_eval_step"] is None:
            self.evaluate_dev()  # the starting drafter competes too
        self.segment_start = time.time()
        while self.step < self.max_steps:
            elapsed = self.extra["train_seconds"] + time.time() - self.segment_start
            if stop_by_budget(self.ctx, elapsed, self.config.time_budget_s):
                self.stopped_by_budget = True
                break
            self.train_step()
            step = self.step
            evaluating = step % self.eval_every == 0
            saving = (step % self.config.ckpt_every == 0 or evaluating) and step < self.max_steps
            if step % LOG_EVERY_STEPS == 0 or evaluating or saving or step == self.max_steps:
                self.log_window()
            if evaluating:
                self.stopped_by_plateau = self.evaluate_dev()
            if saving:  # also at every evaluation, so the saved state always agrees with best.pt and the history
                self.save(halt_after_steps)
            if self.stopped_by_plateau:
                break
        self.loop_end = [self.extra["train_seconds"] + synced_clock(self.ctx.device) - self.segment_start]
        self.loop_end.append(self.extra["train_tokens"])
        if self.extra["last_eval_step"] != self.step:  # stopped between evaluations: the last weights compete too
            self.log_window()
            self.evaluate_dev()
        self.bar.close()
        self.tb.close()
        self.train_seconds = self.extra["train_seconds"] + time.time() - self.segment_start

    def train_step(self) -> None:
        """One optimizer step on this rank's share of the step's global batch (and replay rows)."""
        ctx, config, examples, extra = self.ctx, self.config, self.inputs.examples, self.extra
        epoch, within = divmod(self.step, self.steps_per_epoch)
        if within == 0 and self.qat_state is not None and self.clip_search:
            self.qat_state.refresh_clip()
        global_indices = self.epoch_rows(epoch)[within * self.global_batch : (within + 1) * self.global_batch]
        # Every rank knows the whole global batch, so its token count needs no collective (nor a GPU sync).
        n_global = sum(len(examples[i].continuation_tokens) for i in global_indices)
        batch = collate(
            [examples[i] for i in global_indices[self.my_rows]],
            self.pad_id,
            ctx.device,
            self.replay.chunks(self.step) if self.replay is not None else None,
        )
        set_lr(self.optimizer, lr_at(self.step, self.max_steps, config.warmup_steps, self.peak_lr, config.min_lr_ratio))
        with autocast_context(ctx.device):
            sums = loss_sums(self.ddp_model, batch, config)
        loss = sums.distill / n_global
        if self.replay is not None and sums.replay is not None:
            loss = loss + config.replay_weight * sums.replay / self.replay.tokens_per_step
        # DDP averages gradients over ranks; scaling by world size makes that the mean over all ranks' tokens.
        loss = loss * ctx.world_size
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.ddp_model.parameters(), config.grad_clip)
        self.optimizer.step()
        self.step += 1
        extra["train_tokens"] += n_global
        extra["replay_tokens"] += self.replay.tokens_per_step if self.replay is not None else 0
        if self.step == UNTIMED_STEPS:  # throughput is read from here on (tokens_per_s)
            seconds = extra["train_seconds"] + synced_clock(ctx.device) - self.segment_start
            extra["timed_from"] = [seconds, extra["train_tokens"]]
        replay_rows = len(batch["replay_labels"]) if "replay_labels" in batch else 0
        self.window.add(loss / ctx.world_size, sums.parts, len(batch["labels"]), replay_rows)
        self.bar.update(1)

    def epoch_rows(self, epoch: int) -> np.ndarray:
        """The epoch's order of the rows (examples.epoch_order), worked out once an epoch."""
        if self.order[0] != epoch:
            grouping = self.config.seed, epoch, self.global_batch, self.config.group_by_length
            self.order = (epoch, epoch_order(self.widths, *grouping))
        return self.order[1]

    def evaluate_dev(self) -> bool:
        """Rank 0 measures dev τ, keeps the best checkpoint by macro τ; every rank learns whether it plateaued.

        Under FSDP every rank runs the same dev forwards (each layer's weights are gathered from all ranks) and
        gives its shards to rank 0 for a new best; rank 0's numbers decide.
        """
        ctx, extra, step = self.ctx, self.extra, self.step
        extra["last_eval_step"] = step
        tau = None
        if ctx.is_main or self.sharded:
            tau = model_tau(unwrap(self.ddp_model), self.inputs.dev, self.config.eval_k, ctx.device)
        new_best = False
        if ctx.is_main:
            entry = {"step": step, "epoch": step / self.steps_per_epoch, **tau.dev_entry(), **extra["last"]}
            extra["history"].append(entry)
            best = extra["best"]
            new_best = best is None or entry["dev_macro_tau"] > best["dev_macro_tau"]
            if new_best:
                extra["best"] = {k: entry[k] for k in ("step", "epoch", "dev_macro_tau", "dev_tau", "dev_top1")}
                extra["evals_since_best"] = 0
            else:
                extra["evals_since_best"] += 1
        if ctx.broadcast_object(new_best) if self.sharded else new_best:
            self.resume.save_best(self.ddp_model)
        if ctx.is_main:
            log_dev(self.tb, entry, step)
            best = extra["best"]
            self.postfix.update(
                dev_tau=f"{entry['dev_macro_tau']:.3f}", best=f"{best['dev_macro_tau']:.3f}@{best['step']}"
            )
            self.bar.set_postfix(self.postfix, refresh=False)  # a refresh now would bypass the rate limit in log files
            self.bar.write(
                f"distill: step {step} (epoch {entry['epoch']:.2f}) dev macro τ {entry['dev_macro_tau']:.3f}, "
                f"τ {entry['dev_tau']:.3f}, top-1 {entry['dev_top1']:.3f} (best macro τ "
                f"{best['dev_macro_tau']:.3f} at step {best['step']})",
                file=sys.stderr,
            )
        if self.config.patience <= 0:
            return False
        plateau = ctx.is_main and extra["evals_since_best"] >= self.config.patience
        return bool(ctx.all_reduce_sum(torch.tensor([float(plateau)], device=ctx.device)).item() > 0)

    def log_window(self) -> None:
        """The train window's means (every rank: they are all-reduced) into the history's next entry, TensorBoard
        and the bar."""
        means = self.window.read(self.ctx)
        if not means or not self.ctx.is_main:
            return
        step = self.step
        self.extra["last"] = means
        for name, value in means.items():
            self.tb.add_scalar(f"train/{name}", value, step)
        self.tb.add_scalar("train/lr", self.optimizer.param_groups[0]["lr"], step)
        self.postfix.update(
            epoch=f"{step / self.steps_per_epoch:.2f}", loss=f"{means['loss']:.4f}", top1=f"{means['top1']:.3f}"
        )
        self.bar.set_postfix(self.postfix, refresh=False)

    def save(self, halt_after_steps: int | None) -> None:
        """The resumable state, on every rank (under FSDP each gives rank 0 its shards); tests kill the run here."""
        self.extra["train_seconds"] += time.time() - self.segment_start
        self.segment_start = time.time()
        if self.ctx.is_main:
            self.tb.flush()  # events so far on disk before the state a rerun resumes from
        self.resume.save(self.model, self.optimizer, self.step, self.extra)
        self.ctx.barrier()
        halt_for_test(self.step, halt_after_steps)

    def write_outputs(self, reference_dir: Path, start_time: float) -> dict[str, Any]:
        """Rank 0: the best dev checkpoint (with its QAT state under QAT) and the manifest; returns the manifest."""
        model = self.model
        if self.sharded:  # the FSDP model holds only this rank's shards: the best weights go into a plain CPU copy
            model = load_causal_lm(self.drafter, torch.device("cpu"))
        self.resume.load_best(model)
        outputs: list[str]
        if self.qat_state is not None:
            with self.qat_state.unwrapped():  # latent fp32 weights under their HF names; export quantizes them exactly
                outputs = save_checkpoint(model, self.out_dir, self.drafter)
            self.qat_state.save(self.out_dir / QAT_STATE_FILE)
            outputs.append(QAT_STATE_FILE)
        else:
            outputs = save_checkpoint(model, self.out_dir, self.drafter)
        reference_manifest, drafter_manifest = self.inputs.reference_manifest, self.inputs.drafter_manifest
        inputs = {
            "drafter": checkpoint_info(self.drafter),
            "reference": input_record(reference_dir, reference_manifest),
        }
        if self.replay is not None:
            inputs["replay"] = self.replay.record
        provenance = chain_provenance(self.drafter, drafter_manifest, inputs, reference_manifest)
        return write_manifest(
            self.out_dir,
            "distill",
            outputs=outputs,
            params=self.manifest_params(),
            inputs=inputs,
            extra={
                **provenance,
                "architecture": architecture_summary(model),
                "metrics": {
                    **self.manifest_metrics(),
                    "seconds": time.time() - start_time,
                    "drafter_verified": drafter_manifest is not None,
                },
            },
        )

    def manifest_params(self) -> dict[str, Any]:
        return {
            "config": self.config.__dict__,
            "qat": self.qat,
            "embedding_type": self.qat_state.embedding_type if self.qat_state is not None else None,
            "clip_search": self.clip_search,
            "epochs": self.epochs,
            "lr": self.peak_lr,
            "global_batch": self.global_batch,
            "world_size": self.ctx.world_size,
            "fsdp": self.sharded,
            "replay": self.replay is not None,
        }

    def manifest_metrics(self) -> dict[str, Any]:
        extra, best, device = self.extra, self.extra["best"], self.ctx.device
        return {
            "steps": self.step,
            "steps_per_epoch": self.steps_per_epoch,
            "examples": len(self.inputs.examples),
            "examples_available": len(self.inputs.available),
            "train_tokens": extra["train_tokens"],
            "replay_tokens": extra["replay_tokens"],
            "best_dev_macro_tau": best["dev_macro_tau"],
            "best_dev_tau": best["dev_tau"],
            "best_dev_top1": best["dev_top1"],
            "best_step": best["step"],
            "best_epoch": best["epoch"],
            "history": extra["history"],
            "stopped_by_time_budget": self.stopped_by_budget,
            "stopped_by_plateau": self.stopped_by_plateau,
            "train_seconds": self.train_seconds,
            "tokens_per_s": warm_throughput(extra.get("timed_from"), self.loop_end),
            "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        }

    def finish_line(self) -> str:
        """The stage's last line: the kept checkpoint (step 0 is the starting drafter), the steps run of those
        planned, and why it stopped short of them."""
        best, steps = self.extra["best"], self.step
        why = " (plateau)" if self.stopped_by_plateau else " (time budget)" if self.stopped_by_budget else ""
        start = " (the starting drafter: no evaluation beat it)" if best["step"] == 0 and steps > 0 else ""
        return (
            f"distill: best dev macro τ {best['dev_macro_tau']:.3f} (τ {best['dev_tau']:.3f}, top-1 "
            f"{best['dev_top1']:.3f}) at step {best['step']}{start} after {steps:,} of {self.max_steps:,} steps{why}; "
            f"{self.extra['train_tokens']:,} continuation tokens in {self.train_seconds:.1f} s"
        )


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
    epochs, peak_lr = config.schedule(qat, epochs, lr)
    inputs = read_inputs(drafter, reference_dir, config, ctx)
    if config.fsdp and qat:
        raise ValueError("distill --fsdp with --qat: QAT's parametrized weights are not wired for FSDP; run QAT on DDP")
    distillation = Distillation(
        ctx, drafter, inputs, out_dir, config, qat, clip_search, epochs, peak_lr, replay_tokens, embedding_type
    )
    distillation.train(halt_after_steps)
    manifest = None
    if ctx.is_main:
        manifest = distillation.write_outputs(reference_dir, start_time)
        print(distillation.finish_line(), file=sys.stderr)
        shutil.rmtree(out_dir / "resume", ignore_errors=True)
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
        help="replay text: a lab tokenizer directory, a `pretrain --init` directory, a .npy "
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
    epochs, lr = config.schedule(args.qat, args.epochs, args.lr)
    settings: dict[str, Any] = {
        "epochs": epochs,
        "batch": config.batch_size,
        "lr": lr,
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
        args.drafter, args.reference, args.out, config, args.qat, args.clip_search, args.device, args.halt_after_steps,
        args.epochs, args.lr, args.replay_tokens, embedding_type
    )  # fmt: skip
    if manifest is not None:
        print(json.dumps({k: manifest["metrics"][k] for k in SUMMARY_METRICS}))
    return 0
