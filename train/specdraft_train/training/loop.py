"""What `pretrain` and `distill` share: DDP/FSDP setup, the LR schedule, the data order of token chunks, the resumable
training state, progress, logs.

Both loops run unchanged as one process or under ``torchrun --nproc-per-node N`` (NCCL between GPUs, gloo on the
CPU): each rank takes its slice of every global batch (so N ranks see exactly the data one process would), gradients
are averaged by DDP, or by FSDP (``wrap_model(..., fsdp=True)``: parameters, gradients and optimizer moments sharded
over the ranks, for a drafter whose training state does not fit one GPU), and only rank 0 writes. The resumable
state (weights, optimizer, step, RNG, loop extras) lives in one file replaced atomically, so a kill at any moment
leaves either the previous state or the new one; under FSDP rank 0 gathers the shards into that one file. Rank 0
shows a tqdm progress bar and writes TensorBoard event files into ``OUT/tb/`` (when the `tensorboard` package imports).
`reference` and `lab` use the same process group (init_distributed) for their own sharding.

    ctx = init_distributed("auto"); state = ResumeState(out_dir / "resume", ctx)
    bar = progress_bar(ctx, total=max_steps, initial=step, desc="distill"); tb = open_summary_writer(ctx, out_dir, step)
"""

from __future__ import annotations

import gc
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..formats.artifacts import AtomicFile
from ..modeling.models import resolve_device
from ..progress import progress_bar as shared_progress_bar


