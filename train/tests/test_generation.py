"""generation: the static engine's greedy continuations and top-k log-probs equal HF generate's (CPU, fp32) in every
prefill and decode mode — mixed prompt lengths in one call, several buckets, batch and prefill splits, a row stopping
mid-way, every row stopping early, chat-style prompts of the real path, a kept engine's cache reused across calls of
other shapes — the varlen attention's reference has FlashAttention's semantics, and the benchmark runs at tiny scale.

    bash train/scripts/pytest.sh tests/test_generation.py
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from test_export import tiny_config
from transformers import Qwen3ForCausalLM

from specdraft_train.engine.decode_kernel import splits_for
from specdraft_train.engine.generation import generate_continuations, generate_greedy_hf, stop_ids
from specdraft_train.engine.static_cache import (
    Varlen,
    bucket_width,
    flash_varlen_problem,
    packed_chunks,
    plan_batches,
    split_kv_problem,
    varlen_attention_reference,
)
from specdraft_train.engine.static_engine import MASKED_MATMUL, GreedyOutput, StaticEngineConfig, StaticGreedyEngine
from specdraft_train.formats.prompts import Prompt, render_chat
from specdraft_train.modeling.models import load_causal_lm, load_tokenizer

CPU = torch.device("cpu")
TRAIN_DIR = Path(__file__).resolve().parents[1]
VOCAB = 256
TOP_K = 5
MAX_NEW = 20
# Lengths 3/5/8 share the width-8 bucket (padded batches and exact ones), 13/16 the width-16 one, 21 and 40 are alone.
LENGTHS = [5, 8, 8, 8, 13, 16, 16, 21, 40, 3]
LOGPROB_ATOL = 1e-5  # HF generate itself moves its log-probs by ~5e-6 between batch sizes 1 and 4 here


@pytest.fixture(scope="module")
def model() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    # A sharper init than HF's 0.02: greedy choices sit far from ties, so fp32 reordering cannot flip them.
    return Qwen3ForCausalLM(tiny_config(VOCAB, initializer_range=0.2)).eval()


def random_prompts(lengths: Sequence[int], seed: int = 1) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=generator).tolist() for n in lengths]


def assert_same(ours: Sequence[GreedyOutput], peer: Sequence[GreedyOutput]) -> None:
    assert len(ours) == len(peer)
    for row, (a, b) in enumerate(zip(ours, peer)):
        assert a.tokens == b.tokens, f"row {row}"
        assert a.topk_ids.dtype == np.int32 and a.topk_logprobs.dtype == np.float32
        np.testing.assert_array_equal(a.topk_ids, b.topk_ids, err_msg=f"row {row}")
        np.testing.assert_allclose(a.topk_logprobs, b.topk_logprobs, atol=LOGPROB_ATOL, rtol=0, err_msg=f"row {row}")


def test_bucket_widths_and_batches():
    assert [bucket_width(n, 8) for n in (1, 3, 8, 9, 13, 21, 40, 64, 65, 96, 128, 192, 500, 512)] == [
        8,
        8,
        8,
        16,
        16,
        24,
        40,
        64,
        80,
        96,
        128,
        192,
        512,
        512,
    ]
    # A bucket's rows left over join the next bucket's (rows are the lever: a batch costs max_new_tokens steps however
    # few rows it has), at that bucket's width and row cap; a batch of one length stays exact and unpadded.
    batches = plan_batches(LENGTHS, lambda width: 2, 8)
    assert [([LENGTHS[i] for i in b.indices], b.width, b.padded) for b in batches] == [
        ([3, 5], 8, True),
        ([8, 8], 8, False),
        ([8, 13], 16, True),
        ([16, 16], 16, False),
        ([21, 40], 40, True),
    ]
    # The row cap of the widest bucket a batch reaches holds for it (here 3 rows up to width 16, 1 above).
    batches = plan_batches(LENGTHS, lambda width: 3 if width <= 16 else 1, 8)
    assert [[LENGTHS[i] for i in b.indices] for b in batches] == [[3, 5, 8], [8, 8, 13], [16, 16], [21], [40]]


# (prefill, decode attention): the CPU default (masked + matmul, the engine before packing), the CUDA default
# (packed + split-kv: the engine's Triton kernel on CUDA, FlashAttention's varlen semantics through the PyTorch
# reference here, as for flash) and the other combinations
MODES = [
    ("masked", "matmul"),
    ("masked", "sdpa"),
    ("packed", "split-kv"),
    ("packed", "flash"),
    ("packed", "matmul"),
    ("masked", "flash"),
]


def engine_config(prefill: str, decode_attention: str, **fields: int | bool | str) -> StaticEngineConfig:
    return StaticEngineConfig(prefill=prefill, decode_attention=decode_attention, **fields)


@pytest.fixture(scope="module")
def mid_way_stop(model: Qwen3ForCausalLM) -> tuple[list[list[int]], int, int, list[GreedyOutput]]:
    """Prompts of every bucket, a stop token row 0 first produces mid-way, its position, HF generate's outputs."""
    prompts = random_prompts(LENGTHS)
    free = generate_greedy_hf(model, prompts, MAX_NEW, [0], 0, TOP_K, batch_size=4, device=CPU)
    position = next(p for p in range(4, MAX_NEW - 4) if free[0].tokens[p] not in free[0].tokens[:p])
    stop = free[0].tokens[position]
    return prompts, stop, position, generate_greedy_hf(model, prompts, MAX_NEW, [stop], 0, TOP_K, 4, device=CPU)


