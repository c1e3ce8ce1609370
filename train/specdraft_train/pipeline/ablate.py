"""Command `ablate`: distillation variants from one lab, each scored on the lab's held-out set by category.

Every variant distills the lab's base drafter (or, with ``variant.init=layers:N``, a drafter made of N of the
target's layers, as `drafter --init layers --layers N` makes it) on the lab's reference data with the lab's distill
settings changed by the variant's own, then runs QAT like the lab does (or, with ``variant.qat=false``, scores the
distilled drafter at Q4_0 PTQ), is exported as the Q4_0 GGUF it would ship as (``OUT/NAME/drafter-q4_0.gguf``, its
bytes in the report), and is evaluated on ``reference/heldout.jsonl``: τ, macro τ and top-1 agreement overall and per
category, the ratio to the lab's base drafter at Q4_0 PTQ, and the share of the gap between that base and the target
as its own drafter that it closes. Each variant also records the continuation tokens it trained on and the seconds
its stages held the device.

It takes either kind of lab's folder, the toy lab's or the real-model lab's (``labs.LabLayout``); where the lab has
not evaluated its base and target yet, ablate does, once (``OUT/reference.json``), so a study needs only the base and
the reference data.

    python -m specdraft_train ablate --lab runs/lab --out runs/ablation \\
        --variant 'kl:' \\
        --variant 'allq4:export.embedding_type=Q4_0' \\
        --variant 'prefix+replay:distill.loss=prefix,distill.replay_weight=0.2' \\
        --variant 'tvd-no-qat:distill.loss=tvd,variant.qat=false' \\
        --variant 'inner-only:distill.categories=["code/inner"],distill.data_fraction=0.5'

A variant is ``NAME:SETTING,SETTING,…`` (NAME: letters, digits, ``._+-``); a SETTING is ``distill.FIELD=VALUE`` for
any field of config.DistillConfig (JSON values or bare strings, as `lab --set` takes them; ``categories`` keeps the
training examples whose category starts with one of its prefixes, ``data_fraction`` a nested share of them),
``export.FIELD=VALUE`` for a field of config.ExportConfig (``embedding_type=Q4_0``: QAT, evaluation and export with
the token embedding at Q4_0 too, an all-Q4_0 file), ``onpolicy.FIELD=VALUE`` for config.OnPolicyConfig,
``variant.qat=true|false``, ``variant.init=base|distilled|layers:N`` (``distilled``: go on from the lab's distilled
drafter), ``variant.onpolicy=true`` (the starting drafter first writes on-policy data, `onpolicy`, trained on beside
the reference's rows) or ``variant.select_reference=distilled`` (token selection by the lab's distilled drafter, with
``distill.select_tokens`` < 1). Each variant follows the recipe `run` does (training.distillation.recipe): distill,
then ``onpolicy.rounds`` on-policy rounds (``distilled-R/``), then QAT bounded by ``distill.qat_time_budget_s``.
Where the lab has a second held-out set (`run --eval-prompts`, the real-model lab's target-written prompts), every
variant is scored on it too. A `run` folder is a lab too (its base: ``base/`` or ``drafter/``):

    python -m specdraft_train ablate --lab runs/mine --out runs/mine-study --jobs 3 \\
        --variant 'more:variant.init=distilled,distill.epochs=2' \\
        --variant 'onpolicy:variant.init=distilled,variant.onpolicy=true,distill.epochs=2' \\
        --variant 'select:variant.select_reference=distilled,distill.select_tokens=0.5'

Each variant's cost is bounded by its ``distill.time_budget_s`` per distill run and ``distill.qat_time_budget_s``
for QAT (``--time-budget`` sets both for every variant, 0 for none) besides its epochs and plateau stop.

``--jobs N`` runs N variants at a time on the one device, each in its own process: a small drafter leaves most of an
H200 idle (its steps are bound by kernel launches), so N variants with equal time budgets share it fairly, each
training on fewer tokens than alone. Each result records ``device_shared_by`` (N, or fewer when fewer variants were
left to run), and the report says so beside the device seconds.

Writes ``OUT/NAME/`` (the variant's checkpoints, GGUF and ``result.json``), then ``OUT/ablation.json`` and
``OUT/ablation.md`` (one row per finished variant). Resumable: a finished variant is skipped on rerun, a
distillation cut off mid-run resumes from its own ``resume/`` state; a name reused with other settings is refused.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..commands import distill, drafter, onpolicy
from ..commands.evaluate import drafter_tau, verify_heldout
from ..config import ExportConfig, LabPreset, add_device_argument
from ..formats.artifacts import (
    DRAFTER_GGUF,
    atomic_write_json,
    atomic_write_text,
    sha256_file,
    stage_complete,
    verify_stage_dir,
)
from ..labs.layout import LabLayout, lab_layout
from ..labs.reports import ablation_markdown, pct
from ..labs.variants import Variant, parse_variant, variant_preset
from ..modeling.models import checkpoint_qat_state, load_causal_lm, resolve_device
from ..modeling.tau import gap_closed, model_tau, ngram_tau, read_conversations
from ..training.distillation import DistillJob, recipe
from .runner import Runner

RESULT_FILE = "result.json"
SECOND_REFERENCE_FILE = "reference-second.json"  # the same on the lab's second held-out set, where it has one
REFERENCE_FILE = "reference.json"  # OUT/reference.json: the base's and target's τ, where ablate evaluated them
# What a variant's result keeps of each of its distill stages' metrics.
# The recipe's steps (training.distillation.recipe) as a variant's folders and progress stages; a round R's
# distillation is ``distilled-R``.
STEP_FOLDERS = {"distill": "distilled", "qat": "distilled-qat"}
STEP_STAGES = {"qat": "distill --qat"}
STAGE_METRICS = (
    "steps",
    "best_step",
    "best_dev_macro_tau",
    "stopped_by_plateau",
    "stopped_by_time_budget",
    "train_seconds",
)


def lab_reference_tau(layout: LabLayout, out: Path, device_name: str) -> dict[str, Any]:
    """The base drafter at Q4_0 PTQ, the target as its own drafter and n-gram prompt lookup on the lab's held-out set:
    the lab's where it evaluated them, else evaluated here once (``out/reference.json``)."""
    if layout.evaluated:
        reference = layout.reference_tau()
        if "ngram" not in reference:  # a lab that did not score prompt lookup: it is cheap (CPU, no model)
            conversations = read_conversations(layout.path / "reference" / "heldout.jsonl")
            evaluate = layout.preset.evaluate
            reference["ngram"] = ngram_tau(conversations, evaluate.k, evaluate.ngram_max).to_dict()
        return reference
    return heldout_reference_tau(layout, layout.path / "reference" / "heldout.jsonl", out / REFERENCE_FILE, device_name)


