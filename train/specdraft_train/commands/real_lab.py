"""Command `real-lab-report`: the real-model lab's report (train/scripts/gpu/real_lab.sh, docs/lab.md), a
``lab_report.json`` and ``lab_report.md`` like the lab's, naming the target. Two uses:

- **on the GPU machine**, from the lab's folder (``--work DIR``): τ of every drafter on the held-out template prompts
  and on the prompts the target wrote (the other method), the drafter from scratch against the one from the target's
  layers, where walks stop, model sizes, stage seconds, the base's pretraining and the distillations' metrics;
- **on the CPU afterwards** (``--report FILE``, the file the GPU run wrote): the same report with what the CPU measured
  added — the served drafters walked by `specdraft validate` (``--validate SET:DRAFTER=summary.json``), `specdraft
  generate`'s runs (``--generate DRAFTER=summary.json``), tokens per drafter step with lookahead (``--lookahead``,
  bench/lookaheadSteps.ts's JSON) and llama.cpp's own speculative decoding (``--llama-server``,
  bench/llama_server_spec.py's summary.json). SET is ``templates`` or ``other``; DRAFTER one of SERVED_DRAFTERS.

Every run rewrites both files beside the report and recomputes the goals from what the report holds.

The lab's folder, as real_lab.sh writes it: ``run/`` (a `run` folder) and ``layers/`` (`ablate` on it), under the
names this report reads — ``target/``, ``base/`` (the scratch drafter pretrained), ``distilled/``, ``distilled-qat/``,
``drafter-layers/`` (the target's layers), ``distilled-layers-qat/``, ``reference/`` and ``reference-other/``,
``corpus/`` (links into those two); ``eval-templates.json`` and ``eval-other.json`` (`evaluate`'s output over those
drafters, ``--q4 --ngram --target``), ``export/*.gguf``, ``stamps/<step>`` (its seconds) and ``real_lab.json`` (the
settings the script ran with).

    python -m specdraft_train real-lab-report --work /tmp/real-lab
    python -m specdraft_train real-lab-report --report R/lab_report.json --lookahead steps.json \\
        --validate templates:distilled_q4_0_qat=V/summary.json --generate distilled_q4_0_qat=G/k4.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from ..formats.artifacts import DRAFTER_GGUF, atomic_write_json, atomic_write_text, read_manifest, sha256_file
from ..labs.layout import REAL_LAB_PRESET, lab_evaluation
from ..labs.report_sections import BASELINE, QAT, chat_goals
from ..labs.reports import comparison, goals, lab_markdown

# Drafters made two ways: (label, the base's folder, the distilled QAT drafter's folder)
ORIGINS = {
    "scratch": ("from scratch, pretrained on general text", "base", "distilled-qat"),
    "layers": ("from the target's own layers", "drafter-layers", "distilled-layers-qat"),
}
# The held-out sets: evaluate's file in the lab's folder, and the label the report gives them
SETS = {"templates": "eval-templates.json", "other": "eval-other.json"}
OTHER_LABEL = "written by the target (data/chat-prompts-target.jsonl.xz)"
# The GGUFs real_lab.sh exports, by the served drafter each is: base at Q4_0 PTQ, distilled QAT, layers QAT
SERVED_DRAFTERS = {
    "base_q4_0_ptq": "base-q4_0.gguf",
    "distilled_q4_0_qat": DRAFTER_GGUF,
    "layers_q4_0_qat": "layers-q4_0.gguf",
}
# Labels of drafters the lab's variants do not name (report_sections.extra_sections reads them from the report)
DRAFTER_LABELS = {
    "layers_q4_0_qat": "from the target's layers, Q4_0 QAT",
    "distilled_q4_0_qat_http": "distilled, Q4_0 QAT, drafts over HTTP (serve)",
}
DISTILL_FOLDERS = ("distilled", "distilled-qat", "distilled-layers", "distilled-layers-qat")


def drafter_origins(evaluation: dict[str, Any], work: Path) -> dict[str, Any]:
    """Each ORIGINS drafter's base at Q4_0 PTQ and distilled at Q4_0 QAT, with its parameters."""
    drafters = {Path(entry["drafter"]["path"]).name: entry for entry in evaluation["drafters"]}
    origins = {}
    for name, (label, base, qat) in ORIGINS.items():
        if base in drafters and qat in drafters:
            architecture = (read_manifest(work / qat) or {}).get("architecture", {})
            layers = (read_manifest(work / base) or {}).get("params", {}).get("target_layers")
            origins[name] = {
                "label": label + (f" ({', '.join(map(str, layers))})" if layers else ""),
                "parameters": architecture.get("parameters"),
                "tau": {BASELINE: drafters[base]["q4_0"], QAT: drafters[qat]["q4_0"]},
            }
    return origins


