"""How a Hugging Face checkpoint maps onto a llama.cpp GGUF, as llama.cpp's convert_hf_to_gguf.py maps it: which
architecture, which hyper-parameter keys, which tensor names, which order of rows, and the vocabulary's metadata.
`export` writes the tensor values (quant.py's blocks) into this layout; bench/models/make_random_gguf.py writes random
ones.

    architecture   HF class           GGUF arch   q/k rows                        extra keys / tensors
    Llama          LlamaForCausalLM   llama       permuted per head (see below)   vocab_size, rope.dimension_count
    Mistral        MistralForCausalLM llama       as Llama (full attention only)  as Llama
    Qwen2          Qwen2ForCausalLM   qwen2       as HF stores them (NeoX RoPE)   blk.N.attn_{q,k,v}.bias (F32)
    Qwen3          Qwen3ForCausalLM   qwen3       as HF stores them (NeoX RoPE)   blk.N.attn_{q,k}_norm

These are the architectures the pipeline takes a target of (`target` from a GGUF or an HF checkpoint), makes drafters
of (`drafter`) and writes (`export`): :data:`ARCHITECTURES`, the one list each of them reads.

HF rotates dimensions i and i + d/2 of a head together (``rotate_half``); llama.cpp's ``llama`` architecture rotates
2i and 2i + 1. The converter therefore reorders the rows of q_proj and k_proj within each head (:func:`qk_row_order`),
and so does export. A quantized block runs along a row (32 consecutive input weights), so reordering rows moves whole
blocks and never changes one: the Q4_0 blocks QAT trained are the blocks the file holds, only in another order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import LlamaFileType
from tokenizers import Tokenizer

from . import vocabulary
from .vocabulary import END_OF_TEXT, llama_cpp_pre_tokenizer

FILE_TYPES = {
    "F32": LlamaFileType.ALL_F32,
    "F16": LlamaFileType.MOSTLY_F16,
    "Q8_0": LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": LlamaFileType.MOSTLY_Q4_0,
}


@dataclass(frozen=True)
class Architecture:
    """One architecture export writes."""

    hf_class: str  # config.json "architectures"
    model_type: str  # config.json "model_type"
    gguf_arch: gguf.MODEL_ARCH
    # llama.cpp's converter for the class (its LlamaModel): q/k rows reordered to llama.cpp's RoPE pairs, and the keys
    # vocab_size, rope.dimension_count and (from tokenizer_config.json) tokenizer.ggml.add_space_prefix written
    llama_layout: bool
    # q_proj, k_proj and v_proj carry biases by the architecture's definition (Qwen2), written as F32 tensors beside
    # their weights; an architecture without (Llama, Qwen3) is refused when its config asks for biases
    qkv_bias: bool = False

    @property
    def gguf_name(self) -> str:
        return gguf.MODEL_ARCH_NAMES[self.gguf_arch]


QWEN3 = Architecture("Qwen3ForCausalLM", "qwen3", gguf.MODEL_ARCH.QWEN3, llama_layout=False)
LLAMA = Architecture("LlamaForCausalLM", "llama", gguf.MODEL_ARCH.LLAMA, llama_layout=True)
QWEN2 = Architecture("Qwen2ForCausalLM", "qwen2", gguf.MODEL_ARCH.QWEN2, llama_layout=False, qkv_bias=True)
# Llama's layers under another name (Mistral Nemo, Mistral Small 3, Ministral): llama.cpp's converter writes it as a
# llama GGUF, so a GGUF of one reads back as LlamaForCausalLM (gguf_architecture takes the first of a name).
MISTRAL = Architecture("MistralForCausalLM", "mistral", gguf.MODEL_ARCH.LLAMA, llama_layout=True)
ARCHITECTURES = (QWEN3, LLAMA, QWEN2, MISTRAL)
GGUF_ARCHITECTURES = ", ".join(sorted({a.gguf_name for a in ARCHITECTURES}))  # "llama, qwen2, qwen3": for refusals
HF_CLASSES = ", ".join(a.hf_class for a in ARCHITECTURES)


def gguf_architecture(name: str | None) -> Architecture | None:
    """The architecture a GGUF's ``general.architecture`` names, None when it is none of :data:`ARCHITECTURES`."""
    return next((a for a in ARCHITECTURES if a.gguf_name == name), None)