def heldout_reference_tau(layout: LabLayout, heldout_path: Path, cached: Path, device_name: str) -> dict[str, Any]:
    """The base at Q4_0 PTQ, the target and n-gram prompt lookup on one held-out set, evaluated once and kept in
    ``cached`` (for reruns and for --jobs' processes) while the set is the same."""
    heldout_sha256 = sha256_file(heldout_path)
    if cached.is_file():
        saved = json.loads(cached.read_text())
        if saved.get("heldout_sha256") == heldout_sha256 and "ngram" in saved["tau"]:
            return saved["tau"]
    print(f"ablate: the base and the target on {heldout_path} …", file=sys.stderr)
    conversations = read_conversations(heldout_path)
    device = resolve_device(device_name)
    evaluate = layout.preset.evaluate
    embedding_type = layout.preset.export.resolved_embedding_type()
    base, mode = drafter_tau(
        layout.base,
        conversations,
        evaluate.k,
        device,
        q4=True,
        batch_tokens=evaluate.batch_tokens,
        embedding_type=embedding_type,
    )
    target_model = load_causal_lm(layout.path / "target", device)
    target = model_tau(target_model, conversations, evaluate.k, device, evaluate.batch_tokens)
    tau = {
        "base_q4_0_ptq": {"checkpoint": "base", "weights": mode, **base.to_dict()},
        "target_as_drafter": {"checkpoint": "target", **target.to_dict()},
        "ngram": ngram_tau(conversations, evaluate.k, evaluate.ngram_max).to_dict(),
    }
    atomic_write_json(cached, {"heldout_sha256": heldout_sha256, "device": str(device), "tau": tau})
    return tau


def check_target_layers(lab: Path, variant: Variant) -> None:
    """A ``variant.init=layers:N`` variant needs the lab's target with at least N layers."""
    wanted = variant.target_layers()
    if wanted is None:
        return
    config_path = lab / "target" / "config.json"
    said = f"--variant {variant.name}: variant.init=layers:{wanted}"
    if not config_path.is_file():
        raise ValueError(f"{said} needs the lab's target ({config_path})")
    layers = json.loads(config_path.read_text())["num_hidden_layers"]
    try:
        drafter.evenly_spaced(wanted, layers)  # the rule `drafter --init layers --layers N` applies
    except ValueError as error:
        raise ValueError(f"{said}: the lab's target has {layers} layers") from error