def target_record(work: Path) -> dict[str, Any]:
    manifest = read_manifest(work / "target") or {}
    gguf = manifest.get("inputs", {}).get("gguf", {})
    name = Path(gguf.get("path", "target.gguf")).name
    parameters = manifest.get("architecture", {}).get("parameters")
    return {
        "label": f"{name} (sha256 {gguf.get('sha256', '?')[:16]}…) dequantized to fp32, "
        f"{parameters or 0:,} parameters, served as target-f32.gguf",
        "gguf": name,
        "gguf_sha256": gguf.get("sha256"),
        "parameters": parameters,
    }


def stage_seconds(work: Path) -> dict[str, float]:
    """Each finished stage's seconds (real_lab.sh's stamps), in the order they finished."""
    stamps = sorted((work / "stamps").glob("*"), key=lambda p: p.stat().st_mtime)
    return {stamp.name: float(stamp.read_text().strip() or 0) for stamp in stamps}


def model_sizes(work: Path) -> dict[str, Any]:
    sizes: dict[str, Any] = {}
    for name in ("target", "base", "distilled", "distilled-qat", "drafter-layers", "distilled-layers-qat"):
        weights = work / name / "model.safetensors"
        if weights.is_file():
            parameters = (read_manifest(work / name) or {}).get("architecture", {}).get("parameters")
            sizes[name] = {"parameters": parameters, "safetensors_bytes": weights.stat().st_size}
    sizes["drafter_gguf_q4_0_bytes"] = (work / "export" / DRAFTER_GGUF).stat().st_size
    return sizes


def machine() -> tuple[str, str]:
    """The machine's description and the device the lab ran on (the GPU's name where there is one)."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    where = f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPU cores" + (f", {gpu})" if gpu else ")")
    return where, "cuda" if gpu else "cpu"


def build_report(work: Path) -> dict[str, Any]:
    """The GPU part's report from the lab's folder (module docstring)."""
    evaluation_files = {name: work / file for name, file in SETS.items()}
    missing = [str(path) for path in evaluation_files.values() if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)}: run real_lab.sh's evaluate stage first")
    raw = {name: json.loads(path.read_text()) for name, path in evaluation_files.items()}
    evaluation = lab_evaluation(raw["templates"])
    where, device = machine()
    export = work / "export" / DRAFTER_GGUF
    settings = work / "real_lab.json"
    base_manifest = read_manifest(work / "base") or {}
    report: dict[str, Any] = {
        "preset": REAL_LAB_PRESET,
        "drafter_labels": DRAFTER_LABELS,
        "target": target_record(work),
        "settings": json.loads(settings.read_text()) if settings.is_file() else {},
        "date": time.strftime("%Y-%m-%d"),
        "machine": where,
        "device": device,
        "evaluation": evaluation,
        "comparison": comparison(evaluation["tau"]),
        "goals": goals(evaluation["tau"]),
        "other_prompts": {
            "label": OTHER_LABEL,
            "evaluation": lab_evaluation(raw["other"]),
            "drafter_origins": drafter_origins(raw["other"], work),
        },
        "drafter_origins": drafter_origins(raw["templates"], work),
        "model_sizes": model_sizes(work),
        "prompts": (read_manifest(work / "reference") or {}).get("categories"),
        "pretrain": {
            "corpus": (read_manifest(work / "corpus") or {}).get("summary"),
            "metrics": base_manifest.get("metrics"),
        },
        "distill": {name: (read_manifest(work / name) or {}).get("metrics") for name in DISTILL_FOLDERS},
        "stage_seconds": stage_seconds(work),
        "export": {
            "path": f"export/{DRAFTER_GGUF}",
            "sha256": sha256_file(export),
            "bytes": export.stat().st_size,
            "files": {p.name: p.stat().st_size for p in sorted((work / "export").glob("*.gguf"))},
        },
    }
    return report


def _served_entry(summary: dict[str, Any], pytorch: dict[str, Any] | None) -> dict[str, Any]:
    """validate's summary.json beside PyTorch's τ entry of the same drafter and set."""
    return {
        "tau": summary["tau"],
        "macro_tau": summary["tau_macro_over_categories"],
        "by_category": {c: e["tau"] for c, e in summary["per_category"].items()},
        "pytorch_tau": pytorch["tau"] if pytorch else None,
        "pytorch_macro_tau": pytorch["macro_tau"] if pytorch else None,
        "pytorch_by_category": {c: e["tau"] for c, e in pytorch["by_category"].items()} if pytorch else {},
        "conversations": summary["samples"],
        "failures": summary["failures"]["total"],
    }


def pytorch_tau(report: dict[str, Any], where: str, drafter: str) -> dict[str, Any] | None:
    """The report's τ entry of a served drafter (SERVED_DRAFTERS) on a held-out set (SETS)."""
    held = report if where == "templates" else report["other_prompts"]
    if drafter == "layers_q4_0_qat":
        return held.get("drafter_origins", {}).get("layers", {}).get("tau", {}).get(QAT)
    return held["evaluation"]["tau"].get(drafter)


