"""Fake quantization is bit-exact with gguf-py's quantizers and with ggml's own C reference, and QAT wires it in.

bash train/scripts/pytest.sh tests/test_quant.py
"""

from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path

import numpy as np
import pytest
import torch
from ggml_cpu import load_variant, require_bins, runnable_variants, variant_scores
from gguf import GGMLQuantizationType as T
from gguf import quants
from transformers import Qwen3Config, Qwen3ForCausalLM

from specdraft_train.config import ExportConfig, resolve_embedding_type
from specdraft_train.training.ggml_activations import ggml_activation_rule, round_activations_q8_0
from specdraft_train.training.quant import (
    CLIP_CANDIDATES,
    QUANTIZERS_MODULE,
    fake_quant,
    gguf_storage_type,
    load_qat_state,
    pack_q4_0,
    prepare_qat,
    q4_0_dequantize_blocks,
    q4_0_quantize_blocks,
    q8_0_activation_terms,
    search_clip,
)


def hard_weights(seed: int = 0) -> torch.Tensor:
    """(rows, 256) weights covering the awkward cases: normal, tiny (fp16-subnormal d), huge, zero blocks, ties of
    |max| with both signs, and values whose x·id + 8.5 lands within a few ulps of an integer (where a fused
    multiply-add or an fp16 d would round differently)."""
    g = torch.Generator().manual_seed(seed)
    rows = [
        torch.randn(64, 256, generator=g) * 0.02,
        torch.randn(8, 256, generator=g) * 1e-6,
        torch.randn(8, 256, generator=g) * 300.0,
        torch.zeros(2, 256),
    ]
    tie = torch.randn(4, 256, generator=g)
    tie[:, 0], tie[:, 5] = 3.0, -3.0  # first block: +3 comes first, so it sets the sign
    tie[:, 32], tie[:, 40] = -3.0, 3.0
    rows.append(tie)
    # boundary values: block max -8·d, others at (k + 0.5)·d nudged by a few ulps
    d = torch.rand(32, 1, generator=g) * 1.5 + 0.5  # (32, 1)
    k = torch.randint(-8, 8, (32, 256), generator=g).float()
    x = ((k + 0.5) * d).to(torch.float32)
    steps = torch.randint(-3, 4, x.shape, generator=g)
    for _ in range(3):
        x = torch.where(steps > 0, torch.nextafter(x, torch.full_like(x, np.inf)), x)
        x = torch.where(steps < 0, torch.nextafter(x, torch.full_like(x, -np.inf)), x)
        steps = steps - steps.sign()
    x = x.reshape(-1, 32)  # (blocks, 32)
    x[:, 0] = (-8 * d).repeat_interleave(8, dim=0).squeeze(1)
    rows.append(x.reshape(32, 256))
    return torch.cat(rows).contiguous()


def gguf_q4_0(w: torch.Tensor) -> np.ndarray:
    return quants.quantize(w.numpy(), T.Q4_0)


def test_fake_quant_q4_0_equals_gguf_dequant_of_quantize_exactly():
    w = hard_weights()
    expected = torch.from_numpy(quants.dequantize(gguf_q4_0(w), T.Q4_0))
    actual = fake_quant(w, T.Q4_0)
    assert actual.shape == w.shape and actual.dtype == torch.float32
    assert torch.equal(actual, expected), f"{(actual != expected).sum().item()} values differ"
    assert np.array_equal(pack_q4_0(*q4_0_quantize_blocks(w)).reshape(w.shape[0], -1), gguf_q4_0(w))


def test_boundary_values_really_exercise_the_rounding_order():
    # If x·id + 8.5 were computed with one rounding (FMA) or with id from the fp16 d, some q would change.
    w = hard_weights()[-32:]
    blocks = w.reshape(-1, 32).double()
    vmax = blocks[:, :1]
    d32 = (vmax.float() / -8).double()
    inv = (1 / d32.float()).double()
    fused = torch.trunc(((blocks * inv) + 8.5).float()).clamp(0, 15)
    inv16 = (1 / d32.half().float()).double()
    from_fp16 = torch.trunc(((blocks.float() * inv16.float()) + 8.5).float()).clamp(0, 15)
    _, q = q4_0_quantize_blocks(w)
    assert (fused.to(torch.uint8) != q).sum() > 0
    assert (from_fp16.to(torch.uint8) != q).sum() > 0