@pytest.mark.parametrize(("prefill", "decode_attention"), MODES)
def test_static_engine_equals_hf_generate_with_mixed_lengths_splits_and_a_mid_way_stop(
    model: Qwen3ForCausalLM, mid_way_stop: tuple, prefill: str, decode_attention: str
):
    prompts, stop, position, peer = mid_way_stop
    # Batches of ≤ 2 rows, prefill forwards of ≤ 16 tokens: every bucket splits, width-16 rows prefill one by one
    # (packed: whole prompts, so the 21- and 40-token ones alone).
    config = engine_config(prefill, decode_attention, prefill_tokens=16, finish_check_every=3)
    engine = StaticGreedyEngine(model, CPU, config)
    ours = engine.generate(prompts, MAX_NEW, [stop], TOP_K, max_batch_size=2)
    assert_same(ours, peer)
    assert len(ours[0].tokens) == position + 1 and ours[0].tokens[-1] == stop
    assert any(len(o.tokens) == MAX_NEW for o in ours)  # others ran to the cap
    assert (engine.stats.prefill, engine.stats.decode_attention) == (prefill, decode_attention)
    assert engine.stats.batches == 5 and engine.stats.padded_batches == 3
    assert engine.stats.prefill_forwards > engine.stats.batches  # row-chunked prefill
    assert engine.stats.prompt_tokens == sum(LENGTHS)
    assert not engine.stats.used_cuda_graph
    # the split of the wall time the rehearsal reports: both parts timed, every batch
    assert engine.stats.prefill_seconds > 0 and engine.stats.decode_seconds > 0
    log = engine.stats.batch_log
    assert [entry["rows"] for entry in log] == [2, 2, 2, 2, 2] and sum(e["prompt_tokens"] for e in log) == sum(LENGTHS)
    assert max(entry["steps"] for entry in log) == MAX_NEW  # a batch holding a row that ran to the cap


