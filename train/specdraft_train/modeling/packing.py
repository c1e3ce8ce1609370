"""Packed batches: a batch's rows laid end to end in one sequence, positions restarting at every row and attention kept
inside each row (document-causal), so a step computes no padding whatever its rows' lengths — and the attention that
computes them, registered with transformers' attention interface.

A batch has one of two layouts, and the places a loss or τ reads are flat indices into its (B · T) positions either way:

- packed (``layout(sequences, packed=True)``): ``input_ids`` (1, ΣL), ``position_ids`` restarting at 0 for each
  sequence, ``cu_seq_lens_q``/``_k`` (n + 1,) and ``max_length_q``/``_k`` — transformers' own names for packed
  sequences (its FlashAttentionKwargs), which its decoders pass down to the attention function untouched;
- right-padded (``packed=False``): ``input_ids`` and ``attention_mask`` (n, max L): the reference the packed layout
  is tested against, and the form the GPU probe measures against.

The attention (``PACKED_ATTENTION``, set on a model by :func:`use_packed_attention`): on CUDA in bf16/fp16 (autocast
or bf16 weights), flash attention over the sequences' boundaries (``torch.nn.attention.varlen.varlen_attn``: no
mask, no kernel compilation); elsewhere — the CPU, fp32 on CUDA — the reference, causal SDPA on each sequence alone.
FlexAttention's document mask computes the same but pays minutes of kernel compilation per process, and SDPA with a
4-D block mask takes its slow path (both measured at the 1.7B shape on an H200: docs/training.md). Any
decoder that dispatches attention through ``ALL_ATTENTION_FUNCTIONS`` takes it (Qwen3ForCausalLM, LlamaForCausalLM):
nothing model-specific here. Without ``cu_seq_lens_q`` (one sequence per row, right-padded) it is plain causal SDPA,
exact for right padding, since no real position attends to a later one.

    inputs, starts = layout([[5, 6, 7], [8, 9]], packed=True, pad_id=0)   # starts: each sequence's flat offset
    hidden = final_hidden_states(use_packed_attention(model), to_device(inputs, device))   # (1, 5, H)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.varlen import varlen_attn
from transformers import AttentionInterface

PACKED_ATTENTION = "specdraft_packed"
HALF_DTYPES = (torch.bfloat16, torch.float16)  # what flash attention computes in
# The model inputs a batch dict may carry (losses and τ keep their own keys beside them).
MODEL_INPUT_KEYS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "cu_seq_lens_q",
    "cu_seq_lens_k",
    "max_length_q",
    "max_length_k",
)


def _compute_dtype(value: torch.Tensor) -> torch.dtype:
    """What attention computes in: autocast's dtype inside an autocast region of the tensor's device, else its own."""
    if torch.is_autocast_enabled(value.device.type):
        return torch.get_autocast_dtype(value.device.type)
    return value.dtype


def document_attention_reference(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seq_lens: torch.Tensor, scale: float | None
) -> torch.Tensor:
    """Causal SDPA on each sequence alone: query (1, H, T, D), key/value (1, H_kv, T, D) → (1, H, T, D)."""
    bounds = cu_seq_lens.tolist()
    pieces = [
        F.scaled_dot_product_attention(
            query[:, :, start:end],
            key[:, :, start:end],
            value[:, :, start:end],
            is_causal=True,
            scale=scale,
            enable_gqa=True,
        )
        for start, end in zip(bounds[:-1], bounds[1:])
    ]
    return torch.cat(pieces, dim=2)


def packed_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface: query (B, H, T, D), key/value (B, H_kv, T, D) → (B, T, H, D)."""
    if attention_mask is not None or dropout:
        raise ValueError(f"{PACKED_ATTENTION} attention takes no mask and no dropout: pack the rows instead")
    cu_seq_lens = kwargs.get("cu_seq_lens_q")
    if cu_seq_lens is None:  # one sequence per row, right-padded: causal is exact for every real position
        output = F.scaled_dot_product_attention(
            query, key, value, is_causal=query.shape[2] > 1, scale=scaling, enable_gqa=True
        )
        return output.transpose(1, 2).contiguous(), None
    if query.shape[0] != 1:
        raise ValueError(f"packed sequences come as one row, got {query.shape[0]}")
    dtype = _compute_dtype(value)
    if query.is_cuda and dtype in HALF_DTYPES:
        max_length = kwargs["max_length_q"]  # an int, symbolic under torch.compile: int() would specialize on it
        output = varlen_attn(
            query[0].transpose(0, 1).to(dtype),  # (T, H, D)
            key[0].transpose(0, 1).to(dtype),  # (T, H_kv, D): flash attention takes GQA as it is
            value[0].transpose(0, 1).to(dtype),
            cu_seq_lens,
            cu_seq_lens,
            max_length,
            max_length,
            scale=scaling,
            window_size=(-1, 0),  # causal
        )  # (T, H, D)
        return output.unsqueeze(0), None
    return document_attention_reference(query, key, value, cu_seq_lens, scaling).transpose(1, 2).contiguous(), None


AttentionInterface.register(PACKED_ATTENTION, packed_attention)


def use_packed_attention(model: nn.Module) -> nn.Module:
    """``model`` (an HF PreTrainedModel) with :data:`PACKED_ATTENTION` as its attention; returns it. Not saved with a
    checkpoint (config.json records no attention implementation)."""
    model.set_attn_implementation(PACKED_ATTENTION)
    return model


@contextlib.contextmanager
def packed_attention_within(model: nn.Module) -> Iterator[nn.Module]:
    """:func:`use_packed_attention` for the block; the model's own attention again after it."""
    before = model.config._attn_implementation
    use_packed_attention(model)
    try:
        yield model
    finally:
        model.set_attn_implementation(before)


def layout(sequences: Sequence[Sequence[int]], packed: bool, pad_id: int = 0) -> tuple[dict[str, Any], np.ndarray]:
    """The model inputs (CPU tensors) of ``sequences`` in one layout, and each sequence's first position among the
    batch's flat (B · T) positions: position c of sequence i is ``starts[i] + c`` in ``hidden.flatten(0, 1)``."""
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    if len(lengths) == 0 or lengths.min() < 1:
        raise ValueError("a batch needs sequences of at least one token")
    if packed:
        ends = np.cumsum(lengths)
        starts = ends - lengths
        flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences])  # (ΣL,)
        positions = np.arange(len(flat)) - np.repeat(starts, lengths)  # (ΣL,): restarting at each sequence
        cu_seq_lens = torch.from_numpy(np.concatenate([[0], ends]).astype(np.int32))  # (n + 1,)
        max_length = int(lengths.max())
        inputs = {
            "input_ids": torch.from_numpy(flat)[None],  # (1, ΣL)
            "position_ids": torch.from_numpy(positions)[None],  # (1, ΣL)
            "cu_seq_lens_q": cu_seq_lens,
            "cu_seq_lens_k": cu_seq_lens,
            "max_length_q": max_length,
            "max_length_k": max_length,
        }
        return inputs, starts
    width = int(lengths.max())
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # (n, T), right-padded
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        input_ids[row, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
        attention_mask[row, : len(sequence)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}, np.arange(len(sequences)) * width


def to_device(inputs: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Tensors onto ``device`` (non-blocking from the host), anything else as it is."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    """The model's inputs among a batch's entries."""
    return {k: batch[k] for k in MODEL_INPUT_KEYS if k in batch}


def batch_tokens(batch: dict[str, Any]) -> int:
    """Tokens the batch's forward computes, padding included (packed: its real tokens)."""
    return int(batch["input_ids"].numel())
