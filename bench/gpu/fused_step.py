"""How fast can a batch-1 draft step of a Qwen3-1.7B-shaped Q4_0 drafter be with fewer, fused kernels?

llama.cpp launches 600 kernels a step for that shape (docs/benchmarks.md, the ncu census of 2026-12-01): 183
matrix-vector products of ~7 µs that cannot fill the GPU, 182 separate input quantizations, and the norms, RoPE and
attention around them; 1.68 ms a step where reading the ~1 GB of weights takes ~0.2 ms. This is the experiment that
decides whether an engine of our own is worth building: the same step in 7 Triton kernels a layer (RMSNorm fused into
the matrix-vector product that reads its output; Q, K and V as one matrix; gate and up as one matrix with SiLU·up
fused; the residual adds fused into O and down; q/k norm, RoPE and the KV write in one kernel; split-K attention and
its reduction: with one program per head, 16 programs, the first version's attention took most of its 3.12 ms), the
greedy argmax in two kernels, the Q4_0 blocks read as GGUF stores them (an fp16 scale and 16 bytes of nibbles per 32
weights, element j in the low nibble of byte j and element j + 16 in its high nibble), the weights dequantized in
registers against fp32 activations (llama.cpp rounds the activations to Q8_1 and uses integer dot products instead:
the drafts would not be bit-identical to llama.cpp's), the token fed back on the device, and STEPS steps captured as
one CUDA graph.

It prints the ms per step, the weight bandwidth it reached and the µs of each kind of kernel alone, with a check
against a PyTorch reference of the same dequantized weights (logits and greedy tokens). Random weights; timing does not
depend on their values.

    python3 bench/gpu/fused_step.py                       # on the H200: the 1.7B shape, a CUDA graph of 16 steps
    python3 bench/gpu/fused_step.py --shape tiny --check  # anywhere: TRITON_INTERPRET=1 runs the kernels on the CPU

The CPU check needs triton (3.6.0, the version torch 2.11 pins) and, for its interpreter, numpy < 2.4 (which refuses
to turn a one-element array into a scalar): `pip install --target /tmp/tri triton==3.6.0 numpy==2.2.6` and
`PYTHONPATH=/tmp/tri train/.venv/bin/python bench/gpu/fused_step.py --shape tiny --check`.

Not an engine: no prefill, no batching, no interface to serve; what it measures is the floor such an engine could
reach at batch 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

SHAPES = {
    # hidden, layers, q heads, kv heads, head dim, FFN, vocabulary (Qwen3-1.7B / 0.6B, bench/models/qwen3_shapes.py)
    "qwen3-1.7b": (2048, 28, 16, 8, 128, 6144, 151_936),
    "qwen3-0.6b": (1024, 28, 16, 8, 128, 3072, 151_936),
    "tiny": (64, 2, 2, 1, 32, 128, 320),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-1.7b")
    p.add_argument("--context", type=int, default=512, help="tokens already in the KV cache (default: 512)")
    p.add_argument("--steps", type=int, default=16, help="steps captured in one CUDA graph (default: 16)")
    p.add_argument("--repeats", type=int, default=20, help="graph replays timed (default: 20)")
    p.add_argument("--no-tune", action="store_true", help="keep the guessed kernel configurations (no sweep)")
    p.add_argument("--check", action="store_true", help="on the CPU: TRITON_INTERPRET=1, eager kernels, no timing")
    p.add_argument("--out", default=None, help="JSON file for the results")
    return p.parse_args()


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None and ARGS.check:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

QK = 32  # weights per Q4_0 block


@triton.jit
def _block_dots(b, x_lo, x_hi):
    """[rows, blocks] dot products of Q4_0 blocks (bytes b: [rows, blocks, 16]) with x's halves (x_lo, x_hi: [blocks,
    16]), before the blocks' scales."""
    lo = ((b & 15) - 8).to(tl.float32)
    hi = ((b >> 4) - 8).to(tl.float32)
    return tl.sum(lo * x_lo[None, :, :] + hi * x_hi[None, :, :], axis=2)


