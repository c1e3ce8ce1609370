"""GGUF export of Llama-architecture checkpoints and of tokenizers other than Qwen's: what llama.cpp's converter writes
for a ``LlamaForCausalLM`` (architecture ``llama``, its keys, tensor names, q/k rows in llama.cpp's RoPE order), the
vocabulary metadata of SmolLM2's own GGUF, Q4_0 blocks kept whole by the row order, each supported pre-tokenizer
tokenizing in llama.cpp as in Hugging Face, and one-line refusals of what export cannot write. (Drafting parity of
Llama exports, F32 and QAT-exact Q4_0: test_parity.py's llama lab.)

    bash train/scripts/pytest.sh tests/test_export_llama.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from conftest import run_main, smollm2_gguf
from gguf import GGMLQuantizationType as T
from test_export import corpus_text, read_gguf, run_gguf_greedy_all, save_checkpoint, tiny_llama_config
from test_parity import TOKENIZER_TEXTS
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaForCausalLM

from specdraft_train.commands.export import export_gguf, manifest_path
from specdraft_train.formats.gguf_layout import LLAMA, qk_row_order
from specdraft_train.formats.gguf_reader import GgufReader
from specdraft_train.formats.vocabulary import hf_pre_tokenizer, vocab_fingerprint
from specdraft_train.training.quant import (
    fake_quant,
    pack_q4_0,
    prepare_qat,
    q4_0_quantize_blocks,
    search_clip,
)

VOCAB = 49_152  # SmolLM2's
# What the converter writes for SmolLM2 and export must write alike for any drafter with its tokenizer.
VOCAB_KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_space_prefix",
    "tokenizer.chat_template",
)


@pytest.fixture(scope="module")
def smollm2_fields() -> dict[str, Any]:
    """The metadata of SmolLM2's own GGUF (written by llama.cpp's converter)."""
    return {name: field.contents() for name, field in GgufReader(smollm2_gguf()).fields.items()}


def llama_checkpoint(tokenizer: Tokenizer | Path, out_dir: Path, seed: int, **config: Any) -> Path:
    torch.manual_seed(seed)
    vocab = tokenizer.get_vocab_size() if isinstance(tokenizer, Tokenizer) else VOCAB
    return save_checkpoint(LlamaForCausalLM(tiny_llama_config(vocab, **config)).eval(), tokenizer, out_dir)


def test_llama_export_writes_what_llama_cpps_converter_writes(
    smollm2_tokenizer: Path, smollm2_fields: dict[str, Any], tmp_path: Path
):
    checkpoint = llama_checkpoint(smollm2_tokenizer, tmp_path / "ckpt", seed=0, tie_word_embeddings=False)
    out = export_gguf(checkpoint, tmp_path / "m.gguf", "Q4_0")
    fields, tensors = read_gguf(out)

    expected = {
        "general.architecture": "llama",
        "general.file_type": int(gguf.LlamaFileType.MOSTLY_Q4_0),
        "llama.block_count": 2,
        "llama.context_length": 256,
        "llama.embedding_length": 64,
        "llama.feed_forward_length": 128,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.attention.key_length": 16,
        "llama.attention.value_length": 16,
        "llama.rope.dimension_count": 16,
        "llama.rope.freq_base": 100_000.0,
        "llama.vocab_size": VOCAB,
    }
    assert {k: fields.get(k) for k in expected} == expected
    assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    # the vocabulary as llama.cpp's converter wrote it for SmolLM2 itself: same tokens, types, merges, specials
    assert {k: fields.get(k) for k in VOCAB_KEYS} == {k: smollm2_fields.get(k) for k in VOCAB_KEYS}
    assert fields["tokenizer.ggml.pre"] == "smollm" and fields["tokenizer.ggml.eos_token_id"] == 2
    assert vocab_fingerprint(fields["tokenizer.ggml.tokens"]) == vocab_fingerprint(
        smollm2_fields["tokenizer.ggml.tokens"]
    )

    layer = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
    names = {"token_embd.weight", "output.weight", "output_norm.weight"}
    assert set(tensors) == names | {f"blk.{b}.{n}.weight" for b in range(2) for n in layer}
    assert tensors["output.weight"].tensor_type == T.Q8_0 and tensors["blk.1.attn_q.weight"].tensor_type == T.Q4_0
    assert json.loads(manifest_path(out).read_text())["tensor_types"] == {"Q8_0": 2, "Q4_0": 14, "F32": 5}

    # q and k: within each head, GGUF row 2j + s holds HF row s·d/2 + j (llama.cpp rotates adjacent pairs, HF halves)
    state = LlamaForCausalLM.from_pretrained(checkpoint).state_dict()
    for name, hf_name, heads in (("attn_q", "q_proj", 4), ("attn_k", "k_proj", 2), ("attn_v", "v_proj", 2)):
        w = state[f"model.layers.1.self_attn.{hf_name}.weight"]
        t = tensors[f"blk.1.{name}.weight"]
        stored = torch.from_numpy(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)).reshape(w.shape)
        expected_rows = fake_quant(w, T.Q4_0).detach()
        if name != "attn_v":  # v is not rotated: rows kept
            source = [h * 16 + s * 8 + j for h in range(heads) for j in range(8) for s in range(2)]
            expected_rows = expected_rows[source]
        assert torch.equal(stored, expected_rows), name


def test_the_q_k_row_order_moves_whole_q4_0_blocks(smollm2_tokenizer: Path, tmp_path: Path):
    # A Q4_0 block is 32 consecutive weights of one row: reordering rows reorders blocks and changes none, with plain
    # ggml quantization and with QAT's clipped blocks alike, so the file holds exactly the blocks QAT trained with.
    config = tiny_llama_config(VOCAB).to_dict()
    torch.manual_seed(1)
    w = torch.randn(64, 64) * torch.rand(64, 1)  # q_proj's shape (4 heads × 16, hidden 64), rows of varied scale
    w[:, ::29] *= 8  # outliers: the clip search clips some blocks
    order = qk_row_order(LLAMA, "model.layers.0.self_attn.q_proj.weight", config)
    assert order is not None and sorted(order.tolist()) == list(range(64)) and order.tolist() != list(range(64))
    plain = gguf.quants.quantize(w.numpy(), T.Q4_0)  # (64 rows, 2 blocks × 18 bytes)
    assert np.array_equal(gguf.quants.quantize(w[order].numpy(), T.Q4_0), plain[order])
    clip = search_clip(w)  # (128,) one factor per block, rows first
    assert (clip < 1).any()
    block_order = (order[:, None] * 2 + np.arange(2)).reshape(-1)  # a row's blocks follow it
    moved = pack_q4_0(*q4_0_quantize_blocks(w[order], clip[block_order])).reshape(64, -1)
    assert np.array_equal(moved, pack_q4_0(*q4_0_quantize_blocks(w, clip)).reshape(64, -1)[order])

    # end to end: a QAT export's q rows are the QAT model's quantized rows, in that order
    torch.manual_seed(2)
    model = LlamaForCausalLM(tiny_llama_config(VOCAB)).eval()
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight[:, ::29] *= 8
    matrices = {name for name, w in model.named_parameters() if w.dim() == 2}  # the tied head is the embedding
    qat = prepare_qat(model, clip_search=True)
    assert set(qat.targets) == matrices and len(matrices) == 1 + 2 * 7  # q/k/v/o, gate/up/down a layer: all covered
    assert (qat.targets["model.layers.0.self_attn.q_proj.weight"].quantizer.clip < 1).any()
    with qat.unwrapped():
        checkpoint = save_checkpoint(model, smollm2_tokenizer, tmp_path / "ckpt")
    out = export_gguf(checkpoint, tmp_path / "q.gguf", "Q4_0", qat_state=qat.save(checkpoint / "qat_state.safetensors"))
    t = read_gguf(out)[1]["blk.0.attn_q.weight"]
    stored = gguf.quants.dequantize(np.asarray(t.data), T.Q4_0).reshape(64, 64)
    assert torch.equal(torch.from_numpy(stored), qat.quantized_weight("model.layers.0.self_attn.q_proj.weight")[order])


def train_tokenizer(pre_tokenizer: pre_tokenizers.PreTokenizer, ignore_merges: bool = False) -> Tokenizer:
    """A small byte-level BPE trained on the corpus with ``pre_tokenizer``'s split."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator([corpus_text()], trainer)
    data = json.loads(tokenizer.to_str())
    data["model"]["ignore_merges"] = ignore_merges
    return Tokenizer.from_str(json.dumps(data))