@pytest.mark.parametrize(("prefill", "decode_attention"), [("masked", "matmul"), ("packed", "flash")])
def test_compiled_norms_and_mlps_decode_what_the_eager_modules_do_and_close_undoes_them(
    model: Qwen3ForCausalLM, monkeypatch: pytest.MonkeyPatch, prefill: str, decode_attention: str
):
    """StaticEngineConfig.compile: every RMSNorm and MLP through torch.compile (the aot_eager backend here: dynamo
    traces them as on a GPU without building kernels), the same tokens and log-probs; the modules of a class share
    their graphs; close() gives the model back uncompiled."""
    from torch._dynamo.utils import counters

    import specdraft_train.engine.static_engine as static_engine
    from specdraft_train.modeling.models import compile_pointwise_modules

    prompts = random_prompts(LENGTHS)
    plain = StaticGreedyEngine(model, CPU, engine_config(prefill, decode_attention))
    assert not plain.compiled  # "auto" compiles on a GPU only
    expected = plain.generate(prompts, MAX_NEW, [0], TOP_K, max_batch_size=4)
    aot_eager = functools.partial(compile_pointwise_modules, backend="aot_eager")
    monkeypatch.setattr(static_engine, "compile_pointwise_modules", aot_eager)
    torch._dynamo.reset()
    counters.clear()
    engine = StaticGreedyEngine(model, CPU, engine_config(prefill, decode_attention, compile="on"))
    compiled = [m for m in model.modules() if "forward" in vars(m)]
    # per layer its two norms, q_norm, k_norm and the MLP; and the final norm
    assert len(compiled) == 5 * model.config.num_hidden_layers + 1
    assert_same(engine.generate(prompts, MAX_NEW, [0], TOP_K, max_batch_size=4), expected)
    assert 0 < counters["stats"]["unique_graphs"] < len(compiled)  # shared, not one per module
    engine.close()
    assert not any("forward" in vars(m) for m in model.modules())


@pytest.mark.parametrize(("prefill", "decode_attention"), [("masked", "matmul"), ("packed", "flash")])
def test_decoding_stops_once_every_row_has_stopped(model: Qwen3ForCausalLM, prefill: str, decode_attention: str):
    prompts = random_prompts([12] * 6, seed=2)
    free = generate_greedy_hf(model, prompts, MAX_NEW, [0], 0, TOP_K, batch_size=6, device=CPU)
    stops = sorted({o.tokens[2] for o in free})  # every row stops by its third token
    engine = StaticGreedyEngine(model, CPU, engine_config(prefill, decode_attention, finish_check_every=4))
    ours = engine.generate(prompts, MAX_NEW, stops, TOP_K)
    assert_same(ours, generate_greedy_hf(model, prompts, MAX_NEW, stops, 0, TOP_K, batch_size=6, device=CPU))
    assert all(len(o.tokens) <= 3 for o in ours)
    assert engine.stats.decode_steps == 4  # one round of steps, then the check saw every row stopped
    # Without top-k (held-out/dev splits) the tokens are the same.
    plain = StaticGreedyEngine(model, CPU, engine_config(prefill, decode_attention))
    plain = plain.generate(prompts, MAX_NEW, stops, None)
    assert [o.tokens for o in plain] == [o.tokens for o in ours] and plain[0].topk_ids is None


@pytest.mark.parametrize(("prefill", "decode_attention"), [("masked", "matmul"), ("packed", "flash")])
def test_a_kept_engine_reuses_its_cache_across_calls_of_other_shapes(
    model: Qwen3ForCausalLM, mid_way_stop: tuple, prefill: str, decode_attention: str
):
    """One engine serves a stage's shards: its KV store and per-shape buffers are reused, and what an earlier batch
    left in them (slots outside a row's range, another shape's rows) never reaches a later one."""
    prompts, stop, _, peer = mid_way_stop
    engine = StaticGreedyEngine(model, CPU, engine_config(prefill, decode_attention, prefill_tokens=16))
    first = engine.generate(prompts, MAX_NEW, [stop], TOP_K, max_batch_size=2)
    other = random_prompts([30, 7, 7, 19, 2], seed=3)  # other widths and row counts, in the same store
    assert_same(
        engine.generate(other, MAX_NEW, [stop], TOP_K, max_batch_size=3),
        generate_greedy_hf(model, other, MAX_NEW, [stop], 0, TOP_K, batch_size=3, device=CPU),
    )
    again = engine.generate(prompts, MAX_NEW, [stop], TOP_K, max_batch_size=2)
    assert_same(first, peer)
    assert_same(again, peer)
    engine.release()  # and after a release it allocates again
    assert_same(engine.generate(prompts, MAX_NEW, [stop], TOP_K, max_batch_size=2), peer)


