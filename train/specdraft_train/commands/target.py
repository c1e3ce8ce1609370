"""Stage `target`: a Llama-architecture GGUF (a real chat model as it is distributed) → the target the pipeline trains
against, as an HF checkpoint, and the GGUF it is served from.

What "the target" is, defined once: **the weights the GGUF holds, dequantized to fp32** (gguf-py's dequantization,
block by block what llama.cpp computes from the file: d·q + m for Q4_1). Both outputs are those same weights:

- an HF checkpoint (config, fp32 ``model.safetensors``, tokenizer, ``chat_template.jinja``, generation config with the
  chat model's end tokens, ``manifest.json``) that `reference`, `distill`, `evaluate` and `drafter` load like any other;
  Q/K rows un-permuted back to HF's layout as transformers' GGUF loader does (its ``load_gguf_checkpoint``, without
  the ``accelerate`` that its ``from_pretrained(gguf_file=…)`` needs);
- ``target-f32.gguf``: the input file with every tensor stored as F32 and every metadata key kept (tokenizer,
  pre-tokenizer, chat template), which `specdraft serve` / `generate` / `validate` run.

Why not serve the quantized file as it came: llama.cpp computes a quantized matmul with its activations quantized too
(Q8_1 for Q4_1 weights), so the served Q4_1 model is another function than the fp32 model transformers runs on the same
weights, and a small chat model's greedy answers part early; training would teach a drafter a target nobody serves.
With F32 weights both sides compute the same function up to float summation order, flash attention and llama.cpp's
F16 KV cache, and their greedy tokens part only at near ties (docs/training.md has the figures).
Why not F16: Q4_1's d·q + m values are not all representable in F16, so an F16 file would be a third model.

The tokenizer comes from transformers' GGUF converter, mended where it is wrong for these files: its eos is the GGUF's
bos (SmolLM2's would end answers at ``<|im_start|>``), and it splits text with GPT-2's rule whatever the GGUF's
pre-tokenizer says (SmolLM2's ``smollm`` also isolates digits): the special tokens are set from the GGUF's ids and the
split from :func:`vocabulary.hf_pre_tokenizer`. The generation config stops at the GGUF's eos and end-of-turn tokens.
``--no-weights`` writes the checkpoint without its weights and the served GGUF: where the weights cannot go yet (a GPU
machine that receives the GGUF in parts), a drafter from scratch can already be made and pretrained with its tokenizer.

    bash train/scripts/data/fetch_smollm2.sh          # prints the Q4_1 GGUF's path (pinned by sha256)
    python -m specdraft_train target --gguf train/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf --out runs/smol/target
    python -m specdraft_train target --gguf ... --out runs/smol/target-meta --no-weights   # tokenizer and config alone
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm
from transformers import AutoConfig, GenerationConfig, PretrainedConfig, PreTrainedTokenizerFast
from transformers.integrations.ggml import convert_gguf_tokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from ..formats.artifacts import AtomicFile, sha256_file, write_manifest
from ..formats.vocabulary import (
    END_OF_TEXT,
    IM_END,
    PRE_TOKENIZER_NAMES,
    find_pre_tokenizer,
    tokenizer_fingerprint,
    vocab_fingerprint,
)
from ..modeling.models import architecture_summary, new_model, save_checkpoint

SUPPORTED_ARCHITECTURES = ("llama",)  # general.architecture values this stage converts
SERVED_GGUF = "target-f32.gguf"  # in OUT: the target as specdraft serves it
# Beside the GGUF's eos: tokens that end a chat answer or a document wherever a vocabulary has them (llama.cpp counts
# both as end of generation too, so `generate` stops where `reference` does).
END_TOKENS = (IM_END, END_OF_TEXT)
# The GGUF's special token ids (tokenizer.ggml.<key>) by the HF tokenizer's name for them
SPECIAL_ID_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "pad": "padding_token_id"}


# ---------------------------------------------------------------------------------------------------------------------
# Reading the GGUF


def field_value(reader: gguf.GGUFReader, key: str) -> Any:
    """A metadata value (None when absent)."""
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def open_gguf(path: Path) -> gguf.GGUFReader:
    """The GGUF's reader, refused in one line when it is not a GGUF, not a supported architecture, or its vocabulary
    is not a GPT-2-style BPE with a pre-tokenizer this stage knows."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError) as error:
        raise ValueError(f"{path}: not a readable GGUF ({error})") from error
    architecture = field_value(reader, "general.architecture")
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"{path}: architecture {architecture!r}: `target` converts {', '.join(SUPPORTED_ARCHITECTURES)} GGUFs"
        )
    model, pre = field_value(reader, "tokenizer.ggml.model"), field_value(reader, "tokenizer.ggml.pre")
    if model != "gpt2" or pre not in PRE_TOKENIZER_NAMES:
        raise ValueError(
            f"{path}: vocabulary {model!r} with pre-tokenizer {pre!r}: `target` converts GPT-2-style BPE vocabularies "
            f"('gpt2') with pre-tokenizer {', '.join(repr(p) for p in PRE_TOKENIZER_NAMES)}"
        )
    return reader


