"""GGUF export: Qwen3 metadata and vocabulary as convert_hf_to_gguf.py writes them, tensor types per file type, and
QAT-exact Q4_0 blocks (including clipped ones) guarded by training's fingerprints.

    bash train/scripts/pytest.sh tests/test_export.py

Also home of the tiny-checkpoint helpers the parity tests import.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, PreTrainedModel, Qwen3Config, Qwen3ForCausalLM

from specdraft_train.commands.export import export_gguf, manifest_path
from specdraft_train.formats.artifacts import sha256_file
from specdraft_train.formats.gguf_reader import GgufReader
from specdraft_train.formats.vocabulary import QWEN2_SPLIT_REGEX, TOKENIZER_FILES
from specdraft_train.training.quant import prepare_qat, q4_0_quantize_blocks

TRAIN_DIR = Path(__file__).resolve().parents[1]
GGUF_GREEDY = TRAIN_DIR / "tests" / "gguf_greedy.mjs"
END_OF_TEXT = "<|endoftext|>"


# --------------------------------------------------------------------------------------------------------------------
# Helpers (also used by test_parity.py)


def corpus_text() -> str:
    """A few hundred KB of deterministic text: standard-library sources shipped with this Python."""
    import json.decoder
    import json.encoder

    return "".join(Path(m.__file__).read_text() for m in (textwrap, json.decoder, json.encoder))


def train_bpe(text: str, vocab_size: int) -> Tokenizer:
    """A byte-level BPE with Qwen2's pre-tokenizer (what llama.cpp's 'qwen2' pre-tokenizer reproduces)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator([text], trainer)
    return tokenizer


def tiny_config(vocab_size: int, **overrides: Any) -> Qwen3Config:
    fields: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        rope_parameters={"rope_theta": 10_000.0, "rope_type": "default"},
        eos_token_id=0,
        pad_token_id=0,
        bos_token_id=None,
    )
    fields.update(overrides)
    return Qwen3Config(**fields)


def tiny_llama_config(vocab_size: int, **overrides: Any) -> LlamaConfig:
    """A tiny Llama (SmolLM2's kind: tied head, RoPE θ 10^5, SmolLM2's special token ids)."""
    fields: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        rope_parameters={"rope_theta": 100_000.0, "rope_type": "default"},
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    fields.update(overrides)
    return LlamaConfig(**fields)


