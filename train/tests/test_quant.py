"""Fake quantization is bit-exact with gguf-py's quantizers and with ggml's own C reference, and QAT wires it in.

    bash train/scripts/pytest.sh tests/test_quant.py
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants
from transformers import Qwen3Config, Qwen3ForCausalLM

from specdraft_train.quant import (
    CLIP_CANDIDATES,
    fake_quant_q4_0,
    fake_quant_q8_0,
    gguf_storage_type,
    load_qat_state,
    pack_q4_0,
    prepare_qat,
    q4_0_dequantize_blocks,
    q4_0_quantize_blocks,
    search_clip,
)

REPO = Path(__file__).resolve().parents[2]
GGML_BASE = REPO / "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so"


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
    actual = fake_quant_q4_0(w)
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


@pytest.mark.skipif(not GGML_BASE.is_file(), reason="node-llama-cpp's linux-x64 ggml binaries are not installed")
def test_q4_0_and_q8_0_equal_ggml_c_reference_bytes():
    lib = ctypes.CDLL(str(GGML_BASE))
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
    lib.dequantize_row_q4_0(blocks.ctypes.data_as(ctypes.c_void_p), deq.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size))
    assert torch.equal(torch.from_numpy(deq).reshape(w.shape), fake_quant_q4_0(w))


def test_fake_quant_q8_0_equals_gguf_exactly():
    w = hard_weights(2)
    expected = torch.from_numpy(quants.dequantize(quants.quantize(w.numpy(), T.Q8_0), T.Q8_0))
    assert torch.equal(fake_quant_q8_0(w), expected)


def test_blocks_run_along_the_last_dim():
    w = torch.randn(3, 64)
    w[0, 0] = 100.0  # an outlier changes only its own block: row 0, columns 0..31
    fq = fake_quant_q4_0(w)
    w2 = w.clone()
    w2[0, 0] = 1.0
    changed = fq != fake_quant_q4_0(w2)
    assert changed[0, :32].any() and not changed[0, 32:].any() and not changed[1:].any()
    with pytest.raises(ValueError, match="multiple of the block size"):
        fake_quant_q4_0(torch.randn(4, 48))


def test_straight_through_gradient():
    w = torch.randn(4, 64, requires_grad=True)
    upstream = torch.randn(4, 64)
    (fake_quant_q4_0(w) * upstream).sum().backward()
    assert torch.equal(w.grad, upstream)  # identity: without clipping every weight is in range

    w.grad = None
    clip = torch.full((8,), 0.6)
    (fake_quant_q4_0(w, clip) * upstream).sum().backward()
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


def tiny_model(tied: bool = True, seed: int = 0) -> Qwen3ForCausalLM:
    config = Qwen3Config(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, tie_word_embeddings=tied)
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).eval()


@pytest.mark.parametrize("tied", [True, False])
def test_prepare_qat_forward_uses_exactly_the_stored_weights(tied: bool, tmp_path: Path):
    torch.set_num_threads(1)
    model = tiny_model(tied)
    latent = {k: v.clone() for k, v in model.state_dict().items()}
    qat = prepare_qat(model, clip_search=True)
    expected_types = {
        "model.embed_tokens.weight": T.Q8_0,
        **({} if tied else {"lm_head.weight": T.Q8_0}),
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
            d, q = q4_0_quantize_blocks(value, qat.targets[name].parametrization.clip)
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
        assert not any("parametrizations" in k for k in plain)
    assert any("parametrizations" in k for k in model.state_dict())  # re-attached after the block

    saved = load_qat_state(qat.save(tmp_path / "qat.safetensors"))
    assert saved.out_type == "Q4_0" and saved.types == {n: t.name for n, t in expected_types.items()}
    assert set(saved.clips) == {n for n, t in expected_types.items() if t == T.Q4_0}
    assert saved.fingerprints == qat.fingerprints()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU machine)")
def test_cuda_fake_quant_is_bit_identical_to_cpu():
    # Training fake-quantizes on the GPU, export on the CPU: both must compute the very same blocks.
    w = hard_weights(3)
    clip = search_clip(w)
    assert torch.equal(search_clip(w.cuda()).cpu(), clip)
    for fn in (fake_quant_q4_0, fake_quant_q8_0):
        assert torch.equal(fn(w.cuda()).cpu(), fn(w))
    assert torch.equal(fake_quant_q4_0(w.cuda(), clip.cuda()).cpu(), fake_quant_q4_0(w, clip))
