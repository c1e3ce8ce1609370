"""A distill run's loop, shared by the `distill` stage (which adds its command line and writes its outputs) and the
GPU training probe (train/scripts/gpu/probe_training.py, which times its steps): the drafter set up for training
(packed attention, QAT's fake quantization, layers recomputed by measured memory, compiled layers, DDP or FSDP), the
epoch's steps, one optimizer step, dev τ keeping the best checkpoint, the logs and the resumable state.

    job = DistillJob("runs/lab/base", Path("runs/lab/reference"), Path("runs/lab/distilled"), get_preset("lab").distill)
    ctx = init_distributed(job.device)
    distillation = Distillation(job, ctx, read_inputs(job.drafter, job.reference, job.config, ctx, job.onpolicy))
    distillation.train()          # then rank 0 writes the outputs (distill.py)
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..config import (
    ACTIVATION_CHECKPOINTING,
    DistillConfig,
    ExportConfig,
    OnPolicyConfig,
    check_compile,
    compile_on,
)
from ..modeling.models import autocast_context, compile_decoder_layers, enable_activation_checkpointing, load_causal_lm
from ..modeling.packing import use_packed_attention
from ..modeling.tau import model_tau
from .examples import (
    DistillInputs,
    ReplayText,
    check_replay_tokenizer,
    check_vocabularies,
    collate,
    epoch_order,
    epoch_steps,
    padding_factor,
    rank_rows,
    row_width,
    steps_per_epoch,
)
from .loop import (
    DistributedContext,
    ResumeState,
    TrainWindow,
    halt_for_test,
    lr_at,
    make_optimizer,
    open_summary_writer,
    progress_bar,
    rank_slice,
    set_lr,
    stop_by_budget,
    synced_clock,
    unwrap,
    wrap_model,
)
from .losses import check_loss, loss_sums, position_losses
from .step_memory import choose_activation_checkpointing

LOG_EVERY_STEPS = 25  # also every evaluation and checkpoint step, so logged windows are the same after a resume
UNTIMED_STEPS = 5  # the manifest's tokens_per_s starts after these: the first steps pay cuBLAS set-up, allocator growth


@dataclass(frozen=True)
class DistillJob:
    """One distill run: what it reads and writes, and how. Its epochs and peak learning rate are
    ``config.schedule(qat)`` (DistillConfig.with_schedule sets them)."""

    drafter: str | Path  # the starting drafter: a lab checkpoint, a local HF model or an HF id
    reference: Path  # the reference stage's output directory
    out: Path
    config: DistillConfig
    qat: bool = False  # train through GGUF Q4_0 fake quantization (quant.py)
    clip_search: bool = False  # with qat: per-block clip search, refreshed each epoch
    # With qat: the token embedding's type in the Q4_0 file (config.EMBEDDING_TYPES); None: ExportConfig's default.
    embedding_type: str | None = None
    # Replay text (a lab tokenizer directory, a .npy token array or a directory of them): used when replay_weight > 0.
    replay_tokens: Path | None = None
    device: str = "auto"
    halt_after_steps: int | None = None  # tests: SIGKILL this process after that many steps (a crash to resume from)
    onpolicy: tuple[Path, ...] = ()  # `onpolicy` folders whose rows train beside the reference's
    # Token selection's reference drafter (config.select_tokens < 1): a drafter distilled from the same start
    select_reference: str | Path | None = None


@dataclass(frozen=True)
class RecipeStep:
    """One distill run of the recipe (:func:`recipe`)."""

    name: str  # "distill", "distill-R" (on-policy round R) or "qat": the stage's name and its folder's suffix
    config: DistillConfig
    qat: bool
    onpolicy_round: int  # R: the last drafter first writes round R's on-policy data, trained on beside the reference


def recipe(config: DistillConfig, rounds: OnPolicyConfig, qat: bool = True) -> list[RecipeStep]:
    """The distill runs from a starting drafter, each going on from the last: distillation on the reference's rows;
    ``rounds.rounds`` on-policy rounds (the last drafter writes fresh data, then distillation goes on over the
    reference's rows and those, for ``rounds.epochs`` at peak ``rounds.lr``); then QAT (unless ``qat`` is False),
    bounded by ``config.qat_time_budget_s``. `run` and `ablate` both follow it."""
    steps = [RecipeStep("distill", config, False, 0)]
    for r in range(1, rounds.rounds + 1):
        steps.append(RecipeStep(f"distill-{r}", replace(config, epochs=rounds.epochs, lr=rounds.lr), False, r))
    if qat:
        steps.append(RecipeStep("qat", replace(config, time_budget_s=config.qat_time_budget_s), True, 0))
    return steps


def compiles(config: DistillConfig, device: torch.device) -> bool:
    """Whether the decoder layers are compiled: "on", or "auto" on a GPU."""
    return compile_on(config.compile, device.type)


def check_job(job: DistillJob) -> None:
    """Refuse a job that cannot run, before any model is loaded."""
    config = job.config
    check_loss(config)
    if config.activation_checkpointing not in ACTIVATION_CHECKPOINTING:
        choices = ", ".join(ACTIVATION_CHECKPOINTING)
        raise ValueError(f"activation_checkpointing {config.activation_checkpointing!r}: expected one of {choices}")
    check_compile(config.compile)
    if config.group_by_length > 0 and (config.packed or config.batch_tokens > 0):
        raise ValueError("group_by_length groups right-padded rows of batch_size: set packed=false and batch_tokens=0")
    if config.fsdp and job.qat:
        raise ValueError("distill --fsdp with --qat: QAT's quantized weights are not wired for FSDP; run QAT on DDP")
    if not 0 < config.select_tokens <= 1:
        raise ValueError(f"select_tokens {config.select_tokens}: expected a share, 0 < share ≤ 1")
    if config.select_tokens < 1 and job.select_reference is None:
        raise ValueError(f"select_tokens {config.select_tokens} selects by a reference drafter: give one")


def new_history() -> dict[str, Any]:
    """The loop's state beside the weights and optimizer, saved with them (``extra`` of ResumeState)."""
    history: dict[str, Any] = {"train_seconds": 0.0, "history": [], "best": None, "evals_since_best": 0}
    return {**history, "last_eval_step": None, "train_tokens": 0, "input_tokens": 0, "replay_tokens": 0, "last": {}}


def log_dev(tb: Any, entry: dict[str, Any], step: int) -> None:
    tb.add_scalar("dev/tau", entry["dev_tau"], step)
    tb.add_scalar("dev/macro_tau", entry["dev_macro_tau"], step)
    tb.add_scalar("dev/top1", entry["dev_top1"], step)
    for name, category in entry["dev_by_category"].items():
        tb.add_scalar(f"dev/tau/{name}", category["tau"], step)
        tb.add_scalar(f"dev/top1/{name}", category["top1"], step)
    tb.flush()


class Distillation:
    """One distill run on this rank: the drafter (packed attention, recomputation and compilation as decided, wrapped
    for DDP or FSDP, fake-quantized under QAT), its optimizer, the steps, the resumable state and the logs.
    :meth:`train` runs the steps, evaluating dev τ and saving the resumable state on schedule; :meth:`train_step` is
    one optimizer step.

    Every epoch takes each training row once: its seeded order (examples.epoch_order) is cut into
    ``steps_per_epoch`` steps of equal tokens (examples.epoch_steps), and a step's rows go to the ranks balanced by
    tokens (examples.rank_rows). The loop's own state (``self.extra``: history, best, token counts, train seconds) is
    saved with the weights, so a resumed run continues the same history.
    """

    def __init__(self, job: DistillJob, ctx: DistributedContext, inputs: DistillInputs):
        self.job, self.ctx, self.inputs, self.config = job, ctx, inputs, job.config
        self.epochs, self.peak_lr = self.config.schedule(job.qat)
        self.sharded = self.config.fsdp and ctx.distributed
        self.widths = np.array([row_width(e) for e in inputs.examples], dtype=np.int64)
        self.continuation = np.array([len(e.continuation_tokens) for e in inputs.examples], dtype=np.int64)
        self.steps_per_epoch = steps_per_epoch(self.widths, self.config, ctx.world_size)
        self.max_steps = self.epochs * self.steps_per_epoch
        self.plan: tuple[int, list[np.ndarray]] = (-1, [])
        self._load_drafter()
        if ctx.is_main:
            print(self.plan_line(), file=sys.stderr)
        self.eval_every = self.config.eval_every or self.steps_per_epoch
        self.resume = ResumeState(job.out / "resume", ctx)
        self.step, self.extra = 0, new_history()
        if self.resume.exists():
            self.step, extra = self.resume.load(self.model, self.optimizer)
            self.extra = {**new_history(), **extra}  # a count this version keeps and the saving one did not starts at 0
            if ctx.is_main:
                print(f"distill: resuming at step {self.step}", file=sys.stderr)
        self.bar = progress_bar(ctx, total=self.max_steps, initial=self.step, desc=self.name)
        self.tb = open_summary_writer(ctx, job.out, self.step)
        self.window = TrainWindow()
        self.postfix = {"epoch": "", "loss": "", "top1": "", "dev_tau": "", "best": ""}  # the bar's; parts: TensorBoard
        self.stopped_by_budget = self.stopped_by_plateau = False

    @property
    def name(self) -> str:
        return "distill --qat" if self.job.qat else "distill"

    def _load_drafter(self) -> None:
        """The drafter with its checks, the replay text, QAT's fake quantization, recomputation (as set, or by the
        measured memory), compiled layers, the wrapper and the optimizer."""
        ctx, config, job = self.ctx, self.config, self.job
        # Under FSDP the full drafter is read into CPU memory and each rank moves only its shards to its GPU.
        self.model = load_causal_lm(job.drafter, torch.device("cpu") if self.sharded else ctx.device)
        if config.packed:
            use_packed_attention(self.model)
        vocab_size = self.model.get_input_embeddings().weight.shape[0]
        check_vocabularies(job.drafter, self.inputs.reference_manifest, vocab_size, self.inputs.examples)
        self.replay: ReplayText | None = None
        if job.replay_tokens is not None and config.replay_weight > 0:
            self.replay = ReplayText(Path(job.replay_tokens), config, vocab_size, ctx)
            check_replay_tokenizer(job.drafter, self.replay)
        elif config.replay_weight > 0 and ctx.is_main:
            print(f"distill: replay_weight {config.replay_weight}, no --replay-tokens: replay is off", file=sys.stderr)
        self.pad_id = self.model.config.pad_token_id if self.model.config.pad_token_id is not None else 0
        self.select_model: nn.Module | None = None
        if config.select_tokens < 1 and job.select_reference is not None:
            self.select_model = load_causal_lm(job.select_reference, ctx.device)
            check_vocabularies(job.select_reference, self.inputs.reference_manifest, vocab_size, self.inputs.examples)
            if config.packed:
                use_packed_attention(self.select_model)
            self.select_model.eval().requires_grad_(False)
        self.qat_state = None
        if job.qat:
            from .quant import prepare_qat  # the GGUF-exact fake quantization (needs the `gguf` package)

            embedding_type = job.embedding_type or ExportConfig().resolved_embedding_type()
            self.qat_state = prepare_qat(self.model, clip_search=job.clip_search, embedding_type=embedding_type)
        self.model.train()
        self.recompute, self.recompute_why = choose_activation_checkpointing(
            config, ctx, self.model, self.largest_step_tokens(), self.sharded, self.weights_quantized_once
        )
        if self.recompute:
            enable_activation_checkpointing(self.model)
        self.compiled = compiles(config, ctx.device)
        if self.compiled:
            compile_decoder_layers(self.model)
        # before the optimizer: FSDP replaces the parameters
        self.ddp_model = wrap_model(self.model, ctx, fsdp=config.fsdp)
        self.optimizer = make_optimizer(self.model, self.peak_lr, config.weight_decay, ctx.device)

    # -----------------------------------------------------------------------------------------------------------------
    # The steps

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        """The epoch's steps (rows of each, every rank's), worked out once an epoch: its order cut into steps of equal
        tokens, or — right-padded rows grouped by length — into the order's batches of ``batch_size`` rows (the rows
        past the last whole one left out), as distill took them before rows were packed."""
        if self.plan[0] != epoch:
            config, steps = self.config, self.steps_per_epoch
            order = epoch_order(self.widths, config.seed, epoch, config.batch_size, config.group_by_length)
            if config.group_by_length > 0:
                plan = [order[i * config.batch_size : (i + 1) * config.batch_size] for i in range(steps)]
            else:
                plan = epoch_steps(self.widths, order, steps, self.ctx.world_size)
            self.plan = (epoch, plan)
        return self.plan[1]

    def step_tokens(self, rows: np.ndarray) -> int:
        """Tokens this rank's share of a step's rows puts through the forward, padding included."""
        widths = self.widths[rank_rows(rows, self.widths, self.ctx.world_size, self.ctx.rank)]
        return int(widths.sum() if self.config.packed else widths.max() * len(widths))

    def largest_step_tokens(self) -> int:
        """The largest forward of this rank in the first epoch, replay rows included, with one row more of margin for
        the later epochs (cut from other orders, their steps differ by about a row)."""
        replay = 0
        if self.replay is not None:
            replay = len(range(self.config.replay_batch_size)[rank_slice(self.config.replay_batch_size, self.ctx)])
            replay *= self.config.replay_seq_len
        return max(self.step_tokens(rows) for rows in self.epoch_plan(0)) + int(self.widths.max()) + replay

    def plan_line(self) -> str:
        """What the run's steps hold and how the drafter trains, printed before the first step."""
        plan = self.epoch_plan(0)
        tokens = int(self.widths.sum()) / len(plan)
        padded = padding_factor(self.widths, plan)
        layout = (
            f"packed (right-padded rows would hold {padded:.2f}× their tokens)"
            if self.config.packed
            else f"right-padded, {padded:.2f}× their tokens"
        )
        return (
            f"{self.name}: {self.steps_per_epoch:,} steps an epoch of ~{tokens:,.0f} tokens "
            f"({len(self.widths) / len(plan):.1f} rows on average), {layout}; activation checkpointing "
            f"{self.recompute_why}; compiled layers: {'yes' if self.compiled else 'no'}"
        )

    def weights_quantized_once(self) -> contextlib.AbstractContextManager[None]:
        """What a training step (forward and backward) or a dev evaluation runs inside: under QAT every weight
        quantized once for it (quant.QatState.held), so compiled layers hold no eager quantization and the dev
        forwards do not quantize again each."""
        return self.qat_state.held() if self.qat_state is not None else contextlib.nullcontext()

    def train_step(self) -> None:
        """One optimizer step on this rank's share of the step's rows (and its replay rows)."""
        ctx, config, examples, extra = self.ctx, self.config, self.inputs.examples, self.extra
        epoch, within = divmod(self.step, self.steps_per_epoch)
        if within == 0 and self.qat_state is not None and self.job.clip_search:
            self.qat_state.refresh_clip()
        rows = self.epoch_plan(epoch)[within]
        # Every rank knows the whole step, so its token count needs no collective (nor a GPU sync).
        n_global = int(self.continuation[rows].sum())
        batch = collate(
            [examples[i] for i in rank_rows(rows, self.widths, ctx.world_size, ctx.rank)],
            self.pad_id,
            ctx.device,
            self.replay.chunks(self.step) if self.replay is not None else None,
            packed=config.packed,
        )
        set_lr(self.optimizer, lr_at(self.step, self.max_steps, config.warmup_steps, self.peak_lr, config.min_lr_ratio))
        reference_losses = None
        if self.select_model is not None:
            with autocast_context(ctx.device):
                reference_losses = position_losses(self.select_model, batch, config)
        with self.weights_quantized_once():
            with autocast_context(ctx.device):
                sums = loss_sums(self.ddp_model, batch, config, reference_losses=reference_losses)
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
        extra["input_tokens"] += int(self.widths[rows].sum())
        extra["replay_tokens"] += self.replay.tokens_per_step if self.replay is not None else 0
        if self.step == UNTIMED_STEPS:  # throughput is read from here on (tokens_per_s)
            seconds = extra["train_seconds"] + synced_clock(ctx.device) - self.segment_start
            extra["timed_from"] = [seconds, extra["train_tokens"], extra["input_tokens"]]
        replay_rows = len(batch["replay_labels"]) if "replay_labels" in batch else 0
        self.window.add(loss / ctx.world_size, sums.parts, len(batch["labels"]), replay_rows)
        self.bar.update(1)

    # -----------------------------------------------------------------------------------------------------------------
    # The loop

    def train(self) -> None:
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
                self.save()
            if self.stopped_by_plateau:
                break
        extra = self.extra
        seconds = extra["train_seconds"] + synced_clock(self.ctx.device) - self.segment_start
        self.loop_end = [seconds, extra["train_tokens"], extra["input_tokens"]]
        if self.extra["last_eval_step"] != self.step:  # stopped between evaluations: the last weights compete too
            self.log_window()
            self.evaluate_dev()
        self.bar.close()
        self.tb.close()
        self.train_seconds = self.extra["train_seconds"] + time.time() - self.segment_start

    def evaluate_dev(self) -> bool:
        """Rank 0 measures dev τ, keeps the best checkpoint by macro τ; every rank learns whether it plateaued.

        Under FSDP every rank runs the same dev forwards (each layer's weights are gathered from all ranks) and
        gives its shards to rank 0 for a new best; rank 0's numbers decide. Compiled layers run eager here: a
        forward without gradients would otherwise compile them a second time.
        """
        ctx, extra, step = self.ctx, self.extra, self.step
        extra["last_eval_step"] = step
        tau = None
        if ctx.is_main or self.sharded:
            with torch.compiler.set_stance("force_eager"), self.weights_quantized_once():
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
            self.log_dev_entry(entry)
        if self.config.patience <= 0:
            return False
        plateau = ctx.is_main and extra["evals_since_best"] >= self.config.patience
        return bool(ctx.all_reduce_sum(torch.tensor([float(plateau)], device=ctx.device)).item() > 0)

    def log_dev_entry(self, entry: dict[str, Any]) -> None:
        """Rank 0: a dev evaluation into TensorBoard, the bar and a line."""
        log_dev(self.tb, entry, entry["step"])
        best = self.extra["best"]
        self.postfix.update(dev_tau=f"{entry['dev_macro_tau']:.3f}", best=f"{best['dev_macro_tau']:.3f}@{best['step']}")
        self.bar.set_postfix(self.postfix, refresh=False)  # a refresh now would bypass the rate limit in log files
        self.bar.write(
            f"distill: step {entry['step']} (epoch {entry['epoch']:.2f}) dev macro τ {entry['dev_macro_tau']:.3f}, "
            f"τ {entry['dev_tau']:.3f}, top-1 {entry['dev_top1']:.3f} (best macro τ "
            f"{best['dev_macro_tau']:.3f} at step {best['step']})",
            file=sys.stderr,
        )

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

    def save(self) -> None:
        """The resumable state, on every rank (under FSDP each gives rank 0 its shards); tests kill the run here."""
        self.extra["train_seconds"] += time.time() - self.segment_start
        self.segment_start = time.time()
        if self.ctx.is_main:
            self.tb.flush()  # events so far on disk before the state a rerun resumes from
        self.resume.save(self.model, self.optimizer, self.step, self.extra)
        self.ctx.barrier()
        halt_for_test(self.step, self.job.halt_after_steps)
