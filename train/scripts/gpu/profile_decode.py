"""Where a decode step of the reference engine spends its time, at a real shape: one batch of ``--rows`` prompts of
``--width`` tokens, its decode step timed as the engine runs it (a CUDA graph) and, run eagerly under torch.profiler
so that every kernel is seen, its kernel time by kind (matmul, attention, elementwise, reduction, top-k/sort, copy)
and its kernel count. The prefill's kernels are profiled alone and subtracted, so the figures are the decode steps'.

    # one H200 (~2 minutes; the gguf wheel is not needed)
    PYTHONPATH=train python3 train/scripts/gpu/profile_decode.py --shape qwen3-8b --batch 895x448 --batch 149x1432 \
        --out /tmp/decode-profile.json
    cd train && .venv/bin/python scripts/gpu/profile_decode.py --device cpu --layers 2 --batch 4x16 \
        --out /tmp/decode-profile.json                                   # the CPU dry run: CPU operators, no graph

A kernel's kind comes from its name (KINDS, first match); the sums are device time, which the eager run's launch gaps
do not inflate, so the graph's step time minus the kernels' sum is what the GPU spent between kernels.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_reference: the model, as the benchmark builds it
from bench_reference import TOP_K, build_model  # noqa: E402

from specdraft_train.engine.static_engine import StaticEngineConfig, StaticGreedyEngine  # noqa: E402

# Kernel (or, on the CPU, operator) name → kind, first match wins (the split-kv kernels are decode_attention_*; the
# compiled norms' and MLPs' are inductor's triton_{poi,per,red}_fused_*).
KINDS = (
    ("attention", re.compile(r"flash|fmha|attention|softmax_warp", re.I)),
    ("matmul", re.compile(r"gemm|xmma|cutlass|cublas|sm90_|matmul|aten::mm|aten::addmm|aten::bmm|linear", re.I)),
    ("top-k/sort", re.compile(r"topk|sort|radix|select", re.I)),
    ("reduction", re.compile(r"reduce|argmax|max|sum|mean|norm", re.I)),
    ("copy", re.compile(r"copy|cat|index|scatter|gather|fill|memcpy|memset", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|aten::|triton_(poi|per|red)_fused", re.I)),
)


def kind_of(name: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(name)), "other")


def kernel_times(run: Any, device: torch.device) -> tuple[Counter, Counter]:
    """Device microseconds and counts by kind of everything ``run()`` launched (CPU: operators' self time)."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        run()
        if cuda:
            torch.cuda.synchronize(device)
    micros, counts = Counter(), Counter()
    for event in prof.key_averages():
        if cuda and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if not cuda and not event.key.startswith("aten::"):
            continue
        spent = event.self_device_time_total if cuda else event.self_cpu_time_total
        micros[kind_of(event.key)] += spent
        counts[kind_of(event.key)] += event.count
    return micros, counts


def profile_batch(model: torch.nn.Module, rows: int, width: int, steps: int, device: torch.device) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    prompts = [rng.integers(0, vocab, size=width).tolist() for _ in range(rows)]
    entry: dict[str, Any] = {"rows": rows, "width": width, "decode_steps": steps}
    if device.type == "cuda":  # the step as the engine runs it: a CUDA graph, replayed
        engine = StaticGreedyEngine(model, device)
        engine.generate(prompts, 1 + steps, [], TOP_K, max_batch_size=rows)  # capture, warm-up
        engine.stats.batch_log.clear()
        engine.generate(prompts, 1 + 4 * steps, [], TOP_K, max_batch_size=rows)
        batch = engine.stats.batch_log[0]  # its own shape: captured in this call, the capture left out
        entry["graph_ms_per_step"] = 1000 * (batch["decode_s"] - batch["capture_s"]) / max(1, batch["steps"] - 1)
        entry["cuda_graph"] = engine.stats.used_cuda_graph and engine.stats.cuda_graph_failure is None
        entry["cuda_graph_failure"] = engine.stats.cuda_graph_failure
        entry["capture_retries"] = engine.stats.capture_retries
        engine.close()  # the model uncompiled again for the next engine
    eager = StaticGreedyEngine(model, device, StaticEngineConfig(cuda_graphs=False))
    eager.generate(prompts[:2], 2, [], TOP_K)  # cuBLAS handles, the KV store
    prefill, prefill_n = kernel_times(lambda: eager.generate(prompts, 1, [], TOP_K, max_batch_size=rows), device)
    both, both_n = kernel_times(lambda: eager.generate(prompts, 1 + steps, [], TOP_K, max_batch_size=rows), device)
    eager.close()
    per_step = {kind: (both[kind] - prefill[kind]) / steps / 1000 for kind in both}
    entry["kernel_ms_per_step"] = {k: round(v, 3) for k, v in sorted(per_step.items(), key=lambda kv: -kv[1])}
    entry["kernel_ms_per_step_total"] = round(sum(per_step.values()), 3)
    entry["kernels_per_step"] = {k: (both_n[k] - prefill_n[k]) / steps for k in both_n}
    entry["kernels_per_step_total"] = sum(entry["kernels_per_step"].values())
    if "graph_ms_per_step" in entry:
        entry["between_kernels_ms_per_step"] = round(entry["graph_ms_per_step"] - entry["kernel_ms_per_step_total"], 3)
    return entry


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="JSON report path")
    p.add_argument("--device", default="cuda", help="cuda | cpu (default: cuda)")
    p.add_argument("--shape", default=None, help="a real model's shape, random weights (bench/models/qwen3_shapes.py)")
    p.add_argument("--batch", action="append", default=[], help="ROWSxWIDTH, repeatable (default: 895x448)")
    p.add_argument("--steps", type=int, default=4, help="decode steps profiled per batch (default: 4)")
    p.add_argument("--layers", type=int, default=12, help="without --shape: a small random Qwen3's layers")
    args = p.parse_args()
    # what bench_reference's build_model reads, at its defaults (a small random Qwen3 without --shape)
    defaults = dict(checkpoint=None, hidden=256, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=4096, context=4096)
    build = argparse.Namespace(**defaults, shape=args.shape, layers=args.layers, init_std=0.02, seed=0)
    device = torch.device(args.device)
    build.dtype = "bfloat16" if device.type == "cuda" else "float32"
    model, source = build_model(build, device)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    report.update(model=source, torch=torch.__version__, created=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    # No autocast around the engine: it sets its own, and an outer one's cast cache would hold tensors of the CUDA
    # graphs' memory pool (the capture then fails an allocator assertion and the engine decodes eagerly).
    run_batches(args.batch, lambda rows, width: profile_batch(model, rows, width, args.steps, device), report, args.out)
    return 0


def run_batches(specs: list[str], measure: Callable[[int, int], dict], report: dict[str, Any], out: Path) -> None:
    """Each ``ROWSxWIDTH`` spec (default 895x448) measured without autograd, printed as a JSON line and kept in
    ``report["batches"]``; the report written to ``out`` (bench_decode_attention.py runs its batches so too)."""
    report["batches"] = []
    with torch.no_grad():
        for spec in specs or ["895x448"]:
            rows, _, width = spec.partition("x")
            entry = measure(int(rows), int(width))
            report["batches"].append(entry)
            print(json.dumps(entry), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
