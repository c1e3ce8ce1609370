"""Whether a training step fits the GPU without recomputing layers (`DistillConfig.activation_checkpointing` "auto"):
the memory a token of a step costs, measured at the start of a run by two short forward and backward passes over
rows of made-up tokens, against what the device holds.

A step's peak is close to linear in its tokens once rows are packed (no attention matrix is kept): the weights, their
gradients and AdamW's moments whatever the step, plus each token's activations. Two steps of different sizes give
the slope and the rest; the moments, allocated by the first optimizer step, are added from the parameters' size.
Recomputing each layer in the backward pass keeps only its input, at ~1/3 more compute, so it is chosen only where
the largest step of the run would not fit.

    recompute, why = choose_activation_checkpointing(config, ctx, model, step_tokens=21_504)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..config import DistillConfig
from ..modeling.models import autocast_context
from .examples import TrainExample, collate
from .loop import DistributedContext
from .losses import loss_sums

GIB, MIB = 2**30, 2**20
# The share of the device's memory a run plans on: the caching allocator's fragmentation, cuBLAS workspaces and the
# CUDA context take the rest.
MEMORY_HEADROOM = 0.9
PROBE_TOKENS = (2048, 4096)  # the two measured steps: large enough that activations dominate, small enough to fit
PROBE_ROW = 512  # tokens of each made-up row, the last 128 of them scored as a continuation with a top-k
# What a training step's forward and backward run inside (Distillation.weights_quantized_once under QAT)
StepContext = Callable[[], contextlib.AbstractContextManager[None]]


@dataclass(frozen=True)
class StepMemory:
    """A step's peak bytes as ``fixed_bytes + per_token_bytes × tokens``, and the device's total."""

    fixed_bytes: float
    per_token_bytes: float
    device_bytes: int

    def need(self, tokens: int) -> float:
        return self.fixed_bytes + self.per_token_bytes * tokens

    def fits(self, tokens: int) -> bool:
        return self.need(tokens) <= MEMORY_HEADROOM * self.device_bytes


def probe_rows(tokens: int, vocab_size: int, top_k: int = 20, seed: int = 0) -> list[TrainExample]:
    """Made-up rows of ``PROBE_ROW`` tokens (a whole number of them, at least one), their last 128 a continuation with
    a random top-k: what a step of ``tokens`` tokens holds, whatever the run's data (random tokens cost what real ones
    do). A generator of its own, so the run's random streams are untouched."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(max(1, tokens // PROBE_ROW)):
        ids = rng.integers(0, vocab_size, size=PROBE_ROW + 1).tolist()
        logprobs = np.log(rng.dirichlet(np.ones(top_k), size=128)).astype(np.float32)
        topk = rng.integers(0, vocab_size, size=(128, top_k)).astype(np.int32)
        rows.append(TrainExample(ids[: PROBE_ROW - 127], ids[PROBE_ROW - 127 :], topk, logprobs))
    return rows


def _peak_step_bytes(
    model: nn.Module, rows: list[TrainExample], config: DistillConfig, device: torch.device, step: StepContext
) -> int:
    """Peak bytes allocated during a forward and backward of ``rows`` (all of one width: packed or right-padded, no
    padding) inside ``step()``, above what was allocated once inside it (under QAT: the weights quantized for the
    step, which the fixed part then counts)."""
    model.zero_grad(set_to_none=True)
    with step():
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        batch = collate(rows, 0, device, packed=config.packed)
        with autocast_context(device):
            sums = loss_sums(model, batch, config)
        sums.distill.backward()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
    model.zero_grad(set_to_none=True)
    return peak


def measure_step_memory(
    model: nn.Module,
    config: DistillConfig,
    device: torch.device,
    replicas: bool,
    step: StepContext = contextlib.nullcontext,
) -> StepMemory:
    """Two packed steps of ``PROBE_TOKENS`` on ``model`` (on a GPU, in training mode, not wrapped for DDP), each
    inside ``step()`` as training runs it. The fixed part adds what the measured steps do not hold: AdamW's two
    moments and, with ``replicas`` (DDP), its gradient buckets, a copy of the gradients."""
    vocab_size = model.get_input_embeddings().weight.shape[0]
    peaks = [_peak_step_bytes(model, probe_rows(n, vocab_size), config, device, step) for n in PROBE_TOKENS]
    sizes = [(n // PROBE_ROW) * PROBE_ROW for n in PROBE_TOKENS]
    per_token = max(0.0, (peaks[1] - peaks[0]) / (sizes[1] - sizes[0]))
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    fixed = torch.cuda.memory_allocated(device) + peaks[0] - per_token * sizes[0]
    fixed += parameter_bytes * (3 if replicas else 2)
    return StepMemory(fixed, per_token, torch.cuda.get_device_properties(device).total_memory)


def choose_activation_checkpointing(
    config: DistillConfig,
    ctx: DistributedContext,
    model: nn.Module,
    step_tokens: int,
    sharded: bool = False,
    step: StepContext = contextlib.nullcontext,
) -> tuple[bool, str]:
    """Whether to recompute each layer in the backward pass, and why (the line a run prints): as set, or under
    "auto" whether a step of ``step_tokens`` would not fit without (every rank measures; any that would not fit
    makes all of them recompute, so the ranks run alike)."""
    setting = config.activation_checkpointing  # auto | on | off (config.ACTIVATION_CHECKPOINTING; distill checks it)
    if setting != "auto":
        return setting == "on", f"{setting} (set)"
    if ctx.device.type != "cuda":
        return False, "off (auto: not on a GPU, nothing measured)"
    if sharded:
        return True, "on (auto: FSDP shards are not measured)"
    try:
        memory = measure_step_memory(model, config, ctx.device, replicas=ctx.distributed, step=step)
        fits, how = memory.fits(step_tokens), ""
        how = (
            f"a step of ≤ {step_tokens:,} tokens needs ~{memory.need(step_tokens) / GIB:.1f} GiB at "
            f"{memory.per_token_bytes / MIB:.2f} MiB a token, measured; the GPU has {memory.device_bytes / GIB:.1f} GiB"
        )
    except torch.OutOfMemoryError:
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        fits, how = False, f"a measuring step of {PROBE_TOKENS[-1]:,} tokens ran out of memory"
    flag = torch.tensor([0.0 if fits else 1.0], device=ctx.device)
    recompute = bool(ctx.all_reduce_sum(flag).item() > 0)
    if recompute and fits:
        how += "; another rank's would not fit"
    return recompute, f"{'on' if recompute else 'off'} (auto: {how})"
