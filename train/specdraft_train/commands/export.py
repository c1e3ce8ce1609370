"""Export a Hugging Face checkpoint (Qwen3 or Llama architecture, GPT-2-style byte-level BPE tokenizer) to GGUF through
the official ``gguf`` package, with QAT-exact Q4_0 blocks.

Metadata, tensor names and layout, and vocabulary follow llama.cpp's convert_hf_to_gguf.py (gguf_layout.py:
``Qwen3ForCausalLM`` as ``qwen3``, ``LlamaForCausalLM`` as ``llama`` with its q/k rows in llama.cpp's RoPE order; the
pre-tokenizer chosen from the tokenizer, vocabulary.PRE_TOKENIZERS: ``qwen2``, ``llama-bpe``, ``smollm``, ``gpt-2``;
special tokens and chat template from the tokenizer's files). A checkpoint or tokenizer it cannot write is refused in
one line naming what is supported. Tensor types per file type come from
:func:`specdraft_train.training.quant.gguf_storage_type`, the same rule QAT trains against:

    file type   norms   token embedding / output   other weights
    F32         F32     F32                        F32
    F16         F32     F16                        F16
    Q8_0        F32     Q8_0                       Q8_0
    Q4_0        F32     --embedding-type:          Q4_0
                        Q8_0 by default, Q4_0 under --max-bytes

A checkpoint of `distill --qat` holds its QAT state (``qat_state.safetensors``, written by ``QatState.save``); export
uses it as `evaluate` does, unless ``--qat-state FILE`` names another (e.g. one re-fingerprinted on the CPU,
scripts/gpu/refingerprint_qat.py) or ``--no-qat-state`` asks for post-training quantization of the latent weights.
With a QAT state the Q4_0 blocks are the ones training computed, including per-block clip factors, every quantized
tensor is checked against the fingerprint training recorded, and the embedding type is the one training used; a file
type or an embedding type that contradicts the state is refused, naming the way out. ``--max-bytes N`` refuses to write
a file larger than N bytes, naming its largest tensors. ``--preset qwen3-chat`` brings the real job's layout and cap
(all-Q4_0, 10^9 bytes).

    python -m specdraft_train export --checkpoint runs/real/distilled-qat --out drafter-q4_0.gguf --preset qwen3-chat
    python -m specdraft_train export --checkpoint ckpt --out d.gguf --max-bytes 1000000000   # all-Q4_0 under 1 GB

Writes ``<out>`` atomically, ``<out>.manifest.json`` (sha256 of the GGUF, inputs, tensor types) beside it, and, for a
checkpoint of `distill`, ``<name>.data_manifest.json`` (the training sources, for ``specdraft pack --manifest``,
provenance.py) and ``general.base_model`` (the model the chain started from, or ``--base-model NAME@REV``).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType
from safetensors import safe_open

from ..config import DEFAULT_EMBEDDING_TYPE, add_embedding_type_argument, announce, resolve_embedding_type
from ..formats.artifacts import (
    MANIFEST_NAME,
    AtomicFile,
    atomic_write_json,
    read_manifest,
    sha256_file,
    verify_stage_dir,
)
from ..formats.gguf_layout import (
    FILE_TYPES,
    Architecture,
    add_model_metadata,
    add_vocab,
    architecture_of,
    pre_tokenizer_of,
    qk_row_order,
)
from ..formats.provenance import data_manifest, data_manifest_path
from ..modeling.models import checkpoint_qat_state
from ..presets import add_preset_argument, get_preset
from ..training.quant import (
    OUT_TYPES,
    LoadedQatState,
    fake_quant,
    gguf_storage_type,
    load_qat_state,
    pack_q4_0,
    q4_0_quantize_blocks,
    verify_fingerprint,
)

MANIFEST_SUFFIX = ".manifest.json"


# --------------------------------------------------------------------------------------------------------------------
# Checkpoint reading


def read_config(checkpoint_dir: Path) -> tuple[dict[str, Any], Architecture]:
    """The checkpoint's config.json and its architecture (refused in one line when export cannot write it)."""
    config = json.loads((checkpoint_dir / "config.json").read_text())
    return config, architecture_of(config, checkpoint_dir)