def test_q4_0_and_q8_0_equal_ggml_c_reference_bytes():
    lib = ctypes.CDLL(str(require_bins() / "libggml-base.so"))
    w = hard_weights(1)
    x = np.ascontiguousarray(w.numpy().reshape(-1))
    for fn, qtype, ours in (
        (lib.quantize_row_q4_0_ref, T.Q4_0, pack_q4_0(*q4_0_quantize_blocks(w))),
        (lib.quantize_row_q8_0_ref, T.Q8_0, None),
    ):
        out = np.zeros(quants.quantize(w.numpy(), qtype).size, np.uint8)
        fn(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size))
        assert np.array_equal(out, quants.quantize(w.numpy(), qtype).reshape(-1)), qtype.name
        if ours is not None:
            assert np.array_equal(out, ours.reshape(-1))
    # and ggml's own dequantization of those bytes gives our fake-quantized values
    blocks = pack_q4_0(*q4_0_quantize_blocks(w)).reshape(-1)
    deq = np.zeros(x.size, np.float32)
    lib.dequantize_row_q4_0(
        blocks.ctypes.data_as(ctypes.c_void_p), deq.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size)
    )
    assert torch.equal(torch.from_numpy(deq).reshape(w.shape), fake_quant(w, T.Q4_0))


def test_fake_quant_q8_0_equals_gguf_exactly():
    w = hard_weights(2)
    expected = torch.from_numpy(quants.dequantize(quants.quantize(w.numpy(), T.Q8_0), T.Q8_0))
    assert torch.equal(fake_quant(w, T.Q8_0), expected)


def test_blocks_run_along_the_last_dim():
    w = torch.randn(3, 64)
    w[0, 0] = 100.0  # an outlier changes only its own block: row 0, columns 0..31
    fq = fake_quant(w, T.Q4_0)
    w2 = w.clone()
    w2[0, 0] = 1.0
    changed = fq != fake_quant(w2, T.Q4_0)
    assert changed[0, :32].any() and not changed[0, 32:].any() and not changed[1:].any()
    with pytest.raises(ValueError, match="multiple of the block size"):
        fake_quant(torch.randn(4, 48), T.Q4_0)


def test_straight_through_gradient():
    w = torch.randn(4, 64, requires_grad=True)
    upstream = torch.randn(4, 64)
    (fake_quant(w, T.Q4_0) * upstream).sum().backward()
    assert torch.equal(w.grad, upstream)  # identity: without clipping every weight is in range

    w.grad = None
    clip = torch.full((8,), 0.6)
    (fake_quant(w, T.Q4_0, clip) * upstream).sum().backward()
    d, _ = q4_0_quantize_blocks(w, clip)
    in_range = (w.detach().reshape(-1, 32).abs() <= 8 * d.abs()).reshape(4, 64)
    assert not in_range.all()  # the block maxima are clipped off
    assert torch.equal(w.grad, upstream * in_range)


def test_clip_search_never_worse_than_plain_and_uses_candidates():
    w = torch.randn(32, 256) * 0.02
    w[::3, ::17] *= 6  # outliers make clipping pay off in some blocks
    clip = search_clip(w)
    assert set(clip.unique().tolist()) <= {np.float32(c).item() for c in CLIP_CANDIDATES}
    assert (clip < 1).any()
    blocks = w.reshape(-1, 32)
    err_plain = (q4_0_dequantize_blocks(*q4_0_quantize_blocks(w)) - blocks).square().sum(-1)
    err_clip = (q4_0_dequantize_blocks(*q4_0_quantize_blocks(w, clip)) - blocks).square().sum(-1)
    assert (err_clip <= err_plain).all() and (err_clip < err_plain).any()


def test_storage_types_per_file_type():
    assert gguf_storage_type("model.layers.0.self_attn.q_proj.weight", (64, 64), "Q4_0") == T.Q4_0
    assert gguf_storage_type("model.embed_tokens.weight", (600, 64), "Q4_0") == T.Q8_0
    assert gguf_storage_type("lm_head.weight", (600, 64), "Q4_0") == T.Q8_0
    assert gguf_storage_type("model.norm.weight", (64,), "Q4_0") == T.F32
    assert gguf_storage_type("model.layers.0.mlp.down_proj.weight", (64, 100), "Q4_0") == T.F16
    assert gguf_storage_type("model.layers.0.mlp.down_proj.weight", (64, 128), "Q8_0") == T.Q8_0
    assert gguf_storage_type("model.layers.0.mlp.down_proj.weight", (64, 128), "F16") == T.F16
    assert gguf_storage_type("model.embed_tokens.weight", (600, 64), "F32") == T.F32
    with pytest.raises(ValueError, match="Unknown GGUF type"):
        gguf_storage_type("x.weight", (32, 32), "Q5_K")


