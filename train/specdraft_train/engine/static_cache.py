"""What the static engine (static_engine.py) allocates and runs its forwards on: the batch plan (prompts bucketed by
width, rows per batch from a memory budget), the KV cache (one allocation an engine keeps, viewed per batch shape in
either layout) and the attention it registers with transformers' ``AttentionInterface``.

    batches = plan_batches(lengths, max_rows_at=lambda width: 256, min_multiple=8)   # [Batch(indices, width, padded)]
    store = KVStore(model, dtype, device); store.reserve(256 * (width + max_new_tokens))
    cache = StaticKVCache(store, rows=256, length=width + max_new_tokens, layout="tokens")
    with static_attention(model, ATTENTION_NAMES["flash"]):                         # the model reads this cache
        model(..., past_key_values=cache, specdraft_varlen=Varlen(...))

Packed rows (:class:`Varlen`, a model keyword the attention receives) go through :func:`varlen_attention`:
FlashAttention-2's variable-length kernel on CUDA — the one behind ``torch.nn.attention.varlen``, called through its
ATen op because only that takes ``seqused_k``, which lets a decode step read each row's keys up to the row's own
length inside a fixed-shape cache — and a per-row PyTorch loop with the kernel's semantics elsewhere (the CPU tests).
Without ``Varlen`` a prefill goes through transformers' SDPA path (with the mask it is given) and a decode step through
grouped-query matmuls over the whole static length (or SDPA on the same grouped rows).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from .decode_kernel import split_kv_decode

STATIC_ATTENTION = "specdraft_static_cache"  # the name the engine's attention is registered under
LAYOUTS = ("heads", "tokens")  # a cache's (rows, KV heads, slots, head_dim) or (rows, slots, KV heads, head_dim)


# ---------------------------------------------------------------------------------------------------------------------
# Planning: buckets and batch sizes


@dataclass(frozen=True)
class Batch:
    indices: list[int]  # into the prompt list, shortest first
    width: int  # prompt slots (left-padded when the prompts' lengths differ)
    padded: bool


def bucket_width(length: int, min_multiple: int) -> int:
    """``length`` rounded up to a multiple of 1/8 of the next power of two (and of ``min_multiple``): ≤ 20 % padding,
    8 widths per octave; 64, 96, 128, 192, 512 map to themselves."""
    if length < 1:
        raise ValueError(f"prompt of {length} tokens: expected at least 1")
    step = max(min_multiple, 2 ** max(0, math.ceil(math.log2(length)) - 3))
    return -(-length // step) * step


def kv_shape(model: nn.Module) -> tuple[int, int, int]:
    """(layers, KV heads, head_dim) of a decoder's cache."""
    config = model.config
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return config.num_hidden_layers, kv_heads, head_dim


def kv_bytes_per_token(model: nn.Module, dtype: torch.dtype) -> int:
    """Keys + values of every layer for one token: 2 × layers × KV heads × head_dim × element size."""
    return 2 * math.prod(kv_shape(model)) * torch.empty(0, dtype=dtype).element_size()


def plan_batches(lengths: Sequence[int], max_rows_at: Callable[[int], int], min_multiple: int) -> list[Batch]:
    """Bucket prompts by width, then cut each bucket (shortest first) into batches of ``max_rows_at(width)`` rows.

    What a bucket leaves over (fewer rows than a batch holds) joins the next bucket's prompts, at that bucket's width
    and row cap, rather than decoding alone: a batch costs ``max_new_tokens`` steps however few rows it has, and a
    step's floor (reading the weights once, its kernel launches) is the same for 50 rows and 500. Chat prompts spread
    over ~35 buckets, so a 4,096-prompt shard would otherwise decode ~35 batches of ~120 rows. Leftovers too many for
    the next bucket's cap go alone at their own width; a batch of one length stays exact (no padding, no mask).
    """
    buckets: dict[int, list[int]] = {}
    for index in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        buckets.setdefault(bucket_width(lengths[index], min_multiple), []).append(index)
    batches: list[Batch] = []

    def emit(indices: list[int], width: int) -> None:
        shortest, longest = lengths[indices[0]], lengths[indices[-1]]
        if shortest == longest:  # one length: exact width, no padding, no mask
            batches.append(Batch(indices, longest, padded=False))
        else:
            batches.append(Batch(indices, width, padded=True))

    carry: list[int] = []  # the last bucket's leftover rows, shortest first
    carry_width = 0
    for width in sorted(buckets):
        rows = max_rows_at(width)
        if carry and len(carry) >= rows:  # the wider bucket's cap cannot take them with anything else
            emit(carry, carry_width)
            carry = []
        members = carry + buckets[width]
        full = len(members) - len(members) % rows
        for start in range(0, full, rows):
            emit(members[start : start + rows], width)
        carry, carry_width = members[full:], width
    if carry:
        emit(carry, carry_width)
    return batches


