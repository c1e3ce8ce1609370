"""The dress rehearsal's results (real_rehearsal.sh): every stage's seconds, throughput, peak GPU memory and largest
batch, from its stamp and its own manifest, and the whole job's cost projected from them — rehearsal.json and
tables.md in OUT (the folder meant for bench/results/<date>-h200-real-rehearsal/).

    python train/scripts/gpu/real_rehearsal_report.py --work /tmp/real-rehearsal --out RESULTS
    python train/scripts/gpu/real_rehearsal_report.py --from-report RESULTS/rehearsal.json --out RESULTS  # again

The projection: the job's JOB_PROMPTS prompts with JOB_CONTINUATION-token answers, one epoch of KD and one of QAT,
at the measured rates. The rehearsal's random models never stop, so every continuation runs to max_new_tokens:
reference batches then decode to the cap as a real batch does (its longest row sets its steps), so the job's useful
tokens/s is the measured one × JOB_CONTINUATION / cap; distillation trains on prompt + continuation, so its cost per
continuation token is scaled by the job's (P + C) / C against the rehearsal's. Evaluation: the held-out walks at the
drafters' measured seconds per conversation, and distill's and QAT's dev evaluations at the base drafter's, with the
held-out and dev sets and the evaluation cadence of qwen3-chat. 8 GPUs: reference and training
divided by 8 (shards and DDP ranks; the scaling is not measured here), evaluate, export and pack as on one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # train/: runs without PYTHONPATH too
from specdraft_train.config import get_preset  # noqa: E402  (no torch: the config is plain dataclasses)

JOB_PROMPTS = 250_000
JOB_CONTINUATION = 200  # tokens an answer, on average
GPU_HOURS_GOAL = 6.0
REFERENCE_GOAL = 10_000  # continuation tokens/s at the 8B shape, top-20 log-probs
FOLDER_CAP = 1_000_000_000
STAGES = ("models", "prompts", "reference", "distill", "probe", "qat", "evaluate", "export", "node", "pack",
          "selfcheck", "validate")  # fmt: skip


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def token_lengths(work: Path) -> dict[str, float]:
    """Mean prompt and continuation tokens of what the reference stage generated (training shards and eval sets)."""
    # imported here, not at the top: these readers pull in torch, which --from-report (re-projecting stored
    # figures, e.g. on a laptop) does not need
    from specdraft_train.examples import read_train_examples
    from specdraft_train.tau import read_conversations

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
    """Each finished stage: its stamp (seconds, nvidia-smi peak) and what its outputs say."""
    rows: dict[str, dict[str, Any]] = {}
    for name in STAGES:
        stamp = read_json(work / "stamps" / f"{name}.json")
        if stamp is not None:
            rows[name] = dict(stamp)
    reference = read_json(work / "reference" / "manifest.json")
    if reference and "reference" in rows:
        generation = reference["generation"]
        rank = generation["per_rank"][0]
        rows["reference"].update(
            tokens_per_s=generation["tokens_per_s"],
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


def job_split() -> dict[str, int]:
    """The job's held-out and dev prompts and the dev evaluations of one distill run, as qwen3-chat sizes them."""
    preset = get_preset("qwen3-chat")
    heldout = JOB_PROMPTS * preset.corpus.heldout_per_mille // 1000
    dev = JOB_PROMPTS * preset.corpus.dev_per_mille // 1000
    steps = (JOB_PROMPTS - heldout - dev) // preset.distill.batch_size
    evaluations = steps // preset.distill.eval_every + 2  # the starting drafter and the last weights compete too
    return {"heldout": heldout, "dev": dev, "dev_evaluations": evaluations}


def projection(rows: dict[str, dict[str, Any]], lengths: dict[str, float], cap: int) -> dict[str, Any] | None:
    """The whole job on 1 and on 8 H200s from the measured rates (module docstring), or None before they exist."""
    needed = [rows.get("reference", {}).get("tokens_per_s"), rows.get("distill", {}).get("tokens_per_s"),
              rows.get("qat", {}).get("tokens_per_s")]  # fmt: skip
    if any(rate is None for rate in needed):
        return None
    reference_tps, kd_tps, qat_tps = needed
    tokens = JOB_PROMPTS * JOB_CONTINUATION
    prompt = lengths["prompt_tokens_mean"]
    rehearsal_c = lengths["continuation_tokens_mean"]
    train_scale = ((prompt + JOB_CONTINUATION) / JOB_CONTINUATION) / ((prompt + rehearsal_c) / rehearsal_c)
    hours = {
        "reference": tokens / (reference_tps * JOB_CONTINUATION / cap) / 3600,
        "distill": tokens * train_scale / kd_tps / 3600,
        "qat": tokens * train_scale / qat_tps / 3600,
    }
    split = job_split()
    evaluate = rows.get("evaluate", {})
    if evaluate.get("conversations"):
        conversations, drafters = evaluate["conversations"], evaluate.get("drafters") or []
        drafting = sum(d["seconds"] for d in drafters) or evaluate["seconds"]
        # the stage's loading is paid once; its drafters' walks (each in bf16 and Q4_0) grow with the held-out set
        hours["evaluate"] = (evaluate["seconds"] - drafting + drafting / conversations * split["heldout"]) / 3600
        if drafters:
            # dev τ inside distill and QAT: the base drafter's rate in one mode, on the dev set, at every evaluation
            dev_rate = drafters[0]["seconds"] / conversations / (2 if drafters[0].get("q4_mode") else 1)
            hours["dev evaluations"] = 2 * split["dev_evaluations"] * split["dev"] * dev_rate / 3600
    for name in ("export", "pack"):
        if name in rows:
            hours[name] = rows[name]["seconds"] / 3600
    parallel = ("reference", "distill", "qat")
    one = sum(hours.values())
    eight_wall = sum(h / 8 if k in parallel else h for k, h in hours.items())
    eight_gpu_hours = sum(h if k in parallel else h * 8 for k, h in hours.items())
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
        "eight_h200": {"wall_hours": eight_wall, "gpu_hours": eight_gpu_hours, "scaling": "ideal ÷ 8, not measured"},
    }