def gguf_tokens(reader: gguf.GGUFReader) -> list[str]:
    return list(field_value(reader, "tokenizer.ggml.tokens"))


# ---------------------------------------------------------------------------------------------------------------------
# The HF checkpoint


def read_metadata(path: Path) -> dict[str, Any]:
    """transformers' reading of the GGUF's metadata: its config, its tokenizer's vocabulary and merges."""
    return load_gguf_checkpoint(str(path), return_tensors=False)


def model_config(metadata: dict[str, Any]) -> PretrainedConfig:
    """The HF config of the GGUF's model."""
    config = AutoConfig.for_model(**metadata["config"])
    # float32's 1e-5 read back as 9.999999747378752e-06: the shortest decimal of the same float32 is what HF writes
    config.rms_norm_eps = float(str(np.float32(config.rms_norm_eps)))
    return config


def load_model(path: Path, metadata: dict[str, Any]) -> torch.nn.Module:
    """The fp32 HF model of the GGUF's dequantized weights (transformers' own mapping of names and Q/K layout)."""
    config = model_config(metadata)
    model = new_model(config, seed=0)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"{path}: tensors the model lacks {unexpected[:3]}, or it needs {sorted(set(missing))[:3]}")
    model.tie_weights()
    model.eval()
    return model


def load_tokenizer(reader: gguf.GGUFReader, metadata: dict[str, Any]) -> PreTrainedTokenizerFast:
    """The GGUF's vocabulary as an HF fast tokenizer: transformers' conversion, its split and special tokens mended
    (module docstring), the chat template the GGUF carries."""
    converted, _ = convert_gguf_tokenizer(metadata["config"]["model_type"], metadata["tokenizer"])
    spec = json.loads(converted.to_str())
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokens = gguf_tokens(reader)
    special = {}
    for name, key in SPECIAL_ID_KEYS.items():
        if (token_id := field_value(reader, f"tokenizer.ggml.{key}")) is not None:
            special[f"{name}_token"] = tokens[int(token_id)]
    pre = find_pre_tokenizer(field_value(reader, "tokenizer.ggml.pre"))
    spec["model"]["ignore_merges"] = pre.ignore_merges
    backend = Tokenizer.from_str(json.dumps(spec))
    backend.pre_tokenizer = pre.build()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, chat_template=field_value(reader, "tokenizer.chat_template"), **special
    )
    # Saved into tokenizer_config.json, where export reads it back for tokenizer.ggml.add_space_prefix; set after
    # construction, since the constructor would rebuild the split from it.
    if (add_space_prefix := field_value(reader, "tokenizer.ggml.add_space_prefix")) is not None:
        tokenizer.init_kwargs["add_prefix_space"] = bool(add_space_prefix)
    return tokenizer


def gguf_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    """The target's tokenizer alone, as the stage writes it into the checkpoint (e.g. for a drafter's vocabulary)."""
    return load_tokenizer(open_gguf(path), read_metadata(path))


def generation_config(reader: gguf.GGUFReader) -> GenerationConfig:
    """Greedy, stopping at the GGUF's eos and at every END_TOKENS the vocabulary has."""
    tokens = gguf_tokens(reader)
    eos = field_value(reader, "tokenizer.ggml.eos_token_id")
    stop = ([] if eos is None else [int(eos)]) + [tokens.index(t) for t in END_TOKENS if t in tokens]
    stop = list(dict.fromkeys(stop))
    if not stop:
        raise ValueError("the GGUF names no eos token and its vocabulary has none of " + ", ".join(END_TOKENS))
    pad = field_value(reader, "tokenizer.ggml.padding_token_id")
    bos = field_value(reader, "tokenizer.ggml.bos_token_id")
    return GenerationConfig(
        bos_token_id=None if bos is None else int(bos),
        eos_token_id=stop,
        pad_token_id=stop[0] if pad is None else int(pad),
        do_sample=False,
    )


# ---------------------------------------------------------------------------------------------------------------------
# The served GGUF


