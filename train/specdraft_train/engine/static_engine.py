"""The static engine: batched greedy generation with the target's own modules, one preallocated KV cache, packed
prefill and a decode step captured as a CUDA graph — the `reference` stage's default (generation.py runs it, or HF
``generate``, its peer). Per prompt it returns the greedy continuation (up to and including the first stop token) and,
when asked, the target's top-k log-probabilities (fp32 log_softmax of the fp32 logits) at every continuation position:

    from specdraft_train.engine.static_engine import StaticGreedyEngine
    engine = StaticGreedyEngine(model, device)
    outputs = engine.generate([[1, 2, 3], [4, 5]], max_new_tokens=128, stop_ids=[0], top_k=20)
    outputs[0].tokens, outputs[0].topk_ids, outputs[0].topk_logprobs   # list[int], (L, K) int32, (L, K) float32
    engine.stats.prefill, engine.stats.decode_attention, engine.stats.batch_log   # what ran, per batch timings

How it works, and why (only the KV cache and the attention are its own; static_cache.py holds both):

- **Buckets.** Prompts are grouped by width: their length rounded up to 1/8 of its power of two, so a corpus's exact
  prompt lengths are their own buckets while chat prompts share a few widths; a bucket's leftover rows join the next
  bucket's batch (:func:`static_cache.plan_batches`: rows are the lever).
- **Batch size from a memory budget.** Rows per batch = what fits ``kv_cache_fraction`` of the free device memory (on
  the CPU: the host memory available, :func:`available_host_memory`) at
  (width + max_new_tokens) × KV bytes per token, capped by ``max_batch_size``. KV bytes per token = 2 × layers × KV
  heads × head_dim × 2 bytes: Qwen3-8B's 2 × 36 × 8 × 128 × 2 = 144 KiB, so a chat row of 436 prompt + 256 new
  tokens holds 102 MB, and 0.7 of the ~122 GB an H200 has beside the 16.4 GB of bf16 weights holds ~830 such rows.
- **One KV allocation** (:class:`static_cache.KVStore`) for the engine's life, sized to its largest batch and viewed
  by every batch shape; rows sit left-aligned to the batch's width (a row's prompt ends at slot ``width``) and decode
  step t writes slot ``width + t`` of every row. Under autocast the cache holds the autocast dtype, what attention
  reads. transformers' ``StaticCache`` was not taken: its write position is a counter that the CUDA-graph warm-up would
  advance, and it can be neither packed-written nor shared between shapes.
- **Prefill**, ``packed`` (where FlashAttention's varlen kernel runs, i.e. CUDA): each forward takes whole prompts
  concatenated up to ``prefill_tokens`` tokens, positions restarting at each, no padding and no mask; attention is
  causal within each prompt (the varlen kernel) and the logits are computed at each prompt's last token only.
  ``masked`` (elsewhere, and the engine's earlier form): rows left-padded to the width with HF's mask and position ids
  (``cumsum(mask) - 1``); a batch of one length runs unpadded and causal.
- **Decode attention**, ``split-kv`` (CUDA): the cache is token-major and a step reads exactly each row's keys —
  row b's start at its first prompt slot (``cu_k``) and ``used_k`` says how many it has — through the engine's Triton
  kernel (:mod:`decode_kernel`: the query heads sharing a KV head read it together, the keys split over thread
  blocks), checked against the reference before first use; ``flash``: the same ranges through FlashAttention-2's
  varlen kernel (``seqused_k``), which reaches about half the memory bandwidth that split-kv does. ``matmul``
  (elsewhere): the query heads sharing a KV head attend as that head's rows with two matmuls and an fp32 softmax
  over the whole static length, unwritten slots masked; ``sdpa``: the same rows through torch's SDPA.
- **A decode step stays on the device**: fp32 argmax (HF's greedy choice), fp32 log_softmax top-k, stop-token tracking,
  and the next step's inputs are written into static buffers; the host checks "all rows finished" once every
  ``finish_check_every`` steps and copies a batch's results once, after its last step.
- **CUDA graph**: the decode step is captured once per batch shape (:mod:`step_graph`; autocast's cast cache off as
  CUDA graphs require) and replayed; graphs stay for the engine's life (the ``graph_cache`` most recent shapes)
  in one shared memory pool, so a shape that recurs — the next shard's full batches — replays without another capture.
  A failed capture is retried once in a fresh pool; if that fails too the engine logs one line and decodes eagerly:
  same buffers, same results.
- **Compiled pointwise work** (``compile``, ``auto``: on a GPU): norms and MLPs through torch.compile, captured in
  the decode graph (:func:`models.compile_pointwise_modules`; 1.16× at the 8B shape).

Finished rows keep decoding (their tokens are dropped), as in HF's ``generate``: rows do not interact. ``auto`` (the
default of both modes) takes packed + split-kv where :func:`static_cache.flash_varlen_problem` and
:func:`static_cache.split_kv_problem` find the kernels working, packed + flash where only the first does, and masked
+ matmul otherwise (the reasons are in ``stats.flash_problem`` and ``stats.split_kv_problem``); ``MASKED_MATMUL`` is
the engine as it was before packed prefill and flash decode, the benchmark's peer.
"""

