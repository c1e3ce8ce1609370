"""Stage `lab`: every stage end to end — corpus → tokenizer → target + base drafter → reference → distill → QAT →
evaluate → GGUF export — into one directory, resumable, with a report.

A stage whose outputs and manifest hashes are already in place is skipped, so rerunning the same command after a
crash continues where it stopped (stages that train also resume mid-run from their own ``resume/`` state). Writes
``lab_report.json`` and ``lab_report.md`` (τ of base / distilled / QAT drafters as trained and as Q4_0, the n-gram peer,
the target as its own drafter, overall, macro and per category, each beside its ratio to the base Q4_0 PTQ drafter and
the gap it closes toward the target; repeated-4-gram share; model sizes; stage times; the lab goals),
``data_manifest.json`` (every source file with its kind, hash and the split it fed), ``architecture.json`` (the
drafter), and ``export/drafter-q4_0.gguf`` (the QAT drafter). Prose comes from ``--prose DIR``s,
or else from the preset's packages under ``train/.cache/prose`` (``train/scripts/data/fetch_prose.sh``).

    python -m specdraft_train lab --preset micro --out runs/micro            # CPU, a few minutes (prose: git-doc)
    python -m specdraft_train lab --preset lab --out runs/lab --extra /usr/lib/python3/dist-packages \\
        --prose P/linux-doc-6.1 --prose P/python3.11-doc --prose P/git-doc    # one H200
    python -m specdraft_train lab --nproc-per-node 8 --preset lab --out runs/lab ...   # 8 GPUs of one machine

With ``--nproc-per-node N`` the lab starts itself again as N ranks through torch.distributed.run (the same as
``torchrun --standalone --nproc-per-node N -m specdraft_train lab ...``; several machines: torchrun with
``--nnodes``, docs/training.md). Under torchrun rank 0 alone runs corpus, tokenizer, evaluate and export and writes
the reports while the others wait; pretrain, reference and distill run on every rank (DDP, prompts sharded). A
rerun, with any number of ranks, resumes the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..commands import corpus, distill, pretrain, reference, tokenizer
from ..commands.corpus import PROSE_CACHE, preset_prose
from ..commands.evaluate import drafter_tau, verify_heldout
from ..commands.export import export_gguf
from ..config import LabPreset, add_device_argument, add_settings_argument, apply_settings
from ..formats.artifacts import (
    DRAFTER_GGUF,
    atomic_write_json,
    atomic_write_text,
    read_manifest,
    sha256_file,
    stage_complete,
    verify_stage_dir,
    write_manifest,
)
from ..labs.reports import comparison, goals, lab_markdown
from ..modeling.models import QAT_STATE_FILE, architecture_summary, load_causal_lm
from ..modeling.tau import (
    TauResult,
    model_tau,
    ngram_tau,
    read_conversations,
    repeated_ngram_share,
    repeated_ngram_share_by_category,
)
from ..presets import LAB_PRESETS, add_preset_argument, check_preset, get_preset
from ..training.distillation import DistillJob
from ..training.loop import DistributedContext, finish_distributed, init_distributed, relaunch_under_torchrun
from ..training.quant import gguf_storage_type
from .runner import Runner

STATE_FILE = "lab_state.json"


class LabState(Runner):
    """``lab_state.json``: the preset the directory belongs to, its settings, and each stage's wall time (runner.py).

    Under torchrun (``ctx``) rank 0 checks and writes the file first, the other ranks read it after; only rank 0 ever
    writes it."""

    def __init__(
        self,
        out: Path,
        preset: LabPreset,
        extras: list[Path],
        settings: list[str],
        prose: list[Path] | None = None,
        ctx: DistributedContext | None = None,
    ):
        if ctx is not None and not ctx.is_main:
            ctx.barrier()  # until rank 0 has checked the directory and written the file
        super().__init__(out, "lab", ctx, STATE_FILE)
        if "preset" in self.data and self.data["preset"] != preset.name:
            raise ValueError(
                f"{out} holds a lab of preset {self.data.get('preset')!r}, not {preset.name!r}: use another --out"
            )
        if "preset" in self.data and self.data.get("settings", []) != settings:
            raise ValueError(
                f"{out} was run with --set {self.data.get('settings', [])}, not {settings}: finished "
                "stages would not match; use another --out"
            )
        self.data.setdefault("preset", preset.name)
        self.data.setdefault("settings", settings)
        self.data.setdefault("extras", [str(e) for e in extras])
        self.data.setdefault("prose", [str(p) for p in prose or []])
        self.save()
        if self.ctx.is_main and ctx is not None:
            self.ctx.barrier()


def run_stage(
    state: LabState,
    name: str,
    stage_dir: Path,
    fn: Callable[[], Any],
    complete: Callable[[], bool],
    every_rank: bool = False,
) -> None:
    """Run a stage unless it is complete (runner.py: rank 0 decides; ``every_rank``: the stages that shard their work
    run on every rank, the others on rank 0 alone)."""
    state.stage(name, stage_dir, fn, complete, every_rank=every_rank)


def export_complete(gguf_path: Path) -> bool:
    manifest_path = gguf_path.with_name(gguf_path.name + ".manifest.json")
    if not (gguf_path.is_file() and manifest_path.is_file()):
        return False
    recorded = json.loads(manifest_path.read_text())["outputs"].get(gguf_path.name, {}).get("sha256")
    return recorded == sha256_file(gguf_path)


def tau_entry(result: TauResult, **extra: Any) -> dict[str, Any]:
    return {**extra, **result.to_dict()}


def evaluate_lab(out: Path, preset: LabPreset, device: torch.device) -> dict[str, Any]:
    """All of the lab's τ figures on the held-out split, as one JSON-able dict."""
    heldout_path = out / "reference" / "heldout.jsonl"
    verify_heldout(heldout_path)
    conversations = read_conversations(heldout_path)
    k, batch_tokens = preset.evaluate.k, preset.evaluate.batch_tokens
    results: dict[str, Any] = {
        "k": k,
        "heldout": {
            "path": str(heldout_path),
            "sha256": sha256_file(heldout_path),
            "conversations": len(conversations),
            "continuation_tokens": sum(len(c.continuation_tokens) for c in conversations),
        },
        "repeated_4gram_share": repeated_ngram_share(conversations, 4),
        "repeated_4gram_share_by_category": repeated_ngram_share_by_category(conversations, 4),
        "tau": {},
    }
    tau = results["tau"]
    for key, directory, q4 in (
        ("base", "base", False),
        ("base_q4_0_ptq", "base", True),
        ("distilled", "distilled", False),
        ("distilled_q4_0_ptq", "distilled", True),
        ("distilled_qat_latent", "distilled-qat", False),
        ("distilled_q4_0_qat", "distilled-qat", True),
    ):
        result, mode = drafter_tau(
            out / directory,
            conversations,
            k,
            device,
            q4=q4,
            batch_tokens=batch_tokens,
            embedding_type=preset.export.resolved_embedding_type(),
        )
        tau[key] = tau_entry(result, checkpoint=directory, weights=mode)
        print(f"lab: τ {key} = {result.tau:.3f}", file=sys.stderr)
    tau["ngram"] = tau_entry(ngram_tau(conversations, k, preset.evaluate.ngram_max), n_max=preset.evaluate.ngram_max)
    target = load_causal_lm(out / "target", device)
    tau["target_as_drafter"] = tau_entry(model_tau(target, conversations, k, device, batch_tokens), checkpoint="target")
    return results


