"""What `pretrain` and `distill` share: DDP setup, the LR schedule, the resumable training state, progress and logs.

Both loops run unchanged as one process or under ``torchrun --nproc_per_node N``: each rank takes its slice of every
global batch (so N ranks see exactly the data one process would), gradients are averaged by DDP, and only rank 0
writes. The resumable state (weights, optimizer, step, RNG, loop extras) lives in one file replaced atomically, so a
kill at any moment leaves either the previous state or the new one. Rank 0 shows a tqdm progress bar and writes
TensorBoard event files into ``OUT/tb/`` (when the `tensorboard` package imports).

    ctx = init_distributed("auto"); state = ResumeState(out_dir / "resume")
    bar = progress_bar(ctx, total=max_steps, initial=step, desc="distill"); tb = open_summary_writer(ctx, out_dir, step)
"""

from __future__ import annotations

import math
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from .artifacts import AtomicFile
from .models import resolve_device


@dataclass(frozen=True)
class DistributedContext:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
        return value


def init_distributed(device_name: str) -> DistributedContext:
    """Join the process group torchrun describes (WORLD_SIZE > 1), NCCL on CUDA, gloo on CPU."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = resolve_device(device_name)
    if world_size > 1:
        if device.type == "cuda":
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return DistributedContext(rank=rank, world_size=world_size, device=device)


def finish_distributed(ctx: DistributedContext) -> None:
    if ctx.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def rank_slice(global_batch: int, ctx: DistributedContext) -> slice:
    if global_batch % ctx.world_size:
        raise ValueError(f"batch size {global_batch} must be divisible by the {ctx.world_size} DDP ranks")
    per_rank = global_batch // ctx.world_size
    return slice(ctx.rank * per_rank, (ctx.rank + 1) * per_rank)


def wrap_ddp(model: nn.Module, ctx: DistributedContext) -> nn.Module:
    if not ctx.distributed:
        return model
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def lr_at(step: int, max_steps: int, warmup_steps: int, peak_lr: float, min_lr_ratio: float) -> float:
    """Linear warmup, then cosine decay from ``peak_lr`` to ``peak_lr * min_lr_ratio`` at ``max_steps``."""
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return peak_lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: nn.Module, lr: float, weight_decay: float, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; no decay on norms and other 1-D parameters (decaying RMSNorm gains toward 0 only hurts)."""
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=device.type == "cuda")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Generators take their state as a CPU ByteTensor only, whatever device the training runs on."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


class ResumeState:
    """``resume/state.pt`` (the latest training state) and ``resume/best.pt`` (weights of the best evaluation)."""

    def __init__(self, root: Path):
        self.root = root
        self.state_path = root / "state.pt"
        self.best_path = root / "best.pt"

    def exists(self) -> bool:
        return self.state_path.is_file()

    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, extra: dict[str, Any]) -> None:
        payload = {
            "step": step,
            "model": unwrap(model).state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": rng_state(),
            "extra": extra,
        }
        with AtomicFile(self.state_path) as tmp:
            torch.save(payload, tmp)

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, dict[str, Any]]:
        """Restore a saved state into ``model`` and ``optimizer`` wherever they live.

        The file is read onto the CPU: ``load_state_dict`` copies weights onto the model's device and moves the
        optimizer's moments next to their parameters, while the RNG states must stay CPU ByteTensors (reading with
        ``map_location=<cuda>`` put them on the GPU, and the rerun of an interrupted H200 run failed with
        ``TypeError: RNG state must be a torch.ByteTensor``).
        """
        payload = torch.load(self.state_path, map_location="cpu", weights_only=False)
        unwrap(model).load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        restore_rng_state(payload["rng"])
        return payload["step"], payload["extra"]

    def save_best(self, model: nn.Module) -> None:
        with AtomicFile(self.best_path) as tmp:
            torch.save({k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}, tmp)

    def load_best(self, model: nn.Module) -> None:
        unwrap(model).load_state_dict(torch.load(self.best_path, map_location="cpu", weights_only=True))


def stop_by_budget(ctx: DistributedContext, elapsed_s: float, budget_s: float) -> bool:
    if budget_s <= 0:
        return False
    if not ctx.distributed:
        return elapsed_s >= budget_s
    flag = torch.tensor([1.0 if elapsed_s >= budget_s else 0.0], device=ctx.device)
    return bool(ctx.all_reduce_sum(flag).item() > 0)  # any rank over budget stops all, at the same step


def halt_for_test(step: int, halt_after: int | None) -> None:
    """Hard-kill this process (SIGKILL, no cleanup) after ``halt_after`` steps: how resume tests simulate a crash."""
    if halt_after is not None and step >= halt_after:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def progress_bar(ctx: DistributedContext, total: int, initial: int, desc: str) -> Any:
    """A tqdm bar over optimizer steps on rank 0 (disabled elsewhere).

    Redrawn at most every second on a terminal; into a log file (the GPU jobs' captured stderr) at most every 30 s,
    so a 10-minute job leaves ~20 progress lines rather than thousands of carriage returns.
    """
    from tqdm.auto import tqdm

    interactive = sys.stderr.isatty()
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="step",
        disable=not ctx.is_main,
        dynamic_ncols=True,
        mininterval=1.0 if interactive else 30.0,
        file=sys.stderr,
    )


class NullSummaryWriter:
    """Stands in for TensorBoard's SummaryWriter where there is none (not rank 0, or the package failed to import)."""

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def open_summary_writer(ctx: DistributedContext, out_dir: Path, step: int) -> Any:
    """``torch.utils.tensorboard.SummaryWriter`` into ``out_dir/tb/`` on rank 0, else a no-op writer.

    Imported lazily and defensively: TensorBoard logs are a convenience, and a `tensorboard` whose version does not
    suit this torch (the GPU machine brings its own) must not stop training. On a run resumed at ``step``, events
    after it (logged before the kill, about to be logged again) are purged, so each step appears once; those at
    ``step`` itself were logged before the state was saved and stay.
    """
    if not ctx.is_main:
        return NullSummaryWriter()
    try:
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=str(out_dir / "tb"), purge_step=step + 1 if step > 0 else None)
    except Exception as error:  # ImportError, or any incompatibility inside tensorboard's own imports
        print(f"training: no TensorBoard logs ({type(error).__name__}: {error})", file=sys.stderr)
        return NullSummaryWriter()