def read_tensors(checkpoint_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint's safetensors file(s), by HF name (sharded checkpoints: all shards)."""
    files = sorted(checkpoint_dir.glob("*.safetensors"))
    files = [f for f in files if f.name.startswith("model")]
    if not files:
        raise FileNotFoundError(f"{checkpoint_dir}: no model*.safetensors")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
    return tensors


def parse_base_model(text: str) -> dict[str, str | None]:
    """``NAME[@REV]`` → {"name", "revision"} (pack's --base convention; the revision may be left out here)."""
    name, at, revision = text.rpartition("@") if "@" in text else (text, "", "")
    if not name:
        raise ValueError(f"--base-model {text!r}: expected NAME or NAME@REV, e.g. Qwen/Qwen3-1.7B@70d244cc")
    return {"name": name, "revision": revision or None}


# --------------------------------------------------------------------------------------------------------------------
# Tensors


@dataclass
class EncodedTensor:
    gguf_name: str
    data: np.ndarray
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]


def encode_tensor(
    hf_name: str, weight: torch.Tensor, qtype: GGMLQuantizationType, qat: LoadedQatState | None
) -> np.ndarray:
    """The bytes (or F32/F16 array) GGUF stores for ``weight``; with a QAT state, the blocks training computed."""
    w = weight.to(torch.float32)
    if qtype == GGMLQuantizationType.F32:
        return w.numpy()
    if qtype == GGMLQuantizationType.F16:
        data = w.numpy().astype(np.float16)
    elif qtype == GGMLQuantizationType.Q4_0 and qat is not None and hf_name in qat.clips:
        # The learned blocks: d from the stored clip factor, q from that d (gguf.quants only derives d from the max).
        d, q = q4_0_quantize_blocks(w, qat.clips[hf_name])
        data = pack_q4_0(d, q).reshape(*w.shape[:-1], -1)  # (rows, row_bytes)
    else:
        data = gguf.quants.quantize(w.numpy(), qtype)
    if qat is not None and hf_name in qat.fingerprints:
        stored = torch.from_numpy(gguf.quants.dequantize(data, qtype)).reshape(w.shape)
        trained = fake_quant(w, qtype, qat.clips.get(hf_name)).detach()
        if not torch.equal(stored, trained):
            raise AssertionError(f"{hf_name}: GGUF {qtype.name} bytes do not dequantize to the QAT weights.")
        verify_fingerprint(hf_name, trained, qat.fingerprints[hf_name])
    return data


def encode_tensors(
    tensors: dict[str, torch.Tensor],
    arch: Architecture,
    config: dict[str, Any],
    out_type: str,
    qat: LoadedQatState | None,
    embedding_type: str = DEFAULT_EMBEDDING_TYPE,
) -> list[EncodedTensor]:
    tensor_map = gguf.get_tensor_name_map(arch.gguf_arch, config["num_hidden_layers"])
    tied = bool(config.get("tie_word_embeddings", False))
    if qat is not None:
        if qat.out_type != out_type:
            raise ValueError(
                f"QAT state was trained for {qat.out_type}, but the export type is {out_type} "
                "(--no-qat-state exports the latent weights, post-training quantized)."
            )
        if out_type == "Q4_0" and qat.embedding_type != embedding_type:
            raise ValueError(
                f"QAT state was trained with {qat.embedding_type} embeddings, but the export asks for "
                f"{embedding_type}: QAT with that embedding type first (export.embedding_type), or --no-qat-state."
            )
        missing = sorted(set(qat.types) - set(tensors))
        if missing:
            raise ValueError(f"QAT state names tensors the checkpoint lacks: {', '.join(missing[:5])}.")
    encoded: list[EncodedTensor] = []
    for hf_name, weight in tensors.items():
        if hf_name == "lm_head.weight" and tied:
            continue  # tied head: llama.cpp reuses token_embd, as convert_hf_to_gguf.py writes it
        gguf_name = tensor_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ValueError(f"No GGUF name for checkpoint tensor {hf_name!r} (architecture {arch.gguf_name}).")
        qtype = gguf_storage_type(hf_name, tuple(weight.shape), out_type, embedding_type)
        if qat is not None and hf_name in qat.types and qat.types[hf_name] != qtype.name:
            raise ValueError(f"{hf_name}: QAT trained it as {qat.types[hf_name]}, export stores {qtype.name}.")
        data = encode_tensor(hf_name, weight, qtype, qat)
        if (order := qk_row_order(arch, hf_name, config)) is not None:
            data = data[order]  # whole rows, so whole blocks: the values QAT checked above, in llama.cpp's order
        encoded.append(EncodedTensor(gguf_name, data, qtype, tuple(weight.shape)))
    if not tied and "lm_head.weight" not in tensors:
        raise ValueError("Untied checkpoint without lm_head.weight.")
    return encoded