def model_sizes(out: Path, gguf_path: Path) -> dict[str, Any]:
    sizes: dict[str, Any] = {}
    for name in ("target", "base", "distilled", "distilled-qat"):
        manifest = read_manifest(out / name) or {}
        sizes[name] = {
            "parameters": manifest.get("architecture", {}).get("parameters"),
            "safetensors_bytes": (out / name / "model.safetensors").stat().st_size,
        }
    sizes["drafter_gguf_q4_0_bytes"] = gguf_path.stat().st_size
    return sizes


def data_manifest(out: Path) -> dict[str, Any]:
    """Every source file (kind, content hash, split it fed) and every stage artifact's hash."""
    sources = json.loads((out / "corpus" / "sources.json").read_text())
    prose_repeats = verify_stage_dir(out / "tokenizer", "tokenizer")["prose_repeats"]
    fed = {
        "train": [
            "tokenizer",
            f"pretrain target and base (prose × {prose_repeats} in the token stream)",
            "reference train prompts → distill",
        ],
        "dev": ["pretrain dev loss", "reference dev prompts → distill epoch selection (dev τ)"],
        "heldout": ["reference held-out prompts → evaluate (lab_report τ)"],
    }
    artifacts = {}
    for stage_dir in ("corpus", "tokenizer", "target", "base", "reference", "distilled", "distilled-qat", "eval"):
        manifest = read_manifest(out / stage_dir)
        if manifest is not None:
            artifacts[stage_dir] = {rel: info["sha256"] for rel, info in manifest["outputs"].items()}
    return {
        "python_version": sources["python_version"],
        "roots": sources["roots"],
        "split_feeds": fed,
        "prose_repeats": prose_repeats,
        "summary": sources["summary"],
        "files": sources["files"],
        "artifacts": artifacts,
    }


def drafter_architecture(out: Path, embedding_type: str) -> dict[str, Any]:
    model = load_causal_lm(out / "distilled-qat", torch.device("cpu"))
    summary = architecture_summary(model)
    summary["q4_0_gguf_tensor_types"] = {
        name: gguf_storage_type(name, tuple(t.shape), "Q4_0", embedding_type).name
        for name, t in model.state_dict().items()
    }
    return summary