def architecture_of(config: dict[str, Any], where: Path | str = "config.json") -> Architecture:
    """The architecture of a checkpoint's config.json, refused in one line when export cannot write it."""
    classes = config.get("architectures") or []
    for arch in ARCHITECTURES:
        if arch.hf_class in classes or (not classes and config.get("model_type") == arch.model_type):
            if not arch.qkv_bias and (config.get("attention_bias") or config.get("mlp_bias")):
                raise ValueError(
                    f"{where}: a {arch.hf_class} with attention_bias or mlp_bias; export writes {arch.model_type} "
                    "checkpoints without biases (as the released models and every drafter made here have them)."
                )
            if arch is MISTRAL and config.get("sliding_window") is not None:
                raise ValueError(
                    f"{where}: a MistralForCausalLM with sliding_window {config['sliding_window']}; export writes "
                    "Mistral checkpoints of full attention (sliding_window null: Mistral Nemo, Small 3, Ministral)."
                )
            if arch.qkv_bias and (config.get("use_sliding_window") or config.get("mlp_bias")):
                raise ValueError(
                    f"{where}: a {arch.hf_class} with use_sliding_window or mlp_bias; export writes {arch.model_type} "
                    "checkpoints as Qwen2.5 has them (full attention, biases on q/k/v only)."
                )
            return arch
    raise ValueError(
        f"{where}: export writes {HF_CLASSES} checkpoints; found "
        f"{', '.join(classes) or config.get('model_type') or 'no architecture'}."
    )


def head_dim(config: dict[str, Any]) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def rope_parameters(config: dict[str, Any]) -> dict[str, Any]:
    """The config's RoPE settings (transformers 5's ``rope_parameters``, or the older ``rope_scaling``)."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    return rope.get("full_attention", rope)


def rope_theta(config: dict[str, Any]) -> float | None:
    """The RoPE base; refused for a scaling export cannot write: plain RoPE, or Llama 3's (its factors as the
    ``rope_freqs`` tensor, :func:`llama3_rope_factors`)."""
    rope = rope_parameters(config)
    theta = rope.get("rope_theta", config.get("rope_theta"))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", None, "llama3"):
        raise ValueError(
            f"RoPE scaling {rope_type!r} is not exported: export writes plain RoPE (rope_type 'default') and Llama 3's "
            "('llama3', as Llama 3.1–3.3 have it)."
        )
    return theta


# Llama 3's frequency scaling: what Llama 3.1, 3.2 and 3.3 ship with (factor 8, or 32 for 3.2), and what a GGUF's
# rope_freqs tensor is checked against when `target` reads one back into a config.
LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def llama3_rope_factors(config: dict[str, Any]) -> np.ndarray | None:
    """Llama 3 RoPE scaling as llama.cpp reads it: the divisor of each rotary frequency (``rope_freqs``, head_dim / 2
    float32), as llama.cpp's converter computes it from the config; None for any other RoPE."""
    rope = rope_parameters(config)
    if rope.get("rope_type", rope.get("type")) != "llama3":
        return None
    theta, dim = float(rope.get("rope_theta", config.get("rope_theta"))), head_dim(config)
    factor, low, high = float(rope["factor"]), float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
    old = float(rope["original_max_position_embeddings"])
    wavelengths = 2 * np.pi * theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    smooth = (old / wavelengths - low) / (high - low)
    factors = 1 / ((1 - smooth) / factor + smooth)
    factors = np.where(wavelengths < old / high, 1.0, np.where(wavelengths > old / low, factor, factors))
    return factors.astype(np.float32)


def llama3_rope_from_factors(factors: np.ndarray, theta: float, config: dict[str, Any]) -> dict[str, Any]:
    """A config's ``rope_parameters`` whose :func:`llama3_rope_factors` are a GGUF's ``rope_freqs``: Llama 3's
    thresholds (LLAMA3_ROPE) and the largest factor; refused when they give other factors."""
    rope = {"rope_type": "llama3", "rope_theta": theta, "factor": float(np.round(factors.max(), 4)), **LLAMA3_ROPE}
    expected = llama3_rope_factors({**config, "rope_parameters": rope})
    if expected is None or expected.shape != factors.shape or not np.allclose(expected, factors, rtol=1e-5):
        raise ValueError(
            "rope_freqs: frequency factors other than Llama 3's (factor, low/high frequency factors 1 and 4, "
            "original context 8192)"
        )
    return rope


