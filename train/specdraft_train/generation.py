"""Batched greedy generation for the `reference` stage: a static-cache engine (default) and HF ``generate`` (its peer),
and :func:`generate_continuations`, which runs the one a stage asks for.

Both return, per prompt, the greedy continuation (up to and including the first stop token) and, when asked, the
target's top-k log-probabilities (fp32 log_softmax of the fp32 logits) at every continuation position:

    from specdraft_train.generation import StaticGreedyEngine, generate_greedy_hf
    engine = StaticGreedyEngine(model, device)
    outputs = engine.generate([[1, 2, 3], [4, 5]], max_new_tokens=128, stop_ids=[0], top_k=20)
    outputs[0].tokens, outputs[0].topk_ids, outputs[0].topk_logprobs   # list[int], (L, K) int32, (L, K) float32
    engine.stats.used_cuda_graph                                        # True once a decode step ran as a CUDA graph
    peer = generate_greedy_hf(model, prompts, 128, stop_ids=[0], pad_token_id=0, top_k=20, batch_size=256,
                              device=device)

How the static engine works, and why (it runs the model's own modules; only the KV cache and the decode-step attention
kernel are its own):

- **Buckets.** Prompts are grouped by width: their length rounded up to 1/8 of its power of two (≤ 20 % padding),
  so a corpus's exact prompt lengths (64/96/128/192/512) are their own buckets and need neither padding nor a mask,
  while variable-length chat prompts share a few widths. A bucket's leftover rows join the next bucket's batch
  (:func:`plan_batches`: rows are the lever). A batch whose prompts all have one length runs at that exact length;
  otherwise rows are left-padded with an attention mask and position ids computed as HF ``generate`` computes them
  (``cumsum(mask) - 1``, pads at 0).
- **Batch size from a memory budget.** Rows per batch = what fits ``kv_cache_fraction`` of the free device memory at
  (width + max_new_tokens) × KV bytes per token, capped by ``max_batch_size`` (the stage's ``batch_size``).
- **Preallocated KV cache** (:class:`StaticKVCache`, one per batch shape, reused by every batch of that shape).
  transformers' ``StaticCache`` was not taken: its write position is a counter that the CUDA-graph warm-up would
  advance, it allocates keys and values in one dtype (under autocast with fp32 weights Qwen3's keys are fp32 and its
  values bf16), and it cannot be filled in row chunks. Under autocast the cache stores keys/values in the autocast
  dtype, which is what the attention reads them as anyway (HF's path casts them inside SDPA each step).
- **Decode attention** (registered with transformers' ``AttentionInterface`` while the engine runs): the query heads
  that share a KV head are laid out as that head's query rows, ``(B, KV heads, group, head_dim)``, and attend with
  two matmuls and an fp32 softmax, so each cached key/value is read once. HF's SDPA path with a mask first copies the
  whole cache ``group`` times (``repeat_kv``) per layer and step. SDPA on the grouped rows
  (``decode_attention="sdpa"``) leaves the kernel to torch; on the H200 it ran 5 % slower than the matmuls (91k vs
  95k tok/s, lab target). Decoding reads the whole static length (unwritten slots masked), ≈ 1.5× the keys an
  exact-length cache would read at 64 + 128 tokens: the price of fixed shapes for the CUDA graph. Prefill goes
  through transformers' own SDPA path (flash attention with ``is_causal`` when unpadded).
- **A decode step stays on the device**: fp32 argmax (HF's greedy choice), fp32 log_softmax top-k, stop-token
  tracking, and the next step's inputs are written into static buffers; the host checks "all rows finished" once
  every ``finish_check_every`` steps and copies a batch's results once, after its last step.
- **CUDA graph**: on CUDA the decode step is captured once per batch shape (warm-up on a side stream, autocast's cast
  cache off as CUDA graphs require) and replayed. If capture fails for any reason the engine logs one line and
  decodes eagerly from then on: same buffers, same results. No ``torch.compile`` (minutes of compile time on a
  15-minute GPU budget).

Finished rows keep decoding (their tokens are dropped), as in HF's ``generate``: rows do not interact.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, PreTrainedTokenizerBase

from .examples import Continuation
from .models import autocast_context
from .prompts import Prompt
from .static_cache import (
    DECODE_ATTENTIONS,
    Batch,
    StaticKVCache,
    check_supported,
    kv_bytes_per_token,
    kv_cache_dtype,
    plan_batches,
    static_attention,
)
from .training import synced_clock

PAD_TOKEN_ID = 0  # what left-padded slots hold: any valid id works, the mask hides them
CAPTURE_WARMUP_STEPS = 2  # eager steps on a side stream before capture: cuBLAS handles, workspaces, allocator state


@dataclass(frozen=True)
class GreedyOutput:
    """One prompt's greedy continuation, ending with the first stop token when one was produced."""

    tokens: list[int]
    topk_ids: np.ndarray | None  # (L, K) int32
    topk_logprobs: np.ndarray | None  # (L, K) float32