def gib(value: float | None) -> str:
    return "—" if value is None else f"{value / 2**30:.1f} GiB"


def rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


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
        "| stage | seconds | continuation tokens/s | peak GPU memory (torch) | peak (nvidia-smi) | batch |",
        "|---|---|---|---|---|---|",
    ]
    for name in STAGES:
        row = rows.get(name)
        if row is None:
            lines.append(f"| {name} | not run | | | | |")
            continue
        batch = row.get("batch", "")
        if name == "reference" and row.get("prompt_tokens_per_s"):
            batch = f"prompt tokens/s {row['prompt_tokens_per_s']:,.0f}; "
        if name == "reference" and row.get("engine"):
            engine = row["engine"]
            budget = engine["row_budget_by_width"]
            batch += f"rows ≤ {engine['rows_max']} (mean {engine['rows_mean']:.0f}); KV budget rows by width {budget}"
            if engine.get("prefill_seconds") is not None:
                batch += f"; prefill {engine['prefill_seconds']:.0f} s, decode {engine['decode_seconds']:.0f} s"
        if name == "probe" and row.get("largest_batch"):
            batch = f"largest that fits: KD {row['largest_batch']['distill']}, QAT {row['largest_batch']['qat']}"
        smi = row.get("nvidia_smi_max_mib")
        lines.append(
            f"| {name} | {row['seconds']:.0f}{'' if row.get('rc', 0) == 0 else ' (exit ' + str(row['rc']) + ')'} | "
            f"{rate(row.get('tokens_per_s'))} | {gib(row.get('peak_gpu_bytes'))} | "
            f"{'—' if smi is None else f'{smi / 1024:.1f} GiB'} | {batch} |"
        )
    for name, label in (("export", "GGUF"), ("pack", "packed folder")):
        size = rows.get(name, {}).get("gguf_bytes" if name == "export" else "folder_bytes")
        if size is not None:
            lines.append(f"\n{label}: {size:,} bytes ({'≤' if size <= FOLDER_CAP else '>'} 10^9).")
    projected = report.get("projection")
    if projected:
        hours = projected["hours_one_h200"]
        lines += ["", "## The whole job, projected from these rates", "",
                  "| stage | H200-hours on one |", "|---|---|"]  # fmt: skip
        lines += [f"| {k} | {v:.2f} |" for k, v in hours.items()]
        lines += [
            f"| **total** | **{projected['one_h200']['gpu_hours']:.2f}** |",
            "",
            f"On 8 H200s: {projected['eight_h200']['wall_hours']:.2f} hours of wall time, "
            f"{projected['eight_h200']['gpu_hours']:.2f} GPU-hours ({projected['eight_h200']['scaling']}). "
            f"Assumptions: {json.dumps(projected['assumptions'])}.",
        ]
    lines += ["", "## Goals", ""] + [f"- {goal}: {verdict}" for goal, verdict in report["goals"].items()]
    return "\n".join(lines) + "\n"


def goals(rows: dict[str, dict[str, Any]], projected: dict[str, Any] | None) -> dict[str, str]:
    def judged(value: float | None, ok: bool, text: str) -> str:
        return "not measured" if value is None else f"{'met' if ok else 'NOT met'} ({text})"

    reference = rows.get("reference", {}).get("tokens_per_s")
    hours = projected["one_h200"]["gpu_hours"] if projected else None
    folder = rows.get("pack", {}).get("folder_bytes")
    failed = [name for name, row in rows.items() if row.get("rc", 0) != 0 and name != "selfcheck"]
    return {
        "reference ≥ 10,000 continuation tokens/s at the 8B shape": judged(
            reference, (reference or 0) >= REFERENCE_GOAL, f"{rate(reference)} tok/s"
        ),
        "whole job ≤ 6 H200-hours": judged(hours, (hours or 0) <= GPU_HOURS_GOAL, f"{hours or 0:.2f} h"),
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
    args = ap.parse_args()
    import time

    if args.from_report is not None:  # the same measurements, projected by this script as it is now
        measured = read_json(args.from_report)
        if measured is None or "stages" not in measured:
            sys.exit(f"real_rehearsal_report: {args.from_report} is not a rehearsal.json")
        rows, lengths, created = measured["stages"], measured["lengths"], measured["created"]
        created += f", projected again {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        args.mode = measured.get("mode", args.mode)
    else:
        rows, created = stage_rows(args.work), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        lengths = token_lengths(args.work) if (args.work / "reference" / "manifest.json").is_file() else {}
    if lengths and rows.get("reference", {}).get("generation_seconds"):  # the prefill's share of the work
        prompts = sum(rows["reference"]["prompts"].values())
        rows["reference"]["prompt_tokens_per_s"] = (
            lengths["prompt_tokens_mean"] * prompts / rows["reference"]["generation_seconds"]
        )
    projected = projection(rows, lengths, args.max_new_tokens) if lengths else None
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
