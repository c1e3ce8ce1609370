"""The dress rehearsal's results (real_rehearsal.sh): every stage's throughput, MFU, peak GPU memory and batch, and the
whole job's cost projected from them — rehearsal.json and tables.md in OUT (the folder meant for
bench/results/<date>-h200-real-rehearsal/).

    python train/scripts/gpu/real_rehearsal_report.py --work /tmp/real-rehearsal --out RESULTS
    python train/scripts/gpu/real_rehearsal_report.py --work /tmp/real-rehearsal --out RESULTS \\
        --baseline bench/results/2026-12-01-h200-real-rehearsal/rehearsal.json     # rates: stages it lacks from there
    python train/scripts/gpu/real_rehearsal_report.py --from-report RESULTS/rehearsal.json --out RESULTS  # again

Two kinds of work folder. The full rehearsal's: each stage's stamp (seconds, nvidia-smi peak) and its own outputs
(reference's manifest, distill's and QAT's manifests, evaluate's JSON, the export, the packed folder). The rates
mode's (``REHEARSAL_MODE=rates``): ``reference-rate.json`` (bench_reference.py at the real shapes: the reference
engine's continuation tokens/s, prefill and decode time, peak memory) and ``train-rate.json``, the training probe's
(real_rehearsal.sh's ``train_probe`` hook), whose sections are read as::

    {"distill":  {"tokens_per_s": all real tokens a second (prompt + continuation), "continuation_tokens_per_s": …,
                  "mfu": 0..1, "peak_gib": …},
     "qat":      {the same keys},
     "evaluate": {"conversations_per_s": held-out conversations a second, one drafter in one mode, "peak_gib": …}}

(any section may be missing). ``--baseline`` fills the stages a run did not measure from an earlier rehearsal.json,
each marked with where it came from.

The projection: the job's JOB_PROMPTS prompts with JOB_CONTINUATION-token answers, qwen3-chat's KD and QAT epochs, its
held-out and dev sets and dev-evaluation cadence, at the measured rates. The rehearsal's random models never stop, so
every continuation runs to max_new_tokens: reference batches then decode to the cap as a real batch does (its longest
row sets its steps), so the job's useful tokens/s is the measured one × JOB_CONTINUATION / cap. Distillation trains
on prompt + continuation: at an all-token rate the job's hours are its tokens ÷ that rate; at a continuation rate alone
(the full rehearsal's manifests) the cost per continuation token is scaled by the job's (P + C) / C against the
rehearsal's. Evaluation: JOB_EVAL_WALKS walks of each held-out conversation (the base and the distilled drafter, each
in bf16 and Q4_0) and the dev evaluations (one walk). MFU = FLOPs ÷ (seconds × PEAK_TFLOPS): 2 × parameters a token
for reference's forward passes, from the probe for training. 8 GPUs: reference and training divided by 8 (shards and
DDP ranks; the scaling is not measured here), evaluate, export and pack as on one. A 3-hour job: the speed-up every
stage would need, each stage's rate at that speed-up, and the H200s that would do it in 3 hours of wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # train/: runs without PYTHONPATH too
from specdraft_train.presets import get_preset  # noqa: E402  (no torch: the presets are plain dataclasses)

JOB_PROMPTS = 250_000
JOB_CONTINUATION = 200  # tokens an answer, on average
JOB_EVAL_WALKS = 4  # each held-out conversation: the base and the distilled drafter, each in bf16 and in Q4_0
GPU_HOURS_GOAL = 5.0
THREE_HOURS = 3.0
REFERENCE_GOAL = 9_000  # continuation tokens/s at the 8B shape, top-20 log-probs
TRAIN_MFU_GOAL = 0.40  # distill and QAT at the 1.7B shape
EVALUATE_GOAL_MINUTES = 10  # 5,000 held-out conversations
PEAK_TFLOPS = 790  # dense bf16 of this H200, as the training probe counts MFU
FOLDER_CAP = 1_000_000_000
STAGES = ("models", "prompts", "reference", "distill", "probe", "qat", "evaluate", "export", "node", "pack",
          "selfcheck", "validate")  # fmt: skip
RATE_STAGES = ("reference-rate", "train-rate")
PARALLEL = ("reference", "distill", "qat")  # divided between GPUs; the rest runs on one
PROJECTED = (*PARALLEL, "evaluate", "export", "pack")  # the stages the projection reads


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def token_lengths(work: Path) -> dict[str, float]:
    """Mean prompt and continuation tokens of what the reference stage generated (training shards and eval sets)."""
    # imported here, not at the top: these readers pull in torch, which --from-report (re-projecting stored
    # figures, e.g. on a laptop) does not need
    from specdraft_train.modeling.tau import read_conversations
    from specdraft_train.training.examples import read_train_examples

    prompts, continuations = [], []
    for e in read_train_examples(work / "reference"):
        prompts.append(len(e.prompt_tokens))
        continuations.append(len(e.continuation_tokens))
    for split in ("dev", "heldout"):
        for c in read_conversations(work / "reference" / f"{split}.jsonl"):
            prompts.append(len(c.prompt_tokens))
            continuations.append(len(c.continuation_tokens))
    return {
        "prompt_tokens_mean": statistics.fmean(prompts),
        "prompt_tokens_max": max(prompts),
        "continuation_tokens_mean": statistics.fmean(continuations),
    }


def stage_rows(work: Path) -> dict[str, dict[str, Any]]:
    """Each finished stage of a full rehearsal: its stamp (seconds, nvidia-smi peak) and what its outputs say."""
    rows: dict[str, dict[str, Any]] = {}
    for name in STAGES:
        stamp = read_json(work / "stamps" / f"{name}.json")
        if stamp is not None:
            rows[name] = dict(stamp)
    reference = read_json(work / "reference" / "manifest.json")
    if reference and "reference" in rows:
        generation = reference["generation"]
        rank = generation["per_rank"][0]
        # the training shards' rate where the manifest has it (the job is 98 % training prompts; its eval sets are
        # generated in small rounds), else the whole generation phase's
        train_rate = rank["train_tokens"] / rank["train_seconds"] if rank.get("train_seconds") else None
        rows["reference"].update(
            tokens_per_s=train_rate or generation["tokens_per_s"],
            generation_tokens_per_s=generation["tokens_per_s"],
            tokens=generation["tokens"],
            generation_seconds=generation["seconds"],
            peak_gpu_bytes=rank.get("peak_gpu_bytes"),
            engine=rank.get("engine"),
            prompts=reference["prompts"],
        )
    for name, folder in (("distill", "distilled"), ("qat", "distilled-qat")):
        manifest = read_json(work / folder / "manifest.json")
        if manifest and name in rows:
            m = manifest["metrics"]
            rows[name].update(
                tokens_per_s=m.get("tokens_per_s"),
                steps=m["steps"],
                train_tokens=m["train_tokens"],
                train_seconds=m["train_seconds"],
                peak_gpu_bytes=m.get("peak_gpu_bytes"),
                batch=manifest["params"]["global_batch"],
            )
    probe = read_json(work / "probe.json")
    if probe and "probe" in rows:
        rows["probe"].update(largest_batch=probe["largest_batch"], distill=probe["distill"], qat=probe["qat"])
    export = read_json(work / "drafter-q4_0.gguf.manifest.json")
    if export and "export" in rows:
        rows["export"].update(
            gguf_bytes=next(iter(export["outputs"].values()))["bytes"], tensor_types=export["tensor_types"]
        )
    evaluation = read_json(work / "eval.json")
    if evaluation and "evaluate" in rows:
        rows["evaluate"].update(
            conversations=evaluation["heldout"]["conversations"],
            peak_gpu_bytes=evaluation.get("peak_gpu_bytes"),
            drafters=[
                {
                    "path": d["drafter"]["path"],
                    "seconds": d["seconds"],
                    "q4_mode": d.get("q4_0", {}).get("mode"),
                    "tau_q4": d.get("q4_0", {}).get("tau"),
                }
                for d in evaluation["drafters"]
            ],  # fmt: skip
        )
    folder = work / "drafter-folder"
    if folder.is_dir() and "pack" in rows:
        rows["pack"]["folder_bytes"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    summary = (
        next((p for p in (work / "validate").rglob("summary.json")), None) if (work / "validate").is_dir() else None
    )
    if summary is not None and "validate" in rows:
        s = read_json(summary) or {}
        rows["validate"].update({k: s.get(k) for k in ("tau", "requests", "requests_per_second", "failures")})
    return rows


def rate_rows(work: Path) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """The rates mode's rows (module docstring) and the prompts' lengths, from the files its two stages leave."""
    rows: dict[str, dict[str, Any]] = {}
    lengths: dict[str, float] = {}
    stamps = {name: read_json(work / "stamps" / f"{name}.json") or {} for name in RATE_STAGES}
    bench = read_json(work / "reference-rate.json")
    if bench:
        spec, run = next(iter(bench["engines"].items()))
        workload = bench["workload"]
        lengths = {
            "prompt_tokens_mean": workload["prompt_tokens_mean"],
            "prompt_tokens_max": workload["prompt_tokens_max"],
            "continuation_tokens_mean": run["tokens"] / run["prompts"],
        }
        flops = 2 * bench["model"]["parameters"] * (run["prompt_tokens"] + run["tokens"])
        rows["reference"] = {
            "source": f"bench_reference.py --engines {spec}, {run['prompts']:,} chat prompts",
            "seconds": run["seconds"],
            "nvidia_smi_max_mib": stamps["reference-rate"].get("nvidia_smi_max_mib"),
            "tokens_per_s": run["tokens_per_s"],
            "all_tokens_per_s": (run["prompt_tokens"] + run["tokens"]) / run["seconds"],
            "prompt_tokens_per_s": run["prompt_tokens_per_s"],
            "mfu": flops / run["seconds"] / (PEAK_TFLOPS * 1e12),
            "peak_gpu_bytes": run["peak_gib"] * 2**30 if run.get("peak_gib") is not None else None,
            "prompts": {"train": run["prompts"]},
            "engine": {key: run[key] for key in ("prefill", "decode_attention", "max_rows", "kv_cache_fraction")}
            | {key: run[key] for key in ("prefill_seconds", "decode_seconds", "graph_captures", "batches")},
        }
    probe = read_json(work / "train-rate.json") or {}
    for name in ("distill", "qat", "evaluate"):
        measured = probe.get(name)
        if not measured:
            continue
        row = {"source": "training probe", "nvidia_smi_max_mib": stamps["train-rate"].get("nvidia_smi_max_mib")}
        if name == "evaluate":
            row["conversations_per_s"] = measured["conversations_per_s"]
        else:
            row.update(
                tokens_per_s=measured["continuation_tokens_per_s"],
                all_tokens_per_s=measured["tokens_per_s"],
                mfu=measured.get("mfu"),
            )
        if measured.get("peak_gib") is not None:
            row["peak_gpu_bytes"] = measured["peak_gib"] * 2**30
        rows[name] = row
    return rows, lengths


def with_baseline(
    rows: dict[str, dict[str, Any]], lengths: dict[str, float], baseline: dict[str, Any], label: str
) -> dict[str, float]:
    """The projected stages ``rows`` lacks, from an earlier rehearsal.json (each row says so: ``label``); returns the
    lengths to project with (this run's, else the baseline's)."""
    before = baseline["lengths"]
    for name in PROJECTED:
        row = baseline["stages"].get(name)
        if name in rows or row is None:
            continue
        rows[name] = {**row, "source": f"baseline: {label}"}
        if name in ("distill", "qat") and row.get("tokens_per_s") and not row.get("all_tokens_per_s"):
            # its continuation rate at the baseline's lengths, as all the tokens it trained on a second
            prompt, continuation = before["prompt_tokens_mean"], before["continuation_tokens_mean"]
            rows[name]["all_tokens_per_s"] = row["tokens_per_s"] * (prompt + continuation) / continuation
    return lengths or before


def job_split() -> dict[str, int]:
    """The job's held-out and dev prompts, KD and QAT epochs and the dev evaluations of one distill run, as
    qwen3-chat sizes them."""
    preset = get_preset("qwen3-chat")
    heldout = JOB_PROMPTS * preset.corpus.heldout_per_mille // 1000
    dev = JOB_PROMPTS * preset.corpus.dev_per_mille // 1000
    steps = (JOB_PROMPTS - heldout - dev) // preset.distill.batch_size
    evaluations = steps // preset.distill.eval_every + 2  # the starting drafter and the last weights compete too
    return {
        "heldout": heldout,
        "dev": dev,
        "dev_evaluations": evaluations,
        "kd_epochs": preset.distill.epochs,
        "qat_epochs": preset.distill.qat_epochs,
    }


def evaluation_hours(evaluate: dict[str, Any], split: dict[str, int]) -> dict[str, float]:
    """Held-out evaluation and the dev evaluations inside distill and QAT, at the evaluate row's rate."""
    if evaluate.get("conversations_per_s"):
        rate = evaluate["conversations_per_s"]  # one drafter, one mode
        return {
            "evaluate": JOB_EVAL_WALKS * split["heldout"] / rate / 3600,
            "dev evaluations": 2 * split["dev_evaluations"] * split["dev"] / rate / 3600,
        }
    if not evaluate.get("conversations"):
        return {}
    conversations, drafters = evaluate["conversations"], evaluate.get("drafters") or []
    drafting = sum(d["seconds"] for d in drafters) or evaluate["seconds"]
    # the stage's loading is paid once; its drafters' walks (each in bf16 and Q4_0) grow with the held-out set
    hours = {"evaluate": (evaluate["seconds"] - drafting + drafting / conversations * split["heldout"]) / 3600}
    if drafters:
        # dev τ inside distill and QAT: the base drafter's rate in one mode, on the dev set, at every evaluation
        dev_rate = drafters[0]["seconds"] / conversations / (2 if drafters[0].get("q4_mode") else 1)
        hours["dev evaluations"] = 2 * split["dev_evaluations"] * split["dev"] * dev_rate / 3600
    return hours