def score(result: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """A variant's held-out result against the lab's base (Q4_0 PTQ) and target: ratios and gap closed, per category."""
    base, target = reference["base_q4_0_ptq"], reference["target_as_drafter"]
    ngram = reference.get("ngram", {}).get("by_category", {})
    by_category = {}
    for name, category in result["by_category"].items():
        b, t = base["by_category"].get(name), target["by_category"].get(name)
        by_category[name] = {
            "tau": category["tau"],
            "top1": category.get("top1"),
            "base_tau": b["tau"] if b else None,
            "target_tau": t["tau"] if t else None,
            "ngram_tau": ngram[name]["tau"] if name in ngram else None,
            "over_base": category["tau"] / b["tau"] if b else None,
            "gap_closed": gap_closed(category["tau"], b["tau"], t["tau"]) if b and t else None,
        }
    base_macro = sum(base["by_category"][n]["tau"] for n in by_category if n in base["by_category"]) / max(
        sum(n in base["by_category"] for n in by_category), 1
    )
    target_macro = sum(target["by_category"][n]["tau"] for n in by_category if n in target["by_category"]) / max(
        sum(n in target["by_category"] for n in by_category), 1
    )
    return {
        "tau": result["tau"],
        "macro_tau": result["macro_tau"],
        "top1": result["top1"],
        "over_base": result["tau"] / base["tau"],
        "gap_closed": gap_closed(result["tau"], base["tau"], target["tau"]),
        "macro_gap_closed": gap_closed(result["macro_tau"], base_macro, target_macro),
        "beats_base_everywhere": all(c["over_base"] is not None and c["over_base"] > 1 for c in by_category.values()),
        # categories where the variant drafts longer than n-gram prompt lookup (where the lab scored it)
        "ahead_of_ngram": sum(c["ngram_tau"] is not None and c["tau"] > c["ngram_tau"] for c in by_category.values()),
        "by_category": by_category,
    }


class VariantProgress(Runner):
    """``OUT/NAME/progress.json``: the variant's spec and the seconds each of its stages took, interrupted runs
    included (runner.py: a stage cut off by a kill or SIGINT keeps its seconds, added when the rerun finishes it)."""

    def __init__(self, directory: Path, variant: Variant):
        super().__init__(directory, f"ablate {variant.name}", state_file="progress.json", seconds_key="seconds")
        if "spec" in self.data and self.data["spec"] != variant.spec():
            raise ValueError(
                f"{directory} holds variant {variant.name!r} run with {self.data.get('spec')}, not "
                f"{variant.spec()}: give the new settings another name, or another --out"
            )
        self.data.setdefault("spec", variant.spec())
        self.data.setdefault("interrupted_seconds", {})
        directory.mkdir(parents=True, exist_ok=True)
        self.save()

    def run_stage(self, name: str, fn: Callable[[], Any], complete: Callable[[], bool]) -> None:
        self.stage(name, self.out, fn, complete)


def distill_variant(
    layout: LabLayout,
    directory: Path,
    progress: VariantProgress,
    variant: Variant,
    applied: LabPreset,
    device_name: str,
) -> list[Path]:
    """distill from the lab's base or the variant's drafter of the target's layers (and, unless
    ``variant.qat=false``, distill --qat from that) into the variant's directory; returns the stage directories, the
    last one the variant's final checkpoint."""
    lab, replay = layout.path, layout.replay
    config, embedding_type = applied.distill, applied.export.resolved_embedding_type()
    start = layout.distilled if variant.init == "distilled" else layout.base
    layers = variant.target_layers()
    if layers is not None:
        start = directory / "drafter"
        print(f"ablate: {variant.name}: drafter of {layers} of the target's layers …", file=sys.stderr)
        progress.run_stage(
            "drafter",
            lambda: drafter.run(lab / "target", start, "layers", layers),
            lambda: stage_complete(start, "drafter"),
        )
    first: tuple[Path, ...] = ()
    if variant.onpolicy:  # the starting drafter's own text, trained on from the first distillation
        first = (directory / "onpolicy",)
        print(f"ablate: {variant.name}: on-policy data from {start.name} …", file=sys.stderr)
        job = onpolicy.OnPolicyJob(start, lab / "target", lab / "reference", first[0], applied.onpolicy, device_name)
        progress.run_stage("onpolicy", lambda: onpolicy.run(job), lambda: stage_complete(first[0], "onpolicy"))
    select = layout.distilled if variant.select_reference == "distilled" else None
    dirs: list[Path] = []
    last = start
    for step in recipe(config, applied.onpolicy, qat=variant.qat):
        data = first if step.name == "distill" else ()
        if step.onpolicy_round:  # the lab's recipe: the last drafter writes this round's data (`run`'s rounds)
            data = (directory / f"onpolicy-{step.onpolicy_round}",)
            print(f"ablate: {variant.name}: on-policy data from {last.name} …", file=sys.stderr)
            job = onpolicy.OnPolicyJob(last, lab / "target", lab / "reference", data[0], applied.onpolicy, device_name)
            progress.run_stage(
                f"onpolicy-{step.onpolicy_round}",
                lambda job=job: onpolicy.run(job),
                lambda d=data[0]: stage_complete(d, "onpolicy"),
            )
        out = directory / STEP_FOLDERS.get(step.name, f"distilled-{step.onpolicy_round}")
        distill_job = DistillJob(
            last,
            lab / "reference",
            out,
            step.config,
            qat=step.qat,
            embedding_type=embedding_type if step.qat else None,
            replay_tokens=replay,
            device=device_name,
            onpolicy=data,
            select_reference=select,  # QAT trains on the tokens distillation selects
        )
        print(f"ablate: {variant.name}: {step.name} …", file=sys.stderr)
        progress.run_stage(
            STEP_STAGES.get(step.name, step.name),
            lambda distill_job=distill_job: distill.run(distill_job),
            lambda out=out: stage_complete(out, "distill"),
        )
        dirs.append(out)
        last = out
    return dirs


def evaluate_variant(
    final: Path, layout: LabLayout, embedding_type: str, device: torch.device, progress: VariantProgress
) -> dict[str, Any]:
    """τ of the final checkpoint on the lab's held-out set at Q4_0 (its QAT state, else PTQ) and as trained, and at
    Q4_0 on its second held-out set where it has one."""
    sets = {"main": layout.path / "reference" / "heldout.jsonl", "second": layout.second_heldout}
    k, batch_tokens = layout.preset.evaluate.k, layout.preset.evaluate.batch_tokens
    evaluated: dict[str, Any] = {}

    def evaluate() -> None:
        for name, heldout_path in sets.items():
            if heldout_path is None:
                continue
            verify_heldout(heldout_path)
            conversations = read_conversations(heldout_path)
            q4, mode = drafter_tau(
                final, conversations, k, device, q4=True, batch_tokens=batch_tokens, embedding_type=embedding_type
            )
            evaluated[name] = q4.to_dict()
            if name == "main":
                fp32, _ = drafter_tau(final, conversations, k, device, batch_tokens=batch_tokens)
                evaluated.update(weights=mode, fp32=fp32.to_dict())

    progress.run_stage("evaluate", evaluate, lambda: False)
    return evaluated


def run_variant(
    layout: LabLayout,
    out: Path,
    variant: Variant,
    references: dict[str, dict[str, Any]],
    device_name: str,
    device_shared_by: int = 1,
) -> dict[str, Any]:
    """Distill (+ QAT), score and export one variant into ``out/NAME``; returns its result (also result.json)."""
    directory = out / variant.name
    directory.mkdir(parents=True, exist_ok=True)
    progress = VariantProgress(directory, variant)
    applied = variant_preset(layout.preset, variant)
    embedding_type = applied.export.resolved_embedding_type()
    stages = distill_variant(layout, directory, progress, variant, applied, device_name)
    final = stages[-1]
    device = resolve_device(device_name)
    evaluated = evaluate_variant(final, layout, embedding_type, device, progress)
    gguf_path = directory / DRAFTER_GGUF
    print(f"ablate: {variant.name}: export …", file=sys.stderr)
    progress.run_stage("export", lambda: export_variant(final, gguf_path, applied.export), lambda: False)
    manifests = [verify_stage_dir(d, "distill") for d in stages]
    result = {
        "name": variant.name,
        "spec": variant.spec(),
        "config": applied.distill.__dict__,
        "export": {
            "embedding_type": embedding_type,
            "gguf": str(gguf_path),
            "gguf_bytes": gguf_path.stat().st_size,
            "max_bytes": applied.export.max_bytes,
        },
        "checkpoint": str(final),
        "weights": evaluated["weights"],
        **score(evaluated["main"], references["main"]),
        # the same on the lab's second held-out set (its path in ablation.json's second_heldout), where it has one
        **({"second": score(evaluated["second"], references["second"])} if "second" in evaluated else {}),
        "fp32": {k: evaluated["fp32"][k] for k in ("tau", "macro_tau", "top1")},
        # Continuation tokens trained on (distill + QAT), text tokens of the replay loss beside them.
        "data_tokens": sum(m["metrics"]["train_tokens"] for m in manifests),
        "replay_tokens": sum(m["metrics"]["replay_tokens"] for m in manifests),
        "examples": manifests[0]["metrics"]["examples"],
        "stages": {  # by folder: distilled, distilled-R (on-policy round R), distilled-qat
            d.name: {k: m["metrics"][k] for k in STAGE_METRICS} for d, m in zip(stages, manifests, strict=True)
        },
        "device": str(device),
        # Wall seconds of the variant's stages on the device, interrupted runs included: GPU seconds on the H200
        # (shared with device_shared_by − 1 other variants running at the same time, with --jobs).
        "device_seconds": round(sum(progress.data["seconds"].values()), 2),
        "device_shared_by": device_shared_by,
    }
    atomic_write_json(directory / RESULT_FILE, result)
    return result


def export_variant(checkpoint: Path, gguf_path: Path, config: ExportConfig) -> None:
    """The variant's drafter as the Q4_0 GGUF the lab would ship: its QAT blocks (and embedding type) when it has a
    QAT state, else post-training quantized with ``config``'s embedding type."""
    from ..commands.export import export_gguf  # needs the `gguf` package, like QAT

    qat_state = checkpoint_qat_state(checkpoint)
    export_gguf(
        checkpoint,
        gguf_path,
        "Q4_0",
        qat_state=qat_state,
        embedding_type=None if qat_state is not None else config.resolved_embedding_type(),
        max_bytes=config.max_bytes,
    )


def held_out_set(path: Path) -> dict[str, Any]:
    """What ablation.json says of a held-out set."""
    conversations = read_conversations(path)
    tokens = sum(len(c.continuation_tokens) for c in conversations)
    return {"path": str(path), "conversations": len(conversations), "continuation_tokens": tokens}


def lab_references(layout: LabLayout, out: Path, device_name: str) -> dict[str, dict[str, Any]]:
    """The base, target and n-gram τ on each of the lab's held-out sets ("main", and "second" where it has one)."""
    references = {"main": lab_reference_tau(layout, out, device_name)}
    if layout.second_heldout is not None:
        cached = out / SECOND_REFERENCE_FILE
        references["second"] = heldout_reference_tau(layout, layout.second_heldout, cached, device_name)
    return references


def write_summary(layout: LabLayout, out: Path, order: list[str], references: dict[str, Any]) -> dict[str, Any]:
    lab, k = layout.path, layout.preset.evaluate.k
    finished = {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob(f"*/{RESULT_FILE}"))}
    names = [n for n in order if n in finished] + [n for n in sorted(finished) if n not in order]
    summary = {
        "lab": str(lab),
        "k": k,
        "heldout": held_out_set(lab / "reference" / "heldout.jsonl"),
        "lab_reference": references["main"],
        "variants": [finished[n] for n in names],
    }
    if "second" in references and layout.second_heldout is not None:
        summary.update(second_heldout=held_out_set(layout.second_heldout), second_reference=references["second"])
    atomic_write_json(out / "ablation.json", summary)
    atomic_write_text(out / "ablation.md", ablation_markdown(summary))
    return summary