@pytest.mark.parametrize("failures", [1, 2])
def test_a_failed_capture_is_retried_in_a_fresh_pool_and_then_decodes_eagerly(
    model: Qwen3ForCausalLM, monkeypatch: pytest.MonkeyPatch, failures: int
):
    """The capture path on the CPU, with capture_step standing in: a first failure is retried in a fresh memory pool
    and the retry's graph replays (the reason kept in capture_retries); two failures make the engine decode eagerly
    for good. The tokens are the same either way."""
    import specdraft_train.engine.static_engine as static_engine

    prompts = random_prompts(LENGTHS)
    expected = StaticGreedyEngine(model, CPU).generate(prompts, MAX_NEW, [0], TOP_K, max_batch_size=4)
    handles = iter(range(100))
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: next(handles))
    monkeypatch.setattr(StaticGreedyEngine, "_graphs_allowed", lambda self: self.stats.cuda_graph_failure is None)
    pools: list[int] = []

    class Replayed:  # a "graph" whose replay is the step itself
        def __init__(self, step):
            self.replay = step

    def capture(step, state, device, pool):
        pools.append(pool)
        if len(pools) <= failures:
            return None, "RuntimeError: it->second->use_count > 0"
        return Replayed(step), ""

    monkeypatch.setattr(static_engine, "capture_step", capture)
    engine = StaticGreedyEngine(model, CPU)
    assert_same(engine.generate(prompts, MAX_NEW, [0], TOP_K, max_batch_size=4), expected)
    stats = engine.stats
    assert stats.capture_retries == ["RuntimeError: it->second->use_count > 0"]
    assert pools[:2] == [0, 1]  # the retry took a fresh pool
    if failures == 1:  # every later shape captured at once, in the retry's pool
        assert stats.cuda_graph_failure is None and stats.graph_captures == len(pools) - 1 > 1
        assert set(pools[1:]) == {1} and stats.graph_replays > 0
    else:  # no capture tried again: every batch decoded eagerly
        assert stats.cuda_graph_failure == "RuntimeError: it->second->use_count > 0" and len(pools) == 2
        assert stats.graph_captures == stats.graph_replays == 0


def test_auto_takes_the_varlen_kernel_only_where_it_runs(model: Qwen3ForCausalLM):
    """On the CPU the engine keeps the masked prefill and matmul decode (its outputs as before packing); the varlen
    kernel's check names why it cannot serve, and an unknown mode is refused."""
    assert flash_varlen_problem(CPU, torch.bfloat16, 4, 2, 16) == "no FlashAttention kernel on cpu"
    assert split_kv_problem(CPU, torch.bfloat16, 4, 2, 16) == "no Triton kernel on cpu"
    engine = StaticGreedyEngine(model, CPU)
    engine.generate(random_prompts([5, 9]), 4, [0], None)
    stats = engine.stats
    assert (stats.prefill, stats.decode_attention, stats.flash_problem) == ("masked", "matmul", None)
    assert (MASKED_MATMUL.prefill, MASKED_MATMUL.decode_attention) == ("masked", "matmul")
    with pytest.raises(ValueError, match="prefill 'padded': expected one of auto, packed, masked"):
        StaticGreedyEngine(model, CPU, StaticEngineConfig(prefill="padded"))
    with pytest.raises(ValueError, match="compile True: expected one of auto, on, off"):
        StaticGreedyEngine(model, CPU, StaticEngineConfig(compile=True))  # type: ignore[arg-type]