from __future__ import annotations

import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ..config import compile_on
from ..modeling.models import autocast_context, compile_pointwise_modules
from ..progress import progress_bar
from ..training.loop import synced_clock
from .static_cache import (
    ATTENTION_NAMES,
    Batch,
    KVStore,
    StaticKVCache,
    Varlen,
    check_supported,
    flash_varlen_problem,
    kv_bytes_per_token,
    kv_cache_dtype,
    kv_shape,
    packed_chunks,
    plan_batches,
    prefill_mask,
    split_kv_problem,
    static_attention,
)
from .step_graph import capture_step

PAD_TOKEN_ID = 0  # what left-padded slots hold: any valid id works, the mask hides them
CAPTURE_ATTEMPTS = 2  # capture tries before decoding eagerly (_capture_with_retry)
PREFILLS = ("auto", "packed", "masked")
DECODE_ATTENTIONS = ("auto", "flash", "split-kv", "matmul", "sdpa")
RANGED = ("flash", "split-kv")  # decode attentions reading a token-major cache through per-row key ranges (Varlen)


@dataclass(frozen=True)
class GreedyOutput:
    """One prompt's greedy continuation, ending with the first stop token when one was produced."""

    tokens: list[int]
    topk_ids: np.ndarray | None  # (L, K) int32
    topk_logprobs: np.ndarray | None  # (L, K) float32


@dataclass(frozen=True)
class StaticEngineConfig:
    kv_cache_fraction: float = 0.7  # of the free device memory, for the KV cache; the rest holds the prefill's
    # activations (an 8B target at 64k tokens: ~10 GB) and the graphs' pool ((B, 151,936) fp32 logits: ~1.2 MB a row)
    prefill_tokens: int = 65_536  # prompt tokens per prefill forward (whole prompts; rows split to fit): bounds
    # activations, e.g. an 8B target's MLP at 64k tokens × 12,288 × 2 bytes ≈ 1.6 GB per projection
    finish_check_every: int = 8  # decode steps between host checks of "all rows finished": each check is a sync,
    # and at most this many steps are wasted after the last row finishes
    cuda_graphs: bool = True  # capture the decode step on CUDA (ignored on CPU)
    prefill: str = "auto"  # packed | masked | auto (the module docstring says each)
    decode_attention: str = "auto"  # flash | split-kv | matmul | sdpa | auto
    min_pad_multiple: int = 8  # bucket widths are multiples of at least this (and of 1/8 of their power of two)
    graph_cache: int = 8  # batch shapes whose decode graph (and buffers) the engine keeps
    compile: str = "auto"  # torch.compile the model's norms and MLPs (models.compile_pointwise_modules), in place,
    # until close(): config.COMPILE's choices, "auto" on a GPU (the CPU tests trace it with another backend)


