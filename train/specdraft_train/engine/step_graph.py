"""A step function captured as a CUDA graph: the reference engine's decode step (static_engine.py).

The step reads and writes only tensors that outlive it (static buffers), so that replaying the graph is the step.
Capture follows PyTorch's recipe — warm-up steps on a side stream (cuBLAS handles, workspaces, allocator state), then
the capture into a memory pool the caller keeps — with two additions:

- **Warm-up steps run for real**, so the step's state (``state``: the tensors it changes) is saved first and restored
  before every run and at the end; whatever else a step writes, the first real step rewrites with the same values.
- **A failure is returned, not raised**, with its reason: the caller retries in a fresh pool (a fresh engine's first
  capture with compiled modules fails an allocator assertion on an H200 and the retry captures: docs/training.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

CAPTURE_WARMUP_STEPS = 2  # eager steps on a side stream before capture


def capture_step(
    step: Callable[[], None], state: list[torch.Tensor], device: torch.device, pool: Any
) -> tuple[torch.cuda.CUDAGraph | None, str]:
    """``step`` as a CUDA graph allocating from ``pool`` (a ``torch.cuda.graph_pool_handle()``), or None and why
    capture failed (its first line). Every graph of one pool must never run at once with another, and nothing a step
    allocates may outlive it."""
    saved = [t.clone() for t in state]

    def restore() -> None:
        for tensor, copy in zip(state, saved):
            tensor.copy_(copy)

    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(CAPTURE_WARMUP_STEPS):
                restore()
                step()
        torch.cuda.current_stream(device).wait_stream(side)
        restore()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            step()
        return graph, ""
    except Exception as error:  # noqa: BLE001 (any failure: the caller retries, then runs the step eagerly)
        return None, f"{type(error).__name__}: {error}".splitlines()[0][:300]
    finally:
        torch.cuda.synchronize(device)
        restore()