@dataclass(frozen=True)
class DistributedContext:
    rank: int
    world_size: int
    device: torch.device
    # Whether init_distributed created the process group (and finish_distributed destroys it): a stage run by the lab
    # under torchrun joins the lab's group and must leave it for the next stage.
    owns_group: bool = False

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

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (any picklable object; the other ranks' values are ignored)."""
        if not self.distributed:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def all_gather_object(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""
        if not self.distributed:
            return [value]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered


def init_distributed(device_name: str, backend: str | None = None, tf32: bool = True) -> DistributedContext:
    """Join the process group torchrun describes (WORLD_SIZE > 1): NCCL on CUDA, gloo on CPU, unless ``backend``
    says otherwise. A group that already exists (the lab's, when a stage runs inside it) is joined, not re-created.

    Each rank takes the GPU of its LOCAL_RANK. ``tf32`` lets fp32 matmuls use TF32 on CUDA (training); `reference`
    turns it off, so that its continuations do not change with the way the stage is launched.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = resolve_device(device_name)
    owns_group = False
    if world_size > 1:
        if device.type == "cuda":
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            chosen = backend or ("nccl" if device.type == "cuda" else "gloo")
            # device_id binds NCCL to this rank's GPU up front (and silences its guess-the-device warning)
            device_id = device if chosen == "nccl" else None
            dist.init_process_group(backend=chosen, device_id=device_id)
            owns_group = True
    if device.type == "cuda" and tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return DistributedContext(rank=rank, world_size=world_size, device=device, owns_group=owns_group)


def finish_distributed(ctx: DistributedContext) -> None:
    """Wait for every rank; destroy the process group only where this context created it.

    Call it once the stage's DDP model is gone (its last reference dropped). A DDP model's C++ Reducer holds the
    group; if it is the last holder, freeing it destroys the gloo group with the GIL held, whose worker thread may
    still be freeing the final barrier's tensors and waits for the GIL: a deadlock after the stage's work is done
    (seen in CI, ~1 run in 10 on a loaded 2-core machine). Freed here first, while the group is still registered,
    the Reducer only drops a reference, and destroy_process_group frees the group with the GIL released.
    """
    if ctx.distributed and dist.is_initialized():
        gc.collect()  # a dropped model still in a reference cycle (e.g. a stage object's) is freed now, not later
        # type(), not isinstance: isinstance asks some objects for __class__, and torch's deprecated ones warn
        if any(issubclass(type(obj), nn.parallel.DistributedDataParallel) for obj in gc.get_objects()):
            raise RuntimeError("finish_distributed: a DDP model is still referenced; drop it first (see docstring)")
        dist.barrier()
        if ctx.owns_group:
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


def wrap_fsdp(model: nn.Module, ctx: DistributedContext) -> nn.Module:
    """FSDP2 (``fully_shard``) over all ranks: each decoder layer is one unit (its weights gathered just before its
    forward and backward, freed after), the embeddings, final norm and LM head the root unit. Returns the same
    module.

    ``model`` may live on the CPU: fully_shard moves each rank's shards to the mesh's device, so the full weights
    never sit on one GPU (one layer's at a time, while it is sharded). Parameters stay fp32 and are gathered as
    fp32, and the forward runs under the same bf16 autocast as DDP's, so FSDP computes what DDP does up to summation
    order; gathering bf16 (``MixedPrecisionPolicy``) would halve the traffic but change the numerics, and was not
    measured. Multi-node runs may prefer hybrid sharding (shard within a node, replicate across) — a 2-D mesh here —
    which is not wired.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    layers = getattr(getattr(model, "model", None), "layers", None)  # HF decoders: model.model.layers
    for layer in layers if layers is not None else []:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def wrap_model(model: nn.Module, ctx: DistributedContext, fsdp: bool = False) -> nn.Module:
    """The model as the training loop runs it: itself (one process), DDP, or FSDP (``fsdp``, with several ranks)."""
    if not ctx.distributed:
        return model
    return wrap_fsdp(model, ctx) if fsdp else wrap_ddp(model, ctx)


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model`` is FSDP-sharded: its forward, state gathering and loading then involve every rank."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


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


# ---------------------------------------------------------------------------------------------------------------------
# Data order, and what the loops log


class ChunkSampler:
    """Step → global batch of chunk indices, the same for any world size and any restart."""

    def __init__(self, n_tokens: int, seq_len: int, batch_size: int, seed: int):
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.n_chunks = (n_tokens - 1) // seq_len
        self.steps_per_epoch = self.n_chunks // batch_size
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"{n_tokens} tokens make {self.n_chunks} chunks of {seq_len}: fewer than one batch of {batch_size}"
            )
        self._epoch = -1
        self._perm = np.zeros(0, dtype=np.int64)

    def batch_indices(self, step: int) -> np.ndarray:
        epoch, within = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_chunks)
            self._epoch = epoch
        return self._perm[within * self.batch_size : (within + 1) * self.batch_size]


class TrainWindow:
    """Loss parts summed on the device since the last log point; read (one sync, one all-reduce) only when logged.

    Log points are fixed by the step (distill: every LOG_EVERY_STEPS, evaluation and checkpoint), so a resumed run
    logs the same windows as an uninterrupted one and the history agrees.
    """

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts = {"steps": 0.0, "tokens": 0.0, "replay_tokens": 0.0}

    def add(self, loss: torch.Tensor, parts: dict[str, torch.Tensor], tokens: int, replay_tokens: int) -> None:
        for name, value in {"loss": loss.detach(), **parts}.items():
            self.sums[name] = self.sums[name] + value if name in self.sums else value
        self.counts["steps"] += 1
        self.counts["tokens"] += tokens
        self.counts["replay_tokens"] += replay_tokens

    def read(self, ctx: DistributedContext) -> dict[str, float]:
        """Means over the window and all ranks: loss per step, lm per replay token, the rest per continuation token."""
        if not self.sums:
            return {}
        names = sorted(self.sums)
        device = self.sums[names[0]].device
        values = torch.stack(
            [self.sums[n].float() for n in names]
            + [torch.tensor(self.counts[c], device=device) for c in ("tokens", "replay_tokens")]
        )
        values = ctx.all_reduce_sum(values).tolist()
        tokens, replay_tokens = values[-2], values[-1]
        steps = self.counts["steps"]  # each rank adds its share of the global mean loss: the sum is the mean
        means = {}
        for name, value in zip(names, values):
            means[name] = value / max({"loss": steps, "lm": replay_tokens}.get(name, tokens), 1)
        self.sums, self.counts = {}, {"steps": 0.0, "tokens": 0.0, "replay_tokens": 0.0}
        return means


def synced_clock(device: torch.device) -> float:
    """Wall time once the device has finished what was queued (steps are asynchronous on CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.time()


def warm_throughput(timed_from: list[float] | None, loop_end: list[float], column: int = 1) -> float | None:
    """Tokens per second between the step timing starts from (distill: UNTIMED_STEPS) and the last step
    ([seconds, tokens, …] at each; ``column`` picks the count): what a longer run sustains. None for a run of fewer
    steps, or one saved before the count was kept."""
    if timed_from is None or loop_end[0] <= timed_from[0] or len(timed_from) <= column:
        return None
    return (loop_end[column] - timed_from[column]) / (loop_end[0] - timed_from[0])


# ---------------------------------------------------------------------------------------------------------------------
# The resumable state


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


def _full_state_options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)


class ResumeState:
    """``resume/state.pt`` (the latest training state) and ``resume/best.pt`` (weights of the best evaluation).

    Call :meth:`save` and :meth:`save_best` on every rank: with a plain or DDP model only rank 0 writes (the replicas
    are equal); with an FSDP model every rank gives its shards to rank 0 first (collective), which writes the full
    state. Loading reads the one file on every rank (the output directory is shared, as it is for DDP), each FSDP
    rank keeping its own shards. An FSDP state keys the optimizer's moments by parameter name (a DDP one by index),
    so each resumes only the way it was saved. Gathering the whole state on rank 0's CPU bounds FSDP's resumable size
    by one host's memory (a 1.7B drafter with AdamW: 27 GB; an 8B: ~130 GB) and makes a save as slow as one writer.
    Sharded checkpoints (torch.distributed.checkpoint: a file per rank, written in parallel) lift both; not taken
    because the state would then be a directory needing its own commit protocol (a pointer replaced once every
    rank's files are in) instead of one os.replace, and the drafters in view (≤ 8B) fit a GPU host's memory.
    """

    def __init__(self, root: Path, ctx: DistributedContext | None = None):
        self.root = root
        self.state_path = root / "state.pt"
        self.best_path = root / "best.pt"
        self.is_main = ctx is None or ctx.is_main

    def exists(self) -> bool:
        return self.state_path.is_file()

    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, extra: dict[str, Any]) -> None:
        if is_sharded(model):  # a collective: every rank hands rank 0 its shards
            from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

            weights = get_model_state_dict(model, options=_full_state_options())
            moments = get_optimizer_state_dict(model, optimizer, options=_full_state_options())
            layout = "fsdp"
            if not self.is_main:
                return
        elif self.is_main:
            weights, moments, layout = unwrap(model).state_dict(), optimizer.state_dict(), "single"
        else:
            return
        payload = {"step": step, "model": weights, "optimizer": moments, "rng": rng_state(), "extra": extra}
        if layout == "fsdp":
            payload["layout"] = layout  # optimizer moments keyed by parameter name, not by index
        with AtomicFile(self.state_path) as tmp:
            torch.save(payload, tmp)

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, dict[str, Any]]:
        """Restore a saved state into ``model`` and ``optimizer`` wherever they live (every rank calls it).

        The file is read onto the CPU: ``load_state_dict`` copies weights onto the model's device and moves the
        optimizer's moments next to their parameters, while the RNG states must stay CPU ByteTensors (reading with
        ``map_location=<cuda>`` put them on the GPU, and the rerun of an interrupted H200 run failed with
        ``TypeError: RNG state must be a torch.ByteTensor``).
        """
        payload = torch.load(self.state_path, map_location="cpu", weights_only=False)
        layout, wanted = payload.get("layout", "single"), "fsdp" if is_sharded(model) else "single"
        if layout != wanted:
            how = "with" if layout == "fsdp" else "without"
            raise ValueError(
                f"{self.state_path} was saved by a run {how} FSDP: resume it the same way ({how} --fsdp), or "
                f"delete {self.root} to start over"
            )
        if layout == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

            set_state_dict(
                model,
                optimizer,
                model_state_dict=payload["model"],
                optim_state_dict=payload["optimizer"],
                options=StateDictOptions(full_state_dict=True),
            )
        else:
            unwrap(model).load_state_dict(payload["model"])
            optimizer.load_state_dict(payload["optimizer"])
        restore_rng_state(payload["rng"])
        return payload["step"], payload["extra"]

    def save_best(self, model: nn.Module) -> None:
        if is_sharded(model):  # a collective, as in save
            from torch.distributed.checkpoint.state_dict import get_model_state_dict

            weights = get_model_state_dict(model, options=_full_state_options())
            if not self.is_main:
                return
        elif self.is_main:
            weights = {k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}
        else:
            return
        with AtomicFile(self.best_path) as tmp:
            torch.save(weights, tmp)

    def load_best(self, model: nn.Module) -> None:
        """Best weights into a plain (unsharded) model, e.g. a CPU copy that rank 0 saves as the stage's output."""
        unwrap(model).load_state_dict(torch.load(self.best_path, map_location="cpu", weights_only=True))


def relaunch_under_torchrun(nproc_per_node: int, argv: list[str]) -> int:
    """``python -m specdraft_train ARGV`` as ``nproc_per_node`` processes on this machine, through
    torch.distributed.run (what ``torchrun`` runs), standalone: the rendezvous takes a free port, so two jobs on one
    machine do not clash. Returns 0 when every rank succeeded, else 1 (torchrun has printed which rank failed)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    if "WORLD_SIZE" in os.environ:
        raise ValueError("--nproc-per-node under torchrun: this process is already one of torchrun's ranks")
    args = get_args_parser().parse_args(
        ["--standalone", f"--nproc-per-node={nproc_per_node}", "-m", "specdraft_train", *argv]
    )
    try:
        run(args)
    except ChildFailedError:
        return 1
    return 0


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
    """Optimizer steps on rank 0 (disabled elsewhere): a bar on a terminal, a line every few percent in a log."""
    return shared_progress_bar(total, desc, "step", initial=initial, enabled=ctx.is_main)


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