def projection(rows: dict[str, dict[str, Any]], lengths: dict[str, float], cap: int) -> dict[str, Any] | None:
    """The whole job on 1 and on 8 H200s, and what 3 hours would take (module docstring); None before reference
    and training have rates."""
    needed = [rows.get(name, {}).get("tokens_per_s") for name in PARALLEL]
    if any(rate is None for rate in needed) or not lengths:
        return None
    tokens = JOB_PROMPTS * JOB_CONTINUATION
    prompt = lengths["prompt_tokens_mean"]
    rehearsal_c = lengths["continuation_tokens_mean"]
    train_scale = ((prompt + JOB_CONTINUATION) / JOB_CONTINUATION) / ((prompt + rehearsal_c) / rehearsal_c)
    split = job_split()
    hours = {"reference": tokens / (rows["reference"]["tokens_per_s"] * JOB_CONTINUATION / cap) / 3600}
    for name, epochs in (("distill", split["kd_epochs"]), ("qat", split["qat_epochs"])):
        row = rows[name]
        if row.get("all_tokens_per_s"):
            hours[name] = epochs * JOB_PROMPTS * (prompt + JOB_CONTINUATION) / row["all_tokens_per_s"] / 3600
        else:
            hours[name] = epochs * tokens * train_scale / row["tokens_per_s"] / 3600
    hours |= evaluation_hours(rows.get("evaluate", {}), split)
    for name in ("export", "pack"):
        if name in rows:
            hours[name] = rows[name]["seconds"] / 3600
    one = sum(hours.values())
    serial = sum(h for k, h in hours.items() if k not in PARALLEL)
    parallel = one - serial
    speedup = one / THREE_HOURS
    rates = {name: rows[name]["tokens_per_s"] * max(1.0, speedup) for name in PARALLEL}
    return {
        "assumptions": {
            "prompts": JOB_PROMPTS,
            **split,
            "continuation_tokens": JOB_CONTINUATION,
            "prompt_tokens_mean": prompt,
            "reference_useful_share": JOB_CONTINUATION / cap,
            "train_cost_scale": train_scale,
        },
        "hours_one_h200": hours,
        "one_h200": {"wall_hours": one, "gpu_hours": one},
        "eight_h200": {
            "wall_hours": parallel / 8 + serial,
            "gpu_hours": parallel + 8 * serial,
            "scaling": "ideal ÷ 8, not measured",
        },
        "three_hours": {
            "speedup_needed": speedup,  # of every stage at once, on one H200
            "continuation_tokens_per_s_needed": rates,
            # H200s that fit it in 3 hours of wall time at these rates (None: the one-GPU stages alone take longer)
            "h200s": max(1, math.ceil(parallel / (THREE_HOURS - serial))) if serial < THREE_HOURS else None,
        },
    }