def save_checkpoint(model: PreTrainedModel, tokenizer: Tokenizer | Path, out_dir: Path) -> Path:
    """``model`` saved with ``tokenizer``: a tokenizers object (its tokenizer.json) or a folder of tokenizer files
    (e.g. the ``smollm2_tokenizer`` fixture's)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    if isinstance(tokenizer, Path):
        for name in (*TOKENIZER_FILES, "chat_template.jinja"):
            if (tokenizer / name).is_file():
                shutil.copy(tokenizer / name, out_dir / name)
    else:
        tokenizer.save(str(out_dir / "tokenizer.json"))
    return out_dir


def run_gguf_greedy(gguf_path: Path, request: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    """train/tests/gguf_greedy.mjs on ``gguf_path`` (node-llama-cpp, CPU, one thread pool worker); ``env`` adds
    variables, e.g. ``ggml_cpu.pinned_env`` to run one CPU backend variant."""
    return run_gguf_greedy_all([gguf_path], request, env)[0]


def run_gguf_greedy_all(
    gguf_paths: Sequence[Path], request: dict[str, Any], env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """:func:`run_gguf_greedy` for several GGUFs in one node process (its start-up is most of a tiny model's run)."""
    env = {**os.environ, "UV_THREADPOOL_SIZE": "1", **(env or {})}
    result = subprocess.run(
        ["node", str(GGUF_GREEDY), *map(str, gguf_paths)],
        input=json.dumps(request),
        text=True,
        capture_output=True,
        env=env,
        cwd=TRAIN_DIR.parent,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout)
    return answer if len(gguf_paths) > 1 else [answer]


# --------------------------------------------------------------------------------------------------------------------
# Tests


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_bpe(corpus_text(), 320)


def read_gguf(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    reader = GgufReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    tensors = {t.name: t for t in reader.tensors}
    return fields, tensors


def test_qwen3_metadata_vocabulary_and_tensor_types(tokenizer: Tokenizer, tmp_path: Path):
    torch.manual_seed(0)
    config = tiny_config(tokenizer.get_vocab_size() + 12, tie_word_embeddings=False)  # padded vocab, untied head
    model = Qwen3ForCausalLM(config).eval()
    checkpoint = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    out = export_gguf(checkpoint, tmp_path / "m.gguf", "Q4_0")
    fields, tensors = read_gguf(out)

    expected = {
        "general.architecture": "qwen3",
        "general.type": "model",
        "general.file_type": int(gguf.LlamaFileType.MOSTLY_Q4_0),
        "general.quantization_version": gguf.GGML_QUANT_VERSION,
        "qwen3.block_count": 2,
        "qwen3.context_length": 256,
        "qwen3.embedding_length": 64,
        "qwen3.feed_forward_length": 128,
        "qwen3.attention.head_count": 4,
        "qwen3.attention.head_count_kv": 2,
        "qwen3.attention.key_length": 16,
        "qwen3.attention.value_length": 16,
        "qwen3.rope.freq_base": 10_000.0,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.add_bos_token": False,
    }
    assert {k: fields.get(k) for k in expected} == expected
    assert fields["qwen3.attention.layer_norm_rms_epsilon"] == pytest.approx(config.rms_norm_eps)
    eot = tokenizer.token_to_id(END_OF_TEXT)
    for key in ("bos_token_id", "eos_token_id", "padding_token_id"):
        assert fields[f"tokenizer.ggml.{key}"] == eot
    tokens = fields["tokenizer.ggml.tokens"]
    vocab = tokenizer.get_vocab()
    assert len(tokens) == config.vocab_size
    assert all(tokens[i] == t for t, i in vocab.items())
    assert tokens[-1] == f"[PAD{config.vocab_size - 1}]"
    types = fields["tokenizer.ggml.token_type"]
    assert types[eot] == gguf.TokenType.CONTROL and types[-1] == gguf.TokenType.UNUSED
    assert types[vocab["Ġthe"]] == gguf.TokenType.NORMAL
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    assert fields["tokenizer.ggml.merges"] == [" ".join(m) for m in merges]

    # tensor names as llama.cpp's qwen3 loader expects them, types per the Q4_0 mix
    layer = {
        "attn_q": T.Q4_0,
        "attn_k": T.Q4_0,
        "attn_v": T.Q4_0,
        "attn_output": T.Q4_0,
        "ffn_gate": T.Q4_0,
        "ffn_up": T.Q4_0,
        "ffn_down": T.Q4_0,
        "attn_norm": T.F32,
        "ffn_norm": T.F32,
        "attn_q_norm": T.F32,
        "attn_k_norm": T.F32,
    }
    expected_types = {
        "token_embd.weight": T.Q8_0,
        "output.weight": T.Q8_0,
        "output_norm.weight": T.F32,
        **{f"blk.{b}.{n}.weight": t for b in range(2) for n, t in layer.items()},
    }
    assert {name: t.tensor_type for name, t in tensors.items()} == expected_types
    assert list(tensors["blk.0.ffn_down.weight"].shape) == [128, 64]  # ggml ne = torch shape reversed

    # values: plain gguf-py quantization of the checkpoint's weights
    state = model.state_dict()
    hf = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output.weight": "lm_head.weight",
        "blk.1.ffn_down.weight": "model.layers.1.mlp.down_proj.weight",
        "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight",
        "blk.0.attn_k_norm.weight": "model.layers.0.self_attn.k_norm.weight",
    }
    for name, hf_name in hf.items():
        t = tensors[name]
        w = state[hf_name].numpy()
        if t.tensor_type == T.F32:
            assert np.array_equal(np.asarray(t.data).reshape(w.shape), w)
        else:
            assert np.array_equal(np.asarray(t.data).reshape(-1), gguf.quants.quantize(w, t.tensor_type).reshape(-1))

    manifest = json.loads(manifest_path(out).read_text())
    assert manifest["outputs"]["m.gguf"]["sha256"] == sha256_file(out)
    assert manifest["tensor_types"] == {"Q8_0": 2, "Q4_0": 14, "F32": 9}


@pytest.mark.parametrize("embedding_type", ["Q8_0", "Q4_0"])
def test_qat_export_writes_the_learned_blocks(embedding_type: str, tokenizer: Tokenizer, tmp_path: Path):
    torch.manual_seed(1)
    model = Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size())).eval()
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[:, ::29] *= 8  # outliers: the clip search then clips some blocks
        model.model.embed_tokens.weight[::7, ::29] *= 8  # and in the (tied) embedding, when it is Q4_0
    qat = prepare_qat(model, clip_search=True, embedding_type=embedding_type)
    with qat.unwrapped():
        checkpoint = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    state_file = qat.save(checkpoint / "qat_state.safetensors")
    out = export_gguf(checkpoint, tmp_path / "qat.gguf", "Q4_0", qat_state=state_file)  # the state's embedding type
    plain = export_gguf(checkpoint, tmp_path / "plain.gguf", "Q4_0", embedding_type=embedding_type, ptq=True)
    _, tensors = read_gguf(out)
    _, plain_tensors = read_gguf(plain)
    assert tensors["token_embd.weight"].tensor_type == T[embedding_type] and "output.weight" not in tensors
    assert json.loads(manifest_path(out).read_text())["params"]["embedding_type"] == embedding_type

    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, 2)
    clipped = set()
    for hf_name, target in qat.targets.items():
        t = tensors[name_map.get_name(hf_name, try_suffixes=(".weight",))]
        stored = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(target.modules[0].weight.shape)
        assert torch.equal(torch.from_numpy(stored), qat.quantized_weight(hf_name)), hf_name
        if target.quantizer.clip is not None and (target.quantizer.clip < 1).any():
            clipped.add(hf_name)
            assert not np.array_equal(np.asarray(t.data), np.asarray(plain_tensors[t.name].data))
    assert "model.layers.0.mlp.up_proj.weight" in clipped
    assert ("model.embed_tokens.weight" in clipped) == (embedding_type == "Q4_0")  # Q8_0 has nothing to clip
    assert json.loads(manifest_path(out).read_text())["inputs"]["qat_state_sha256"] == sha256_file(state_file)

    # a QAT state without clipping writes exactly what plain ggml quantization writes
    qat.remove()
    plain_qat = prepare_qat(model, clip_search=False, embedding_type=embedding_type)
    no_clip = export_gguf(
        checkpoint, tmp_path / "noclip.gguf", "Q4_0", qat_state=plain_qat.save(tmp_path / "noclip.safetensors")
    )
    assert sha256_file(no_clip) == sha256_file(plain)