@dataclass(frozen=True)
class StaticEngineConfig:
    kv_cache_fraction: float = 0.5  # of the free device memory, for one batch's KV cache; the rest holds logits,
    # prefill activations and the graph's pool (an 8B target's (B, 151,936) fp32 logits are ~0.6 MB a row)
    prefill_tokens: int = 65_536  # prompt tokens per prefill forward (rows are split to fit): bounds activations,
    # e.g. an 8B target's MLP at 64k tokens × 12,288 × 2 bytes ≈ 1.6 GB per projection
    finish_check_every: int = 8  # decode steps between host checks of "all rows finished": each check is a sync,
    # and at most this many steps are wasted after the last row finishes
    cuda_graphs: bool = True  # capture the decode step on CUDA (ignored on CPU)
    decode_attention: str = "matmul"  # q·Kᵀ, fp32 softmax, ·V on the grouped query rows; "sdpa": the same through
    # F.scaled_dot_product_attention, torch's kernel choice (5 % slower on the H200; the bench times both)
    min_pad_multiple: int = 8  # bucket widths are multiples of at least this (and of 1/8 of their power of two)


@dataclass
class EngineStats:
    """What the engine did, for benchmarks and tests."""

    batches: int = 0
    padded_batches: int = 0  # batches that needed left padding and a mask (mixed prompt lengths)
    prefill_forwards: int = 0
    decode_steps: int = 0  # steps of all batches, eager or replayed
    graph_captures: int = 0
    graph_capture_seconds: float = 0.0  # warm-up steps included
    graph_replays: int = 0
    # wall time of the prefills and of the decode loops (CUDA: synchronized at the boundary, once a batch): what a
    # batch's tokens/s is made of, since long chat prompts make the prefill a large share (the 2026-12-01 rehearsal)
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    cuda_graph_failure: str | None = None  # why capture failed (the engine then decodes eagerly)
    batch_shapes: list[tuple[int, int]] = field(default_factory=list)  # (rows, cache length) of each batch
    # CUDA: rows the KV budget allows at each bucket width planned, before the caller's cap (the largest batch that
    # fits by the engine's rule: kv_cache_fraction of the free memory)
    row_budgets: dict[int, int] = field(default_factory=dict)

    @property
    def used_cuda_graph(self) -> bool:
        return self.graph_replays > 0


# ---------------------------------------------------------------------------------------------------------------------
# The engine


class _BatchBuffers:
    """Every tensor a decode step reads or writes, for one batch shape; the CUDA graph is captured against these."""

    def __init__(
        self,
        rows: int,
        length: int,
        steps: int,
        top_k: int | None,
        stop_ids: torch.Tensor,
        cache_dtype: torch.dtype | None,
        device: torch.device,
    ):
        self.key = (rows, length, steps, top_k)
        self.rows, self.length, self.steps = rows, length, steps
        self.cache = StaticKVCache(rows, length, cache_dtype)
        self.stop_ids = stop_ids  # (n,)
        self.input_ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.position_ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)  # the cache slot the next step writes
        self.step = torch.zeros(1, dtype=torch.long, device=device)  # the output column the next step writes
        self.visible = torch.zeros((rows, length), dtype=torch.bool, device=device)  # slots attention may read
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)
        self.tokens = torch.zeros((rows, steps), dtype=torch.long, device=device)
        self.topk_ids = torch.zeros((rows, steps, top_k), dtype=torch.int32, device=device) if top_k else None
        self.topk_logprobs = torch.zeros((rows, steps, top_k), dtype=torch.float32, device=device) if top_k else None
        self.graph: torch.cuda.CUDAGraph | None = None

    def decode_state(self) -> list[torch.Tensor]:
        """The tensors a step changes besides its own output column and cache slot (both rewritten by the real step)."""
        return [self.input_ids, self.position_ids, self.slot, self.step, self.visible, self.finished]