def test_the_varlen_kernel_check_catches_a_kernel_that_reads_the_wrong_keys_or_fails():
    """What the engine runs before trusting the CUDA kernel, here with stand-in kernels on the CPU."""

    def shifted(query, key, value, varlen, scale):  # a kernel off by one key
        return varlen_attention_reference(query, key.roll(1, 0), value, varlen, scale)

    def broken(*args):
        raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.")

    check = functools.partial(flash_varlen_problem, CPU, torch.bfloat16, 8, 2, 64)
    assert check(kernel=varlen_attention_reference) is None  # bf16 inputs against the fp32 reference: within rounding
    assert check(kernel=shifted).startswith("differs from the PyTorch reference by ")
    assert check(kernel=broken) == "RuntimeError: FlashAttention only supports Ampere GPUs or newer."
    assert flash_varlen_problem(CPU, torch.float32, 8, 2, 64, kernel=varlen_attention_reference).startswith(
        "FlashAttention takes fp16/bf16"
    )


def test_split_kv_decode_splits_keys_only_when_rows_leave_the_gpu_idle():
    """Programs are (row, KV head, split): a full batch (895 rows × 8 KV heads on 132 multiprocessors) takes one split;
    a few long rows split their keys, never into pieces under four 64-key blocks; always a power of two."""
    assert splits_for(895, 8, 704, CPU, units=132) == 1
    assert splits_for(16, 8, 4352, CPU, units=132) == 8  # 528 programs wanted: 5 splits, rounded up
    assert splits_for(2, 8, 3000, CPU, units=132) == 16  # 11 blocks' worth allowed, rounded up
    assert splits_for(2, 8, 200, CPU, units=132) == 1  # too short to split