def test_export_refuses_a_qat_state_from_another_step(tokenizer: Tokenizer, tmp_path: Path):
    torch.manual_seed(2)
    model = Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size())).eval()
    qat = prepare_qat(model, clip_search=True)
    state_file = qat.save(tmp_path / "qat_state.safetensors")
    with torch.no_grad():
        qat.latent_weight("model.layers.1.self_attn.o_proj.weight").mul_(1.5)  # a later training step
    with qat.unwrapped():
        checkpoint = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    with pytest.raises(ValueError, match="model.layers.1.self_attn.o_proj.weight: quantized weights differ"):
        export_gguf(checkpoint, tmp_path / "x.gguf", "Q4_0", qat_state=state_file)
    with pytest.raises(ValueError, match="trained for Q4_0, but the export type is Q8_0"):
        export_gguf(checkpoint, tmp_path / "x.gguf", "Q8_0", qat_state=state_file)
    assert not (tmp_path / "x.gguf").exists()


def test_an_all_q4_0_export_stores_embedding_and_head_at_q4_0_and_is_smaller(tokenizer: Tokenizer, tmp_path: Path):
    torch.manual_seed(7)
    model = Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size(), tie_word_embeddings=False)).eval()
    checkpoint = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    mixed = export_gguf(checkpoint, tmp_path / "mixed.gguf", "Q4_0")
    all_q4 = export_gguf(checkpoint, tmp_path / "all-q4.gguf", "Q4_0", embedding_type="Q4_0")
    _, tensors = read_gguf(all_q4)
    state = model.state_dict()
    for name, hf_name in (("token_embd.weight", "model.embed_tokens.weight"), ("output.weight", "lm_head.weight")):
        assert tensors[name].tensor_type == T.Q4_0
        w = state[hf_name].numpy()
        assert np.array_equal(np.asarray(tensors[name].data).reshape(-1), gguf.quants.quantize(w, T.Q4_0).reshape(-1))
    manifest = json.loads(manifest_path(all_q4).read_text())
    assert manifest["tensor_types"] == {"Q4_0": 16, "F32": 9}
    # the two vocabulary tensors (vocab × 64) go from 34 to 18 bytes per block of 32; nothing else differs
    saved = 2 * (tokenizer.get_vocab_size() * 64 // 32) * (34 - 18)
    assert all_q4.stat().st_size == pytest.approx(mixed.stat().st_size - saved, abs=64)  # alignment padding


def test_a_size_cap_defaults_to_q4_0_embeddings_and_refuses_a_larger_file(tokenizer: Tokenizer, tmp_path: Path):
    torch.manual_seed(8)
    model = Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size())).eval()
    checkpoint = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    capped = export_gguf(checkpoint, tmp_path / "capped.gguf", "Q4_0", max_bytes=10**9)
    _, tensors = read_gguf(capped)
    assert tensors["token_embd.weight"].tensor_type == T.Q4_0
    size = capped.stat().st_size
    assert export_gguf(checkpoint, tmp_path / "exact.gguf", "Q4_0", max_bytes=size).stat().st_size == size

    over = tmp_path / "over.gguf"
    with pytest.raises(
        ValueError,
        match=rf"over\.gguf: {size:,} bytes as Q4_0 with Q4_0 embeddings, over the cap of "
        rf"{size - 1:,} \(largest: token_embd\.weight Q4_0 ",
    ):
        export_gguf(checkpoint, over, "Q4_0", max_bytes=size - 1)
    with pytest.raises(ValueError, match=r"with Q8_0 embeddings, .*; Q4_0 embeddings \(--embedding-type Q4_0\)"):
        export_gguf(checkpoint, over, "Q4_0", embedding_type="Q8_0", max_bytes=size)
    assert not over.exists() and not manifest_path(over).exists()
    assert list(tmp_path.glob("*.tmp")) == []  # the refused file's temporary is gone too

    # a QAT state fixes the embedding type: a cap does not change it, another explicit type is refused
    qat = prepare_qat(model, embedding_type="Q8_0")
    state_file = qat.save(tmp_path / "qat.safetensors")
    _, tensors = read_gguf(export_gguf(checkpoint, tmp_path / "q.gguf", "Q4_0", qat_state=state_file, max_bytes=10**9))
    assert tensors["token_embd.weight"].tensor_type == T.Q8_0
    with pytest.raises(ValueError, match="trained with Q8_0 embeddings, but the export asks for Q4_0"):
        export_gguf(checkpoint, over, "Q4_0", qat_state=state_file, embedding_type="Q4_0")
    with pytest.raises(ValueError, match="Embedding type Q4_0 is for Q4_0 files"):
        export_gguf(checkpoint, over, "Q8_0", embedding_type="Q4_0")