def packed_chunks(lengths: Sequence[int], max_tokens: int) -> list[tuple[int, int]]:
    """Consecutive ranges of rows whose lengths sum to at most ``max_tokens`` (a longer row alone): one packed
    prefill forward each."""
    chunks, start, total = [], 0, 0
    for row, length in enumerate(lengths):
        if row > start and total + length > max_tokens:
            chunks.append((start, row))
            start, total = row, 0
        total += length
    chunks.append((start, len(lengths)))
    return chunks


# ---------------------------------------------------------------------------------------------------------------------
# KV cache


class KVStore:
    """One allocation of keys and values for every layer, which each batch shape views: no allocation per batch (an
    8B target's ~80 GB cache allocated per shape fragments the allocator) and no zeroing but once. Per layer a flat
    buffer of ``capacity`` token slots × KV heads × head_dim in ``dtype`` (autocast's when on: what attention reads)."""

    def __init__(self, model: nn.Module, dtype: torch.dtype, device: torch.device):
        self.layers, self.kv_heads, self.head_dim = kv_shape(model)
        self.dtype, self.device = dtype, device
        self.capacity = 0  # token slots
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    @property
    def nbytes(self) -> int:
        return 2 * self.layers * self.capacity * self.kv_heads * self.head_dim * self.dtype.itemsize

    def reserve(self, tokens: int) -> None:
        """Room for ``tokens`` slots: a larger request reallocates, and the caller drops its views of the old buffers
        first (else both live at once)."""
        if tokens <= self.capacity:
            return
        self.keys, self.values, self.capacity = [], [], 0
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        size = tokens * self.kv_heads * self.head_dim
        # zeros, not empty: the matmul decode multiplies unread slots' values by a zero weight, and 0 × NaN is NaN
        self.keys = [torch.zeros(size, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        self.values = [torch.zeros(size, dtype=self.dtype, device=self.device) for _ in range(self.layers)]
        self.capacity = tokens


class StaticKVCache:
    """A batch shape's keys and values, views of a :class:`KVStore`: ``(rows, KV heads, length, head_dim)`` per layer
    (layout ``heads``, what the matmul decode reads) or ``(rows, length, KV heads, head_dim)`` (``tokens``: the flat
    token-major layout FlashAttention's varlen kernel reads as packed sequences).

    The model's attention modules call :meth:`update` with each layer's new keys/values (the ``past_key_values``
    protocol of transformers' decoders). Before each forward the engine sets where they go: ``scatter`` (a packed
    forward: each token's row and slot; the attention then reads the forward's own keys), or ``batch_rows`` (prefill
    runs in row chunks) and ``write_positions`` (the same slots for every row, a device tensor: in decode, the slot
    counter the CUDA graph advances), and how many slots a dense read covers (``read_length``). Reads come back in
    transformers' ``(rows, KV heads, slots, head_dim)`` convention, views in either layout.
    """

    def __init__(self, store: KVStore, rows: int, length: int, layout: str):
        if layout not in LAYOUTS:
            raise ValueError(f"KV layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
        self.rows, self.length, self.layout = rows, length, layout
        kv, dim = store.kv_heads, store.head_dim
        shape = (rows, length, kv, dim) if layout == "tokens" else (rows, kv, length, dim)
        size = rows * length * kv * dim
        self.keys = [k[:size].view(shape) for k in store.keys]
        self.values = [v[:size].view(shape) for v in store.values]
        self.batch_rows = slice(None)
        self.write_positions: torch.Tensor | None = None  # (Q,) slots a dense forward writes
        self.scatter: tuple[torch.Tensor, torch.Tensor] | None = None  # (N,) rows and (N,) slots of a packed forward
        self.read_length = length

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        key_states, value_states = key_states.to(keys.dtype), value_states.to(values.dtype)  # (b, KVH, Q, D)
        if self.scatter is not None:  # packed: (1, KVH, N, D), each token to its row's slot
            rows, slots = self.scatter
            for store, states in ((keys, key_states), (values, value_states)):
                packed = states[0].transpose(0, 1)  # (N, KVH, D)
                if self.layout == "tokens":
                    store[rows, slots] = packed
                else:
                    store[rows, :, slots] = packed
            return key_states, value_states
        part_keys, part_values = keys[self.batch_rows], values[self.batch_rows]
        for store, states in ((part_keys, key_states), (part_values, value_states)):
            if self.layout == "tokens":
                store.index_copy_(1, self.write_positions, states.transpose(1, 2))
            else:
                store.index_copy_(2, self.write_positions, states)
        return self._read(part_keys), self._read(part_values)

    def _read(self, part: torch.Tensor) -> torch.Tensor:
        view = part.transpose(1, 2) if self.layout == "tokens" else part  # (b, KVH, S, D)
        return view[:, :, : self.read_length]


# ---------------------------------------------------------------------------------------------------------------------
# Attention


@dataclass
class Varlen:
    """Packed rows for one forward, FlashAttention's ``cu_seqlens`` convention: row b's queries are
    ``cu_q[b]:cu_q[b + 1]`` of the packed tokens and its keys start at ``cu_k[b]``, ``used_k[b]`` of them when given
    (else up to ``cu_k[b + 1]``). ``causal`` aligns a row's last query with its last key."""

    cu_q: torch.Tensor  # (B + 1,) int32
    cu_k: torch.Tensor  # (B + 1,) int32
    max_q: int
    max_k: int
    causal: bool
    used_k: torch.Tensor | None = None  # (B,) int32
    split_kv: bool = False  # one query a row on CUDA: decode_kernel.split_kv_decode instead of FlashAttention's kernel


def varlen_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, varlen: Varlen, scale: float | None
) -> torch.Tensor:
    """Attention of packed rows: query (Tq, H, D), key/value (Tk, KVH, D) → (Tq, H, D). FlashAttention-2's varlen
    kernel on CUDA (bf16/fp16; query heads sharing a KV head read it once), or with ``varlen.split_kv`` the engine's
    own decode kernel (:func:`decode_kernel.split_kv_decode`); :func:`varlen_attention_reference` elsewhere."""
    if query.is_cuda and varlen.split_kv:
        return split_kv_decode(query, key, value, varlen.cu_k, varlen.used_k, varlen.max_k, scale)
    if query.is_cuda:
        return torch.ops.aten._flash_attention_forward(
            query,
            key,
            value,
            varlen.cu_q,
            varlen.cu_k,
            varlen.max_q,
            varlen.max_k,
            0.0,  # dropout
            varlen.causal,
            False,  # return_debug_mask
            scale=scale,
            seqused_k=varlen.used_k,
        )[0]
    return varlen_attention_reference(query, key, value, varlen, scale)


def varlen_attention_reference(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, varlen: Varlen, scale: float | None
) -> torch.Tensor:
    """What :func:`varlen_attention` computes, one row at a time through PyTorch's SDPA (reads the row ranges on the
    host: not for a CUDA graph)."""
    cu_q, cu_k = varlen.cu_q.tolist(), varlen.cu_k.tolist()
    used = varlen.used_k.tolist() if varlen.used_k is not None else [e - s for s, e in zip(cu_k, cu_k[1:])]
    group = query.shape[1] // key.shape[1]
    output = torch.empty_like(query)
    for row in range(len(cu_q) - 1):
        q = query[cu_q[row] : cu_q[row + 1]].transpose(0, 1)  # (H, q, D)
        k, v = (t[cu_k[row] : cu_k[row] + used[row]].transpose(0, 1).repeat_interleave(group, 0) for t in (key, value))
        square = q.shape[1] == k.shape[1]
        mask = None
        if varlen.causal and not square:  # the last query sees every key: the causal diagonal ends bottom-right
            mask = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool, device=q.device).tril(k.shape[1] - q.shape[1])
        attended = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=varlen.causal and square and q.shape[1] > 1, scale=scale
        )
        output[cu_q[row] : cu_q[row + 1]] = attended.transpose(0, 1)
    return output