class StaticGreedyEngine:
    """Greedy decoding with a static KV cache and (on CUDA) a CUDA-graph decode step. See the module docstring."""

    def __init__(self, model: nn.Module, device: torch.device, config: StaticEngineConfig = StaticEngineConfig()):
        check_supported(model)
        self.model, self.device, self.config = model, device, config
        self.stats = EngineStats()
        self._buffers: _BatchBuffers | None = None
        self._zero = torch.zeros(1, dtype=torch.long, device=device)
        self._logits_kwargs = {"logits_to_keep": 1} if _accepts(model, "logits_to_keep") else {}

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        top_k: int | None,
        max_batch_size: int | None = None,
        progress: bool = False,
    ) -> list[GreedyOutput]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens {max_new_tokens}: expected at least 1")
        results: list[GreedyOutput | None] = [None] * len(prompts)
        if self.config.decode_attention not in DECODE_ATTENTIONS:
            raise ValueError(
                f"decode_attention {self.config.decode_attention!r}: expected one of {', '.join(DECODE_ATTENTIONS)}"
            )
        with (
            static_attention(self.model, DECODE_ATTENTIONS[self.config.decode_attention]),
            autocast_context(self.device),
        ):
            cache_dtype = kv_cache_dtype(self.model, self.device)
            batches = plan_batches(
                [len(p) for p in prompts],
                self._rows_for(max_new_tokens, cache_dtype, max_batch_size),
                self.config.min_pad_multiple,
            )
            stop = torch.tensor(list(stop_ids), dtype=torch.long, device=self.device)
            bar = _progress_bar(progress)
            for batch in batches:
                outputs = self._run_batch(
                    [prompts[i] for i in batch.indices], batch, max_new_tokens, stop, top_k, cache_dtype
                )
                for index, output in zip(batch.indices, outputs):
                    results[index] = output
                if bar is not None:
                    bar.update(sum(len(o.tokens) for o in outputs))
            if bar is not None:
                bar.close()
        self._buffers = None  # frees the cache and the graph's pool
        return results  # type: ignore[return-value]

    # -- planning --------------------------------------------------------------------------------------------------

    def _rows_for(
        self, max_new_tokens: int, cache_dtype: torch.dtype | None, max_batch_size: int | None
    ) -> Callable[[int], int]:
        """Rows per batch at a prompt width: the caller's cap, and on CUDA what fits the KV budget."""
        cap = max_batch_size or 1 << 30
        if self.device.type != "cuda":
            return lambda width: cap  # CPU: the caller's batch size is the only bound
        free, _ = torch.cuda.mem_get_info(self.device)
        free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        per_token = kv_bytes_per_token(self.model, cache_dtype or next(self.model.parameters()).dtype)
        budget = self.config.kv_cache_fraction * free

        def rows_at(width: int) -> int:
            rows = int(budget // ((width + max_new_tokens) * per_token))
            self.stats.row_budgets[width] = rows
            return max(1, min(cap, rows))

        return rows_at

    # -- one batch -------------------------------------------------------------------------------------------------

    def _run_batch(
        self,
        prompts: list[Sequence[int]],
        batch: Batch,
        max_new_tokens: int,
        stop: torch.Tensor,
        top_k: int | None,
        cache_dtype: torch.dtype | None,
    ) -> list[GreedyOutput]:
        rows, width = len(prompts), batch.width
        length = width + max_new_tokens
        buffers = self._buffers
        if (
            buffers is None
            or buffers.key != (rows, length, max_new_tokens, top_k)
            or not torch.equal(buffers.stop_ids, stop)
        ):
            self._buffers = buffers = None  # release the previous shape's cache and graph first
            buffers = self._buffers = _BatchBuffers(rows, length, max_new_tokens, top_k, stop, cache_dtype, self.device)
        self.stats.batches += 1
        self.stats.padded_batches += int(batch.padded)
        self.stats.batch_shapes.append((rows, length))

        input_ids = torch.full((rows, width), PAD_TOKEN_ID, dtype=torch.long)  # (B, T), left-padded
        attention_mask = torch.zeros((rows, width), dtype=torch.long)  # (B, T)
        for row, tokens in enumerate(prompts):
            input_ids[row, width - len(tokens) :] = torch.as_tensor(list(tokens), dtype=torch.long)
            attention_mask[row, width - len(tokens) :] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)  # (B, T), as HF generate
        input_ids, attention_mask, position_ids = (t.to(self.device) for t in (input_ids, attention_mask, position_ids))

        started = synced_clock(self.device)
        self._prefill(buffers, input_ids, attention_mask, position_ids, batch.padded)
        prefilled = synced_clock(self.device)
        self.stats.prefill_seconds += prefilled - started
        # Decode state: the first decode step writes slot `width`, output column 1, at each row's next position.
        cache = buffers.cache
        cache.batch_rows, cache.write_positions, cache.read_length = slice(None), buffers.slot, length
        buffers.slot.fill_(width)
        buffers.step.fill_(1)
        buffers.position_ids.copy_(attention_mask.sum(-1, keepdim=True))  # (B, 1): prompt lengths
        buffers.visible.zero_()
        buffers.visible[:, :width] = attention_mask.bool()
        steps = self._decode(buffers, max_new_tokens)
        self.stats.decode_seconds += synced_clock(self.device) - prefilled
        return self._collect(buffers, steps)

    def _prefill(
        self,
        buffers: _BatchBuffers,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        padded: bool,
    ) -> None:
        rows, width = input_ids.shape
        cache = buffers.cache
        cache.write_positions = torch.arange(width, device=self.device)  # (T,)
        cache.read_length = width
        buffers.finished.zero_()
        chunk = max(1, self.config.prefill_tokens // width)
        for start in range(0, rows, chunk):
            part = slice(start, min(rows, start + chunk))
            cache.batch_rows = part
            mask = _prefill_mask(attention_mask[part]) if padded else None  # None: causal, flash attention
            logits = self.model(
                input_ids=input_ids[part],
                position_ids=position_ids[part],
                attention_mask=mask,
                past_key_values=cache,
                use_cache=True,
                **self._logits_kwargs,
            ).logits
            self._select(buffers, logits[:, -1], part, self._zero)  # (b, V): the last prompt position
            self.stats.prefill_forwards += 1

    def _select(self, buffers: _BatchBuffers, logits: torch.Tensor, rows: slice, step: torch.Tensor) -> None:
        """Greedy token, top-k, stop tracking and the next input for ``rows``, all on the device (no host sync)."""
        logits = logits.float()  # (b, V): HF's greedy search also picks from fp32 logits
        next_tokens = logits.argmax(dim=-1)  # (b,)
        buffers.tokens[rows].index_copy_(1, step, next_tokens[:, None])
        if buffers.topk_ids is not None:
            values, ids = torch.log_softmax(logits, dim=-1).topk(buffers.topk_ids.shape[-1], dim=-1)  # (b, K) each
            buffers.topk_ids[rows].index_copy_(1, step, ids.to(torch.int32)[:, None])
            buffers.topk_logprobs[rows].index_copy_(1, step, values[:, None])
        stopped = (next_tokens[:, None] == buffers.stop_ids[None, :]).any(dim=-1)  # (b,)
        buffers.finished[rows] |= stopped
        buffers.input_ids[rows] = next_tokens[:, None]

    def _decode_step(self, buffers: _BatchBuffers) -> None:
        buffers.visible.index_fill_(1, buffers.slot, True)  # the slot this step writes: the token sees itself
        logits = self.model(
            input_ids=buffers.input_ids,
            position_ids=buffers.position_ids,
            attention_mask=buffers.visible[:, None, None, :],  # (B, 1, 1, S)
            past_key_values=buffers.cache,
            use_cache=True,
            **self._logits_kwargs,
        ).logits
        self._select(buffers, logits[:, -1], slice(None), buffers.step)  # (B, V)
        buffers.slot.add_(1)
        buffers.position_ids.add_(1)
        buffers.step.add_(1)

    def _decode(self, buffers: _BatchBuffers, max_new_tokens: int) -> int:
        """Runs decode steps until every row has stopped (checked every few steps) or the cap; returns the steps."""
        done = 1  # the prefill chose the first token
        if done < max_new_tokens and buffers.graph is None and self._graphs_allowed():
            start = time.perf_counter()
            buffers.graph = self._capture(buffers)
            self.stats.graph_capture_seconds += time.perf_counter() - start
        while done < max_new_tokens and not bool(buffers.finished.all()):  # one host sync per round
            for _ in range(min(self.config.finish_check_every, max_new_tokens - done)):
                if buffers.graph is not None:
                    buffers.graph.replay()
                    self.stats.graph_replays += 1
                else:
                    self._decode_step(buffers)
                done += 1
                self.stats.decode_steps += 1
        return done

    # -- CUDA graph --------------------------------------------------------------------------------------------------

    def _graphs_allowed(self) -> bool:
        return self.device.type == "cuda" and self.config.cuda_graphs and self.stats.cuda_graph_failure is None

    def _capture(self, buffers: _BatchBuffers) -> torch.cuda.CUDAGraph | None:
        """The decode step as a CUDA graph, or None (logged once) when capture fails.

        Warm-up steps run for real, so the step's state is saved first and restored before every run and at the end;
        their cache writes land in the slot the first real step rewrites with the same values.
        """
        state = buffers.decode_state()
        saved = [t.clone() for t in state]

        def restore() -> None:
            for tensor, copy in zip(state, saved):
                tensor.copy_(copy)

        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side), autocast_context(self.device, cache_enabled=False):
                for _ in range(CAPTURE_WARMUP_STEPS):
                    restore()
                    self._decode_step(buffers)
            torch.cuda.current_stream(self.device).wait_stream(side)
            restore()
            graph = torch.cuda.CUDAGraph()
            with autocast_context(self.device, cache_enabled=False), torch.cuda.graph(graph):
                self._decode_step(buffers)
            self.stats.graph_captures += 1
            return graph
        except Exception as error:  # noqa: BLE001 (any failure: decode eagerly instead)
            self.stats.cuda_graph_failure = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            print(
                f"generation: CUDA graph capture failed ({self.stats.cuda_graph_failure}); decoding eagerly",
                file=sys.stderr,
            )
            return None
        finally:
            torch.cuda.synchronize(self.device)
            restore()

    # -- results -----------------------------------------------------------------------------------------------------

    def _collect(self, buffers: _BatchBuffers, steps: int) -> list[GreedyOutput]:
        """One device-to-host copy per array for the batch, then each row cut after its first stop token."""
        tokens = buffers.tokens[:, :steps].cpu().numpy()  # (B, steps)
        topk_ids = buffers.topk_ids[:, :steps].cpu().numpy() if buffers.topk_ids is not None else None
        topk_logprobs = buffers.topk_logprobs[:, :steps].cpu().numpy() if buffers.topk_logprobs is not None else None
        lengths = _lengths_to_stop(tokens, buffers.stop_ids.cpu().numpy())
        return [
            GreedyOutput(
                tokens[row, :n].tolist(),
                topk_ids[row, :n].copy() if topk_ids is not None else None,
                topk_logprobs[row, :n].copy() if topk_logprobs is not None else None,
            )
            for row, n in enumerate(lengths)
        ]