def test_export_names_the_split_the_tokenizer_does_and_refuses_one_llama_cpp_lacks(
    tokenizer: Tokenizer, tmp_path: Path
):
    torch.manual_seed(3)
    model = Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size()))
    checkpoint = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    data = json.loads((checkpoint / "tokenizer.json").read_text())

    def with_tokenizer(**changes: Any) -> Path:
        (checkpoint / "tokenizer.json").write_text(json.dumps({**data, **changes}))
        return checkpoint

    # GPT-2's byte-level regex alone: llama.cpp's "gpt-2" (the same vocabulary, another split)
    gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    fields, _ = read_gguf(export_gguf(with_tokenizer(pre_tokenizer=gpt2), tmp_path / "gpt2.gguf", "F16"))
    assert fields["tokenizer.ggml.pre"] == "gpt-2"

    supported = r"supported are qwen2 \(.*\); llama-bpe \(.*\); smollm \(.*\); tekken \(.*\); gpt-2 \(.*\)\.$"
    split, byte_level = data["pre_tokenizer"]["pretokenizers"]
    other_split = {**split, "pattern": {"Regex": r"\p{L}+|\s+"}}
    refused = {
        "prefix space": ({"pre_tokenizer": {**gpt2, "add_prefix_space": True}}, r"ByteLevel\(add_prefix_space=True"),
        "another regex": (
            {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [other_split, byte_level]}},
            r"Split\('\\\\p\{L\}\+\|\\\\s\+', Isolated\) → ByteLevel\(add_prefix_space=False, use_regex=False\)",
        ),
        "ignore_merges": ({"model": {**data["model"], "ignore_merges": True}}, "with ignore_merges"),
    }
    for case, (changes, found) in refused.items():
        with pytest.raises(ValueError, match=rf"tokenizer\.json: the tokenizer's pre-tokenizer .*{found}.*{supported}"):
            export_gguf(with_tokenizer(**changes), tmp_path / "x.gguf", "F16")
        assert not (tmp_path / "x.gguf").exists(), case
    with pytest.raises(ValueError, match=r"holds a WordPiece model; export writes GPT-2-style byte-level BPE"):
        export_gguf(with_tokenizer(model={**data["model"], "type": "WordPiece"}), tmp_path / "x.gguf", "F16")