def qk_row_order(arch: Architecture, hf_name: str, config: dict[str, Any]) -> np.ndarray | None:
    """For a Llama-layout q_proj or k_proj weight: which HF row each GGUF row holds (``gguf_rows = hf_rows[order]``),
    llama.cpp converter's permutation; ``None`` for every other tensor (rows kept)."""
    if not arch.llama_layout:
        return None
    if hf_name.endswith("self_attn.q_proj.weight"):
        heads = config["num_attention_heads"]
    elif hf_name.endswith("self_attn.k_proj.weight"):
        heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    else:
        return None
    size = head_dim(config)
    # within a head, GGUF row 2j + s holds HF row s·d/2 + j: the pair (j, j + d/2) becomes adjacent
    return np.arange(heads * size).reshape(heads, 2, size // 2).swapaxes(1, 2).reshape(-1)


# --------------------------------------------------------------------------------------------------------------------
# Metadata and vocabulary, as convert_hf_to_gguf.py writes them


def add_model_metadata(
    writer: gguf.GGUFWriter,
    arch: Architecture,
    config: dict[str, Any],
    name: str,
    file_type: LlamaFileType,
    n_params: int,
    base_model: dict[str, Any] | None = None,
) -> None:
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    if base_model is not None:  # what src/engine/gguf.ts reads into architecture.json's base_model
        writer.add_base_model_count(1)
        writer.add_base_model_name(0, base_model["name"])
        if base_model.get("revision"):
            writer.add_base_model_version(0, base_model["revision"])
    writer.add_size_label(gguf.size_label(n_params, 0, 0, 0))
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config.get("num_key_value_heads", config["num_attention_heads"]))
    if (theta := rope_theta(config)) is not None:
        writer.add_rope_freq_base(float(theta))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_key_length(head_dim(config))
    writer.add_value_length(head_dim(config))
    writer.add_file_type(file_type)
    if arch.llama_layout:
        writer.add_vocab_size(config["vocab_size"])
        writer.add_rope_dimension_count(head_dim(config))  # llama.cpp's llama refuses any other
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


GGUF_TOKEN_TYPES = {
    vocabulary.NORMAL: gguf.TokenType.NORMAL,
    vocabulary.CONTROL: gguf.TokenType.CONTROL,
    vocabulary.USER_DEFINED: gguf.TokenType.USER_DEFINED,
    vocabulary.UNUSED: gguf.TokenType.UNUSED,
}


def vocab_tokens(checkpoint_dir: Path, vocab_size: int) -> tuple[list[str], list[int]]:
    """Token strings and GGUF token types for ids 0..vocab_size-1 (vocabulary.gguf_vocabulary's rules)."""
    tokens, kinds = vocabulary.gguf_vocabulary(Tokenizer.from_file(str(checkpoint_dir / "tokenizer.json")), vocab_size)
    return tokens, [GGUF_TOKEN_TYPES[kind] for kind in kinds]


def pre_tokenizer_of(checkpoint_dir: Path) -> str:
    """llama.cpp's pre-tokenizer for the checkpoint's tokenizer.json (refused in one line when export has none)."""
    path = checkpoint_dir / "tokenizer.json"
    if not path.is_file():
        raise ValueError(f"{checkpoint_dir}: no tokenizer.json (export writes the vocabulary from it).")
    try:
        return llama_cpp_pre_tokenizer(json.loads(path.read_text()))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def add_vocab(writer: gguf.GGUFWriter, arch: Architecture, checkpoint_dir: Path, vocab_size: int) -> dict[str, int]:
    """Tokenizer metadata (tokens, types, merges, pre-tokenizer, special tokens, chat template); returns the special
    token ids written."""
    pre = pre_tokenizer_of(checkpoint_dir)
    tokens, types = vocab_tokens(checkpoint_dir, vocab_size)
    tokenizer_config_file = checkpoint_dir / "tokenizer_config.json"
    tokenizer_config = json.loads(tokenizer_config_file.read_text()) if tokenizer_config_file.is_file() else {}
    if arch.llama_layout and (add_prefix_space := tokenizer_config.get("add_prefix_space")) is not None:
        writer.add_add_space_prefix(add_prefix_space)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(checkpoint_dir, load_merges=True, n_vocab=vocab_size)
    # Qwen's own GGUFs carry bos = eos = pad = <|endoftext|> where the HF files leave one unset; without it llama.cpp
    # falls back to id 11, an ordinary token of the vocabulary. Other tokenizers say theirs in their config.
    if pre == "qwen2" and END_OF_TEXT in tokens:
        for kind in ("bos", "eos", "pad"):
            special.special_token_ids.setdefault(kind, tokens.index(END_OF_TEXT))
    # What the HF tokenizer does when its files say nothing: prepend nothing (llama.cpp's own default varies by
    # pre-tokenizer, e.g. llama-bpe prepends BOS).
    special.add_special_token.setdefault("bos", False)
    special.add_to_gguf(writer, quiet=True)
    return dict(special.special_token_ids)