def _prefill_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(b, 1, T, T) bool: causal and not padding, as HF builds it; a padding query also sees itself, so no row is
    empty (an all-masked row is NaN in some SDPA kernels, and its cached key/value would then poison later steps)."""
    width = attention_mask.shape[-1]
    causal = torch.ones((width, width), dtype=torch.bool, device=attention_mask.device).tril()  # (T, T)
    mask = causal[None] & attention_mask.bool()[:, None, :]  # (b, T, T)
    mask |= torch.eye(width, dtype=torch.bool, device=attention_mask.device)[None]
    return mask[:, None]  # (b, 1, T, T)


def _lengths_to_stop(tokens: np.ndarray, stop_ids: np.ndarray) -> list[int]:
    """Per row of (B, steps) tokens: the index after the first stop token, else all steps."""
    stopped = np.isin(tokens, stop_ids)  # (B, steps)
    first = stopped.argmax(axis=1)
    return [int(f) + 1 if stopped[row, f] else tokens.shape[1] for row, f in enumerate(first)]


def _accepts(model: nn.Module, argument: str) -> bool:
    import inspect

    return argument in inspect.signature(model.forward).parameters


def _progress_bar(enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(desc="reference", unit="tok", unit_scale=True, mininterval=2.0, file=sys.stderr)


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
    bar = _progress_bar(progress)
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
        for row, (index, length) in enumerate(zip(batch_index, _lengths_to_stop(generated, np.asarray(eos)))):
            results[index] = GreedyOutput(
                generated[row, :length].tolist(),
                topk_ids[row, :length].copy() if topk_ids is not None else None,
                topk_logprobs[row, :length].copy() if topk_logprobs is not None else None,
            )
            if bar is not None:
                bar.update(length)
    if bar is not None:
        bar.close()
    return results  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------------------------
# Either engine, as the reference stage calls it


ENGINES = ("static", "hf")  # ReferenceConfig.engine: this module's static engine, or the HF peer


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
    stats: list[EngineStats] | None = None,
) -> list[Continuation]:
    """Greedy continuations up to and including the first stop token, with the top-k log-probs when ``top_k``.

    ``engine="static"``: :class:`generation.StaticGreedyEngine` (static KV cache, CUDA-graph decode, batches of up to
    ``batch_size`` rows as the memory budget allows); ``"hf"``: HF ``generate`` in batches of ``batch_size``, the
    peer both are tested against. Either way, equal-length prompts share batches unpadded, others are left-padded.
    ``stats`` collects the static engine's EngineStats (batch shapes, graph captures, row budgets).
    """
    eos = stop_ids(model, tokenizer)
    tokens = [p.tokens for p in prompts]
    if engine == "static":
        static = StaticGreedyEngine(model, device)
        outputs = static.generate(tokens, max_new_tokens, eos, top_k, max_batch_size=batch_size, progress=progress)
        if stats is not None:
            stats.append(static.stats)
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
    """What the static engine did over a rank's training shards: batches and their rows, graph captures, and the rows
    its KV budget allowed (the largest batch that fits, by its rule) at the narrowest and widest bucket."""
    rows = [r for s in stats for r, _ in s.batch_shapes]
    budgets = {w: r for s in stats for w, r in s.row_budgets.items()}
    return {
        "batches": len(rows),
        "padded_batches": sum(s.padded_batches for s in stats),
        "rows_max": max(rows, default=0),
        "rows_mean": sum(rows) / len(rows) if rows else 0.0,
        "decode_steps": sum(s.decode_steps for s in stats),
        "graph_captures": sum(s.graph_captures for s in stats),
        "graph_capture_seconds": sum(s.graph_capture_seconds for s in stats),
        "prefill_seconds": sum(s.prefill_seconds for s in stats),
        "decode_seconds": sum(s.decode_seconds for s in stats),  # graph captures included
        "cuda_graph_failure": next((s.cuda_graph_failure for s in stats if s.cuda_graph_failure), None),
        "row_budget_by_width": {str(w): budgets[w] for w in sorted(budgets)[:1] + sorted(budgets)[-1:]},
    }