# The lab's stage directories inside ``out``, in pipeline order.
STAGE_DIRS = ("corpus", "tokenizer", "target", "base", "reference", "distilled", "distilled-qat", "eval", "export")


def run_data_stages(
    state: LabState,
    d: dict[str, Path],
    preset: LabPreset,
    stdlib: Path | None,
    extras: list[Path],
    prose: list[Path] | None,
) -> None:
    """corpus (code, and prose from ``prose`` or the preset's packages, looked up only when the stage runs), then the
    tokenizer."""
    run_stage(
        state,
        "corpus",
        d["corpus"],
        lambda: corpus.build_corpus(
            d["corpus"], preset.corpus, stdlib or corpus.stdlib_root(), extras, prose or preset_prose(preset)
        ),
        lambda: stage_complete(d["corpus"], "corpus"),
    )
    run_stage(
        state,
        "tokenizer",
        d["tokenizer"],
        lambda: tokenizer.build(d["corpus"], d["tokenizer"], preset.tokenizer),
        lambda: stage_complete(d["tokenizer"], "tokenizer"),
    )


def run_training_stages(state: LabState, d: dict[str, Path], preset: LabPreset, device_name: str) -> None:
    """The stages every rank runs: pretrain target and base drafter, reference, distill, distill --qat."""
    for role, name in (("target", "target"), ("drafter", "base")):
        model, config = preset.pretraining(role)
        run_stage(
            state,
            f"pretrain {name}",
            d[name],
            lambda role=role, name=name, config=config, model=model: pretrain.run(
                d["corpus"], d["tokenizer"], d[name], role, preset.name, config, model, device_name
            ),
            lambda name=name: stage_complete(d[name], "pretrain"),
            every_rank=True,
        )
    run_stage(
        state,
        "reference",
        d["reference"],
        lambda: reference.run(
            d["target"],
            d["reference"],
            preset.reference,
            corpus_dir=d["corpus"],
            corpus_config=preset.corpus,
            device_name=device_name,
        ),
        lambda: stage_complete(d["reference"], "reference"),
        every_rank=True,
    )
    # The base's pretraining text (the tokenizer stage's train split) for distill's replay loss, when its weight is > 0.
    run_stage(
        state,
        "distill",
        d["distilled"],
        lambda: distill.run(
            DistillJob(
                d["base"],
                d["reference"],
                d["distilled"],
                preset.distill,
                replay_tokens=d["tokenizer"],
                device=device_name,
            )
        ),
        lambda: stage_complete(d["distilled"], "distill"),
        every_rank=True,
    )
    run_stage(
        state,
        "distill --qat",
        d["distilled-qat"],
        lambda: distill.run(
            DistillJob(
                d["distilled"],
                d["reference"],
                d["distilled-qat"],
                dataclasses.replace(preset.distill, fsdp=False),  # QAT is not wired for FSDP: DDP under torchrun
                qat=True,
                embedding_type=preset.export.resolved_embedding_type(),
                replay_tokens=d["tokenizer"],
                device=device_name,
            )
        ),
        lambda: stage_complete(d["distilled-qat"], "distill"),
        every_rank=True,
    )


def run_evaluate_stage(state: LabState, out: Path, d: dict[str, Path], preset: LabPreset, device: torch.device) -> None:
    """Every τ of the lab (evaluate_lab) into ``eval/results.json``, rank 0 alone."""

    def evaluate_stage() -> None:
        results = evaluate_lab(out, preset, device)
        atomic_write_json(d["eval"] / "results.json", results)
        write_manifest(
            d["eval"],
            "evaluate",
            outputs=["results.json"],
            inputs={name: str(d[name]) for name in ("reference", "base", "distilled", "distilled-qat", "target")},
        )

    run_stage(state, "evaluate", d["eval"], evaluate_stage, lambda: stage_complete(d["eval"], "evaluate"))


def run_export_stage(state: LabState, d: dict[str, Path], preset: LabPreset) -> Path:
    """The QAT drafter as the Q4_0 GGUF it ships as (rank 0 alone); returns its path."""
    gguf_path = d["export"] / DRAFTER_GGUF
    run_stage(
        state,
        "export",
        d["export"],
        lambda: export_gguf(
            d["distilled-qat"],
            gguf_path,
            "Q4_0",
            qat_state=d["distilled-qat"] / QAT_STATE_FILE,
            max_bytes=preset.export.max_bytes,
        ),
        lambda: export_complete(gguf_path),
    )
    return gguf_path