# --------------------------------------------------------------------------------------------------------------------
# The whole export


def manifest_path(out_path: Path) -> Path:
    return out_path.with_name(out_path.name + MANIFEST_SUFFIX)


def size_report(encoded: list[EncodedTensor], count: int = 3) -> str:
    """The ``count`` largest tensors with their types and bytes, e.g. for a refusal over a size cap."""
    largest = sorted(encoded, key=lambda t: t.data.nbytes, reverse=True)[:count]
    return ", ".join(f"{t.gguf_name} {t.qtype.name} {t.data.nbytes:,} B" for t in largest)


def resolve_qat_state(checkpoint_dir: Path, qat_state: Path | None, ptq: bool) -> Path | None:
    """The QAT state to export with: ``qat_state`` when given, else the checkpoint's own (as evaluate scores it),
    none with ``ptq``; a contradiction of the two is refused."""
    if ptq and qat_state is not None:
        raise ValueError(f"--no-qat-state with --qat-state {qat_state}: give one of them")
    return None if ptq else qat_state or checkpoint_qat_state(checkpoint_dir)


def checkpoint_inputs(checkpoint_dir: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """What the export manifest records of its checkpoint, and the checkpoint's own manifest (verified), if any."""
    inputs: dict[str, Any] = {"checkpoint": str(checkpoint_dir)}
    if read_manifest(checkpoint_dir) is None:
        return inputs, None
    checkpoint_manifest = verify_stage_dir(checkpoint_dir)
    inputs["checkpoint_manifest_sha256"] = sha256_file(checkpoint_dir / MANIFEST_NAME)
    inputs["checkpoint_stage"] = checkpoint_manifest.get("stage")
    return inputs, checkpoint_manifest


def file_embedding_type(out_type: str, qat: LoadedQatState | None, embedding_type: str | None, max_bytes: int) -> str:
    """The token embedding's type in the file: the one asked, else the QAT state's (what training computed with, cap or
    not), else :func:`config.resolve_embedding_type`'s; outside Q4_0 files the vocabulary is stored as the rest, so an
    embedding type other than the default is refused there."""
    if embedding_type is None and qat is not None:
        embedding_type = qat.embedding_type
    if out_type == "Q4_0":
        return resolve_embedding_type(embedding_type, max_bytes)
    if embedding_type is not None and resolve_embedding_type(embedding_type) != DEFAULT_EMBEDDING_TYPE:
        raise ValueError(f"Embedding type {embedding_type} is for Q4_0 files; {out_type} files store it as {out_type}.")
    return DEFAULT_EMBEDDING_TYPE  # not used: outside Q4_0 files the vocabulary is stored as the rest


def write_gguf(
    out_path: Path,
    checkpoint_dir: Path,
    arch: Architecture,
    config: dict[str, Any],
    encoded: list[EncodedTensor],
    out_type: str,
    embedding_type: str,
    base: dict[str, Any] | None,
    max_bytes: int,
    progress: bool,
) -> dict[str, int]:
    """The GGUF (metadata, vocabulary, tensors) written atomically, refused when over ``max_bytes``; returns the special
    token ids it records."""
    n_params = sum(int(np.prod(t.shape)) for t in encoded)
    writer = gguf.GGUFWriter(path=None, arch=arch.gguf_name)
    add_model_metadata(writer, arch, config, checkpoint_dir.resolve().name, FILE_TYPES[out_type], n_params, base)
    special_ids = add_vocab(writer, arch, checkpoint_dir, config["vocab_size"])
    for t in encoded:
        raw_dtype = t.qtype if t.qtype not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16) else None
        writer.add_tensor(t.gguf_name, t.data, raw_dtype=raw_dtype)
    with AtomicFile(out_path) as tmp:
        writer.write_header_to_file(path=tmp)
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file(progress=progress)
        writer.close()
        written = tmp.stat().st_size
        if max_bytes > 0 and written > max_bytes:
            raise ValueError(
                f"{out_path.name}: {written:,} bytes as {out_type}"
                + (f" with {embedding_type} embeddings" if out_type == "Q4_0" else "")
                + f", over the cap of {max_bytes:,} (largest: {size_report(encoded)})"
                + (
                    "; Q4_0 embeddings (--embedding-type Q4_0) are half the size."
                    if out_type == "Q4_0" and embedding_type == "Q8_0"
                    else "."
                )
            )
    return special_ids


