"""The reference engine's decode attention kernels side by side at a real shape: FlashAttention-2's varlen kernel
(``flash`` decode: one query a row, each row's key range through ``seqused_k``) and the engine's Triton kernel
(``split-kv`` decode, decode_kernel.py), on the same arguments. One layer's attention over one batch laid out as the
engine lays it out (a token-major cache of ``width + new_tokens`` slots a row, prompts of mixed lengths ending at
slot ``width``, measured ``--step`` decode steps in), each kernel captured in a CUDA graph and replayed.

    # one H200 (~1 minute)
    PYTHONPATH=train python3 train/scripts/gpu/bench_decode_attention.py --batch 895x448 --batch 149x1432 \\
        --out /tmp/decode-attention.json
    cd train && .venv/bin/python scripts/gpu/bench_decode_attention.py --device cpu --batch 3x40 --heads 4 \\
        --kv-heads 2 --head-dim 16 --new-tokens 8 --step 4 --out /tmp/decode-attention.json   # the CPU dry run

Reported per batch and kernel: microseconds a call, the key/value bytes the rows' ranges hold over that time (what a
kernel at the memory's bandwidth would approach), and the largest difference from the flash kernel's output. On the
CPU both run their PyTorch reference, untimed by any graph: a check of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # profile_decode: the batch loop both scripts run
from profile_decode import run_batches  # noqa: E402

from specdraft_train.engine.static_cache import Varlen, split_kv_problem, varlen_attention  # noqa: E402

H200_BANDWIDTH = 4.8e12  # bytes/s, HBM3e


def timed(run: Callable[[], torch.Tensor], device: torch.device, iterations: int) -> tuple[float, torch.Tensor]:
    """Seconds a call (a CUDA graph replayed on CUDA, after warm-up; plain calls elsewhere) and the output."""
    for _ in range(3):
        output = run()
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(iterations):
            output = run()
        return (time.perf_counter() - start) / iterations, output
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = run()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    begin.record()
    for _ in range(iterations):
        graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    return begin.elapsed_time(end) / 1000 / iterations, output


def bench_batch(args: argparse.Namespace, rows: int, width: int, device: torch.device) -> dict[str, Any]:
    generator = torch.Generator(device).manual_seed(0)
    length = width + args.new_tokens
    heads, kv_heads, dim = args.heads, args.kv_heads, args.head_dim
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    lengths = torch.randint(width // 2, width + 1, (rows,), generator=generator, device=device, dtype=torch.int32)
    first, used = width - lengths, lengths + args.step
    cache_shape = (rows, length, kv_heads, dim)
    keys, values = (torch.randn(cache_shape, generator=generator, device=device, dtype=dtype) for _ in "kv")
    query = torch.randn((rows, heads, dim), generator=generator, device=device, dtype=dtype)
    scale = dim**-0.5

    i32 = {"dtype": torch.int32, "device": device}
    cu_k = torch.cat([torch.arange(rows, **i32) * length + first, torch.tensor([rows * length], **i32)])
    varlen = Varlen(torch.arange(rows + 1, **i32), cu_k, 1, length, causal=False, used_k=used)
    split_kv = dataclasses.replace(varlen, split_kv=True)
    flat_keys, flat_values = keys.view(-1, kv_heads, dim), values.view(-1, kv_heads, dim)
    kernels: dict[str, Callable[[], torch.Tensor]] = {
        "flash": lambda: varlen_attention(query, flat_keys, flat_values, varlen, scale),
        "split-kv": lambda: varlen_attention(query, flat_keys, flat_values, split_kv, scale),
    }
    kv_bytes = int(used.sum()) * kv_heads * dim * 2 * keys.element_size()
    entry: dict[str, Any] = {"rows": rows, "width": width, "slots": length, "step": args.step, "kv_bytes": kv_bytes}
    outputs = {}
    for name, run in kernels.items():
        seconds, outputs[name] = timed(run, device, args.iterations)
        entry[name] = {"us": round(seconds * 1e6, 2), "kv_bytes_per_s": kv_bytes / seconds}
        entry[name]["of_h200_bandwidth"] = round(kv_bytes / seconds / H200_BANDWIDTH, 3)
    for name in kernels:
        entry[name]["max_abs_diff_from_flash"] = float((outputs[name].float() - outputs["flash"].float()).abs().max())
    entry["split_kv_speedup"] = round(entry["flash"]["us"] / entry["split-kv"]["us"], 3)
    return entry


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="JSON report path")
    p.add_argument("--device", default="cuda", help="cuda | cpu (default: cuda)")
    p.add_argument("--batch", action="append", default=[], help="ROWSxWIDTH, repeatable (default: 895x448)")
    p.add_argument("--new-tokens", type=int, default=256, help="decode slots a row has past its width (default: 256)")
    p.add_argument("--step", type=int, default=128, help="decode steps already taken (default: 128)")
    p.add_argument("--heads", type=int, default=32, help="query heads (default: 32, Qwen3-8B)")
    p.add_argument("--kv-heads", type=int, default=8, help="KV heads (default: 8)")
    p.add_argument("--head-dim", type=int, default=128, help="head dimension (default: 128)")
    p.add_argument("--iterations", type=int, default=50, help="timed calls per kernel (default: 50)")
    args = p.parse_args()
    device = torch.device(args.device)
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    report.update(torch=torch.__version__, created=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    report.update(heads=args.heads, kv_heads=args.kv_heads, head_dim=args.head_dim)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    report["split_kv_problem"] = split_kv_problem(device, dtype, args.heads, args.kv_heads, args.head_dim)
    print(f"split-kv kernel check: {report['split_kv_problem'] or 'ok'}", flush=True)
    run_batches(args.batch, lambda rows, width: bench_batch(args, rows, width, device), report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
