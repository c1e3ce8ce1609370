"""Batched greedy generation for the `reference` stage: :func:`generate_continuations` runs the static engine
(static_engine.py, the default) or HF ``generate`` (its peer, :func:`generate_greedy_hf`), and :func:`engine_summary`
says what the static engine did over a stage's calls. Both engines return, per prompt, the greedy continuation (up to
and including the first stop token) and, when asked, the target's top-k log-probabilities (fp32 log_softmax of the
fp32 logits) at every continuation position:

    from specdraft_train.engine.generation import generate_continuations, generate_greedy_hf
    continuations = generate_continuations(model, tokenizer, prompts, 256, 512, device, top_k=20)   # static engine
    peer = generate_greedy_hf(model, token_lists, 128, stop_ids=[0], pad_token_id=0, top_k=20, batch_size=256,
                              device=device)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, PreTrainedTokenizerBase

from ..formats.prompts import Prompt
from ..modeling.models import autocast_context
from ..training.examples import Continuation
from .static_engine import EngineStats, GreedyOutput, StaticGreedyEngine, lengths_to_stop, reference_bar

# ---------------------------------------------------------------------------------------------------------------------
# The peer: HF generate


class TopKCapture(LogitsProcessor):
    """Records the top-k log-probabilities of every generation step; leaves the scores unchanged."""

    def __init__(self, k: int):
        self.k = k
        self.ids: list[torch.Tensor] = []
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        values, indices = torch.log_softmax(scores.float(), dim=-1).topk(self.k, dim=-1)  # (B, K) each
        self.ids.append(indices.to(torch.int32).cpu())
        self.logprobs.append(values.cpu())
        return scores


@torch.no_grad()
def generate_greedy_hf(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_token_id: int,
    top_k: int | None,
    batch_size: int,
    device: torch.device,
    progress: bool = False,
) -> list[GreedyOutput]:
    """HF ``generate``, batched: prompts sorted by length share batches (equal lengths need no padding), others are
    left-padded; a logits processor captures the top-k. The reference stage's original path, kept as the peer."""
    eos = [int(t) for t in stop_ids]
    config = GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=pad_token_id
    )
    results: list[GreedyOutput | None] = [None] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    bar = reference_bar(progress, len(prompts))
    for start in range(0, len(order), batch_size):
        batch_index = order[start : start + batch_size]
        batch = [list(prompts[i]) for i in batch_index]
        width = max(len(t) for t in batch)
        input_ids = torch.full((len(batch), width), pad_token_id, dtype=torch.long)  # (B, T), left-padded
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, tokens in enumerate(batch):
            input_ids[row, width - len(tokens) :] = torch.tensor(tokens)
            attention_mask[row, width - len(tokens) :] = 1
        capture = TopKCapture(top_k) if top_k else None
        with autocast_context(device):
            output = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                generation_config=config,
                logits_processor=LogitsProcessorList([capture] if capture else []),
            )
        generated = output[:, width:].cpu().numpy()  # (B, steps)
        topk_ids = torch.stack(capture.ids, dim=1).numpy() if capture else None  # (B, steps, K)
        topk_logprobs = torch.stack(capture.logprobs, dim=1).numpy() if capture else None  # (B, steps, K)
        for row, (index, length) in enumerate(zip(batch_index, lengths_to_stop(generated, np.asarray(eos)))):
            results[index] = GreedyOutput(
                generated[row, :length].tolist(),
                topk_ids[row, :length].copy() if topk_ids is not None else None,
                topk_logprobs[row, :length].copy() if topk_logprobs is not None else None,
            )
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return results  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------------------------
# Either engine, as the reference stage calls it


ENGINES = ("static", "hf")  # ReferenceConfig.engine: static_engine.py's engine, or the HF peer


def stop_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None) or tokenizer.eos_token_id
    return [int(t) for t in (eos if isinstance(eos, list) else [eos])]


@torch.no_grad()
def generate_continuations(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Prompt],
    max_new_tokens: int,
    batch_size: int,
    device: torch.device,
    top_k: int | None,
    engine: str = "static",
    progress: bool = False,
    static: StaticGreedyEngine | None = None,
) -> list[Continuation]:
    """Greedy continuations up to and including the first stop token, with the top-k log-probs when ``top_k``.

    ``engine="static"``: :class:`static_engine.StaticGreedyEngine` (static KV cache, packed prefill, CUDA-graph
    decode, batches of up to ``batch_size`` rows as the memory budget allows) — ``static`` when given (a stage's
    shards share one engine: its cache and graphs, and its stats), else a new one; ``"hf"``: HF ``generate`` in
    batches of ``batch_size``, the peer both are tested against.
    """
    eos = stop_ids(model, tokenizer)
    tokens = [p.tokens for p in prompts]
    if engine == "static":
        static = static or StaticGreedyEngine(model, device)
        outputs = static.generate(tokens, max_new_tokens, eos, top_k, max_batch_size=batch_size, progress=progress)
    elif engine == "hf":
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        outputs = generate_greedy_hf(
            model, tokens, max_new_tokens, eos, pad, top_k, batch_size, device, progress=progress
        )
    else:
        raise ValueError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    return [
        Continuation(o.tokens, o.topk_ids, o.topk_logprobs.astype(np.float16) if o.topk_logprobs is not None else None)
        for o in outputs
    ]


def engine_summary(stats: Sequence[EngineStats]) -> dict[str, Any]:
    """What the static engine did over a rank's training shards: its modes, batches and their rows, prefill and
    decode time, graph captures, the rows its KV budget allowed (the largest batch that fits, by its rule) at the
    narrowest and widest bucket, and each batch's timings."""
    rows = [r for s in stats for r, _ in s.batch_shapes]
    budgets = {w: r for s in stats for w, r in s.row_budgets.items()}
    return {
        "prefill": next((s.prefill for s in stats if s.prefill), None),
        "decode_attention": next((s.decode_attention for s in stats if s.decode_attention), None),
        "flash_problem": next((s.flash_problem for s in stats if s.flash_problem), None),
        "batches": len(rows),
        "padded_batches": sum(s.padded_batches for s in stats),
        "rows_max": max(rows, default=0),
        "rows_mean": sum(rows) / len(rows) if rows else 0.0,
        "prompt_tokens": sum(s.prompt_tokens for s in stats),
        "decode_steps": sum(s.decode_steps for s in stats),
        "graph_captures": sum(s.graph_captures for s in stats),
        "graph_capture_seconds": sum(s.graph_capture_seconds for s in stats),
        "prefill_seconds": sum(s.prefill_seconds for s in stats),
        "decode_seconds": sum(s.decode_seconds for s in stats),  # graph captures included
        "cuda_graph_failure": next((s.cuda_graph_failure for s in stats if s.cuda_graph_failure), None),
        "row_budget_by_width": {str(w): budgets[w] for w in sorted(budgets)[:1] + sorted(budgets)[-1:]},
        "batch_log": [entry for s in stats for entry in s.batch_log],
    }
