"""What the static engine (generation.py) allocates and runs its decode step on: the batch plan (prompts bucketed by
width, rows per batch from a memory budget), the preallocated KV cache of a batch shape, and the decode attention
over it, registered with transformers' ``AttentionInterface`` (generation.py's docstring says why each is so).

    batches = plan_batches(lengths, max_rows_at=lambda width: 256, min_multiple=8)   # [Batch(indices, width, padded)]
    cache = StaticKVCache(rows=256, length=width + max_new_tokens, dtype=cache_dtype(model, device))
    with static_attention(model, DECODE_ATTENTIONS["matmul"]): ...                  # the model reads this cache
"""

from __future__ import annotations

import contextlib
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

STATIC_ATTENTION = "specdraft_static_cache"  # the name the engine's attention is registered under


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


def kv_bytes_per_token(model: nn.Module, dtype: torch.dtype) -> int:
    """Keys + values of every layer for one token: 2 × layers × KV heads × head_dim × element size."""
    config = model.config
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * torch.empty(0, dtype=dtype).element_size()


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


# ---------------------------------------------------------------------------------------------------------------------
# KV cache and attention


class StaticKVCache:
    """Preallocated keys and values of every layer, ``(rows, KV heads, length, head_dim)``, written in place.

    The model's attention modules call :meth:`update` with each layer's new keys/values (the ``past_key_values``
    protocol of transformers' decoders). The engine sets, before each forward, which rows it covers (prefill runs in
    row chunks), which slots it writes (``write_positions``, a device tensor: in decode, the static slot counter the
    CUDA graph advances), and how many slots the attention reads (the prompt width in prefill, all in decode).
    Buffers are allocated on the first update, in the autocast dtype when autocast is on, else in the keys' dtype.
    """

    def __init__(self, rows: int, length: int, dtype: torch.dtype | None):
        self.rows, self.length, self.dtype = rows, length, dtype
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.batch_rows = slice(None)
        self.write_positions: torch.Tensor | None = None  # (Q,) slots the next forward writes
        self.read_length = length

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if layer_idx == len(self.keys):
            for store, states in ((self.keys, key_states), (self.values, value_states)):
                # zeros, not empty: unwritten slots are masked, and a masked NaN would still poison the softmax sum
                store.append(
                    torch.zeros(
                        (self.rows, states.shape[1], self.length, states.shape[3]),
                        dtype=self.dtype or states.dtype,
                        device=states.device,
                    )
                )
        elif layer_idx > len(self.keys):
            raise RuntimeError(f"layer {layer_idx} wrote before layer {len(self.keys)}: expected layers in order")
        keys = self.keys[layer_idx][self.batch_rows]  # (b, KVH, S, D), a view
        values = self.values[layer_idx][self.batch_rows]
        keys.index_copy_(2, self.write_positions, key_states.to(keys.dtype))
        values.index_copy_(2, self.write_positions, value_states.to(values.dtype))
        return keys[:, :, : self.read_length], values[:, :, : self.read_length]


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
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over :class:`StaticKVCache` keys: query (B, H, Q, D), key/value (B, KVH, S, D), mask (B, 1, Q, S).

    Returns (B, Q, H, D) like transformers' attention functions. The query is cast to the cache's dtype, as autocast
    would cast both for the matmuls.
    """
    query = query.to(key.dtype)
    batch, heads, q_length, head_dim = query.shape
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


# Two registrations: the engine's config picks one (see StaticEngineConfig.decode_attention).
DECODE_ATTENTIONS = {"matmul": STATIC_ATTENTION, "sdpa": STATIC_ATTENTION + "_sdpa"}
AttentionInterface.register(DECODE_ATTENTIONS["matmul"], functools.partial(_static_cache_attention, fused=False))
AttentionInterface.register(DECODE_ATTENTIONS["sdpa"], functools.partial(_static_cache_attention, fused=True))


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


def kv_cache_dtype(model: nn.Module, device: torch.device) -> torch.dtype | None:
    """The dtype the cache stores keys/values in: autocast's when autocast is on, else None (the keys' own)."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None  # the dtype the keys/values come in


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