def flash_varlen_problem(
    device: torch.device,
    dtype: torch.dtype,
    heads: int,
    kv_heads: int,
    head_dim: int,
    kernel: Callable[..., torch.Tensor] | None = None,
) -> str | None:
    """Why the varlen kernel (``kernel``, default :func:`varlen_attention` on CUDA) cannot serve the engine here, or
    None: it runs, and a packed prefill and two decode steps with per-row key ranges (the engine's two uses) agree
    with the reference within bf16 rounding."""
    if kernel is None and device.type != "cuda":
        return f"no FlashAttention kernel on {device.type}"
    if dtype not in (torch.float16, torch.bfloat16) or head_dim % 8 or head_dim > 256:
        return f"FlashAttention takes fp16/bf16 and head_dim ≤ 256 in multiples of 8, not {dtype} × {head_dim}"
    return _kernel_problem(kernel or varlen_attention, _flash_cases(device), dtype, heads, kv_heads, head_dim)


def split_kv_problem(device: torch.device, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int) -> str | None:
    """Why the engine's split-kv decode kernel (decode_kernel.py) cannot serve here, or None: it runs, and decode
    steps with per-row key ranges — many rows in one split, and few long rows over several splits — agree with the
    reference within bf16 rounding."""
    if device.type != "cuda":
        return f"no Triton kernel on {device.type}"
    if dtype not in (torch.float16, torch.bfloat16) or head_dim & (head_dim - 1) or heads % kv_heads:
        return f"split-kv decode takes fp16/bf16 and a power-of-two head_dim, not {dtype} × {head_dim}"
    i32 = functools.partial(torch.tensor, dtype=torch.int32, device=device)
    long = Varlen(i32([0, 1, 2]), i32([5, 3000, 6000]), 1, 3000, causal=False, used_k=i32([2990, 700]))
    cases = [(dataclasses.replace(case[0], split_kv=True), *case[1:]) for case in _flash_cases(device)[1:]]
    cases.append((dataclasses.replace(long, split_kv=True), 2, 6000))
    return _kernel_problem(varlen_attention, cases, dtype, heads, kv_heads, head_dim)