@triton.jit
def gemv_q4_0(
    wq,  # uint8 [R, C/2]: per block of 32 weights 16 bytes, element j low nibble of byte j, j + 16 its high nibble
    wd,  # fp16 [R, C/32]: the blocks' scales
    x,  # fp32 [C]
    norm_w,  # fp32 [C] (NORM): x ← x / rms(x) · norm_w on load
    resid,  # fp32 [R] (RESID): out ← resid + W·x
    out,  # fp32 [R] (or [R/2] with SWIGLU)
    R,
    C,
    eps,
    NORM: tl.constexpr,
    RESID: tl.constexpr,
    SWIGLU: tl.constexpr,  # rows [0, R/2) are gate, [R/2, R) up: out[i] = silu(gate_i·x) · (up_i·x)
    BR: tl.constexpr,
    BK: tl.constexpr,
):
    pid = tl.program_id(0)
    n_out = R // 2 if SWIGLU else R
    rows = pid * BR + tl.arange(0, BR)
    rmask = rows < n_out
    NB: tl.constexpr = BK // 32
    inv = 1.0
    if NORM:
        ss = tl.zeros([BK], tl.float32)
        for k0 in tl.range(0, C, BK):
            xs = tl.load(x + k0 + tl.arange(0, BK))
            ss += xs * xs
        inv = 1.0 / tl.sqrt(tl.sum(ss, axis=0) / C + eps)
    acc = tl.zeros([BR], tl.float32)
    acc_up = tl.zeros([BR], tl.float32)
    j = tl.arange(0, 16)
    for k0 in tl.range(0, C, BK):
        blk = k0 // 32 + tl.arange(0, NB)
        xi = blk[:, None] * 32 + j[None, :]  # [NB, 16]
        x_lo = tl.load(x + xi)
        x_hi = tl.load(x + xi + 16)
        if NORM:
            x_lo = x_lo * inv * tl.load(norm_w + xi)
            x_hi = x_hi * inv * tl.load(norm_w + xi + 16)
        woff = rows[:, None, None] * (C // 2) + blk[None, :, None] * 16 + j[None, None, :]
        b = tl.load(wq + woff, mask=rmask[:, None, None], other=136).to(tl.int32)
        part = _block_dots(b, x_lo, x_hi)
        d = tl.load(wd + rows[:, None] * (C // 32) + blk[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
        acc += tl.sum(part * d, axis=1)
        if SWIGLU:
            up = rows + n_out
            b = tl.load(wq + woff + n_out * (C // 2), mask=rmask[:, None, None], other=136).to(tl.int32)
            part = _block_dots(b, x_lo, x_hi)
            d = tl.load(wd + up[:, None] * (C // 32) + blk[None, :], mask=rmask[:, None], other=0.0).to(tl.float32)
            acc_up += tl.sum(part * d, axis=1)
    if SWIGLU:
        acc = acc / (1.0 + tl.exp(-acc)) * acc_up
    if RESID:
        acc += tl.load(resid + rows, mask=rmask, other=0.0)
    tl.store(out + rows, acc, mask=rmask)


@triton.jit
def qk_norm_rope_kv(
    qkv,  # fp32 [(NQ + 2·NKV)·D]: this step's q, k, v
    q_norm,  # fp32 [D]
    k_norm,  # fp32 [D]
    cos,  # fp32 [max positions, D]
    sin,
    pos_ptr,  # int32 [1]: this step's position (on the device, so a captured graph replays with the next one)
    q_out,  # fp32 [NQ·D]
    k_cache,  # fp32 [NKV, max positions, D]
    v_cache,
    max_pos,
    eps,
    NQ: tl.constexpr,
    NKV: tl.constexpr,
    D: tl.constexpr,
):
    h = tl.program_id(0)  # q heads first, then kv heads
    pos = tl.load(pos_ptr)
    i = tl.arange(0, D)
    half: tl.constexpr = D // 2
    is_q = h < NQ
    base = tl.where(is_q, h * D, NQ * D + (h - NQ) * D)
    v = tl.load(qkv + base + i)
    w = tl.where(is_q, tl.load(q_norm + i), tl.load(k_norm + i))
    inv = 1.0 / tl.sqrt(tl.sum(v * v, axis=0) / D + eps)
    partner = (i + half) % D  # NeoX RoPE, as Qwen3: the two halves of a head rotate together
    pv = tl.load(qkv + base + partner) * inv * tl.where(is_q, tl.load(q_norm + partner), tl.load(k_norm + partner))
    v = v * inv * w
    rotated = v * tl.load(cos + pos * D + i) + tl.where(i < half, -pv, pv) * tl.load(sin + pos * D + i)
    tl.store(q_out + h * D + i, rotated, mask=is_q & (i < D))
    kv = h - NQ
    kv_mask = (h >= NQ) & (i < D)
    tl.store(k_cache + kv * max_pos * D + pos * D + i, rotated, mask=kv_mask)
    v = tl.load(qkv + (NQ + NKV) * D + kv * D + i, mask=kv_mask)
    tl.store(v_cache + kv * max_pos * D + pos * D + i, v, mask=kv_mask)


@triton.jit
def attend_split(
    q,  # fp32 [NQ·D], RoPE applied
    k_cache,
    v_cache,
    pos_ptr,
    part,  # fp32 [NQ, SPLITS, D + 2]: each split's unnormalized output, running max and sum
    max_pos,
    scale,
    NQ: tl.constexpr,
    NKV: tl.constexpr,
    D: tl.constexpr,
    BL: tl.constexpr,
    SPLITS: tl.constexpr,
):
    """Split-K attention (flash-decoding): program (head, split) attends over its share of the positions 0 … pos, so
    a step's attention fills the GPU (NQ × SPLITS programs) instead of running NQ programs over the whole context."""
    h = tl.program_id(0)
    sp = tl.program_id(1)
    kv = h // (NQ // NKV)
    n = tl.load(pos_ptr) + 1
    per = tl.cdiv(tl.cdiv(n, SPLITS), BL) * BL
    lo = sp * per
    hi = tl.minimum(lo + per, n)
    d = tl.arange(0, D)
    qh = tl.load(q + h * D + d)
    m = -float("inf")
    s_sum = 0.0
    acc = tl.zeros([D], tl.float32)
    for l0 in tl.range(lo, hi, BL):
        ls = l0 + tl.arange(0, BL)
        lm = ls < hi
        offs = kv * max_pos * D + ls[:, None] * D + d[None, :]
        k = tl.load(k_cache + offs, mask=lm[:, None], other=0.0)
        s = tl.where(lm, tl.sum(k * qh[None, :], axis=1) * scale, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        vv = tl.load(v_cache + offs, mask=lm[:, None], other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * vv, axis=0)
        s_sum = s_sum * alpha + tl.sum(p, axis=0)
        m = m_new
    base = (h * SPLITS + sp) * (D + 2)
    tl.store(part + base + d, acc)
    tl.store(part + base + D, m)  # -inf for a split with no positions: its weight below is 0
    tl.store(part + base + D + 1, s_sum)


@triton.jit
def attend_reduce(part, out, D: tl.constexpr, SPLITS: tl.constexpr):
    """Combines a head's splits: Σ e^(m_i − M)·acc_i ÷ Σ e^(m_i − M)·sum_i (split 0 always holds position 0)."""
    h = tl.program_id(0)
    sp = tl.arange(0, SPLITS)
    d = tl.arange(0, D)
    base = (h * SPLITS + sp) * (D + 2)
    ms = tl.load(part + base + D)
    w = tl.exp(ms - tl.max(ms, axis=0))
    acc = tl.load(part + base[:, None] + d[None, :])
    total = tl.sum(tl.load(part + base + D + 1) * w, axis=0)
    tl.store(out + h * D + d, tl.sum(acc * w[:, None], axis=0) / total)


@triton.jit
def embed_q4_0(wq, wd, tok_ptr, out, C, BK: tl.constexpr):
    """out ← the dequantized embedding row of the token in tok_ptr."""
    tok = tl.load(tok_ptr).to(tl.int64)
    j = tl.arange(0, 16)
    for k0 in tl.range(0, C, BK):
        blk = k0 // 32 + tl.arange(0, BK // 32)
        b = tl.load(wq + tok * (C // 2) + blk[:, None] * 16 + j[None, :]).to(tl.int32)
        d = tl.load(wd + tok * (C // 32) + blk).to(tl.float32)[:, None]
        tl.store(out + blk[:, None] * 32 + j[None, :], ((b & 15) - 8).to(tl.float32) * d)
        tl.store(out + blk[:, None] * 32 + j[None, :] + 16, ((b >> 4) - 8).to(tl.float32) * d)


@triton.jit
def argmax_partial(logits, part_v, part_i, V, BV: tl.constexpr):
    """Program b: the largest logit of block b and its first index (the greedy token in two kernels that fill the
    GPU, where one program over 151,936 logits would run alone)."""
    b = tl.program_id(0)
    vs = b * BV + tl.arange(0, BV)
    x = tl.load(logits + vs, mask=vs < V, other=-float("inf"))
    m = tl.max(x, axis=0)
    tl.store(part_v + b, m)
    tl.store(part_i + b, tl.min(tl.where(x == m, vs, V), axis=0))


@triton.jit
def argmax_advance(part_v, part_i, tok_ptr, pos_ptr, NB, V, BB: tl.constexpr):
    """One program over the blocks' maxima: the greedy token (the first index of the maximum, as argmax) into
    tok_ptr, the next step's input, and the position + 1."""
    bs = tl.arange(0, BB)
    x = tl.load(part_v + bs, mask=bs < NB, other=-float("inf"))
    m = tl.max(x, axis=0)
    i = tl.load(part_i + bs, mask=bs < NB, other=V)
    tl.store(tok_ptr, tl.min(tl.where(x == m, i, V), axis=0))
    tl.store(pos_ptr, tl.load(pos_ptr) + 1)


@dataclass
class Q4Matrix:
    q: torch.Tensor  # uint8 [R, C/2]
    d: torch.Tensor  # fp16 [R, C/32]

    @property
    def rows(self) -> int:
        return self.q.shape[0]

    @property
    def cols(self) -> int:
        return self.q.shape[1] * 2

    def dequantize(self) -> torch.Tensor:
        b = self.q.view(self.rows, -1, 16).to(torch.int32)
        w = torch.cat([(b & 15) - 8, (b >> 4) - 8], dim=2).to(torch.float32)  # [R, blocks, 32]
        return (w * self.d.to(torch.float32)[:, :, None]).reshape(self.rows, self.cols)

    def nbytes(self) -> int:
        return self.q.numel() + self.d.numel() * 2


def random_q4(rows: int, cols: int, gen: torch.Generator, device: str) -> Q4Matrix:
    q = torch.randint(0, 256, (rows, cols // 2), generator=gen, dtype=torch.uint8)
    d = (torch.rand(rows, cols // QK, generator=gen) * 2 / (8 * math.sqrt(cols))).to(torch.float16)
    return Q4Matrix(q.to(device), d.to(device))


class Drafter:
    def __init__(self, shape: str, max_pos: int, device: str, seed: int = 0):
        self.H, self.L, self.NQ, self.NKV, self.D, self.F, self.V = SHAPES[shape]
        self.device, self.max_pos, self.eps = device, max_pos, 1e-6
        gen = torch.Generator().manual_seed(seed)
        H, D, NQ, NKV, F = self.H, self.D, self.NQ, self.NKV, self.F
        self.layers = []
        for _ in range(self.L):
            self.layers.append(
                {
                    "qkv": random_q4((NQ + 2 * NKV) * D, H, gen, device),
                    "o": random_q4(H, NQ * D, gen, device),
                    "gate_up": random_q4(2 * F, H, gen, device),
                    "down": random_q4(H, F, gen, device),
                    "attn_norm": (1 + 0.1 * torch.randn(H, generator=gen)).to(device),
                    "ffn_norm": (1 + 0.1 * torch.randn(H, generator=gen)).to(device),
                    "q_norm": (1 + 0.1 * torch.randn(D, generator=gen)).to(device),
                    "k_norm": (1 + 0.1 * torch.randn(D, generator=gen)).to(device),
                }
            )
        self.embedding = random_q4(self.V, H, gen, device)  # tied: the output head too
        self.final_norm = (1 + 0.1 * torch.randn(H, generator=gen)).to(device)
        theta = 1_000_000.0 ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)
        angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * theta[None, :]
        self.cos = torch.cat([angles.cos(), angles.cos()], dim=1).to(torch.float32).to(device)
        self.sin = torch.cat([angles.sin(), angles.sin()], dim=1).to(torch.float32).to(device)
        f32 = {"dtype": torch.float32, "device": device}
        # One KV cache that every layer writes and reads (an engine has one per layer): the same bytes a layer reads,
        # without 28 caches' memory in a timing experiment.
        self.k_cache = torch.zeros(NKV, max_pos, D, **f32)
        self.v_cache = torch.zeros(NKV, max_pos, D, **f32)
        self.h = torch.zeros(H, **f32)
        self.qkv = torch.zeros((NQ + 2 * NKV) * D, **f32)
        self.q = torch.zeros(NQ * D, **f32)
        self.attn = torch.zeros(NQ * D, **f32)
        self.act = torch.zeros(F, **f32)
        self.logits = torch.zeros(self.V, **f32)
        self.splits = 16  # attention splits a head (attend_split)
        self.attn_part = torch.zeros(NQ, self.splits, D + 2, **f32)
        self.argmax_block = 4096
        self.argmax_blocks = triton.cdiv(self.V, self.argmax_block)
        self.argmax_v = torch.zeros(self.argmax_blocks, **f32)
        self.argmax_i = torch.zeros(self.argmax_blocks, dtype=torch.int32, device=device)
        self.tok = torch.zeros(1, dtype=torch.int32, device=device)
        self.pos = torch.zeros(1, dtype=torch.int32, device=device)
        self.kernels_per_step = 1 + 7 * self.L + 3
        self.configs: dict[tuple[int, int, bool], tuple[int, int, int]] = {}

    def weight_bytes(self) -> int:
        per_layer = sum(m.nbytes() for name, m in self.layers[0].items() if isinstance(m, Q4Matrix))
        return self.L * per_layer + self.embedding.nbytes()

    def gemv(self, m: Q4Matrix, x, out, norm_w=None, resid=None, swiglu=False, config=None) -> None:
        """out ← W·x (options as gemv_q4_0's); ``config`` = (rows a program, columns an iteration, warps), else the
        one `tune` chose for this matrix's shape, else a guess."""
        n_out = m.rows // 2 if swiglu else m.rows
        key = (m.rows, m.cols, swiglu)
        br, bk, warps = config or self.configs.get(key) or ((16, 256, 4) if n_out >= 32_768 else (4, 256, 4))
        if m.cols % bk:
            bk = 32 * math.gcd(m.cols // 32, bk // 32)
        gemv_q4_0[(triton.cdiv(n_out, br),)](
            m.q, m.d, x, norm_w if norm_w is not None else x, resid if resid is not None else out, out,
            m.rows, m.cols, self.eps, NORM=norm_w is not None, RESID=resid is not None, SWIGLU=swiglu, BR=br, BK=bk,
            num_warps=warps,
        )  # fmt: skip

    def gemvs(self) -> dict[str, Callable[..., None]]:
        """Each matrix-vector product of a step (the first layer's; every layer's have the same shapes), by name."""
        layer = self.layers[0]
        return {
            "qkv (norm fused)": lambda **c: self.gemv(layer["qkv"], self.h, self.qkv, layer["attn_norm"], **c),
            "o (+ residual)": lambda **c: self.gemv(layer["o"], self.attn, self.h, resid=self.h, **c),
            "gate·up (norm, SiLU fused)": lambda **c: self.gemv(
                layer["gate_up"], self.h, self.act, layer["ffn_norm"], swiglu=True, **c
            ),
            "down (+ residual)": lambda **c: self.gemv(layer["down"], self.act, self.h, resid=self.h, **c),
            "output head (norm fused)": lambda **c: self.gemv(
                self.embedding, self.h, self.logits, self.final_norm, **c
            ),
        }

    def shape_key(self, name: str) -> tuple[int, int, bool]:
        layer = self.layers[0]
        m, swiglu = {
            "qkv (norm fused)": (layer["qkv"], False),
            "o (+ residual)": (layer["o"], False),
            "gate·up (norm, SiLU fused)": (layer["gate_up"], True),
            "down (+ residual)": (layer["down"], False),
            "output head (norm fused)": (self.embedding, False),
        }[name]
        return (m.rows, m.cols, swiglu)

    def tune(self) -> dict[str, dict[str, object]]:
        """For each matrix-vector product: the fastest of rows a program (1, 4, 16) × columns an iteration (256,
        1024) × warps (2, 4, 8), timed as 100 launches in a CUDA graph (about a minute of compiling in all); the step
        then uses it. Returns each product's choice and µs."""
        chosen = {}
        for name, launch in self.gemvs().items():
            best = None
            for br in (1, 4, 16):
                for bk in (256, 1024):
                    for warps in (2, 4, 8):
                        if self.shape_key(name)[1] % bk:
                            continue
                        us = time_launches(lambda launch=launch, c=(br, bk, warps): launch(config=c))
                        if best is None or us < best[0]:
                            best = (us, (br, bk, warps))
            assert best is not None
            self.configs[self.shape_key(name)] = best[1]
            chosen[name] = {
                "us": round(best[0], 2),
                "rows_per_program": best[1][0],
                "block_k": best[1][1],
                "warps": best[1][2],
            }
        return chosen

    def step(self) -> None:
        """One draft step: the token in self.tok at position self.pos → the next token in self.tok, pos + 1."""
        embed_q4_0[(1,)](self.embedding.q, self.embedding.d, self.tok, self.h, self.H, BK=min(256, self.H))
        for layer in self.layers:
            self.gemv(layer["qkv"], self.h, self.qkv, norm_w=layer["attn_norm"])
            qk_norm_rope_kv[(self.NQ + self.NKV,)](
                self.qkv, layer["q_norm"], layer["k_norm"], self.cos, self.sin, self.pos, self.q, self.k_cache,
                self.v_cache, self.max_pos, self.eps, NQ=self.NQ, NKV=self.NKV, D=self.D,
            )  # fmt: skip
            self.attention()
            self.gemv(layer["o"], self.attn, self.h, resid=self.h)
            self.gemv(layer["gate_up"], self.h, self.act, norm_w=layer["ffn_norm"], swiglu=True)
            self.gemv(layer["down"], self.act, self.h, resid=self.h)
        self.gemv(self.embedding, self.h, self.logits, norm_w=self.final_norm)
        self.greedy()

    def attention(self) -> None:
        """self.attn ← attention of self.q over the cache's positions 0 … pos (two kernels)."""
        attend_split[(self.NQ, self.splits)](
            self.q, self.k_cache, self.v_cache, self.pos, self.attn_part, self.max_pos, 1 / math.sqrt(self.D),
            NQ=self.NQ, NKV=self.NKV, D=self.D, BL=32, SPLITS=self.splits,
        )  # fmt: skip
        attend_reduce[(self.NQ,)](self.attn_part, self.attn, D=self.D, SPLITS=self.splits)

    def greedy(self) -> None:
        """self.tok ← argmax of self.logits, self.pos + 1 (two kernels)."""
        argmax_partial[(self.argmax_blocks,)](self.logits, self.argmax_v, self.argmax_i, self.V, BV=self.argmax_block)
        argmax_advance[(1,)](
            self.argmax_v, self.argmax_i, self.tok, self.pos, self.argmax_blocks, self.V,
            BB=triton.next_power_of_2(self.argmax_blocks),
        )  # fmt: skip


def reference_step(m: Drafter, tok: int, pos: int, k_ref: list[torch.Tensor], v_ref: list[torch.Tensor]):
    """The same step in PyTorch, fp32, from the dequantized weights; appends to k_ref/v_ref per layer. Returns logits.

    Every layer of the Triton step shares one KV cache (its bytes are what the timing needs); the reference does the
    same: layer i reads the cache the previous layers of this step and all layers of earlier steps wrote."""
    D, NQ, NKV = m.D, m.NQ, m.NKV

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + m.eps) * w

    def rope(x: torch.Tensor) -> torch.Tensor:  # [heads, D]
        rotated = torch.cat([-x[:, D // 2 :], x[:, : D // 2]], dim=1)
        return x * m.cos[pos].cpu() + rotated * m.sin[pos].cpu()

    h = m.embedding.dequantize()[tok].cpu()
    for layer in m.layers:
        qkv = layer["qkv"].dequantize().cpu() @ rms(h, layer["attn_norm"].cpu())
        q = rope(rms(qkv[: NQ * D].view(NQ, D), layer["q_norm"].cpu()))
        k = rope(rms(qkv[NQ * D : (NQ + NKV) * D].view(NKV, D), layer["k_norm"].cpu()))
        v = qkv[(NQ + NKV) * D :].view(NKV, D)
        k_ref[0][:, pos] = k
        v_ref[0][:, pos] = v
        keys, values = k_ref[0][:, : pos + 1], v_ref[0][:, : pos + 1]  # [NKV, n, D]
        group = NQ // NKV
        scores = torch.einsum("hd,hnd->hn", q, keys.repeat_interleave(group, 0)) / math.sqrt(D)
        attn = torch.einsum("hn,hnd->hd", scores.softmax(-1), values.repeat_interleave(group, 0)).reshape(-1)
        h = h + layer["o"].dequantize().cpu() @ attn
        gu = layer["gate_up"].dequantize().cpu() @ rms(h, layer["ffn_norm"].cpu())
        gate, up = gu[: m.F], gu[m.F :]
        h = h + layer["down"].dequantize().cpu() @ (torch.nn.functional.silu(gate) * up)
    return m.embedding.dequantize().cpu() @ rms(h, m.final_norm.cpu())


def check(shape: str, steps: int = 4, context: int = 5) -> dict[str, object]:
    device = "cuda" if torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET") else "cpu"
    m = Drafter(shape, context + steps + 1, device)
    gen = torch.Generator().manual_seed(1)
    # a context already in the cache: random keys and values at positions < context, on both sides
    m.k_cache[:, :context] = torch.randn(m.NKV, context, m.D, generator=gen).to(device)
    m.v_cache[:, :context] = torch.randn(m.NKV, context, m.D, generator=gen).to(device)
    k_ref, v_ref = [m.k_cache.detach().cpu().clone()], [m.v_cache.detach().cpu().clone()]
    m.tok.fill_(7)
    m.pos.fill_(context)
    worst, same = 0.0, 0
    tok = 7
    for s in range(steps):
        logits_ref = reference_step(m, tok, context + s, k_ref, v_ref)
        m.step()
        logits = m.logits.cpu()
        worst = max(worst, float((logits - logits_ref).abs().max() / logits_ref.abs().max()))
        same += int(int(m.tok.item()) == int(logits_ref.argmax()))
        tok = int(m.tok.item())
    return {"shape": shape, "device": device, "steps": steps, "max_rel_logit_error": worst, "same_greedy_token": same}


def time_launches(launch: Callable[[], None], n: int = 100) -> float:
    """µs per launch of ``n`` launches captured as one CUDA graph (compiled first, outside the capture)."""
    launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            launch()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / n


def bench(shape: str, context: int, steps: int, repeats: int, tune: bool = True) -> dict[str, object]:
    m = Drafter(shape, context + steps * (repeats + 4) + 1, "cuda")
    m.tok.fill_(7)
    m.pos.fill_(context)
    guessed = {name: round(time_launches(launch), 2) for name, launch in m.gemvs().items()}  # the default configs
    attention_us = round(time_launches(m.attention), 2)  # at the starting context (pos stays: no argmax between)
    greedy_start = int(m.pos.item())
    greedy_us = round(time_launches(m.greedy), 2)
    m.pos.fill_(greedy_start)
    tuned = m.tune() if tune else {}
    for _ in range(3):  # compile every kernel, outside the capture
        m.step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            m.step()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / steps)
    times.sort()
    per_step = times[len(times) // 2]
    gib = m.weight_bytes() / 2**30
    return {
        "shape": shape,
        "gpu": torch.cuda.get_device_name(),
        "context": context,
        "steps_per_graph": steps,
        "kernels_per_step": m.kernels_per_step,
        "ms_per_step": round(per_step, 4),
        "ms_per_step_all": [round(t, 4) for t in times],
        "weight_gib": round(gib, 3),
        "weight_tb_per_s": round(m.weight_bytes() / (per_step / 1000) / 1e12, 2),
        "gemv_us_default_config": guessed,
        "attention_us_per_layer_at_context": attention_us,
        "greedy_argmax_us": greedy_us,
        "gemv_tuned": tuned,
        "llama_cpp_ms_per_step_2026_12_01": 1.681,
    }


def main() -> int:
    args = ARGS
    assert args is not None
    if args.check or not torch.cuda.is_available():
        result = check(args.shape)
    else:
        result = {"check": check("tiny"), **bench(args.shape, args.context, args.steps, args.repeats, not args.no_tune)}
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    ok = (result.get("check") or result)["max_rel_logit_error"] < 1e-3  # type: ignore[index]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
