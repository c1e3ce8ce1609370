"""Qwen3 model shapes (config.json fields of the real models) for the benchmarks' random-weight models: one table for
make_random_gguf.py, make_random_drafter.py and peers/hf_seed_server.py. Weights are random: timing does not depend on
their values. Importable without PyTorch or the training package."""

from __future__ import annotations

from typing import Any

_QWEN3 = dict(vocab_size=151936, head_dim=128, max_position_embeddings=40960, rope_theta=1_000_000.0, rms_norm_eps=1e-6)
SHAPES: dict[str, dict[str, Any]] = {
    # Qwen/Qwen3-8B's config.json: 36 layers, hidden 4096, 32 q / 8 kv heads of 128, FFN 12288, untied embeddings
    "qwen3-8b": dict(
        _QWEN3,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    ),
    # Qwen/Qwen3-1.7B: 28 layers, hidden 2048, 16 q / 8 kv heads of 128, FFN 6144, tied
    "qwen3-1.7b": dict(
        _QWEN3,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        tie_word_embeddings=True,
    ),
    # Qwen/Qwen3-0.6B: 28 layers, hidden 1024, 16 q / 8 kv heads of 128, FFN 3072, tied
    "qwen3-0.6b": dict(
        _QWEN3,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        tie_word_embeddings=True,
    ),
    # CPU dry runs of the real-shape job: the same vocabulary and kinds (untied target, tied drafters), tiny elsewhere
    "tiny-target": dict(
        _QWEN3,
        head_dim=64,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    ),
    "tiny-drafter": dict(
        _QWEN3,
        head_dim=64,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    ),
}