def _kernel_problem(
    kernel: Callable[..., torch.Tensor],
    cases: list[tuple[Varlen, int, int]],
    dtype: torch.dtype,
    heads: int,
    kv_heads: int,
    head_dim: int,
) -> str | None:
    """The largest error of the kernel against the reference over the cases, as a reason when it is too large."""
    try:
        with torch.autocast(cases[0][0].cu_q.device.type, enabled=False):  # the reference in fp32, whatever the
            errors = [_flash_error(kernel, case, dtype, heads, kv_heads, head_dim) for case in cases]  # autocast
    except Exception as error:  # noqa: BLE001 (any failure: the engine takes the PyTorch path instead)
        return f"{type(error).__name__}: {error}".splitlines()[0][:300]
    return None if max(errors) < 0.05 else f"differs from the PyTorch reference by {max(errors):.3f}"


def _flash_error(
    kernel: Callable[..., torch.Tensor],
    case: tuple[Varlen, int, int],
    dtype: torch.dtype,
    heads: int,
    kv_heads: int,
    head_dim: int,
) -> float:
    """The largest difference between the kernel and the reference on random inputs of one case."""
    varlen, queries, keys = case
    device = varlen.cu_q.device
    generator = torch.Generator(device).manual_seed(0)
    q, k, v = (
        torch.randn((n, h, head_dim), generator=generator, device=device, dtype=dtype)
        for n, h in ((queries, heads), (keys, kv_heads), (keys, kv_heads))
    )
    got = kernel(q, k, v, varlen, head_dim**-0.5).float()
    want = varlen_attention_reference(q.float(), k.float(), v.float(), varlen, head_dim**-0.5)
    return float((got - want).abs().max())


def _flash_cases(device: torch.device) -> list[tuple[Varlen, int, int]]:
    """(varlen, query tokens, key tokens): three prompts packed causally; a decode step of 3 rows in a cache of 3 × 40
    slots whose keys start 7, 0 and 22 slots into their row and number 11, 40 and 5 (few rows: FlashAttention splits
    the keys); the same for 512 rows of 64 slots (the engine's batch sizes: one pass)."""
    i32 = functools.partial(torch.tensor, dtype=torch.int32, device=device)
    prefill = Varlen(i32([0, 5, 22, 62]), i32([0, 5, 22, 62]), 40, 40, causal=True)
    decode = Varlen(i32([0, 1, 2, 3]), i32([7, 40, 102, 120]), 1, 40, causal=False, used_k=i32([11, 40, 5]))
    rows = torch.arange(512, device=device)
    starts, used = rows * 7 % 16, 1 + rows * 13 % 48
    cu_k = torch.cat([rows * 64 + starts, rows[-1:] * 64 + 64]).to(torch.int32)
    wide = Varlen(torch.arange(513, device=device, dtype=torch.int32), cu_k, 1, 64, False, used.to(torch.int32))
    return [(prefill, 62, 62), (decode, 3, 120), (wide, 512, 512 * 64)]