# Digits and numerals of other scripts: where smollm's split (digits first) and GPT-2's differ.
DIGIT_TEXTS = ["x² + y³ = z⁴ ١٢٣ ５６ 2024-12-03 $1,234.56 v2.0.1 3..3 33333333", "I have 12 apples and 345 pears ½"]


def test_each_pre_tokenizer_tokenizes_in_llama_cpp_as_in_hugging_face(smollm2_tokenizer: Path, tmp_path: Path):
    as_converted = tmp_path / "smollm2-gpt2-split"  # SmolLM2's vocabulary with GPT-2's split alone, as transformers
    # converts SmolLM2's GGUF: llama.cpp's "gpt-2" tokenizes as it does (and unlike SmolLM2's own "smollm")
    as_converted.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (as_converted / name).write_text((smollm2_tokenizer / name).read_text())
    data = json.loads((as_converted / "tokenizer.json").read_text())
    data["pre_tokenizer"] = json.loads(hf_pre_tokenizer("gpt-2").__getstate__())
    (as_converted / "tokenizer.json").write_text(json.dumps(data))
    tokenizers: dict[str, tuple[str, Tokenizer | Path]] = {
        "SmolLM2": ("smollm", smollm2_tokenizer),
        "SmolLM2's vocabulary, GPT-2's split": ("gpt-2", as_converted),
        "trained, Qwen2's split": ("qwen2", train_tokenizer(hf_pre_tokenizer("qwen2"))),
        "trained, Llama 3's split": ("llama-bpe", train_tokenizer(hf_pre_tokenizer("llama-bpe"), ignore_merges=True)),
    }
    paths, expected = [], []
    for i, (label, (pre, tokenizer)) in enumerate(tokenizers.items()):
        small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, head_dim=16)
        checkpoint = llama_checkpoint(tokenizer, tmp_path / f"ckpt{i}", seed=i, num_key_value_heads=1, **small)
        paths.append(export_gguf(checkpoint, tmp_path / f"t{i}.gguf", "F16"))
        assert read_gguf(paths[-1])[0]["tokenizer.ggml.pre"] == pre, label
        hf = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
        expected.append([hf.encode(text, add_special_tokens=False).ids for text in TOKENIZER_TEXTS + DIGIT_TEXTS])
    answers = run_gguf_greedy_all(paths, {"texts": TOKENIZER_TEXTS + DIGIT_TEXTS})
    for label, ids, answer in zip(tokenizers, expected, answers):
        mismatches = [(t, e, a) for t, e, a in zip(TOKENIZER_TEXTS + DIGIT_TEXTS, ids, answer["tokens"]) if e != a]
        assert not mismatches, (label, json.dumps(mismatches[:2], ensure_ascii=False))
    # the digit texts tell the two SmolLM2 splits apart: a wrong name would have failed above
    assert expected[0][-2] != expected[1][-2]