def write_reports(
    out: Path,
    d: dict[str, Path],
    preset: LabPreset,
    settings: list[str],
    state: LabState,
    device: torch.device,
    gguf_path: Path,
) -> dict[str, Any]:
    """Rank 0: data_manifest.json, architecture.json, lab_report.json and lab_report.md; returns the report."""
    evaluation = json.loads((d["eval"] / "results.json").read_text())
    export_info = {"path": str(gguf_path), "sha256": sha256_file(gguf_path), "bytes": gguf_path.stat().st_size}
    atomic_write_json(out / "data_manifest.json", data_manifest(out))
    atomic_write_json(out / "architecture.json", drafter_architecture(out, preset.export.resolved_embedding_type()))
    pretrain_metrics = {name: (read_manifest(d[name]) or {}).get("metrics") for name in ("target", "base")}
    distill_metrics = {name: (read_manifest(d[name]) or {}).get("metrics") for name in ("distilled", "distilled-qat")}
    report = {
        "preset": preset.name,
        "settings": settings,
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} ({platform.machine()}, {torch.get_num_threads()} torch threads"
        + (f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "")
        + ")",
        "device": str(device),
        "evaluation": evaluation,
        "comparison": comparison(evaluation["tau"]),
        "goals": goals(evaluation["tau"]),
        "model_sizes": model_sizes(out, gguf_path),
        "prompts": (read_manifest(d["reference"]) or {}).get("categories"),  # per split and category
        "pretrain": pretrain_metrics,
        "distill": distill_metrics,
        "stage_seconds": state.data["stage_seconds"],
        "export": export_info,
        "preset_config": preset.to_dict(),
        "files": {
            "data_manifest": "data_manifest.json",
            "architecture": "architecture.json",
            "heldout": "reference/heldout.jsonl",
        },
    }
    atomic_write_json(out / "lab_report.json", report)
    atomic_write_text(out / "lab_report.md", lab_markdown(report))
    return report


def run_lab(
    out: Path,
    preset_name: str,
    extras: list[Path],
    device_name: str = "auto",
    stdlib: Path | None = None,
    settings: list[str] | None = None,
    prose: list[Path] | None = None,
) -> dict[str, Any] | None:
    """The whole lab in ``out``; ``prose`` defaults to the preset's packages in the prose cache (looked up only when
    the corpus stage has to run). Returns the report (on rank 0 under torchrun; None on the other ranks)."""
    settings = settings or []
    preset = apply_settings(get_preset(preset_name), settings)
    check_preset(preset)
    out.mkdir(parents=True, exist_ok=True)
    # Under torchrun: the process group every stage below joins. TF32 is each stage's choice (reference: off).
    ctx = init_distributed(device_name, tf32=False)
    state = LabState(out, preset, extras, settings, prose, ctx)
    d = {name: out / name for name in STAGE_DIRS}
    run_data_stages(state, d, preset, stdlib, extras, prose)
    run_training_stages(state, d, preset, device_name)
    run_evaluate_stage(state, out, d, preset, ctx.device)
    gguf_path = run_export_stage(state, d, preset)
    report = write_reports(out, d, preset, settings, state, ctx.device, gguf_path) if ctx.is_main else None
    finish_distributed(ctx)
    return report


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "lab",
        help="all stages end to end (resumable) with lab_report.json/.md",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, type=Path, help="lab directory (rerun the same command to resume)")
    add_preset_argument(p, default="micro", choices=LAB_PRESETS)
    p.add_argument(
        "--extra", action="append", default=[], type=Path, help="more code trees for the corpus (repeatable)"
    )
    p.add_argument(
        "--prose",
        action="append",
        default=[],
        type=Path,
        help="prose trees for the corpus (repeatable; default: the preset's packages under "
        f"{PROSE_CACHE}, made by scripts/data/fetch_prose.sh)",
    )
    p.add_argument("--stdlib", type=Path, default=None, help="stdlib directory (default: this interpreter's)")
    add_device_argument(p)
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=1,
        help="run as this many ranks on this machine (one per GPU) through torch.distributed.run (default: 1)",
    )
    add_settings_argument(p)
    p.set_defaults(func=main)


def _without_nproc(argv: list[str]) -> list[str]:
    """The command line without ``--nproc-per-node N`` (or ``=N``, or an abbreviation argparse accepted)."""
    kept, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name.startswith("--n") and "--nproc-per-node".startswith(name):
            skip = "=" not in token
            continue
        kept.append(token)
    return kept


def main(args: argparse.Namespace) -> int:
    if args.nproc_per_node > 1:
        return relaunch_under_torchrun(args.nproc_per_node, _without_nproc(args.argv))
    report = run_lab(args.out, args.preset, args.extra, args.device, args.stdlib, args.settings, args.prose)
    if report is None:  # a rank other than 0
        return 0
    tau = report["evaluation"]["tau"]
    print(json.dumps({k: round(v["tau"], 3) for k, v in tau.items()}))
    print(f"report: {args.out / 'lab_report.md'}")
    return 0