def _tokens(states: torch.Tensor) -> torch.Tensor:
    """(b, heads, T, D) → (b·T, heads, D): packed tokens (a view for a token-major cache, a copy otherwise)."""
    return states.transpose(1, 2).reshape(-1, states.shape[1], states.shape[3])


def _static_cache_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    *,
    fused: bool,
    specdraft_varlen: Varlen | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over :class:`StaticKVCache` reads: query (B, H, Q, D), key/value (B, KVH, S, D), mask (B, 1, Q, S).

    Returns (B, Q, H, D) like transformers' attention functions. The query is cast to the cache's dtype, as autocast
    would cast both for the matmuls. ``specdraft_varlen`` (the engine's model keyword): packed rows, through
    :func:`varlen_attention`.
    """
    query = query.to(key.dtype)
    batch, heads, q_length, head_dim = query.shape
    if specdraft_varlen is not None:
        output = varlen_attention(_tokens(query), _tokens(key), _tokens(value), specdraft_varlen, scaling)
        return output.reshape(batch, q_length, heads, head_dim), None
    if q_length > 1:  # prefill: transformers' own SDPA path
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    kv_heads = key.shape[1]
    # Query head h reads KV head h // group (repeat_kv's layout), so a KV head's queries are its `group` query rows.
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, head_dim)  # (B, KVH, G, D)
    if fused:
        output = F.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask, scale=scaling)
    else:  # eager attention without repeat_kv: K and V are read once, the scores are G/D of K's size
        scores = torch.matmul(grouped, key.transpose(-1, -2)) * (scaling or head_dim**-0.5)  # (B, KVH, G, S)
        scores = scores.float()  # fp32 softmax, as eager attention
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask, float("-inf"))
        output = torch.matmul(torch.softmax(scores, dim=-1).to(value.dtype), value)  # (B, KVH, G, D)
    output = output.reshape(batch, heads, 1, head_dim).transpose(1, 2).contiguous()  # (B, 1, H, D)
    return output, None


# The decode kernels by name (StaticEngineConfig.decode_attention) and the registration each runs under: flash and
# split-kv decode through the varlen branch (the engine passes Varlen), so they share the matmul registration.
ATTENTION_NAMES = {
    "flash": STATIC_ATTENTION,
    "split-kv": STATIC_ATTENTION,
    "matmul": STATIC_ATTENTION,
    "sdpa": STATIC_ATTENTION + "_sdpa",
}
AttentionInterface.register(STATIC_ATTENTION, functools.partial(_static_cache_attention, fused=False))
AttentionInterface.register(ATTENTION_NAMES["sdpa"], functools.partial(_static_cache_attention, fused=True))


@contextlib.contextmanager
def static_attention(model: nn.Module, implementation: str) -> Iterator[None]:
    """The model's attention modules use the engine's attention inside this block (they read the implementation's
    name from the shared config at every call). A model whose modules ignore the switch still decodes correctly,
    through HF's SDPA with the same mask, only slower."""
    original = model.config._attn_implementation
    model.config._attn_implementation = implementation
    try:
        yield
    finally:
        model.config._attn_implementation = original


def prefill_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(b, 1, T, T) bool: causal and not padding, as HF builds it; a padding query also sees itself, so no row is
    empty (an all-masked row is NaN in some SDPA kernels, and its cached key/value would then poison later steps)."""
    width = attention_mask.shape[-1]
    causal = torch.ones((width, width), dtype=torch.bool, device=attention_mask.device).tril()  # (T, T)
    mask = causal[None] & attention_mask.bool()[:, None, :]  # (b, T, T)
    mask |= torch.eye(width, dtype=torch.bool, device=attention_mask.device)[None]
    return mask[:, None]  # (b, 1, T, T)


def kv_cache_dtype(model: nn.Module, device: torch.device) -> torch.dtype:
    """The dtype the cache stores keys/values in: autocast's when autocast is on, else the weights'."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return next(model.parameters()).dtype


def check_supported(model: nn.Module) -> None:
    """Refuse a model the static cache cannot hold: an encoder-decoder, or layers other than full attention."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{type(model).__name__}: the static engine runs decoder-only models; use --engine hf")
    other = sorted({t for t in getattr(config, "layer_types", None) or [] if t != "full_attention"})
    if other:
        raise ValueError(
            f"{type(model).__name__} has {', '.join(other)} layers: the static engine supports full "
            "attention only; use --engine hf"
        )