# The engine before packed prefill and flash decode (the 2026-12-01 rehearsal's): the benchmark's peer.
MASKED_MATMUL = StaticEngineConfig(kv_cache_fraction=0.5, prefill="masked", decode_attention="matmul")


@dataclass
class EngineStats:
    """What the engine did, for benchmarks and tests."""

    prefill: str = ""  # the modes it resolved to (packed | masked, flash | split-kv | matmul | sdpa)
    decode_attention: str = ""
    flash_problem: str | None = None  # why auto did not take the varlen kernel (None: it did, or it was not asked)
    split_kv_problem: str | None = None  # why split-kv decode fell back to flash (None: it did not, or not asked)
    batches: int = 0
    padded_batches: int = 0  # batches of mixed prompt lengths (masked prefill pads them)
    prompt_tokens: int = 0
    prefill_forwards: int = 0
    decode_steps: int = 0  # steps of all batches, eager or replayed
    graph_captures: int = 0
    graph_capture_seconds: float = 0.0  # warm-up steps included
    graph_replays: int = 0
    # wall time of the prefills and of the decode loops (CUDA: synchronized at the boundary, once a batch): what a
    # batch's tokens/s is made of, since long chat prompts make the prefill a large share (the 2026-12-01 rehearsal)
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    cuda_graph_failure: str | None = None  # why capture failed every attempt (the engine then decodes eagerly)
    capture_retries: list[str] = field(default_factory=list)  # why each attempt that was retried failed
    batch_shapes: list[tuple[int, int]] = field(default_factory=list)  # (rows, cache length) of each batch
    # per batch: rows, width, prompt_tokens, steps, prefill_s, decode_s (its graph capture included), capture_s
    batch_log: list[dict[str, Any]] = field(default_factory=list)
    # rows the KV budget allows at each bucket width planned, before the caller's cap (the largest batch that
    # fits by the engine's rule: kv_cache_fraction of the free memory)
    row_budgets: dict[int, int] = field(default_factory=dict)

    @property
    def used_cuda_graph(self) -> bool:
        return self.graph_replays > 0


class _BatchBuffers:
    """Every tensor a decode step reads or writes, for one batch shape; the CUDA graph is captured against these."""

    def __init__(
        self,
        cache: StaticKVCache,
        steps: int,
        top_k: int | None,
        stop_ids: torch.Tensor,
        decode_attention: str,
        device: torch.device,
    ):
        rows, length = cache.rows, cache.length
        self.rows, self.length, self.steps, self.cache = rows, length, steps, cache
        self.stop_ids = stop_ids  # (n,)
        self.input_ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.position_ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)  # the cache slot the next step writes
        self.step = torch.zeros(1, dtype=torch.long, device=device)  # the output column the next step writes
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)
        self.tokens = torch.zeros((rows, steps), dtype=torch.long, device=device)
        self.topk_ids = torch.zeros((rows, steps, top_k), dtype=torch.int32, device=device) if top_k else None
        self.topk_logprobs = torch.zeros((rows, steps, top_k), dtype=torch.float32, device=device) if top_k else None
        ranged = decode_attention in RANGED
        self.visible = None if ranged else torch.zeros((rows, length), dtype=torch.bool, device=device)  # readable
        self.varlen: Varlen | None = None
        if ranged:  # row b's keys: cu_k[b] (its first prompt slot, flat) and used_k[b] of them
            i32 = {"dtype": torch.int32, "device": device}
            cu_k = torch.full((rows + 1,), rows * length, **i32)
            used = torch.zeros(rows, **i32)
            cu_q = torch.arange(rows + 1, **i32)
            split_kv = decode_attention == "split-kv"
            self.varlen = Varlen(cu_q, cu_k, 1, length, causal=False, used_k=used, split_kv=split_kv)
        self.graph: torch.cuda.CUDAGraph | None = None

    def start_decode(self, width: int, lengths: torch.Tensor) -> None:
        """After the prefill: the first decode step writes slot ``width``, output column 1, at each row's next
        position; row b's prompt holds slots ``width - lengths[b]`` to ``width - 1``."""
        cache = self.cache
        cache.batch_rows, cache.write_positions, cache.read_length = slice(None), self.slot, self.length
        self.slot.fill_(width)
        self.step.fill_(1)
        self.position_ids.copy_(lengths[:, None])
        first = width - lengths  # (B,)
        if self.varlen is not None:
            self.varlen.used_k.copy_(lengths)
            self.varlen.cu_k[:-1].copy_(torch.arange(self.rows, device=lengths.device) * self.length + first)
        else:
            self.visible.zero_()
            self.visible[:, :width] = torch.arange(width, device=lengths.device)[None, :] >= first[:, None]

    def decode_state(self) -> list[torch.Tensor]:
        """The tensors a step changes besides its own output column and cache slot (both rewritten by the real step)."""
        state = [self.input_ids, self.position_ids, self.slot, self.step, self.finished]
        return state + ([self.varlen.used_k] if self.varlen is not None else [self.visible])


