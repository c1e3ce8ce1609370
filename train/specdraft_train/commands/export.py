"""Export a Hugging Face checkpoint (Qwen3, Qwen2, Llama or Mistral architecture, byte-level BPE tokenizer) to GGUF
through the official ``gguf`` package, with QAT-exact Q4_0 blocks (training/gguf_export.py does the writing).

Metadata, tensor names and layout, and vocabulary follow llama.cpp's convert_hf_to_gguf.py (gguf_layout.py:
``Qwen3ForCausalLM`` as ``qwen3``, ``Qwen2ForCausalLM`` as ``qwen2`` with its q/k/v biases as F32 tensors,
``LlamaForCausalLM`` and ``MistralForCausalLM`` as ``llama`` with q/k rows in llama.cpp's RoPE order; the
pre-tokenizer chosen from the tokenizer, vocabulary.PRE_TOKENIZERS: ``qwen2``, ``llama-bpe``, ``smollm``, ``tekken``,
``gpt-2``; special tokens and chat template from the tokenizer's files). A checkpoint or tokenizer it cannot write is
refused in one line naming what is supported. Tensor types per file type come from
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
from pathlib import Path
from typing import Any

from ..config import add_embedding_type_argument, announce, resolve_embedding_type
from ..formats.provenance import data_manifest_path
from ..presets import add_preset_argument, get_preset
from ..training.gguf_export import export_gguf, manifest_path, resolve_qat_state
from ..training.quant import OUT_TYPES

__all__ = ["add_parser", "export_gguf", "main", "manifest_path"]  # export_gguf, manifest_path: the stage's library


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