def test_an_all_q4_0_file_stores_the_vocabulary_tensors_at_q4_0_and_nothing_else_changes():
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert gguf_storage_type(name, (600, 64), "Q4_0", "Q4_0") == T.Q4_0
        assert gguf_storage_type(name, (600, 64), "Q4_0", "q4_0") == T.Q4_0  # the case config values come in
        assert gguf_storage_type(name, (600, 64), "Q8_0", "Q4_0") == T.Q8_0  # only Q4_0 files have the choice
        assert gguf_storage_type(name, (600, 100), "Q4_0", "Q4_0") == T.F16  # rows must still be blockable
    assert gguf_storage_type("model.norm.weight", (64,), "Q4_0", "Q4_0") == T.F32
    assert gguf_storage_type("model.layers.0.mlp.up_proj.weight", (96, 64), "Q4_0", "Q4_0") == T.Q4_0
    with pytest.raises(ValueError, match="Unknown embedding type 'Q6_K'"):
        gguf_storage_type("lm_head.weight", (600, 64), "Q4_0", "Q6_K")


def test_the_embedding_type_defaults_to_q4_0_only_under_a_size_cap():
    assert resolve_embedding_type() == resolve_embedding_type("", 0) == "Q8_0"
    assert resolve_embedding_type(None, 1_000_000_000) == "Q4_0"
    assert resolve_embedding_type("q8_0", 1_000_000_000) == "Q8_0"  # an explicit choice wins over the cap's default
    assert ExportConfig().resolved_embedding_type() == "Q8_0"
    assert ExportConfig(max_bytes=10**9).resolved_embedding_type() == "Q4_0"
    assert ExportConfig(embedding_type="Q4_0").resolved_embedding_type() == "Q4_0"


def tiny_model(tied: bool = True, seed: int = 0) -> Qwen3ForCausalLM:
    config = Qwen3Config(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).eval()