def gib(value: float | None) -> str:
    return "—" if value is None else f"{value / 2**30:.1f} GiB"


def rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def measured_lines(rows: dict[str, dict[str, Any]]) -> list[str]:
    """The stage table: one line a stage run or taken from the baseline."""
    lines = [
        "| stage | seconds | continuation tokens/s | all tokens/s | MFU | peak GPU memory (torch) | peak (nvidia-smi) "
        "| batch, engine | source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in (*STAGES, *(n for n in rows if n not in STAGES)):
        row = rows.get(name)
        if row is None:
            continue
        batch = row.get("batch", "")
        if name == "reference" and row.get("prompt_tokens_per_s"):
            batch = f"prompt tokens/s {row['prompt_tokens_per_s']:,.0f}; "
        if name == "reference" and row.get("engine"):
            engine = row["engine"]
            if engine.get("row_budget_by_width"):
                budget = engine["row_budget_by_width"]
                batch += f"rows ≤ {engine['rows_max']} (mean {engine['rows_mean']:.0f}); KV budget rows {budget}"
            if engine.get("decode_attention"):
                batch += f"{engine['prefill']} prefill, {engine['decode_attention']} decode"
            if engine.get("prefill_seconds") is not None:
                batch += f"; prefill {engine['prefill_seconds']:.0f} s, decode {engine['decode_seconds']:.0f} s"
        if name == "probe" and row.get("largest_batch"):
            batch = f"largest that fits: KD {row['largest_batch']['distill']}, QAT {row['largest_batch']['qat']}"
        if row.get("conversations_per_s"):
            batch = f"{row['conversations_per_s']:.1f} conversations/s"
        smi = row.get("nvidia_smi_max_mib")
        seconds = "—" if row.get("seconds") is None else f"{row['seconds']:.0f}"
        failed = "" if row.get("rc", 0) == 0 else f" (exit {row['rc']})"
        lines.append(
            f"| {name} | {seconds}{failed} | {rate(row.get('tokens_per_s'))} | {rate(row.get('all_tokens_per_s'))} | "
            f"{percent(row.get('mfu'))} | {gib(row.get('peak_gpu_bytes'))} | "
            f"{'—' if smi is None else f'{smi / 1024:.1f} GiB'} | {batch} | {row.get('source', 'this run')} |"
        )
    return lines


def tables(report: dict[str, Any]) -> str:
    rows = report["stages"]
    lengths = report["lengths"]
    lines = [
        f"# Dress rehearsal of the real job ({report['mode']})",
        "",
        f"Qwen3-8B-shaped target, Qwen3-1.7B-shaped drafter, random weights, Qwen3's tokenizer and chat template "
        f"(train/scripts/gpu/real_rehearsal.sh, {report['created']}). Prompts: "
        f"{rows.get('reference', {}).get('prompts', '—')}; mean prompt {lengths.get('prompt_tokens_mean', 0):.0f} "
        f"tokens (max {lengths.get('prompt_tokens_max', 0)}), continuations "
        f"{lengths.get('continuation_tokens_mean', 0):.0f}. τ of random models means nothing.",
        "",
        *measured_lines(rows),
    ]
    for name, label in (("export", "GGUF"), ("pack", "packed folder")):
        size = rows.get(name, {}).get("gguf_bytes" if name == "export" else "folder_bytes")
        if size is not None:
            lines.append(f"\n{label}: {size:,} bytes ({'≤' if size <= FOLDER_CAP else '>'} 10^9).")
    projected = report.get("projection")
    if projected:
        hours = projected["hours_one_h200"]
        three = projected["three_hours"]
        lines += ["", "## The whole job, projected from these rates", "",
                  "| stage | H200-hours on one |", "|---|---|"]  # fmt: skip
        lines += [f"| {k} | {v:.2f} |" for k, v in hours.items()]
        lines += [
            f"| **total** | **{projected['one_h200']['gpu_hours']:.2f}** |",
            "",
            f"On 8 H200s: {projected['eight_h200']['wall_hours']:.2f} hours of wall time, "
            f"{projected['eight_h200']['gpu_hours']:.2f} GPU-hours ({projected['eight_h200']['scaling']}). "
            f"Assumptions: {json.dumps(projected['assumptions'])}.",
            "",
            three_hours_line(three),
        ]
    lines += ["", "## Goals", ""] + [f"- {goal}: {verdict}" for goal, verdict in report["goals"].items()]
    return "\n".join(lines) + "\n"


def three_hours_line(three: dict[str, Any]) -> str:
    if three["speedup_needed"] <= 1:
        return "The job fits 3 hours on one H200 at these rates."
    rates = ", ".join(f"{k} {v:,.0f}" for k, v in three["continuation_tokens_per_s_needed"].items())
    speedup = three["speedup_needed"]
    line = f"A 3-hour job on one H200 needs every stage {speedup:.2f}× faster: {rates} continuation tokens/s"
    if three["h200s"] is None:
        return line + "; the stages that run on one GPU alone take longer than 3 hours."
    return line + f"; at these rates {three['h200s']} H200s do it in 3 hours of wall time."


def goals(rows: dict[str, dict[str, Any]], projected: dict[str, Any] | None) -> dict[str, str]:
    def judged(value: float | None, ok: bool, text: str) -> str:
        return "not measured" if value is None else f"{'met' if ok else 'NOT met'} ({text})"

    reference = rows.get("reference", {}).get("tokens_per_s")
    hours = projected["one_h200"]["gpu_hours"] if projected else None
    folder = rows.get("pack", {}).get("folder_bytes")
    mfu = [rows.get(name, {}).get("mfu") for name in ("distill", "qat")]
    evaluate = (projected or {}).get("hours_one_h200", {}).get("evaluate")
    failed = [name for name, row in rows.items() if row.get("rc", 0) != 0 and name != "selfcheck"]
    return {
        f"reference ≥ {REFERENCE_GOAL:,} continuation tokens/s at the 8B shape": judged(
            reference, (reference or 0) >= REFERENCE_GOAL, f"{rate(reference)} tok/s"
        ),
        f"distill and QAT ≥ {TRAIN_MFU_GOAL:.0%} MFU": judged(
            None if None in mfu else min(mfu), min(m or 0 for m in mfu) >= TRAIN_MFU_GOAL, " / ".join(map(percent, mfu))
        ),
        f"evaluate 5,000 held-out conversations in ≤ {EVALUATE_GOAL_MINUTES} minutes": judged(
            evaluate, (evaluate or 0) * 60 <= EVALUATE_GOAL_MINUTES, f"{(evaluate or 0) * 60:.0f} min"
        ),
        f"whole job ≤ {GPU_HOURS_GOAL:g} H200-hours": judged(
            hours, (hours or 0) <= GPU_HOURS_GOAL, f"{hours or 0:.2f} h"
        ),
        "packed folder ≤ 10^9 bytes": judged(folder, (folder or 0) <= FOLDER_CAP, f"{folder or 0:,} B"),
        "no stage out of memory or failed": "met" if not failed and rows else f"NOT met: {', '.join(failed)}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--work", type=Path, help="the rehearsal's work folder")
    source.add_argument("--from-report", type=Path, help="a rehearsal.json: project again from its measurements")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mode", default="H200")
    ap.add_argument("--max-new-tokens", type=int, default=256, help="the reference stage's cap (qwen3-chat: 256)")
    ap.add_argument("--baseline", type=Path, help="a rehearsal.json whose stages fill the ones this run lacks")
    args = ap.parse_args()
    if args.from_report is not None:  # the same measurements, projected by this script as it is now
        measured = read_json(args.from_report)
        if measured is None or "stages" not in measured:
            sys.exit(f"real_rehearsal_report: {args.from_report} is not a rehearsal.json")
        rows, lengths, created = measured["stages"], measured["lengths"], measured["created"]
        created += f", projected again {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        args.mode = measured.get("mode", args.mode)
    else:
        created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        if any((args.work / "stamps" / f"{name}.json").is_file() for name in RATE_STAGES):
            rows, lengths = rate_rows(args.work)
        else:
            rows = stage_rows(args.work)
            lengths = token_lengths(args.work) if (args.work / "reference" / "manifest.json").is_file() else {}
    if args.baseline is not None:
        baseline = read_json(args.baseline)
        if baseline is None or "stages" not in baseline:
            sys.exit(f"real_rehearsal_report: {args.baseline} is not a rehearsal.json")
        lengths = with_baseline(rows, lengths, baseline, args.baseline.parent.name or str(args.baseline))
    reference = rows.get("reference", {})
    if lengths and reference.get("generation_seconds") and not reference.get("prompt_tokens_per_s"):
        prompts = sum(reference["prompts"].values())  # the prefill's share of the work
        reference["prompt_tokens_per_s"] = lengths["prompt_tokens_mean"] * prompts / reference["generation_seconds"]
    projected = projection(rows, lengths, args.max_new_tokens)
    report = {
        "mode": args.mode,
        "created": created,
        "lengths": lengths,
        "stages": rows,
        "projection": projected,
        "goals": goals(rows, projected),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rehearsal.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "tables.md").write_text(tables(report))
    print(tables(report))


if __name__ == "__main__":
    main()