def test_export_refuses_what_it_cannot_write_in_one_line(smollm2_tokenizer: Path, tmp_path: Path):
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "another architecture": (
            {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2"},
            r"export writes Qwen3ForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM checkpoints; "
            r"found Gemma2ForCausalLM\.$",
        ),
        "sliding-window attention": (
            {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": 4096},
            r"a MistralForCausalLM with sliding_window 4096; export writes Mistral checkpoints of full attention",
        ),
        "biases": (
            {"attention_bias": True},
            r"a LlamaForCausalLM with attention_bias or mlp_bias; export writes llama",
        ),
        "RoPE scaling": (
            {"rope_parameters": {"rope_type": "yarn", "rope_theta": 5e5, "factor": 8.0}},
            r"RoPE scaling 'yarn' is not exported: export writes plain RoPE \(rope_type 'default'\) and Llama 3's",
        ),
    }
    checkpoint = llama_checkpoint(smollm2_tokenizer, tmp_path / "ckpt", seed=3)
    config = json.loads((checkpoint / "config.json").read_text())
    out = tmp_path / "x.gguf"
    for case, (changes, says) in cases.items():
        (checkpoint / "config.json").write_text(json.dumps({**config, **changes}))
        code, _, err = run_main("export", "--checkpoint", str(checkpoint), "--out", str(out), "--type", "F32")
        assert code == 2 and "Traceback" not in err and re.search(says, err.splitlines()[-1]), (case, err)
    (checkpoint / "config.json").write_text(json.dumps(config))
    tokenizer_json = json.loads((checkpoint / "tokenizer.json").read_text())
    tokenizer_json["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}
    (checkpoint / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    code, _, err = run_main("export", "--checkpoint", str(checkpoint), "--out", str(out), "--type", "F32")
    last = err.splitlines()[-1]
    assert code == 2 and "Traceback" not in err and "pre-tokenizer Metaspace is none of llama.cpp's" in last, err
    assert "supported are qwen2 (" in last and "smollm (" in last, err
    assert not out.exists() and not manifest_path(out).exists()