def test_packed_chunks_hold_whole_prompts_up_to_the_token_budget():
    assert packed_chunks([5, 8, 8, 13, 40, 3], 16) == [(0, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    assert packed_chunks([5, 8, 3], 16) == [(0, 3)]
    assert packed_chunks([40], 16) == [(0, 1)]  # a longer prompt alone


def _naive_attention(query, key, value, rows, causal):
    """Per row, per query head: softmax(q·kᵀ / √D) v over the row's key range [start, start + used), the query head's
    KV head h // group, and (causal) the i-th of q queries seeing keys up to used − q + i."""
    output = torch.zeros_like(query)
    group = query.shape[1] // key.shape[1]
    for (q0, q1), (start, used) in rows:
        for head in range(query.shape[1]):
            q = query[q0:q1, head]
            k, v = key[start : start + used, head // group], value[start : start + used, head // group]
            scores = q @ k.T / query.shape[-1] ** 0.5  # (q, used)
            if causal:
                visible = torch.arange(used)[None, :] <= torch.arange(q1 - q0)[:, None] + used - (q1 - q0)
                scores = scores.masked_fill(~visible, float("-inf"))
            output[q0:q1, head] = torch.softmax(scores, dim=-1) @ v
    return output


def test_the_varlen_reference_has_flash_attentions_semantics():
    """Packed causal rows (prefill), and rows of one query reading a key range that starts inside a flat cache and
    covers ``used_k`` slots (decode): what the engine asks of FlashAttention's varlen kernel on CUDA."""
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(n, h, 16, generator=generator) for n, h in ((62, 4), (62, 2), (62, 2)))
    i32 = lambda values: torch.tensor(values, dtype=torch.int32)  # noqa: E731
    prefill = Varlen(i32([0, 5, 22, 62]), i32([0, 5, 22, 62]), 40, 40, causal=True)
    want = _naive_attention(query, key, value, [((0, 5), (0, 5)), ((5, 22), (5, 17)), ((22, 62), (22, 40))], True)
    torch.testing.assert_close(varlen_attention_reference(query, key, value, prefill, 16**-0.5), want)
    decode = Varlen(i32([0, 1, 2, 3]), i32([7, 20, 41, 62]), 1, 21, causal=False, used_k=i32([11, 21, 5]))
    want = _naive_attention(query[:3], key, value, [((0, 1), (7, 11)), ((1, 2), (20, 21)), ((2, 3), (41, 5))], False)
    torch.testing.assert_close(varlen_attention_reference(query[:3], key, value, decode, 16**-0.5), want)
    # two queries of a row reading four keys, causal: the diagonal ends at the last key (FlashAttention's alignment)
    tail = Varlen(i32([0, 2]), i32([0, 4]), 2, 4, causal=True)
    want = _naive_attention(query[:2], key, value, [((0, 2), (0, 4))], True)
    torch.testing.assert_close(varlen_attention_reference(query[:2], key, value, tail, 16**-0.5), want)


@pytest.mark.parametrize(("prefill", "decode_attention"), [("masked", "matmul"), ("packed", "flash")])
def test_chat_prompts_equal_hf_generate(tiny: dict[str, Path], prefill: str, decode_attention: str):
    """The real path: an HF checkpoint directory, chat-template prompts of varied lengths, the generation config's
    stop tokens (<|endoftext|>, <|im_end|>), through reference.generate_continuations with either engine."""
    target = load_causal_lm(tiny["target"], CPU)
    tokenizer = load_tokenizer(tiny["target"])
    questions = [
        "Hi",
        "What does os.path.join do?",
        "Write a function that reverses a list in place, please.",
        "Explain\n\ndecorators",
        "x = 1",
        "Why is the sky blue? Answer in one short sentence of Python.",
    ]
    prompts = [
        Prompt(str(i), "chat", render_chat(tokenizer, [{"role": "user", "content": q}]))
        for i, q in enumerate(questions)
    ]
    assert len({len(p.tokens) for p in prompts}) == len(prompts)  # all different: padded batches
    eos = stop_ids(target, tokenizer)
    assert len(eos) == 2
    tokens = [p.tokens for p in prompts]
    engine = StaticGreedyEngine(target, CPU, engine_config(prefill, decode_attention))
    ours = engine.generate(tokens, 16, eos, 20, max_batch_size=4)
    assert engine.stats.padded_batches >= 1
    assert_same(
        ours,
        generate_greedy_hf(target, tokens, 16, eos, tokenizer.pad_token_id or eos[0], 20, batch_size=4, device=CPU),
    )
    static = generate_continuations(target, tokenizer, prompts, 16, 4, CPU, top_k=20, static=engine)  # kept engine
    hf = generate_continuations(target, tokenizer, prompts, 16, 4, CPU, top_k=20, engine="hf")
    default = generate_continuations(target, tokenizer, prompts, 16, 4, CPU, top_k=20)  # a new engine, CPU's modes
    for a, b, c, o in zip(static, hf, default, ours):
        assert a.tokens == b.tokens == c.tokens == o.tokens
        assert a.topk_logprobs.dtype == np.float16  # the shards' dtype, as before
        np.testing.assert_array_equal(a.topk_logprobs, o.topk_logprobs.astype(np.float16))
    with pytest.raises(ValueError, match="engine 'vllm': expected one of static, hf"):
        generate_continuations(target, tokenizer, prompts, 16, 4, CPU, top_k=20, engine="vllm")


def test_bench_script_runs_at_tiny_scale(tmp_path: Path):
    """The GPU bench's CPU dry run: two engine configurations and HF generate on the same prompts, one report."""
    out = tmp_path / "bench.json"
    argv = (
        "--device cpu --threads 1 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --ffn 128 --context 256 "
        f"--init-std 0.2 --vocab {VOCAB} --prompts 12 --lengths 8,16,24 --new-tokens 6 "
        "--engines packed+flash/4,masked+matmul@0.5/3 --hf-prompts 6 --hf-batch-size 3"
    ).split()
    bench = TRAIN_DIR / "scripts" / "gpu" / "bench_reference.py"
    subprocess.run([sys.executable, str(bench), *argv, f"--out={out}"], check=True, capture_output=True, cwd=TRAIN_DIR)
    report = json.loads(out.read_text())
    engines = report["engines"]
    assert list(engines) == ["packed+flash/4", "masked+matmul@0.5/3"]
    first, second = engines.values()
    assert (first["prefill"], first["decode_attention"], first["max_rows"]) == ("packed", "flash", 4)
    assert (second["prefill"], second["kv_cache_fraction"], second["max_rows"]) == ("masked", 0.5, 3)
    assert report["workload"]["prompts"] == first["prompts"] == second["prompts"] == 12
    assert first["tokens"] == second["tokens"] == 12 * 6  # random models never stop: every row to the cap
    assert [b["rows"] for b in first["batches"]] == [4, 4, 4] and len(second["batches"]) == 4
    assert sum(b["prompt_tokens"] for b in first["batches"]) == first["prompt_tokens"] == 4 * (8 + 16 + 24)
    assert all(b["ms_per_step"] > 0 and b["steps"] == 6 for b in first["batches"])
    assert first["prefill_seconds"] > 0 and first["decode_seconds"] > 0 and first["tokens_per_s"] > 0
    assert report["speedup_over_second"]["masked+matmul@0.5/3"] == 1.0
    assert report["speedup_over_second"]["packed+flash/4"] == first["tokens_per_s"] / second["tokens_per_s"]
    # fp32 on the CPU: the configurations and HF generate agree exactly (log-probs to HF's own spread)
    agreed = report["agreement_with_first"]["masked+matmul@0.5/3"]
    assert agreed["identical_share"] == 1.0 and agreed["max_abs_topk_logprob_diff"] <= LOGPROB_ATOL
    assert report["agreement_with_hf"]["identical_share"] == 1.0 and report["hf"]["prompts"] == 6
    assert report["varlen_kernel"] == "no FlashAttention kernel on cpu" and first["cuda_graph"] is False


def test_decode_profile_script_runs_at_tiny_scale(tmp_path: Path):
    """The GPU decode profile's CPU dry run: a decode step's operators by kind, the prefill's subtracted, per batch."""
    out = tmp_path / "profile.json"
    profile = TRAIN_DIR / "scripts" / "gpu" / "profile_decode.py"
    argv = ["--device", "cpu", "--layers", "2", "--batch", "3x16", "--batch", "2x24", "--steps", "2", f"--out={out}"]
    subprocess.run([sys.executable, str(profile), *argv], check=True, capture_output=True, cwd=TRAIN_DIR)
    report = json.loads(out.read_text())
    assert [(b["rows"], b["width"]) for b in report["batches"]] == [(3, 16), (2, 24)]
    for batch in report["batches"]:
        # two layers' projections and the head, each a matmul: a step has at least 2 × 7 + 1 of them (counts, not
        # times: a CPU operator's time differs between the two profiled runs, so their difference can be either sign)
        assert batch["kernels_per_step"]["matmul"] >= 15 and "matmul" in batch["kernel_ms_per_step"]
        assert batch["kernel_ms_per_step_total"] == pytest.approx(sum(batch["kernel_ms_per_step"].values()), abs=0.01)
        assert "graph_ms_per_step" not in batch  # no CUDA graph on the CPU


def test_decode_attention_script_runs_at_tiny_scale(tmp_path: Path):
    """The GPU decode-attention benchmark's CPU dry run: both kernels' entries per batch, the split-kv check's reason,
    and the two agreeing (on the CPU both are the PyTorch reference: a check of the script's arguments and layout)."""
    out = tmp_path / "attention.json"
    script = TRAIN_DIR / "scripts" / "gpu" / "bench_decode_attention.py"
    sizes = ["--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--new-tokens", "8", "--step", "4"]
    argv = ["--device", "cpu", "--batch", "3x40", "--batch", "2x24", *sizes, "--iterations", "2", f"--out={out}"]
    subprocess.run([sys.executable, str(script), *argv], check=True, capture_output=True, cwd=TRAIN_DIR)
    report = json.loads(out.read_text())
    assert report["split_kv_problem"] == "no Triton kernel on cpu"
    assert [(b["rows"], b["width"], b["slots"]) for b in report["batches"]] == [(3, 40, 48), (2, 24, 32)]
    for batch in report["batches"]:
        assert batch["split-kv"]["max_abs_diff_from_flash"] == 0.0
        assert batch["flash"]["us"] > 0 and batch["kv_bytes"] > 0
