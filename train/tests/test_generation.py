"""generation: the static engine's greedy continuations and top-k log-probs equal HF generate's (CPU, fp32) — mixed
prompt lengths in one call, several buckets, batch and prefill splits, a row stopping mid-way, every row stopping
early, chat-style left-padded prompts of the real path — and the benchmark script runs at tiny scale.

    bash train/scripts/pytest.sh tests/test_generation.py
"""

from __future__ import annotations

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

from specdraft_train.generation import (
    GreedyOutput,
    StaticEngineConfig,
    StaticGreedyEngine,
    generate_continuations,
    generate_greedy_hf,
    stop_ids,
)
from specdraft_train.models import load_causal_lm, load_tokenizer
from specdraft_train.prompts import Prompt, render_chat
from specdraft_train.static_cache import bucket_width, plan_batches

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


@pytest.mark.parametrize("decode_attention", ["matmul", "sdpa"])
def test_static_engine_equals_hf_generate_with_mixed_lengths_splits_and_a_mid_way_stop(
    model: Qwen3ForCausalLM, decode_attention: str
):
    prompts = random_prompts(LENGTHS)
    free = generate_greedy_hf(model, prompts, MAX_NEW, [0], 0, TOP_K, batch_size=4, device=CPU)
    # A stop token that row 0 first produces mid-way: that row must end there, the stop token included.
    position = next(p for p in range(4, MAX_NEW - 4) if free[0].tokens[p] not in free[0].tokens[:p])
    stop = free[0].tokens[position]
    peer = generate_greedy_hf(model, prompts, MAX_NEW, [stop], 0, TOP_K, batch_size=4, device=CPU)
    # Batches of ≤ 2 rows, prefill forwards of ≤ 16 tokens: every bucket splits, width-16 rows prefill one by one.
    engine = StaticGreedyEngine(
        model, CPU, StaticEngineConfig(prefill_tokens=16, finish_check_every=3, decode_attention=decode_attention)
    )
    ours = engine.generate(prompts, MAX_NEW, [stop], TOP_K, max_batch_size=2)
    assert_same(ours, peer)
    assert len(ours[0].tokens) == position + 1 and ours[0].tokens[-1] == stop
    assert any(len(o.tokens) == MAX_NEW for o in ours)  # others ran to the cap
    assert engine.stats.batches == 5 and engine.stats.padded_batches == 3
    assert engine.stats.prefill_forwards > engine.stats.batches  # row-chunked prefill
    assert not engine.stats.used_cuda_graph
    # the split of the wall time the rehearsal reports: both parts timed, every batch
    assert engine.stats.prefill_seconds > 0 and engine.stats.decode_seconds > 0


def test_decoding_stops_once_every_row_has_stopped(model: Qwen3ForCausalLM):
    prompts = random_prompts([12] * 6, seed=2)
    free = generate_greedy_hf(model, prompts, MAX_NEW, [0], 0, TOP_K, batch_size=6, device=CPU)
    stops = sorted({o.tokens[2] for o in free})  # every row stops by its third token
    engine = StaticGreedyEngine(model, CPU, StaticEngineConfig(finish_check_every=4))
    ours = engine.generate(prompts, MAX_NEW, stops, TOP_K)
    assert_same(ours, generate_greedy_hf(model, prompts, MAX_NEW, stops, 0, TOP_K, batch_size=6, device=CPU))
    assert all(len(o.tokens) <= 3 for o in ours)
    assert engine.stats.decode_steps == 4  # one round of steps, then the check saw every row stopped
    # Without top-k (held-out/dev splits) the tokens are the same.
    plain = StaticGreedyEngine(model, CPU).generate(prompts, MAX_NEW, stops, None)
    assert [o.tokens for o in plain] == [o.tokens for o in ours] and plain[0].topk_ids is None


def test_chat_prompts_left_padded_equal_hf_generate(tiny: dict[str, Path]):
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
    engine = StaticGreedyEngine(target, CPU)
    ours = engine.generate(tokens, 16, eos, 20, max_batch_size=4)
    assert engine.stats.padded_batches >= 1
    assert_same(
        ours,
        generate_greedy_hf(target, tokens, 16, eos, tokenizer.pad_token_id or eos[0], 20, batch_size=4, device=CPU),
    )
    static = generate_continuations(target, tokenizer, prompts, 16, 4, CPU, top_k=20)  # the default engine
    hf = generate_continuations(target, tokenizer, prompts, 16, 4, CPU, top_k=20, engine="hf")
    for a, b, o in zip(static, hf, ours):
        assert a.tokens == b.tokens == o.tokens
        assert a.topk_logprobs.dtype == np.float16  # the shards' dtype, as before
        np.testing.assert_array_equal(a.topk_logprobs, o.topk_logprobs.astype(np.float16))
    with pytest.raises(ValueError, match="engine 'vllm': expected one of static, hf"):
        generate_continuations(target, tokenizer, prompts, 16, 4, CPU, top_k=20, engine="vllm")


def test_bench_script_runs_at_tiny_scale(tmp_path: Path):
    out = tmp_path / "bench.json"
    subprocess.run(
        [
            sys.executable,
            str(TRAIN_DIR / "scripts" / "gpu" / "bench_reference.py"),
            "--device",
            "cpu",
            "--threads",
            "1",
            "--hidden",
            "64",
            "--layers",
            "2",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--head-dim",
            "16",
            "--ffn",
            "128",
            "--vocab",
            str(VOCAB),
            "--context",
            "256",
            "--init-std",
            "0.2",
            "--prompts",
            "12",
            "--lengths",
            "8,16,24",
            "--new-tokens",
            "6",
            "--hf-prompts",
            "6",
            "--hf-batch-size",
            "3",
            "--batch-size",
            "4",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=TRAIN_DIR,
    )
    report = json.loads(out.read_text())
    assert report["workload"]["prompts"] == report["static"]["prompts"] == 12
    assert report["hf"]["prompts"] == report["agreement"]["rows"] == 6
    assert report["agreement"]["identical_share"] == 1.0
    assert report["agreement"]["max_abs_topk_logprob_diff"] <= LOGPROB_ATOL
    assert report["static"]["tokens"] > 0 and report["hf"]["tokens_per_s"] > 0 and report["speedup"] > 0
    assert report["static"]["cuda_graph"] is False and report["static"]["batches"] == 3