def generate_run(drafter: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One `specdraft generate` summary, as the report's generate section keeps it."""
    alone, speculative = summary["alone"], summary["speculative"]
    steps = max(speculative["targetSteps"], 1)
    differing = [
        p["id"] for p in summary["prompts"] if not p["identical"] and not p.get("firstDifference", {}).get("nearTie")
    ]
    return {
        "drafter": drafter,
        "k": summary["settings"]["draftLength"],
        "prompts": len(summary["prompts"]),
        "max_tokens": summary["settings"]["maxTokens"],
        "threads": summary["settings"].get("threads"),
        "gpu": summary["settings"].get("gpu", "cpu"),  # where llama.cpp computed (generate --gpu)
        "date": summary.get("finishedAt", "")[:10],
        "tau": summary["tau"],
        "speed_up": summary["speedUp"],
        "alone_ms_per_token": 1000 * alone["seconds"] / max(alone["tokens"], 1),
        "ms_per_step": 1000 * speculative["seconds"] / steps,
        "draft_ms_per_step": 1000 * speculative["draftSeconds"] / steps,
        "identical_prompts": sum(1 for p in summary["prompts"] if p["identical"]),
        "near_ties": summary["nearTies"],
        "differing": differing,
    }


def pairs(values: list[str], flag: str) -> list[tuple[str, Path]]:
    """``KEY=PATH`` flag values; a missing file or an unknown form is refused in one line."""
    result = []
    for value in values:
        key, sep, path = value.partition("=")
        if not sep or not Path(path).is_file():
            raise ValueError(f"{flag} {value!r}: expected KEY=FILE with an existing FILE")
        result.append((key, Path(path)))
    return result


def add_cpu_sections(report: dict[str, Any], args: argparse.Namespace) -> None:
    """What the CPU measured after the GPU run (module docstring), into ``report``."""
    report["drafter_labels"] = {**report.get("drafter_labels", {}), **DRAFTER_LABELS}  # a report from an older run
    for key, path in pairs(args.validate, "--validate"):
        where, _, drafter = key.partition(":")
        if where not in SETS or drafter not in SERVED_DRAFTERS:
            raise ValueError(
                f"--validate {key}: expected SET:DRAFTER, SET one of {', '.join(SETS)}, DRAFTER one of "
                + ", ".join(SERVED_DRAFTERS)
            )
        entry = _served_entry(json.loads(path.read_text()), pytorch_tau(report, where, drafter))
        label = "held-out, templates" if where == "templates" else f"held-out, {OTHER_LABEL}"
        report.setdefault("served", {}).setdefault(label, {})[drafter] = entry
    runs = [generate_run(drafter, json.loads(path.read_text())) for drafter, path in pairs(args.generate, "--generate")]
    if runs:
        threads = ", ".join(map(str, sorted({run["threads"] for run in runs if run["threads"]})))
        gpus = sorted({run["gpu"] for run in runs})
        # the summaries name where llama.cpp computed, not the machine: this one's CPU unless they ran on a GPU
        here = f"{platform.node()} ({os.cpu_count()} CPU cores)"
        machine = args.generate_machine or (here if gpus == ["cpu"] else "a GPU machine")
        date = max((run["date"] for run in runs), default="") or time.strftime("%Y-%m-%d")
        report["generate"] = {
            "machine": f"{date} on {machine}; llama.cpp on {', '.join(gpus)}, threads {threads}",
            "runs": runs,
        }
    if args.lookahead is not None:
        report["lookahead"] = json.loads(args.lookahead.read_text())
    if args.llama_server is not None:
        report["llama_server"] = json.loads(args.llama_server.read_text())


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "real-lab-report",
        help="the real-model lab's lab_report.json/.md (from its folder; CPU measurements added)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--work", type=Path, help="the lab's folder (real_lab.sh's REAL_LAB_DIR): the report from it")
    source.add_argument("--report", type=Path, help="a lab_report.json to add the CPU's measurements to")
    p.add_argument("--out", type=Path, default=None, help="folder to write into (default: --work, or --report's)")
    p.add_argument("--validate", action="append", default=[], metavar="SET:DRAFTER=FILE", help="validate summary")
    p.add_argument("--generate", action="append", default=[], metavar="DRAFTER=FILE", help="generate summary")
    p.add_argument(
        "--generate-machine",
        default=None,
        metavar="TEXT",
        help="the machine the generate summaries ran on, e.g. 'one NVIDIA H200' (default: this one's CPU when they "
        "ran on the CPU)",
    )
    p.add_argument("--lookahead", type=Path, default=None, help="bench/lookaheadSteps.ts's JSON")
    p.add_argument("--llama-server", type=Path, default=None, help="bench/llama_server_spec.py's summary.json")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.work is not None:
        report = build_report(args.work)
        out = args.out or args.work
    else:
        if not args.report.is_file():
            raise FileNotFoundError(f"--report {args.report}: no such file")
        report = json.loads(args.report.read_text())
        out = args.out or args.report.parent
    add_cpu_sections(report, args)
    report["chat_goals"] = chat_goals(report)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "lab_report.json", report)
    atomic_write_text(out / "lab_report.md", lab_markdown(report))
    print(f"real-lab-report: {out / 'lab_report.md'}")
    return 0