def export_gguf(
    checkpoint_dir: Path,
    out_path: Path,
    out_type: str = "Q4_0",
    qat_state: Path | None = None,
    progress: bool = False,
    embedding_type: str | None = None,
    max_bytes: int = 0,
    ptq: bool = False,
    base_model: str | None = None,
) -> Path:
    """Write ``checkpoint_dir`` (HF Qwen3 or Llama ``save_pretrained`` + tokenizer.json) as a GGUF of ``out_type`` at
    ``out_path``.

    ``qat_state``: the file ``QatState.save`` wrote (default: the checkpoint's own ``qat_state.safetensors``, unless
    ``ptq``); the Q4_0 blocks are then exactly those QAT trained with. ``embedding_type``: the token embedding's (and an
    untied head's) type in a Q4_0 file; defaults to the QAT state's, else to :func:`config.resolve_embedding_type`'s
    (Q4_0 when ``max_bytes`` is set, else Q8_0). ``max_bytes`` > 0: refuse (ValueError naming the largest tensors,
    nothing written) a file larger than that. ``base_model`` (``NAME[@REV]``): general.base_model, by default the
    checkpoint manifest's. Returns ``out_path``; its sha256 is in ``<out_path>.manifest.json``.
    """
    checkpoint_dir, out_path = Path(checkpoint_dir), Path(out_path)
    if out_type not in OUT_TYPES:
        raise ValueError(f"Unknown GGUF type {out_type!r}: expected one of {', '.join(OUT_TYPES)}.")
    config, arch = read_config(checkpoint_dir)
    pre_tokenizer_of(checkpoint_dir)  # a tokenizer export cannot write is refused before any tensor is encoded
    inputs, checkpoint_manifest = checkpoint_inputs(checkpoint_dir)
    base = parse_base_model(base_model) if base_model else (checkpoint_manifest or {}).get("base_model")
    qat_state = resolve_qat_state(checkpoint_dir, qat_state, ptq)
    qat = None
    if qat_state is not None:
        qat = load_qat_state(qat_state)
        inputs["qat_state"] = str(qat_state)
        inputs["qat_state_sha256"] = sha256_file(qat_state)
    if qat is not None and qat.out_type != out_type:
        raise ValueError(
            f"QAT state {qat_state} was trained for {qat.out_type}, but the export type is {out_type} "
            "(--no-qat-state exports the latent weights, post-training quantized)."
        )
    embedding_type = file_embedding_type(out_type, qat, embedding_type, max_bytes)
    encoded = encode_tensors(read_tensors(checkpoint_dir), arch, config, out_type, qat, embedding_type)
    special_ids = write_gguf(
        out_path, checkpoint_dir, arch, config, encoded, out_type, embedding_type, base, max_bytes, progress
    )
    type_counts: dict[str, int] = {}
    for t in encoded:
        type_counts[t.qtype.name] = type_counts.get(t.qtype.name, 0) + 1
    atomic_write_json(
        manifest_path(out_path),
        {
            "stage": "export",
            "created_unix": time.time(),
            "params": {
                "out_type": out_type,
                "embedding_type": embedding_type if out_type == "Q4_0" else None,
                "max_bytes": max_bytes,
                "qat_state": qat_state is not None,
                "base_model": base,
            },
            "inputs": inputs,
            "outputs": {out_path.name: {"sha256": sha256_file(out_path), "bytes": out_path.stat().st_size}},
            "tensor_types": type_counts,
            "special_token_ids": special_ids,
            "n_params": sum(int(np.prod(t.shape)) for t in encoded),
        },
    )
    if checkpoint_manifest is not None and "sources" in checkpoint_manifest:
        atomic_write_json(data_manifest_path(out_path), data_manifest(checkpoint_manifest["sources"]))
    return out_path