def run_concurrently(
    lab: Path, out: Path, variants: list[Variant], device_name: str, time_budget_s: float | None, jobs: int
) -> None:
    """Each variant in its own ``ablate`` process, ``jobs`` at a time; raises naming those that failed."""
    pending, running, failed = list(variants), [], []
    while pending or running:
        while pending and len(running) < jobs:
            variant = pending.pop(0)
            threads = str(max(1, torch.get_num_threads() // jobs))  # the CPU's threads, shared like the device
            command = [sys.executable, "-m", "specdraft_train", "--threads", threads, "ablate"]
            command += ["--lab", str(lab), "--out", str(out)]
            command += ["--variant", variant.text(), "--device", device_name]
            command += ["--device-shared-by", str(min(jobs, len(running) + 1 + len(pending)))]
            if time_budget_s is not None:
                command += ["--time-budget", str(time_budget_s)]
            print(f"ablate: {variant.name}: started in its own process", file=sys.stderr)
            running.append((variant, subprocess.Popen(command)))
        time.sleep(0.5)
        for variant, process in list(running):
            if process.poll() is not None:
                running.remove((variant, process))
                if process.returncode != 0:
                    failed.append(f"{variant.name} (exit {process.returncode})")
    if failed:
        raise ValueError(f"variants failed: {', '.join(failed)}; rerun the same command to resume them")


def budget_settings(seconds: float) -> tuple[str, ...]:
    """--time-budget as settings: every distill run of a variant, QAT's included, bounded by ``seconds``."""
    return (f"distill.time_budget_s={seconds}", f"distill.qat_time_budget_s={seconds}")


def run_ablation(
    lab: Path,
    out: Path,
    variants: list[Variant],
    device_name: str = "auto",
    time_budget_s: float | None = None,
    jobs: int = 1,
    device_shared_by: int = 1,
) -> dict[str, Any]:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("ablate runs its variants one after another in one process; start it without torchrun")
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: expected at least 1")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError(f"--variant names must differ: {names}")
    layout = lab_layout(lab)
    given = variants
    if time_budget_s is not None:
        variants = [
            replace(v, distill_settings=(*budget_settings(time_budget_s), *v.distill_settings)) for v in variants
        ]
    for variant in variants:  # refuse what cannot run before any variant spends device time
        variant_preset(layout.preset, variant)
        check_target_layers(lab, variant)
        uses_distilled = variant.init == "distilled" or variant.select_reference == "distilled"
        if uses_distilled and not stage_complete(layout.distilled, "distill"):
            raise ValueError(
                f"--variant {variant.name} starts from or selects by {layout.distilled}: not distilled yet"
            )
    for stage, kind in layout.stages:
        if not stage_complete(lab / stage, kind):
            raise ValueError(f"{lab / stage}: the lab's {stage} stage has not finished; run the lab first")
    out.mkdir(parents=True, exist_ok=True)
    references = lab_references(layout, out, device_name)
    unfinished = [g for g, v in zip(given, variants) if not (out / v.name / RESULT_FILE).is_file()]
    if jobs > 1 and len(unfinished) > 1:
        run_concurrently(lab, out, unfinished, device_name, time_budget_s, jobs)
    for variant in variants:
        result_path = out / variant.name / RESULT_FILE
        if result_path.is_file():
            VariantProgress(out / variant.name, variant)  # refuses a name reused with other settings
            print(f"ablate: {variant.name}: finished in {result_path.parent}, skipped", file=sys.stderr)
            continue
        result = run_variant(layout, out, variant, references, device_name, device_shared_by)
        print(
            f"ablate: {variant.name}: τ {result['tau']:.3f} ({result['weights']}), "
            f"macro τ {result['macro_tau']:.3f}, × base {result['over_base']:.3f}, "
            f"gap closed {pct(result['gap_closed'])}, "
            f"{result['data_tokens']:,} tokens, {result['device_seconds']:.0f} s",
            file=sys.stderr,
        )
        write_summary(layout, out, names, references)
    return write_summary(layout, out, names, references)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ablate",
        help="distillation variants from a lab, scored by held-out category",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--lab", required=True, type=Path, help="a lab's folder (`lab`, or real_lab.sh's) with its base and reference"
    )
    p.add_argument("--out", required=True, type=Path, help="ablation directory (rerun the same command to resume)")
    p.add_argument(
        "--variant",
        dest="variants",
        action="append",
        required=True,
        type=str,
        metavar="NAME:SECTION.FIELD=VALUE,…",
        help="a variant (repeatable), e.g. 'tvd:distill.loss=tvd,variant.qat=false' or "
        "'allq4:export.embedding_type=Q4_0'",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="distill.time_budget_s of every variant's distill runs (default: the lab's)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="variants run at a time on the one device, each in its own process (default: 1, one after another)",
    )
    add_device_argument(p)
    # set by --jobs for the processes it starts: how many variants share the device (recorded in each result)
    p.add_argument("--device-shared-by", type=int, default=1, help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    variants = [parse_variant(v) for v in args.variants]
    summary = run_ablation(
        args.lab, args.out, variants, args.device, args.time_budget, args.jobs, args.device_shared_by
    )
    for row in summary["variants"]:
        print(
            f"{row['name']}: τ {row['tau']:.3f} ({row['weights']}), macro τ {row['macro_tau']:.3f}, "
            f"× base {row['over_base']:.3f}, gap closed {pct(row['gap_closed'])}"
        )
    print(f"report: {args.out / 'ablation.md'}")
    return 0