@pytest.mark.parametrize("embedding_type", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize("tied", [True, False])
def test_prepare_qat_forward_uses_exactly_the_stored_weights(tied: bool, embedding_type: str, tmp_path: Path):
    # Q4_0 embeddings are QAT targets like the projections: clip-searched blocks, one tensor for lookup and head (tied)
    torch.set_num_threads(1)
    model = tiny_model(tied)
    latent = {k: v.clone() for k, v in model.state_dict().items()}
    qat = prepare_qat(model, clip_search=True, embedding_type=embedding_type)
    vocab_type = T[embedding_type]
    expected_types = {
        "model.embed_tokens.weight": vocab_type,
        **({} if tied else {"lm_head.weight": vocab_type}),
        **{f"model.layers.0.self_attn.{p}_proj.weight": T.Q4_0 for p in "qkvo"},
        **{f"model.layers.0.mlp.{p}_proj.weight": T.Q4_0 for p in ("gate", "up", "down")},
    }
    assert {n: t.qtype for n, t in qat.targets.items()} == expected_types
    if tied:
        assert len(qat.targets["model.embed_tokens.weight"].modules) == 2  # embedding and head share one weight

    # A plain model holding gguf-py's dequantized weights computes the same logits, bit for bit.
    reference = tiny_model(tied)
    state = {}
    for name, value in latent.items():
        if tied and name == "lm_head.weight":
            continue  # the same tensor as the embedding (state_dict lists it twice)
        t = expected_types.get(name)
        if t == T.Q4_0:
            d, q = q4_0_quantize_blocks(value, qat.targets[name].quantizer.clip)
            value = q4_0_dequantize_blocks(d, q).reshape(value.shape)
        elif t == T.Q8_0:
            value = torch.from_numpy(quants.dequantize(quants.quantize(value.numpy(), T.Q8_0), T.Q8_0))
        state[name] = value
    reference.load_state_dict(state, strict=False)
    input_ids = torch.randint(0, 100, (2, 12))
    with torch.no_grad():
        assert torch.equal(model(input_ids).logits, reference(input_ids).logits)

    # gradients reach the latent weights; unwrapped() shows them under their HF names, unchanged
    model(input_ids, labels=input_ids).loss.backward()
    assert qat.latent_weight("model.layers.0.mlp.up_proj.weight").grad is not None
    with qat.unwrapped():
        plain = model.state_dict()
        assert all(torch.equal(plain[k], v) for k, v in latent.items() if k in plain)
        assert not any(QUANTIZERS_MODULE in k for k in plain)  # the HF names alone
    attached = model.state_dict()
    assert any(QUANTIZERS_MODULE in k for k in attached)  # re-attached after the block, clip factors included
    assert all(torch.equal(attached[k], v) for k, v in latent.items())  # the weights under their own names: latent

    if embedding_type == "Q4_0":
        assert (qat.targets["model.embed_tokens.weight"].quantizer.clip < 1).any()  # the search covered it
    saved = load_qat_state(qat.save(tmp_path / "qat.safetensors"))
    assert saved.out_type == "Q4_0" and saved.types == {n: t.name for n, t in expected_types.items()}
    assert saved.embedding_type == embedding_type
    assert set(saved.clips) == {n for n, t in expected_types.items() if t == T.Q4_0}
    assert saved.fingerprints == qat.fingerprints()


@pytest.mark.parametrize("tied", [True, False])
def test_weights_held_for_a_step_give_the_same_losses_and_gradients_and_follow_the_optimizer(tied: bool):
    """QatState.held: the weights quantized once for a step compute what per-read quantization computes (forward
    and every latent gradient, bit for bit, clipped blocks included), and the next step's block sees the optimizer's
    update, not the last step's values."""
    torch.set_num_threads(1)
    model = tiny_model(tied)
    qat = prepare_qat(model, clip_search=True, embedding_type="Q4_0")
    input_ids = torch.randint(0, 100, (2, 12))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        results = []
        for held in (False, True):
            model.zero_grad(set_to_none=True)
            with qat.held() if held else contextlib.nullcontext():
                loss = model(input_ids, labels=input_ids).loss
                loss.backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            results.append((loss.detach(), grads))
        (expected, expected_grads), (got, got_grads) = results
        assert torch.equal(got, expected) and got_grads.keys() == expected_grads.keys()
        assert all(torch.equal(got_grads[n], g) for n, g in expected_grads.items())
        assert any(bool((qat.targets[n].quantizer.held_in_range == 0).any()) for n in qat.targets)  # clipped
        assert not any(t.quantizer.holding for t in qat.targets.values())  # reads quantize again after it
        optimizer.step()  # the second round's held weights must be this update's


def hard_activations() -> torch.Tensor:
    """(rows, 128) activations where Q8_0 rounding rules differ: exact .5 ties of x·id (amax = 127, so id = 1 in both
    rules), values a few ulps from a tie under an inexact id, scales d = amax / 127 exactly halfway between two fp16
    values (fp16 rounding ties), a negative amax, zeros, tiny and huge rows."""
    g = torch.Generator().manual_seed(7)
    rows = [torch.randn(16, 128, generator=g) * s for s in (1e-3, 0.3, 5.0, 4e4)]
    ties = torch.randint(-126, 126, (4, 128), generator=g).float() + 0.5
    ties[:, ::32] = torch.tensor([127.0, -127.0, 127.0, -127.0])[:, None]  # every block's amax = 127
    rows.append(ties)
    near = torch.randn(4, 128, generator=g)
    near[:, ::32] = 0.9  # amax 0.9: id = 127 / 0.9 is inexact
    k = torch.randint(-100, 100, (4, 128), generator=g).float() + 0.5
    target = k * (0.9 / 127)
    for ulps in (-2, -1, 1, 2):  # x·id within ulps of k + 0.5
        nudged = target.clone()
        for _ in range(abs(ulps)):
            nudged = torch.nextafter(nudged, nudged + (1 if ulps > 0 else -1))
        rows.append(torch.where(torch.arange(128) % 32 == 0, near, nudged))
    fp16_ties = []
    for m in range(1, 1000):
        d = np.float32(1 + (2 * m + 1) * 2.0**-11)  # halfway between two fp16 neighbours in [1, 2)
        amax = np.float32(d * np.float32(127))
        if amax / np.float32(127) == d:  # amax / 127 lands exactly on the tie again
            fp16_ties.append(float(amax))
        if len(fp16_ties) == 4:
            break
    assert len(fp16_ties) == 4
    tie_rows = torch.randn(2, 128, generator=g)
    tie_rows[:, ::32] = torch.tensor(fp16_ties) * torch.tensor([1.0, -1.0, 1.0, -1.0])  # negative amax too
    rows.append(tie_rows)
    zeros = torch.randn(1, 128, generator=g)
    zeros[:, 32:64] = 0
    rows.append(zeros)
    return torch.cat(rows)  # (rows, 128)


def ggml_row_q8_0(lib: ctypes.CDLL, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``quantize_row_q8_0`` of one row: (fp16 d bits (n_blocks,), q int8 (n_blocks, 32))."""
    row = np.ascontiguousarray(x.numpy(), dtype=np.float32)
    out = np.zeros(row.size // 32 * 34, np.uint8)  # block_q8_0: fp16 d, 32 int8
    lib.quantize_row_q8_0(
        row.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(row.size)
    )
    blocks = out.reshape(-1, 34)
    return blocks[:, :2].copy().view(np.uint16).reshape(-1), blocks[:, 2:].view(np.int8)


def ggml_mat_q8_0_4x8(lib: ctypes.CDLL, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """ggml's ``ggml_quantize_mat_q8_0_4x8`` (the repacked Q4_0 path's activations) of 4 rows, de-interleaved to
    (fp16 d bits (4, n_blocks), q int8 (4, n_blocks, 32))."""
    rows = np.ascontiguousarray(x.numpy(), dtype=np.float32)  # (4, K)
    k = rows.shape[1]
    out = np.zeros(k // 32 * (8 + 128), np.uint8)  # block_q8_0x4: 4 fp16 d, then 4 × 32 int8 in 8-byte chunks
    lib.ggml_quantize_mat_q8_0_4x8(
        rows.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(k)
    )
    blocks = out.reshape(-1, 136)  # (n_blocks, 136)
    d = blocks[:, :8].copy().view(np.uint16).reshape(-1, 4).T  # (4, n_blocks)
    qs = blocks[:, 8:].view(np.int8).reshape(-1, 4, 4, 8)  # (n_blocks, chunk, row, 8): qs[32c + 8r + t] = q[r][8c + t]
    return d, qs.transpose(2, 0, 1, 3).reshape(4, -1, 32)  # (4, n_blocks, 32)


def emulated_q8_0(x: torch.Tensor, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """Our emulation in the same form: (fp16 d bits, q int8), blocks along the last dim."""
    scaled, d = q8_0_activation_terms(x, rule)
    dequantized = round_activations_q8_0(x, rule).reshape(-1, 32)
    d16 = d.to(torch.float16)
    q = torch.where(d16.float() == 0, torch.zeros_like(dequantized), dequantized / d16.float())
    assert torch.equal(q, q.round()) and scaled.shape == q.shape  # dequantized = integer × fp16 d exactly
    return d16.view(torch.int16).numpy().view(np.uint16).reshape(-1), q.to(torch.int8).numpy()


def test_activation_rounding_equals_every_ggml_cpu_variant_this_cpu_runs():
    # The rule each of ggml's x86 CPU paths uses to quantize matmul inputs, called in that path's own library: the
    # plain row quantizer (vec-dot, llamafile and AMX paths) and the 4-row one of the repacked Q4_0 layout.
    x = hard_activations()
    variants = runnable_variants()
    assert variants, variant_scores()
    checked = {}
    for variant in variants:
        lib = load_variant(variant)
        rule = ggml_activation_rule(variant)
        expected_d, expected_q = emulated_q8_0(x, rule)
        n_blocks = x.shape[1] // 32
        for r in range(x.shape[0]):
            d, q = ggml_row_q8_0(lib, x[r])
            assert np.array_equal(d, expected_d[r * n_blocks : (r + 1) * n_blocks]), (variant, "row d", r)
            assert np.array_equal(q, expected_q[r * n_blocks : (r + 1) * n_blocks]), (variant, "row q", r)
        for r in range(0, x.shape[0] - 3, 4):
            d, q = ggml_mat_q8_0_4x8(lib, x[r : r + 4])
            assert np.array_equal(d, expected_d.reshape(-1, n_blocks)[r : r + 4]), (variant, "4x8 d", r)
            assert np.array_equal(q, expected_q.reshape(-1, n_blocks, 32)[r : r + 4]), (variant, "4x8 q", r)
        checked[variant] = rule
    print(
        f"\n[quant] activation rounding equals ggml's own on {len(checked)} CPU variants: {checked}; "
        f"not runnable here: {sorted(set(variant_scores()) - set(checked))}"
    )
    # The two rules do differ (at exact ties), so checking the right one per path is not vacuous.
    assert not np.array_equal(emulated_q8_0(x, "simd")[1], emulated_q8_0(x, "reference")[1])