class StaticGreedyEngine:
    """Greedy decoding with a static KV cache and (on CUDA) a CUDA-graph decode step. See the module docstring."""

    def __init__(self, model: nn.Module, device: torch.device, config: StaticEngineConfig = StaticEngineConfig()):
        check_supported(model)
        if config.prefill not in PREFILLS:
            raise ValueError(f"prefill {config.prefill!r}: expected one of {', '.join(PREFILLS)}")
        if config.decode_attention not in DECODE_ATTENTIONS:
            raise ValueError(
                f"decode_attention {config.decode_attention!r}: expected one of {', '.join(DECODE_ATTENTIONS)}"
            )
        self.model, self.device, self.config = model, device, config
        self.stats = EngineStats()
        self._uncompile: Callable[[], None] | None = None
        self.compiled = compile_on(config.compile, device.type)
        if self.compiled:
            self._uncompile = compile_pointwise_modules(model)
        self._store: KVStore | None = None
        self._buffers: OrderedDict[tuple, _BatchBuffers] = OrderedDict()  # by shape, least recently used first
        self._graph_pool: Any = None
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
        with autocast_context(self.device):
            cache_dtype = kv_cache_dtype(self.model, self.device)
            self._resolve_modes(cache_dtype)
            batches = plan_batches(
                [len(p) for p in prompts],
                self._rows_for(max_new_tokens, cache_dtype, max_batch_size),
                self.config.min_pad_multiple,
            )
            if self._store is None or self._store.dtype != cache_dtype:
                self._release()
                self._store = KVStore(self.model, cache_dtype, self.device)
            needed = max((len(b.indices) * (b.width + max_new_tokens) for b in batches), default=0)
            if needed > self._store.capacity:
                self._buffers.clear()  # their cache views and graphs hold the old buffers: gone before the new exist
                self._store.reserve(needed)
            stop = torch.tensor(list(stop_ids), dtype=torch.long, device=self.device)
            bar = reference_bar(progress, len(prompts))
            with static_attention(self.model, ATTENTION_NAMES[self.stats.decode_attention]):
                for batch in batches:
                    outputs = self._run_batch([prompts[i] for i in batch.indices], batch, max_new_tokens, stop, top_k)
                    for index, output in zip(batch.indices, outputs):
                        results[index] = output
                    if bar is not None:
                        bar.update(len(outputs))
            if bar is not None:
                bar.close()
        return results  # type: ignore[return-value]

    def release(self) -> None:
        """Free the KV cache, the per-shape buffers and their graphs (a later generate allocates them again)."""
        self._release()

    def close(self) -> None:
        """Release, and give the model back as it came (its norms and MLPs no longer compiled)."""
        self._release()
        if self._uncompile is not None:
            self._uncompile()
            self._uncompile = None

    def _release(self) -> None:
        self._buffers.clear()
        self._store = None
        self._graph_pool = None

    # -- planning --------------------------------------------------------------------------------------------------

    def _resolve_modes(self, cache_dtype: torch.dtype) -> None:
        """``auto`` → packed + split-kv where the varlen and split-kv kernels work here (each checked once), packed +
        flash where only the varlen kernel does, masked + matmul elsewhere."""
        if self.stats.prefill:
            return
        prefill, decode = self.config.prefill, self.config.decode_attention
        problem = None
        if "auto" in (prefill, decode):
            _, kv_heads, head_dim = kv_shape(self.model)
            heads = self.model.config.num_attention_heads
            problem = flash_varlen_problem(self.device, cache_dtype, heads, kv_heads, head_dim)
            if problem is None and not self._logits_kwargs:
                problem = f"{type(self.model).__name__}.forward takes no logits_to_keep (packed prefill needs it)"
            if problem is not None and self.device.type == "cuda":
                print(f"generation: not the varlen kernel ({problem}); masked prefill, matmul decode", file=sys.stderr)
        varlen = problem is None
        self.stats.prefill = prefill if prefill != "auto" else ("packed" if varlen else "masked")
        self.stats.decode_attention = decode if decode != "auto" else ("split-kv" if varlen else "matmul")
        self.stats.flash_problem = problem if self.device.type == "cuda" else None
        if self.stats.decode_attention == "split-kv" and self.device.type == "cuda":
            _, kv_heads, head_dim = kv_shape(self.model)
            heads = self.model.config.num_attention_heads
            self.stats.split_kv_problem = split_kv_problem(self.device, cache_dtype, heads, kv_heads, head_dim)
            if self.stats.split_kv_problem is not None:
                reason = self.stats.split_kv_problem
                print(f"generation: not the split-kv kernel ({reason}); flash decode", file=sys.stderr)
                self.stats.decode_attention = "flash"

    def _rows_for(
        self, max_new_tokens: int, cache_dtype: torch.dtype, max_batch_size: int | None
    ) -> Callable[[int], int]:
        """Rows per batch at a prompt width: the caller's cap and what fits the KV budget (a preset's 2,048 rows of
        SmolLM2's chat answers would take ~90 GB of fp32 KV cache: a 24 GiB CPU machine killed the stage)."""
        cap = max_batch_size or 1 << 30
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        else:
            free = available_host_memory()
        free += self._store.nbytes if self._store is not None else 0  # this engine's cache: reused or replaced
        per_token = kv_bytes_per_token(self.model, cache_dtype)
        budget = self.config.kv_cache_fraction * free

        def rows_at(width: int) -> int:
            rows = int(budget // ((width + max_new_tokens) * per_token))
            self.stats.row_budgets[width] = rows
            return max(1, min(cap, rows))

        return rows_at

    # -- one batch -------------------------------------------------------------------------------------------------

    def _buffers_for(self, rows: int, length: int, steps: int, top_k: int | None, stop: torch.Tensor) -> _BatchBuffers:
        """The shape's buffers (and graph) if kept, else new ones; the least recently used shape goes past the cap."""
        key = (rows, length, steps, top_k, tuple(stop.tolist()))
        if key in self._buffers:
            self._buffers.move_to_end(key)
            return self._buffers[key]
        while len(self._buffers) >= max(1, self.config.graph_cache):
            self._buffers.popitem(last=False)
        decode = self.stats.decode_attention
        cache = StaticKVCache(self._store, rows, length, "tokens" if decode in RANGED else "heads")
        buffers = self._buffers[key] = _BatchBuffers(cache, steps, top_k, stop, decode, self.device)
        return buffers

    def _run_batch(
        self, prompts: list[Sequence[int]], batch: Batch, max_new_tokens: int, stop: torch.Tensor, top_k: int | None
    ) -> list[GreedyOutput]:
        rows, width = len(prompts), batch.width
        buffers = self._buffers_for(rows, width + max_new_tokens, max_new_tokens, top_k, stop)
        capture_seconds = self.stats.graph_capture_seconds
        lengths = [len(p) for p in prompts]
        self.stats.batches += 1
        self.stats.padded_batches += int(batch.padded)
        self.stats.prompt_tokens += sum(lengths)
        self.stats.batch_shapes.append((rows, buffers.length))

        started = synced_clock(self.device)
        buffers.finished.zero_()
        if self.stats.prefill == "packed":
            self._prefill_packed(buffers, prompts, width)
        else:
            self._prefill_masked(buffers, prompts, width, batch.padded)
        prefilled = synced_clock(self.device)
        buffers.start_decode(width, torch.tensor(lengths, device=self.device))
        steps = self._decode(buffers, max_new_tokens)
        decoded = synced_clock(self.device)
        self.stats.prefill_seconds += prefilled - started
        self.stats.decode_seconds += decoded - prefilled
        self.stats.batch_log.append(
            {
                "rows": rows,
                "width": width,
                "prompt_tokens": sum(lengths),
                "steps": steps,
                "prefill_s": prefilled - started,
                "decode_s": decoded - prefilled,
                "capture_s": self.stats.graph_capture_seconds - capture_seconds,
            }
        )
        return self._collect(buffers, steps)

    def _prefill_packed(self, buffers: _BatchBuffers, prompts: list[Sequence[int]], width: int) -> None:
        """Whole prompts concatenated per forward, positions restarting at each, causal within each (no padding, no
        mask); each token's keys go to its row's slot, and the logits come from each prompt's last token."""
        cache = buffers.cache
        for start, stop in packed_chunks([len(p) for p in prompts], self.config.prefill_tokens):
            lengths = np.array([len(p) for p in prompts[start:stop]])
            ends = np.cumsum(lengths)
            positions = np.arange(ends[-1]) - np.repeat(ends - lengths, lengths)  # (N,): 0.. in each prompt
            rows = np.repeat(np.arange(start, stop), lengths)  # (N,)
            slots = positions + np.repeat(width - lengths, lengths)  # (N,): left-aligned to the width
            tokens = np.concatenate([np.asarray(p, dtype=np.int64) for p in prompts[start:stop]])
            cu = torch.from_numpy(np.concatenate([[0], ends]).astype(np.int32)).to(self.device)  # (c + 1,)
            cache.scatter = (torch.from_numpy(rows).to(self.device), torch.from_numpy(slots).to(self.device))
            longest = int(lengths.max())
            logits = self.model(
                input_ids=torch.from_numpy(tokens).to(self.device)[None],
                position_ids=torch.from_numpy(positions).to(self.device)[None],
                attention_mask=None,
                past_key_values=cache,
                use_cache=True,
                specdraft_varlen=Varlen(cu, cu, longest, longest, causal=True),
                logits_to_keep=cu[1:].long() - 1,  # each prompt's last token
            ).logits  # (1, c, V)
            self._select(buffers, logits[0], slice(start, stop), self._zero)
            self.stats.prefill_forwards += 1
        cache.scatter = None

    def _prefill_masked(self, buffers: _BatchBuffers, prompts: list[Sequence[int]], width: int, padded: bool) -> None:
        """Rows left-padded to the width with HF's mask and position ids, in row chunks of ≤ prefill_tokens."""
        rows = len(prompts)
        input_ids = torch.full((rows, width), PAD_TOKEN_ID, dtype=torch.long)  # (B, T), left-padded
        attention_mask = torch.zeros((rows, width), dtype=torch.long)  # (B, T)
        for row, tokens in enumerate(prompts):
            input_ids[row, width - len(tokens) :] = torch.as_tensor(list(tokens), dtype=torch.long)
            attention_mask[row, width - len(tokens) :] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)  # (B, T), as HF generate
        input_ids, attention_mask, position_ids = (t.to(self.device) for t in (input_ids, attention_mask, position_ids))
        cache = buffers.cache
        cache.write_positions = torch.arange(width, device=self.device)  # (T,)
        cache.read_length = width
        chunk = max(1, self.config.prefill_tokens // width)
        for start in range(0, rows, chunk):
            part = slice(start, min(rows, start + chunk))
            cache.batch_rows = part
            mask = prefill_mask(attention_mask[part]) if padded else None  # None: causal, flash attention
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
        if buffers.varlen is not None:
            buffers.varlen.used_k.add_(1)  # the slot this step writes: the token sees itself
            mask = None
        else:
            buffers.visible.index_fill_(1, buffers.slot, True)
            mask = buffers.visible[:, None, None, :]  # (B, 1, 1, S)
        logits = self.model(
            input_ids=buffers.input_ids,
            position_ids=buffers.position_ids,
            attention_mask=mask,
            past_key_values=buffers.cache,
            use_cache=True,
            specdraft_varlen=buffers.varlen,
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
            buffers.graph = self._capture_with_retry(buffers)
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

    def _capture_with_retry(self, buffers: _BatchBuffers) -> torch.cuda.CUDAGraph | None:
        """The decode step as a CUDA graph (:func:`step_graph.capture_step`), retried in a fresh pool: a fresh engine's
        first capture with compiled modules fails an allocator assertion on an H200 (twice in one pool), and the
        retry in a fresh pool captures. After every attempt fails the engine decodes eagerly for good (logged once)."""

        def step() -> None:  # autocast's cast cache off, as CUDA graphs require
            with autocast_context(self.device, cache_enabled=False):
                self._decode_step(buffers)

        reasons = []
        for _ in range(CAPTURE_ATTEMPTS):
            if self._graph_pool is None:
                self._graph_pool = torch.cuda.graph_pool_handle()
            graph, reason = capture_step(step, buffers.decode_state(), self.device, self._graph_pool)
            if graph is not None:
                self.stats.graph_captures += 1
                self.stats.capture_retries.extend(reasons)
                return graph
            reasons.append(reason)
            self._graph_pool = None  # the failed capture's pool stays behind: the next attempt takes a fresh one
        self.stats.capture_retries.extend(reasons[:-1])
        self.stats.cuda_graph_failure = reasons[-1]
        print(f"generation: CUDA graph capture failed ({reasons[-1]}); decoding eagerly", file=sys.stderr)
        return None

    # -- results -----------------------------------------------------------------------------------------------------

    def _collect(self, buffers: _BatchBuffers, steps: int) -> list[GreedyOutput]:
        """One device-to-host copy per array for the batch, then each row cut after its first stop token."""
        tokens = buffers.tokens[:, :steps].cpu().numpy()  # (B, steps)
        topk_ids = buffers.topk_ids[:, :steps].cpu().numpy() if buffers.topk_ids is not None else None
        topk_logprobs = buffers.topk_logprobs[:, :steps].cpu().numpy() if buffers.topk_logprobs is not None else None
        lengths = lengths_to_stop(tokens, buffers.stop_ids.cpu().numpy())
        return [
            GreedyOutput(
                tokens[row, :n].tolist(),
                topk_ids[row, :n].copy() if topk_ids is not None else None,
                topk_logprobs[row, :n].copy() if topk_logprobs is not None else None,
            )
            for row, n in enumerate(lengths)
        ]


def available_host_memory() -> int:
    """Bytes of host memory available to a new allocation: Linux's MemAvailable (free memory and the page cache it
    can reclaim), else the free pages POSIX reports."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def lengths_to_stop(tokens: np.ndarray, stop_ids: np.ndarray) -> list[int]:
    """Per row of (B, steps) tokens: the index after the first stop token, else all steps."""
    stopped = np.isin(tokens, stop_ids)  # (B, steps)
    first = stopped.argmax(axis=1)
    return [int(f) + 1 if stopped[row, f] else tokens.shape[1] for row, f in enumerate(first)]


def _accepts(model: nn.Module, argument: str) -> bool:
    import inspect

    return argument in inspect.signature(model.forward).parameters


def reference_bar(enabled: bool, prompts: int) -> Any:
    """Continued prompts out of ``prompts`` (progress.py: a bar on a terminal, lines in a log), or None."""
    return progress_bar(prompts, "reference", "prompt") if enabled else None
