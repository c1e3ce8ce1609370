"""Writing a Hugging Face checkpoint as a GGUF: the library under the `export` stage (commands/export.py, whose
docstring tells the file types, the QAT state and the size cap), which `target --hf` writes its served F32 GGUF
through too. The layout comes from formats/gguf_layout.py, the tensor types and QAT-exact Q4_0 blocks from quant.py.

    from specdraft_train.training.gguf_export import export_gguf
    export_gguf(Path("runs/real/distilled-qat"), Path("drafter-q4_0.gguf"), "Q4_0", max_bytes=10**9)
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType
from safetensors import safe_open

from ..config import DEFAULT_EMBEDDING_TYPE, resolve_embedding_type
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
    llama3_rope_factors,
    pre_tokenizer_of,
    qk_row_order,
)
from ..formats.provenance import data_manifest, data_manifest_path
from ..modeling.models import checkpoint_qat_state
from .quant import (
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


def weight_files(checkpoint_dir: Path) -> list[Path]:
    """The checkpoint's model*.safetensors file(s) (sharded checkpoints: all shards)."""
    files = [f for f in sorted(checkpoint_dir.glob("*.safetensors")) if f.name.startswith("model")]
    if not files:
        raise FileNotFoundError(f"{checkpoint_dir}: no model*.safetensors")
    return files


def read_tensors(checkpoint_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint's safetensors file(s), by HF name."""
    tensors: dict[str, torch.Tensor] = {}
    for file in weight_files(checkpoint_dir):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
    return tensors


def q4_0_bytes_at_least(checkpoint_dir: Path) -> int:
    """The fewest bytes the checkpoint's Q4_0 GGUF can take: every matrix at Q4_0 (a tied head once), the vectors,
    the vocabulary and the metadata left out. Read from the files' headers, no weights loaded: a drafter over an
    export cap by this much is refused before it is trained rather than after."""
    tied = json.loads((checkpoint_dir / "config.json").read_text()).get("tie_word_embeddings", False)
    block, block_bytes = gguf.GGML_QUANT_SIZES[GGMLQuantizationType.Q4_0]
    total = 0
    for file in weight_files(checkpoint_dir):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                shape = f.get_slice(key).get_shape()
                if len(shape) >= 2 and not (tied and key == "lm_head.weight"):
                    total += math.prod(shape) // block * block_bytes
    return total


def refuse_over_cap(drafter_dir: Path, max_bytes: int) -> None:
    """A drafter whose Q4_0 GGUF cannot fit the preset's cap (`export.max_bytes`) is refused before it is trained."""
    at_least = q4_0_bytes_at_least(drafter_dir)
    if 0 < max_bytes < at_least:
        raise ValueError(
            f"{drafter_dir}: the drafter's matrices alone take {at_least:,} bytes at Q4_0, over the export cap of "
            f"{max_bytes:,} (export.max_bytes): give it fewer layers (--init layers:N) or a smaller --drafter"
        )


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
    if (factors := llama3_rope_factors(config)) is not None:  # Llama 3's RoPE scaling, as llama.cpp reads it
        writer.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", factors)
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
    """Write ``checkpoint_dir`` (HF Qwen3, Qwen2 or Llama ``save_pretrained`` + tokenizer.json) as a GGUF of
    ``out_type`` at ``out_path``.

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