def test_cli_stage(tokenizer: Tokenizer, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from specdraft_train.__main__ import main

    torch.manual_seed(4)
    checkpoint = save_checkpoint(Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size())), tokenizer, tmp_path / "c")
    out = tmp_path / "out" / "d.gguf"
    assert main(["export", "--checkpoint", str(checkpoint), "--out", str(out), "--type", "F16"]) == 0
    fields, tensors = read_gguf(out)
    assert fields["general.file_type"] == int(gguf.LlamaFileType.MOSTLY_F16)
    assert tensors["token_embd.weight"].tensor_type == T.F16 and tensors["output_norm.weight"].tensor_type == T.F32
    manifest = json.loads(manifest_path(out).read_text())
    assert manifest["outputs"]["d.gguf"]["sha256"] == sha256_file(out)
    assert manifest["outputs"]["d.gguf"]["sha256"][:16] in capsys.readouterr().out
    assert main(["export", "--checkpoint", str(tmp_path / "missing"), "--out", str(out), "--type", "F16"]) != 0

    capsys.readouterr()
    q4 = tmp_path / "out" / "q4.gguf"
    assert main(["export", "--checkpoint", str(checkpoint), "--out", str(q4), "--embedding-type", "q4_0"]) == 0
    assert "with Q4_0 embeddings" in capsys.readouterr().out
    assert read_gguf(q4)[1]["token_embd.weight"].tensor_type == T.Q4_0
    assert main(["export", "--checkpoint", str(checkpoint), "--out", str(q4), "--max-bytes", "100"]) != 0
    assert "over the cap of 100" in capsys.readouterr().err


def test_q4_0_blocks_of_an_exported_tensor_match_quant_module(tokenizer: Tokenizer, tmp_path: Path):
    # the export path without QAT and quant.py's block quantizer agree on the bytes of a decoder weight
    torch.manual_seed(5)
    model = Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size()))
    checkpoint = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    _, tensors = read_gguf(export_gguf(checkpoint, tmp_path / "m.gguf", "Q4_0"))
    from specdraft_train.training.quant import pack_q4_0

    w = model.model.layers[1].mlp.gate_proj.weight.detach()
    assert np.array_equal(
        np.asarray(tensors["blk.1.ffn_gate.weight"].data).reshape(-1), pack_q4_0(*q4_0_quantize_blocks(w)).reshape(-1)
    )


@pytest.mark.parametrize("out_type", ["F16", "Q8_0"])
def test_qat_for_other_file_types_matches_the_export(out_type: str, tokenizer: Tokenizer, tmp_path: Path):
    torch.manual_seed(6)
    model = Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size())).eval()
    qat = prepare_qat(model, out_type=out_type)
    assert {t.qtype.name for t in qat.targets.values()} == {out_type}
    with qat.unwrapped():
        checkpoint = save_checkpoint(model, tokenizer, tmp_path / "ckpt")
    out = export_gguf(checkpoint, tmp_path / "m.gguf", out_type, qat_state=qat.save(tmp_path / "qat.safetensors"))
    _, tensors = read_gguf(out)
    t = tensors["blk.0.attn_v.weight"]
    stored = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(32, 64)  # v_proj: (kv heads × 16, 64)
    assert torch.equal(torch.from_numpy(stored), qat.quantized_weight("model.layers.0.self_attn.v_proj.weight"))
