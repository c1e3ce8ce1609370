"""The reference engine's ``split-kv`` decode attention: a Triton kernel for one query a row over each row's key range
of a token-major cache, the query heads that share a KV head read together, the keys split over thread blocks.

Why not a kept library's kernel: FlashAttention-2's varlen kernel (torch's, the engine's ``flash`` decode) reaches
about half of the H200's memory bandwidth on these shapes, FlexAttention's decoding kernel a tenth of it with this
engine's per-row key ranges; FlashAttention-3's and FlashInfer's decode kernels do not install on the GPU machine
(bench/results/2026-12-03-h200-decode-attention/README.md has the measurements). The kernel is the textbook
flash-decoding scheme:

- program (row b, KV head k, split s) loads the G query heads of KV head k (padded to 16 rows for the tensor cores'
  dot), walks its share of the row's keys ``cu_k[b] + [s·n, (s + 1)·n) ∩ [0, used_k[b])`` in blocks, with an online
  softmax in fp32, and writes its unnormalised output, running max and sum;
- a second kernel merges the splits of each (row, query head).

It takes the same arguments as :func:`static_cache.varlen_attention` for a decode step (``max_q`` 1, not causal), so
the engine's buffers, layout and CUDA graph are those of ``flash`` decode. Triton is imported on first use (the CPU
machines have none); :func:`split_kv_problem` checks the kernel against the reference before the engine uses it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

BLOCK_N = 64  # keys per inner step
MIN_ROWS = 16  # tl.dot's smallest M: the query heads of a KV head are padded to it


@functools.cache
def _kernels() -> tuple[Any, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def decode_attention_split(
        Q,
        K,
        V,
        CuK,
        UsedK,
        Acc,
        Max,
        Sum,
        qk_scale,  # softmax scale × log2(e): the kernel works in base 2
        keys_per_split,
        stride_qb,
        stride_qh,
        stride_kt,
        stride_kh,
        stride_vt,
        stride_vh,
        G: tl.constexpr,
        G_PAD: tl.constexpr,
        D: tl.constexpr,
        BLOCK: tl.constexpr,
        SPLITS: tl.constexpr,
    ):
        row, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        first = tl.load(CuK + row)
        used = tl.load(UsedK + row)
        start = split * keys_per_split
        end = tl.minimum(used, start + keys_per_split)
        groups = tl.arange(0, G_PAD)
        dims = tl.arange(0, D)
        heads = kv_head * G + groups
        q_at = Q + row * stride_qb + heads[:, None] * stride_qh + dims[None, :]
        q = tl.load(q_at, mask=groups[:, None] < G, other=0.0)
        running_max = tl.full([G_PAD], float("-inf"), tl.float32)
        running_sum = tl.zeros([G_PAD], tl.float32)
        acc = tl.zeros([G_PAD, D], tl.float32)
        for block in range(start, end, BLOCK):
            keys = block + tl.arange(0, BLOCK)
            valid = keys < end
            tokens = (first + keys).to(tl.int64)
            k_at = K + tokens[:, None] * stride_kt + kv_head * stride_kh + dims[None, :]
            k = tl.load(k_at, mask=valid[:, None], other=0.0)
            scores = tl.dot(q, tl.trans(k)) * qk_scale  # (G_PAD, BLOCK), fp32
            scores = tl.where(valid[None, :], scores, float("-inf"))
            new_max = tl.maximum(running_max, tl.max(scores, 1))
            correction = tl.exp2(running_max - new_max)
            p = tl.exp2(scores - new_max[:, None])
            running_sum = running_sum * correction + tl.sum(p, 1)
            v_at = V + tokens[:, None] * stride_vt + kv_head * stride_vh + dims[None, :]
            v = tl.load(v_at, mask=valid[:, None], other=0.0)
            acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v)
            running_max = new_max
        slot = (row * (tl.num_programs(1) * G) + heads) * SPLITS + split  # (row, query head, split)
        keep = groups < G
        tl.store(Acc + slot[:, None] * D + dims[None, :], acc, mask=keep[:, None])
        tl.store(Max + slot, running_max, mask=keep)
        tl.store(Sum + slot, running_sum, mask=keep)

    @triton.jit
    def decode_attention_merge(Acc, Max, Sum, Out, D: tl.constexpr, SPLITS: tl.constexpr):
        pair = tl.program_id(0)  # row × query heads + query head
        splits = tl.arange(0, SPLITS)
        dims = tl.arange(0, D)
        maxima = tl.load(Max + pair * SPLITS + splits)
        sums = tl.load(Sum + pair * SPLITS + splits)
        top = tl.max(maxima, 0)
        weights = tl.where(maxima > float("-inf"), tl.exp2(maxima - top), 0.0)  # an empty split weighs nothing
        acc = tl.load(Acc + (pair * SPLITS + splits)[:, None] * D + dims[None, :])
        output = tl.sum(acc * weights[:, None], 0) / tl.sum(sums * weights, 0)
        tl.store(Out + pair * D + dims, output.to(Out.dtype.element_ty))

    return decode_attention_split, decode_attention_merge


def splits_for(rows: int, kv_heads: int, max_keys: int, device: torch.device, units: int | None = None) -> int:
    """Key splits a row gets: enough programs for ~4 per streaming multiprocessor (``units``: the device's count),
    each at least 4 key blocks, rounded up to a power of two (the merge kernel's tile)."""
    if units is None:
        units = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
    wanted = math.ceil(4 * units / max(1, rows * kv_heads))
    most = max(1, max_keys // (4 * BLOCK_N))
    return 1 << max(0, math.ceil(math.log2(max(1, min(wanted, most)))))


def split_kv_decode(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_k: torch.Tensor,
    used_k: torch.Tensor,
    max_k: int,
    scale: float | None,
) -> torch.Tensor:
    """query (B, H, D); key/value (T, KVH, D) with row b's keys at ``cu_k[b]`` … ``cu_k[b] + used_k[b] - 1``;
    ``max_k`` bounds ``used_k`` (a row's slots) → (B, H, D) in the query's dtype."""
    decode_attention_split, decode_attention_merge = _kernels()
    rows, heads, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    if query.stride(-1) != 1 or key.stride(-1) != 1 or value.stride(-1) != 1:
        raise ValueError("split-kv decode: the head dimension must be contiguous")
    splits = splits_for(rows, kv_heads, max_k, query.device)
    keys_per_split = -(-max_k // splits)
    keys_per_split = -(-keys_per_split // BLOCK_N) * BLOCK_N
    partial = rows * heads * splits
    acc = torch.empty((partial, dim), dtype=torch.float32, device=query.device)
    maxima = torch.empty(partial, dtype=torch.float32, device=query.device)
    sums = torch.empty(partial, dtype=torch.float32, device=query.device)
    scale = scale if scale is not None else dim**-0.5
    decode_attention_split[(rows, kv_heads, splits)](
        query,
        key,
        value,
        cu_k,
        used_k,
        acc,
        maxima,
        sums,
        scale * math.log2(math.e),
        keys_per_split,
        query.stride(0),
        query.stride(1),
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        G=group,
        G_PAD=max(MIN_ROWS, 1 << math.ceil(math.log2(group))),
        D=dim,
        BLOCK=BLOCK_N,
        SPLITS=splits,
        num_warps=4,
        num_stages=2,
    )
    output = torch.empty((rows, heads, dim), dtype=query.dtype, device=query.device)
    decode_attention_merge[(rows * heads,)](acc, maxima, sums, output, D=dim, SPLITS=splits, num_warps=4)
    return output