def write_served_gguf(reader: gguf.GGUFReader, out_path: Path, progress: bool = True) -> None:
    """The input GGUF with every tensor dequantized to F32 (the same values the HF checkpoint holds, in the GGUF's own
    layout) and every metadata key kept but the file type; written atomically, one tensor in memory at a time."""
    architecture = field_value(reader, "general.architecture")
    writer = gguf.GGUFWriter(path=None, arch=architecture)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.ALL_F32)
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)
    for tensor in reader.tensors:
        shape = tuple(int(n) for n in reversed(tensor.shape))  # ggml's ne reversed: numpy's row-major shape
        writer.add_tensor_info(tensor.name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
    with AtomicFile(out_path) as tmp:
        writer.write_header_to_file(path=tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for tensor in tqdm(reader.tensors, desc=f"target: {out_path.name}", unit="tensor", disable=not progress):
            shape = tuple(int(n) for n in reversed(tensor.shape))
            writer.write_tensor_data(gguf.dequantize(tensor.data, tensor.tensor_type).reshape(shape))
        writer.close()


# ---------------------------------------------------------------------------------------------------------------------
# The stage


def run(gguf_path: Path, out_dir: Path, progress: bool = True, weights: bool = True) -> dict[str, Any]:
    """Convert ``gguf_path`` into ``out_dir`` (module docstring); returns the manifest. ``weights=False``: the
    checkpoint's other files alone (config, tokenizer, chat template, generation config: all that `drafter --init
    scratch` reads), the same bytes as in the full checkpoint, and no served GGUF."""
    start = time.time()
    reader = open_gguf(gguf_path)
    metadata = read_metadata(gguf_path)
    tokenizer = load_tokenizer(reader, metadata)
    if weights:
        model = load_model(gguf_path, metadata)
    else:
        with torch.device("meta"):  # the architecture and its parameter count, no memory
            model = new_model(model_config(metadata), seed=0)
    model.generation_config = generation_config(reader)
    vocab_size = model.config.vocab_size
    if len(gguf_tokens(reader)) != vocab_size:
        raise ValueError(f"{gguf_path}: {len(gguf_tokens(reader))} tokens, but the model's vocab_size is {vocab_size}")
    outputs = save_checkpoint(model, out_dir, tokenizer, weights=weights)
    if weights:
        write_served_gguf(reader, out_dir / SERVED_GGUF, progress)
        outputs.append(SERVED_GGUF)
    types: dict[str, int] = {}
    for tensor in reader.tensors:
        types[tensor.tensor_type.name] = types.get(tensor.tensor_type.name, 0) + 1
    return write_manifest(
        out_dir,
        "target",
        outputs=outputs,
        params={"served": {"file": SERVED_GGUF, "type": "F32"} if weights else None, "weights": weights},
        inputs={"gguf": {"path": str(gguf_path), "sha256": sha256_file(gguf_path), "tensor_types": types}},
        extra={
            "architecture": architecture_summary(model),
            "gguf": {
                key: field_value(reader, key)
                for key in ("general.name", "general.architecture", "general.file_type", "tokenizer.ggml.pre")
            },
            "special_ids": {
                "bos": tokenizer.bos_token_id,
                "eos": tokenizer.eos_token_id,
                "pad": tokenizer.pad_token_id,
                "stop": model.generation_config.eos_token_id,
            },
            # the served file's token list and the tokenizer's, as export would write it: validate and generate compare
            # fingerprints, so the two must be one vocabulary
            "vocab_fingerprint": vocab_fingerprint(gguf_tokens(reader)),
            "tokenizer_vocab_fingerprint": tokenizer_fingerprint(tokenizer, vocab_size),
            "seconds": time.time() - start,
        },
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "target",
        help="a Llama-architecture GGUF → the target's HF checkpoint and its F32 GGUF for serving",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--gguf", required=True, type=Path, help="the target as distributed (any type gguf-py dequantizes)")
    p.add_argument("--out", required=True, type=Path, help=f"checkpoint directory to write (with {SERVED_GGUF})")
    p.add_argument(
        "--no-weights",
        dest="weights",
        action="store_false",
        help="only the config, tokenizer, chat template and generation config (a few MB; all `drafter --init "
        "scratch` needs): no weights, no served GGUF",
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    manifest = run(args.gguf, args.out, weights=args.weights)
    summary = manifest["architecture"]
    print(
        json.dumps(
            {
                "checkpoint": str(args.out),
                "served": str(args.out / SERVED_GGUF) if args.weights else None,
                "architecture": summary["architecture"],
                "parameters": summary["parameters"],
                "special_ids": manifest["special_ids"],
            }
        )
    )
    return 0
