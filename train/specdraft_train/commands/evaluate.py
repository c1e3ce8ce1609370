"""Stage `evaluate`: τ of drafters on held-out conversations, by the validator's walk (k = 16), in PyTorch: for a greedy
drafter one teacher-forced pass over each conversation gives every step of the walk exactly (tau.py), and the
conversations are packed into forwards of `--batch-tokens` tokens (the preset's `evaluate.batch_tokens`).

For each `--drafter` (lab checkpoint, local HF model or HF id): τ as trained (bf16 autocast on CUDA, fp32 on CPU)
and, with `--q4`, τ with every weight as a GGUF Q4_0 file stores it (quant.prepare_qat: Q4_0 projections, the
embedding as `--embedding-type` says, Q8_0 by default). A checkpoint holding ``qat_state.safetensors`` (from
`distill --qat`) is evaluated with its learned Q4_0 blocks (fingerprints checked) and the embedding type it was trained
with; any other is post-training quantized (PTQ). Also: the n-gram prompt-lookup peer, the
target as its own drafter (`--target`, sanity: τ ≈ k + 1), and the share of continuation 4-grams already seen earlier
in the same text. Overall and per category, with macro τ (mean over categories) and top-1 agreement (share of
positions whose argmax is the target's token). Writes JSON to `--out` (stdout without):

    python -m specdraft_train evaluate --heldout runs/lab/reference/heldout.jsonl --drafter runs/lab/base \\
        --drafter runs/lab/distilled-qat --q4 --ngram --target runs/lab/target --out runs/lab/eval.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..config import (
    DEFAULT_EMBEDDING_TYPE,
    EvalConfig,
    add_device_argument,
    add_embedding_type_argument,
    announce,
    override,
    resolve_embedding_type,
)
from ..formats.artifacts import atomic_write_json, read_manifest, sha256_file, verify_stage_dir
from ..modeling.models import (
    DTYPES,
    add_dtype_argument,
    checkpoint_info,
    checkpoint_qat_state,
    load_causal_lm,
    parameter_count,
    resolve_device,
    verify_checkpoint,
)
from ..modeling.tau import (
    Conversation,
    TauResult,
    model_tau,
    ngram_tau,
    read_conversations,
    repeated_ngram_share,
    repeated_ngram_share_by_category,
)
from ..presets import add_preset_argument, get_preset


def drafter_tau(
    checkpoint: str | Path,
    conversations: list[Conversation],
    k: int,
    device: torch.device,
    q4: bool = False,
    batch_tokens: int = EvalConfig.batch_tokens,
    embedding_type: str | None = None,
    dtype: str = "float32",
    ks: Sequence[int] = (),
) -> tuple[TauResult, str]:
    """τ of one drafter, as trained or as a Q4_0 GGUF holds it; returns (result, how it was quantized).

    ``embedding_type``: the embedding's type in the Q4_0 file of a PTQ drafter (a QAT drafter's is the one it was
    trained with). Defaults to ``config.resolve_embedding_type()``'s, Q8_0. ``dtype``: the weights as trained are
    loaded in it; the Q4_0 scoring always starts from fp32 (QAT's latent weights are fp32, and its fingerprints are
    of the blocks quantized from them).
    """
    verify_checkpoint(checkpoint)
    model = load_causal_lm(checkpoint, device, DTYPES["float32" if q4 else dtype])
    mode = "none"
    if q4:
        from ..training.quant import load_qat_state, load_qat_state_into, prepare_qat

        saved = checkpoint_qat_state(checkpoint)
        if saved is not None:
            qat = prepare_qat(model, embedding_type=load_qat_state(saved).embedding_type)
            load_qat_state_into(qat, saved)
            mode = "q4_0-qat"
        else:
            qat = prepare_qat(model, embedding_type=resolve_embedding_type(embedding_type))
            mode = "q4_0-ptq"
        if qat.embedding_type != DEFAULT_EMBEDDING_TYPE:
            mode += f"-{qat.embedding_type.lower()}-embedding"  # e.g. q4_0-qat-q4_0-embedding: an all-Q4_0 file
        with qat.held():  # every weight quantized once for all the forwards, not at each
            return model_tau(model, conversations, k, device, batch_tokens, ks), mode
    return model_tau(model, conversations, k, device, batch_tokens, ks), mode


def peers_tau(
    base: Path,
    trained: Path,
    target: Path,
    conversations: list[Conversation],
    config: EvalConfig,
    embedding_type: str,
    device: torch.device,
    ks: Sequence[int] = (),
) -> dict[str, Any]:
    """On one held-out set: the drafter before training (``base``, Q4_0 PTQ) and after (``trained``, Q4_0: its QAT
    state), with τ(k) at each of ``ks``; n-gram prompt lookup; the target as its own drafter (`run`'s evaluation)."""
    tau: dict[str, Any] = {}
    for key, checkpoint, by_k in (("base_q4_0_ptq", base, ()), ("drafter_q4_0_qat", trained, ks)):
        result, mode = drafter_tau(
            checkpoint,
            conversations,
            config.k,
            device,
            q4=True,
            batch_tokens=config.batch_tokens,
            embedding_type=embedding_type,
            ks=by_k,
        )
        tau[key] = {"weights": mode, **result.to_dict()}
    tau["ngram"] = ngram_tau(conversations, config.k, config.ngram_max).to_dict()
    target_model = load_causal_lm(target, device)
    tau["target_as_drafter"] = model_tau(target_model, conversations, config.k, device, config.batch_tokens).to_dict()
    return tau


def peers_on_sets(
    base: Path,
    trained: Path,
    target: Path,
    sets: dict[str, Path],
    config: EvalConfig,
    embedding_type: str,
    device: torch.device,
    ks: Sequence[int] = (),
) -> dict[str, Any]:
    """:func:`peers_tau` on the held-out conversations of ``sets["main"]`` (τ(k) at each of ``ks`` too) and, where
    given, of ``sets["second"]`` (`run`'s second prompt set, under ``"second"``)."""

    def on(name: str) -> dict[str, Any]:
        conversations = read_conversations(sets[name])
        main = name == "main"
        tau = peers_tau(base, trained, target, conversations, config, embedding_type, device, ks if main else ())
        return {"k": config.k, "heldout": str(sets[name]), "conversations": len(conversations), "tau": tau}

    results = on("main")
    if "second" in sets:
        results["second"] = on("second")
    return results


def verify_heldout(heldout: Path) -> None:
    """A held-out file inside a stage directory (reference's heldout.jsonl) must match that stage's manifest."""
    manifest = read_manifest(heldout.parent)
    if manifest is not None and heldout.name in manifest.get("outputs", {}):
        verify_stage_dir(heldout.parent)


def evaluate(
    heldout: Path,
    drafters: list[str],
    k: int,
    device: torch.device,
    q4: bool,
    ngram: bool,
    target: str | None,
    config: EvalConfig | None = None,
    embedding_type: str | None = None,
    dtype: str = "float32",
) -> dict[str, Any]:
    config = config or EvalConfig()
    verify_heldout(heldout)
    conversations = read_conversations(heldout)
    report: dict[str, Any] = {
        "heldout": {
            "path": str(heldout),
            "sha256": sha256_file(heldout),
            "conversations": len(conversations),
            "continuation_tokens": sum(len(c.continuation_tokens) for c in conversations),
        },
        "k": k,
        "dtype": dtype,
        "repeated_4gram_share": repeated_ngram_share(conversations, 4),
        "repeated_4gram_share_by_category": repeated_ngram_share_by_category(conversations, 4),
        "drafters": [],
    }
    for drafter in drafters:
        start = time.time()
        entry: dict[str, Any] = {"drafter": checkpoint_info(drafter)}
        result, _ = drafter_tau(drafter, conversations, k, device, batch_tokens=config.batch_tokens, dtype=dtype)
        entry["as_trained"] = result.to_dict()
        if q4:
            result, mode = drafter_tau(
                drafter,
                conversations,
                k,
                device,
                q4=True,
                batch_tokens=config.batch_tokens,
                embedding_type=embedding_type,
            )
            entry["q4_0"] = {"mode": mode, **result.to_dict()}
        entry["seconds"] = time.time() - start
        report["drafters"].append(entry)
    if ngram:
        report["ngram"] = {"n_max": config.ngram_max, **ngram_tau(conversations, k, config.ngram_max).to_dict()}
    if target is not None:
        verify_checkpoint(target)
        model = load_causal_lm(target, device, DTYPES[dtype])
        report["target_as_drafter"] = {
            "target": checkpoint_info(target),
            "parameters": parameter_count(model),
            **model_tau(model, conversations, k, device, config.batch_tokens).to_dict(),
        }
    report["peak_gpu_bytes"] = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return report


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="τ of drafters (as trained / Q4_0) on held-out JSONL; n-gram peer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--heldout", required=True, type=Path, help="validator-format JSONL (reference's heldout.jsonl)")
    p.add_argument("--drafter", action="append", default=[], help="drafter to evaluate (repeatable): dir or HF id")
    p.add_argument("--target", default=None, help="also evaluate the target as its own drafter (sanity τ ≈ k+1)")
    p.add_argument("--q4", action="store_true", help="also τ with GGUF Q4_0 weights (QAT state if present, else PTQ)")
    add_embedding_type_argument(
        p,
        "with --q4, for a PTQ drafter: the embedding's type in the Q4_0 file (default: the preset's export layout: "
        "Q8_0 for lab, Q4_0 for qwen3-chat)",
    )
    add_preset_argument(p)
    add_dtype_argument(p, "weights of the drafters as trained and of --target")
    p.add_argument("--ngram", action="store_true", help="also the n-gram prompt-lookup peer")
    p.add_argument("--k", type=int, default=EvalConfig.k, help=f"draft length (default: {EvalConfig.k})")
    p.add_argument(
        "--batch-tokens", type=int, default=None, help="tokens of conversations a forward (default: preset's)"
    )
    add_device_argument(p)
    p.add_argument("--out", type=Path, default=None, help="JSON file to write (default: print)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if not args.drafter and not args.ngram and args.target is None:
        raise ValueError("nothing to evaluate: give --drafter, --ngram or --target")
    preset = get_preset(args.preset)
    config = override(preset.evaluate, batch_tokens=args.batch_tokens)
    embedding_type = args.embedding_type or preset.export.resolved_embedding_type()
    announce(
        "evaluate",
        args.preset,
        {
            "drafters": len(args.drafter),
            "k": args.k,
            "batch": f"{config.batch_tokens:,} tokens",
            "dtype": args.dtype,
            "q4": f"yes (PTQ embedding {embedding_type})" if args.q4 else "no",
            "target": args.target or "none",
        },
    )
    report = evaluate(
        args.heldout,
        args.drafter,
        args.k,
        resolve_device(args.device),
        args.q4,
        args.ngram,
        args.target,
        config=config,
        embedding_type=embedding_type,
        dtype=args.dtype,
    )
    if args.out is not None:
        atomic_write_json(args.out, report)
        lines = [
            f"{e['drafter']['path']}: τ {e['as_trained']['tau']:.3f} (macro {e['as_trained']['macro_tau']:.3f}, "
            f"top-1 {e['as_trained']['top1']:.3f})"
            + (
                f", Q4_0 ({e['q4_0']['mode']}) {e['q4_0']['tau']:.3f} (top-1 {e['q4_0']['top1']:.3f})"
                if "q4_0" in e
                else ""
            )
            for e in report["drafters"]
        ]
        if "ngram" in report:
            lines.append(f"n-gram peer: τ {report['ngram']['tau']:.3f}")
        if "target_as_drafter" in report:
            lines.append(f"target as drafter: τ {report['target_as_drafter']['tau']:.3f}")
        print("\n".join(lines))
    else:
        print(json.dumps(report, indent=2))
    return 0
