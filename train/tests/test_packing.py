"""Packed batches (packing.py, examples.collate): rows laid end to end with restarting positions and attention inside
each row compute what right-padded rows compute — hidden states for Qwen3 and Llama, every loss's sums and gradients
with replay rows, under QAT too, recomputed and compiled — and an epoch's steps share its tokens equally."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from specdraft_train.config import DistillConfig
from specdraft_train.modeling.models import compile_decoder_layers, final_hidden_states, load_causal_lm
from specdraft_train.modeling.packing import PACKED_ATTENTION, layout, packed_attention_within, use_packed_attention
from specdraft_train.training.examples import (
    collate,
    epoch_order,
    epoch_steps,
    padding_factor,
    rank_rows,
    read_train_examples,
    steps_per_epoch,
)
from specdraft_train.training.losses import LOSSES, loss_sums

CPU = torch.device("cpu")
SMALL = dict(
    vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, head_dim=8
)


@pytest.mark.parametrize(
    "model",
    [
        lambda: Qwen3ForCausalLM(Qwen3Config(**SMALL, num_key_value_heads=2)),
        lambda: LlamaForCausalLM(LlamaConfig(**SMALL, num_key_value_heads=2)),
    ],
    ids=["qwen3", "llama"],
)
def test_packed_sequences_get_the_hidden_states_of_padded_rows(model):
    torch.manual_seed(0)
    model = model().eval()
    sequences = [[5, 6, 7, 8, 9], [10, 11], [12], [13, 14, 15]]
    padded, padded_starts = layout(sequences, packed=False)
    packed, packed_starts = layout(sequences, packed=True)
    assert packed["input_ids"].shape == (1, 11) and packed["position_ids"][0].tolist() == [
        0,
        1,
        2,
        3,
        4,
        0,
        1,
        0,
        0,
        1,
        2,
    ]
    assert packed["cu_seq_lens_q"].tolist() == [0, 5, 7, 8, 11] and packed["max_length_q"] == 5
    with torch.no_grad():
        expected = final_hidden_states(model, padded).flatten(0, 1)  # the model's own SDPA with a padding mask
        with packed_attention_within(model):
            assert model.config._attn_implementation == PACKED_ATTENTION
            got = final_hidden_states(model, packed).flatten(0, 1)
        assert model.config._attn_implementation != PACKED_ATTENTION  # restored after the block
    for sequence, a, b in zip(sequences, padded_starts, packed_starts):
        positions = np.arange(len(sequence))
        torch.testing.assert_close(got[b + positions], expected[a + positions], rtol=1e-5, atol=1e-6)
    # Packed without the document mask (one long sequence) differs: the mask is what keeps the rows apart.
    with torch.no_grad():
        joined = final_hidden_states(model, {"input_ids": packed["input_ids"]}).flatten(0, 1)
    assert not torch.allclose(joined[5:7], expected[padded_starts[1] + np.arange(2)], atol=1e-3)


def _sums_and_gradients(model: torch.nn.Module, batch: dict, config: DistillConfig) -> tuple[dict, dict]:
    model.zero_grad(set_to_none=True)
    sums = loss_sums(model, batch, config)
    (sums.distill + 0.5 * sums.replay).backward()
    values = {"distill": sums.distill.detach(), "replay": sums.replay.detach(), **sums.parts}
    return values, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("qat", [False, True], ids=["fp32", "qat"])
@pytest.mark.parametrize("loss", LOSSES)
def test_a_packed_batch_gives_the_padded_batchs_losses_and_gradients(tiny: dict[str, Path], loss: str, qat: bool):
    """Every loss, with replay rows, as trained and through QAT's fake quantization: packed = padded up to float
    summation order (fp32)."""
    examples = read_train_examples(tiny["reference"])[:6]
    replay_chunks = (np.arange(3 * 11).reshape(3, 11) * 7) % 500  # 3 replay rows of 10 inputs
    config = DistillConfig(loss=loss, eval_k=4)
    results = []
    for packed in (False, True):
        model = load_causal_lm(tiny["base"], CPU)
        if packed:
            use_packed_attention(model)
        if qat:
            from specdraft_train.training.quant import prepare_qat

            prepare_qat(model, embedding_type="Q4_0")
        model.train()
        batch = collate(examples, 0, CPU, replay_chunks, packed=packed)
        results.append(_sums_and_gradients(model, batch, config))
        if packed:  # no padding: every position is a real token
            widths = [len(e.prompt_tokens) + len(e.continuation_tokens) - 1 for e in examples]
            assert batch["input_ids"].shape == (1, sum(widths) + 3 * 10)
    (expected, expected_grads), (got, got_grads) = results
    assert got.keys() == expected.keys() and len(expected_grads) > 0
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-5, msg=name)
    assert got_grads.keys() == expected_grads.keys()
    for name, grad in expected_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_compiled_layers_give_the_eager_losses_and_gradients_on_packed_rows(tiny: dict[str, Path]):
    """DistillConfig.compile: each decoder layer through torch.compile (the aot_eager backend here, so the CPU test
    traces the layers as dynamo does on a GPU without building kernels) under QAT, its fake quantization eager inside
    them (graph breaks around it) or, as distill runs it, the weights held for the step (QatState.held: none around
    the quantization); two batches of other lengths, so the shapes are dynamic."""
    import contextlib

    from torch._dynamo.utils import counters

    from specdraft_train.training.quant import prepare_qat

    examples = read_train_examples(tiny["reference"])
    config = DistillConfig(eval_k=4)
    results, breaks = {}, {}
    for form in ("eager", "compiled", "compiled+held"):
        model = use_packed_attention(load_causal_lm(tiny["base"], CPU))
        qat = prepare_qat(model)
        if form != "eager":
            torch._dynamo.reset()
            counters.clear()
            assert compile_decoder_layers(model, backend="aot_eager") == model.config.num_hidden_layers
        model.train()
        results[form] = []
        for rows in (examples[:3], examples[3:8]):
            batch = collate(rows, 0, CPU, np.zeros((1, 9), dtype=np.int64))
            with qat.held() if form.endswith("held") else contextlib.nullcontext():
                results[form].append(_sums_and_gradients(model, batch, config))
        # Dynamo guards a compiled layer on its submodules' classes: one class for every layer's projection, so the
        # layers share their graphs (torch's parametrize made a class per module: a graph per layer).
        assert len({type(layer.mlp.up_proj) for layer in model.model.layers}) == 1 < len(model.model.layers)
        if form != "eager":
            assert counters["stats"]["unique_graphs"] > 0  # the layers did go through dynamo
            # (the CPU's packed attention, a reference loop over rows, breaks the graph too: not counted here)
            breaks[form] = sum(n for why, n in counters["graph_break"].items() if "FakeQuantize" in why)
    assert breaks["compiled"] > 0 and breaks["compiled+held"] == 0
    for form in ("compiled", "compiled+held"):
        for (expected, expected_grads), (got, got_grads) in zip(results["eager"], results[form]):
            for name in expected:
                torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-5, msg=name)
            assert got_grads.keys() == expected_grads.keys()
            for name, grad in expected_grads.items():
                torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_an_epoch_is_cut_into_steps_of_equal_tokens_every_row_once():
    widths = np.random.default_rng(5).integers(30, 3000, size=1000)
    config = DistillConfig(batch_size=16)
    steps = steps_per_epoch(widths, config)
    assert steps == 1000 // 16  # batch_size rows' worth of tokens a step, on average
    assert steps_per_epoch(widths, replace(config, batch_tokens=20_000)) == -(-int(widths.sum()) // 20_000)
    order = epoch_order(widths, 0, 3, 16, 0)
    plan = epoch_steps(widths, order, steps)
    assert len(plan) == steps and np.concatenate(plan).tolist() == order.tolist()  # consecutive, every row once
    tokens = np.array([widths[rows].sum() for rows in plan])
    share = widths.sum() / steps
    assert np.all(np.abs(tokens - share) <= widths.max())  # equal shares, up to about a row at each end
    assert padding_factor(widths, plan) > 1.5  # what right-padding these steps would cost
    # Ranks: each step keeps a row for each; a rank's share differs from the others' by at most one row.
    plan = epoch_steps(widths, order, steps, world_size=4)
    for rows in plan:
        shares = [rank_rows(rows, widths, 4, rank) for rank in range(4)]
        assert sorted(np.concatenate(shares).tolist()) == sorted(rows.tolist()) and all(len(s) for s in shares)
        loads = [int(widths[s].sum()) for s in shares]
        assert max(loads) - min(loads) <= widths[rows].max()
    # A few rows, more steps asked than ranks can fill: every step still gets a row per rank.
    plan = epoch_steps(np.array([5000, 10, 10, 10, 10, 10]), np.arange(6), 3, world_size=2)
    assert [len(rows) for rows in plan] == [2, 2, 2]
    with pytest.raises(ValueError, match="cannot fill"):
        epoch_steps(widths[:5], np.arange(5), 3, world_size=2)