# --------------------------------------------------------------------------------------------------------------------
# CLI stage


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a checkpoint as GGUF (F32/F16/Q8_0/Q4_0, QAT-exact Q4_0)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="HF checkpoint directory (config.json, model.safetensors, tokenizer.json)",
    )
    parser.add_argument("--out", type=Path, required=True, help="GGUF file to write")
    parser.add_argument(
        "--type", dest="out_type", choices=OUT_TYPES, default="Q4_0", help="tensor type of the file. Defaults to Q4_0."
    )
    parser.add_argument(
        "--qat-state",
        type=Path,
        default=None,
        help="QAT state file (QatState.save) whose learned Q4_0 blocks to write. Defaults to the checkpoint's own "
        "qat_state.safetensors, if it has one.",
    )
    parser.add_argument(
        "--no-qat-state",
        dest="ptq",
        action="store_true",
        help="ignore the checkpoint's QAT state: quantize the latent weights post-training",
    )
    add_embedding_type_argument(
        parser,
        "type of the token embedding (and an untied output head) in a Q4_0 file. Defaults to the QAT state's, "
        "else the preset's (Q4_0 for qwen3-chat), else Q4_0 with --max-bytes, else Q8_0.",
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=None,
        help="refuse to write a file larger than this many bytes (e.g. 1000000000). Defaults to the preset's "
        "(qwen3-chat: 1000000000; lab: no cap).",
    )
    parser.add_argument(
        "--base-model",
        default=None,
        help="general.base_model as NAME[@REV]. Defaults to the model the distill chain started from.",
    )
    add_preset_argument(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    export = get_preset(args.preset).export
    max_bytes = export.max_bytes if args.max_bytes is None else args.max_bytes
    qat_state = resolve_qat_state(args.checkpoint, args.qat_state, args.ptq)
    # The preset's layout only where no QAT state fixes it (a state's own embedding type is the one to write).
    embedding_type = args.embedding_type or (export.embedding_type or None if qat_state is None else None)
    announce(
        "export",
        args.preset,
        {
            "type": args.out_type,
            "embedding": embedding_type
            or ("the QAT state's" if qat_state else resolve_embedding_type(None, max_bytes)),
            "QAT state": qat_state or "none (post-training quantization)",
            "max bytes": max_bytes or "no cap",
        },
    )
    out = export_gguf(
        args.checkpoint,
        args.out,
        args.out_type,
        args.qat_state,
        progress=True,
        embedding_type=embedding_type,
        max_bytes=max_bytes,
        ptq=args.ptq,
        base_model=args.base_model,
    )
    manifest = json.loads(manifest_path(out).read_text())
    info = manifest["outputs"][out.name]
    print(
        f"export: wrote {out} ({info['bytes']:,} bytes, {args.out_type}"
        + (f" with {manifest['params']['embedding_type']} embeddings" if manifest["params"]["embedding_type"] else "")
        + f", sha256 {info['sha256'][:16]}…; tensors {manifest['tensor_types']})"
    )
    if data_manifest_path(out).is_file():
        print(f"export: wrote {data_manifest_path(out)} (specdraft pack --manifest)")
    return 0
