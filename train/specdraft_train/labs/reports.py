"""The markdown reports and the comparisons behind them: `lab`'s ``lab_report.md`` (every τ against the base drafter at
Q4_0 PTQ, the gap it closes toward the target, the lab's goals, model sizes, stage times) and `ablate`'s
``ablation.md`` (one row per variant, then τ by category). Both read the JSON their command writes beside them.

    report["comparison"], report["goals"] = comparison(tau), goals(tau)
    atomic_write_text(out / "lab_report.md", lab_markdown(report))
    atomic_write_text(out / "ablation.md", ablation_markdown(summary))
"""

from __future__ import annotations

from typing import Any

from ..modeling.tau import category_order, gap_closed
from .report_sections import BASELINE, CEILING, extra_sections, fmt, header, pct, row

# The lab's goals for the `lab` preset (docs/lab.md, Goals; reported for micro too, where CI asserts only the first).
GOAL_QAT_OVER_BASE_PTQ = 1.5
GOAL_QAT_OVER_DISTILLED = 0.98
# Every τ the lab reports, in report order, with its label. Gap closed runs from BASELINE to CEILING (report_sections).
VARIANTS = (
    ("base", "base, as trained"),
    ("base_q4_0_ptq", "base, Q4_0 PTQ"),
    ("distilled", "distilled, as trained"),
    ("distilled_q4_0_ptq", "distilled, Q4_0 PTQ"),
    ("distilled_qat_latent", "distilled + QAT, latent fp32"),
    ("distilled_q4_0_qat", "distilled, Q4_0 QAT"),
    ("ngram", "n-gram prompt lookup"),
    ("target_as_drafter", "target as its own drafter"),
)


# ---------------------------------------------------------------------------------------------------------------------
# The lab's report


def comparison(tau: dict[str, Any]) -> dict[str, Any]:
    """Every variant against the base drafter at Q4_0 PTQ: its τ ratio and the gap it closes toward the target drafting
    for itself, overall, macro (from the macro τs) and per category."""
    base, ceiling = tau[BASELINE], tau[CEILING]

    def against(value: float, base_value: float, ceiling_value: float) -> dict[str, float | None]:
        return {
            "over_base_q4_0_ptq": value / base_value if base_value else None,
            "gap_closed": gap_closed(value, base_value, ceiling_value),
        }

    result = {}
    for key, entry in tau.items():
        result[key] = {
            "overall": against(entry["tau"], base["tau"], ceiling["tau"]),
            "macro": against(entry["macro_tau"], base["macro_tau"], ceiling["macro_tau"]),
            "by_category": {
                name: against(c["tau"], base["by_category"][name]["tau"], ceiling["by_category"][name]["tau"])
                for name, c in entry["by_category"].items()
                if name in base["by_category"] and name in ceiling["by_category"]
            },
        }
    return result


def goals(tau: dict[str, Any]) -> dict[str, Any]:
    qat, base_ptq, distilled, ngram = (tau[k] for k in ("distilled_q4_0_qat", BASELINE, "distilled", "ngram"))
    per_category = {
        name: qat["by_category"][name]["tau"] > ngram["by_category"].get(name, {"tau": float("inf")})["tau"]
        for name in qat["by_category"]
    }
    return {
        "qat_beats_base_ptq": qat["tau"] > base_ptq["tau"],
        "qat_over_base_ptq": qat["tau"] / base_ptq["tau"],
        "qat_over_base_ptq_goal": GOAL_QAT_OVER_BASE_PTQ,
        "qat_gap_closed": gap_closed(qat["tau"], base_ptq["tau"], tau[CEILING]["tau"]),
        "qat_over_distilled": qat["tau"] / distilled["tau"],
        "qat_over_distilled_goal": GOAL_QAT_OVER_DISTILLED,
        "qat_beats_ngram_by_category": per_category,
        "all_lab_goals_met": (
            qat["tau"] >= GOAL_QAT_OVER_BASE_PTQ * base_ptq["tau"]
            and qat["tau"] >= GOAL_QAT_OVER_DISTILLED * distilled["tau"]
            and all(per_category.values())
        ),
    }


def _against(cell: dict[str, float | None]) -> str:
    """A ratio to the base Q4_0 PTQ drafter with the gap closed beside it, e.g. ``1.124× · 18%``."""
    ratio = cell["over_base_q4_0_ptq"]
    return ("—" if ratio is None else f"{ratio:.3f}×") + " · " + pct(cell["gap_closed"])


def _drafters_table(report: dict[str, Any]) -> list[str]:
    """The title, what was measured, and each drafter as trained, at Q4_0 PTQ and at Q4_0 QAT, beside the peers."""
    evaluation = report["evaluation"]
    tau = evaluation["tau"]
    lines = [
        f"# specdraft lab report — preset `{report['preset']}`",
        "",
        *([f"Target: {report['target']['label']}.", ""] if "target" in report else []),
        f"{report['date']} on {report['machine']} (device {report['device']}). Held-out: "
        f"{evaluation['heldout']['conversations']} conversations in {len(tau[BASELINE]['by_category'])} categories, "
        f"{evaluation['heldout']['continuation_tokens']} continuation tokens; k = {evaluation['k']}; "
        f"repeated-4-gram share of continuations: {evaluation['repeated_4gram_share']:.1%}.",
        "",
        *header("drafter", "τ as trained", "τ Q4_0 PTQ", "τ Q4_0 QAT"),
    ]
    for label, trained, ptq, qat in (
        ("base drafter", "base", BASELINE, None),
        ("distilled drafter", "distilled", "distilled_q4_0_ptq", None),
        ("distilled + QAT", "distilled_qat_latent", None, "distilled_q4_0_qat"),
    ):
        cells = [tau[trained]["tau"], tau[ptq]["tau"] if ptq else None, tau[qat]["tau"] if qat else None]
        lines.append(row(label, *map(fmt, cells)))
    return lines + [
        row(f"n-gram prompt lookup (n ≤ {tau['ngram']['n_max']})", fmt(tau["ngram"]["tau"]), "", ""),
        row("target as its own drafter (sanity ≈ k+1)", fmt(tau["target_as_drafter"]["tau"]), "", ""),
    ]


def _variants_table(tau: dict[str, Any], versus: dict[str, Any], keys: list[str]) -> list[str]:
    labels = dict(VARIANTS)
    lines = [
        "",
        "## Every variant against the base drafter",
        "",
        "Ratio to τ(base, Q4_0 PTQ) · gap closed = (τ − τ_base) / (τ_target − τ_base), τ_target = the target as "
        "its own drafter. Macro τ = the mean of the categories' τ.",
        "",
        *header("variant", "τ", "ratio · gap closed", "macro τ", "ratio · gap closed (macro)"),
    ]
    for key in keys:
        entry, against = tau[key], versus[key]
        cells = [fmt(entry["tau"]), _against(against["overall"]), fmt(entry["macro_tau"]), _against(against["macro"])]
        lines.append(row(labels[key], *cells))
    return lines


def _categories_table(evaluation: dict[str, Any], keys: list[str], categories: list[str]) -> list[str]:
    tau, repeated, labels = evaluation["tau"], evaluation["repeated_4gram_share_by_category"], dict(VARIANTS)
    lines = [
        "",
        "## τ by category",
        "",
        *header("category", "conversations", "repeated 4-grams", *map(labels.get, keys)),
    ]
    for name in categories:
        cells = [fmt(tau[k]["by_category"].get(name, {}).get("tau")) for k in keys]
        lines.append(row(name, tau[BASELINE]["by_category"][name]["conversations"], f"{repeated[name]:.0%}", *cells))
    heldout = evaluation["heldout"]["conversations"]
    lines.append(row("all", heldout, f"{evaluation['repeated_4gram_share']:.0%}", *(fmt(tau[k]["tau"]) for k in keys)))
    lines.append(row("macro", "", "", *(fmt(tau[k]["macro_tau"]) for k in keys)))
    return lines


def _ratios_table(versus: dict[str, Any], keys: list[str], categories: list[str]) -> list[str]:
    compared = [k for k in keys if k not in (BASELINE, CEILING)]
    labels = dict(VARIANTS)
    lines = ["", "## Ratio to the base Q4_0 PTQ drafter · gap closed, by category", ""]
    lines += header("category", *map(labels.get, compared))
    for name in categories:
        lines.append(row(name, *(_against(versus[k]["by_category"][name]) for k in compared)))
    lines.append(row("all", *(_against(versus[k]["overall"]) for k in compared)))
    lines.append(row("macro", *(_against(versus[k]["macro"]) for k in compared)))
    return lines


def _goals_section(g: dict[str, Any]) -> list[str]:
    return [
        "",
        "## Goals (the `lab` preset's)",
        "",
        f"- τ(QAT) / τ(base PTQ) = {g['qat_over_base_ptq']:.3f} (goal ≥ {g['qat_over_base_ptq_goal']}; "
        f"CI asserts > 1); gap closed {pct(g['qat_gap_closed'])}",
        f"- τ(QAT) / τ(distilled) = {g['qat_over_distilled']:.3f} (goal ≥ {g['qat_over_distilled_goal']})",
        "- τ(QAT) > n-gram peer in every category: "
        + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in g["qat_beats_ngram_by_category"].items()),
    ]


def _models_and_stages(report: dict[str, Any]) -> list[str]:
    lines = ["", "## Models and stages", "", *header("model", "parameters", "safetensors bytes")]
    for name, info in report["model_sizes"].items():
        if isinstance(info, dict):
            lines.append(row(name, f"{info['parameters']:,}", f"{info['safetensors_bytes']:,}"))
    lines.append(
        f"\nDrafter GGUF (Q4_0, QAT): {report['model_sizes']['drafter_gguf_q4_0_bytes']:,} bytes "
        f"(`{report['export']['path']}`)."
    )
    lines += ["", *header("stage", "seconds")]
    lines += [row(name, f"{seconds:.1f}") for name, seconds in report["stage_seconds"].items()]
    return lines + [row("total", f"{sum(report['stage_seconds'].values()):.1f}"), ""]


def lab_markdown(report: dict[str, Any]) -> str:
    """``lab_report.md`` from ``lab_report.json``'s contents."""
    evaluation = report["evaluation"]
    tau, versus = evaluation["tau"], report["comparison"]
    keys = [key for key, _ in VARIANTS if key in tau]
    categories = sorted(tau[BASELINE]["by_category"], key=category_order)
    return "\n".join(
        _drafters_table(report)
        + _variants_table(tau, versus, keys)
        + _categories_table(evaluation, keys, categories)
        + _ratios_table(versus, keys, categories)
        + _goals_section(report["goals"])
        + extra_sections(report, dict(VARIANTS))
        + _models_and_stages(report)
    )


# ---------------------------------------------------------------------------------------------------------------------
# The ablation's report

ABLATION_COLUMNS = ("variant", "settings", "weights", "τ as trained", "τ", "macro τ", "top-1", "× base", "gap closed")
ABLATION_COLUMNS += ("beats base in every category", "ahead of n-gram lookup", "data tokens", "device s", "GGUF bytes")


def _variant_row(r: dict[str, Any]) -> str:
    spec = r["spec"]
    settings = ", ".join(
        spec["distill_settings"]
        + spec.get("export_settings", [])
        + ([] if spec["qat"] else ["variant.qat=false"])
        + ([f"variant.init={spec['init']}"] if "init" in spec else [])
        + (["variant.onpolicy=true"] if spec.get("onpolicy") else [])
        + ([f"variant.select_reference={spec['select_reference']}"] if "select_reference" in spec else [])
    )
    gguf_bytes = r.get("export", {}).get("gguf_bytes")  # results written before variants were exported lack it
    figures = [fmt(r[key]) for key in ("tau", "macro_tau", "top1", "over_base")]
    as_trained = fmt(r["fp32"]["tau"]) if "fp32" in r else "—"  # results written before it was kept lack it
    cells = [r["name"], f"`{settings or 'lab defaults'}`", r["weights"], as_trained, *figures, pct(r["gap_closed"])]
    ahead = f"{r['ahead_of_ngram']} of {len(r['by_category'])}" if "ahead_of_ngram" in r else "—"
    cells += ["yes" if r["beats_base_everywhere"] else "no", ahead]
    cells += [f"{r['data_tokens']:,}", f"{r['device_seconds']:.1f}"]
    return row(*cells, "—" if gguf_bytes is None else f"{gguf_bytes:,}")


def _ablation_categories(
    reference: dict[str, Any], rows: list[dict[str, Any]], categories: list[str], title: str = "## τ by category"
) -> list[str]:
    """τ by category (gap closed) of the lab's base, n-gram prompt lookup, its own recipe, every variant and the
    target."""
    base, target = reference["base_q4_0_ptq"]["by_category"], reference["target_as_drafter"]["by_category"]
    lines = ["", f"{title} (gap closed)", "", *header("variant", *categories)]
    lines.append(row("lab base, Q4_0 PTQ", *(fmt(base[c]["tau"]) for c in categories)))
    ngram = reference.get("ngram", {}).get("by_category", {})
    if ngram:
        lines.append(row("n-gram prompt lookup", *(fmt(ngram[c]["tau"]) if c in ngram else "—" for c in categories)))
    if "distilled_q4_0_qat" in reference:  # the lab's own recipe, for comparison
        lab_qat = reference["distilled_q4_0_qat"]["by_category"]
        cells = []
        for c in categories:
            closed = (
                gap_closed(lab_qat[c]["tau"], base[c]["tau"], target[c]["tau"])
                if c in lab_qat and c in target
                else None
            )
            cells.append(f"{fmt(lab_qat[c]['tau'])} ({pct(closed)})" if c in lab_qat else "—")
        lines.append(row("lab distilled, Q4_0 QAT", *cells))
    for r in rows:
        by_category = r["by_category"]
        cells = [
            f"{fmt(by_category[c]['tau'])} ({pct(by_category[c]['gap_closed'])})" if c in by_category else "—"
            for c in categories
        ]
        lines.append(row(r["name"], *cells))
    return lines + [row("target as its own drafter", *(fmt(target.get(c, {}).get("tau")) for c in categories))]


def _second_set(summary: dict[str, Any]) -> list[str]:
    """The variants on the lab's second held-out set, where it has one: overall, then by category."""
    if "second_reference" not in summary:
        return []
    reference, held = summary["second_reference"], summary["second_heldout"]
    rows = [r for r in summary["variants"] if "second" in r]
    base, target = reference["base_q4_0_ptq"], reference["target_as_drafter"]
    lines = [
        "",
        f"## The second held-out set: {held['conversations']} conversations (`{held['path']}`)",
        "",
        f"Against the base at Q4_0 PTQ (τ {base['tau']:.3f}) and the target as its own drafter (τ {target['tau']:.3f})"
        + (f"; n-gram prompt lookup τ {reference['ngram']['tau']:.3f}." if "ngram" in reference else "."),
        "",
        *header("variant", "τ", "macro τ", "top-1", "× base", "gap closed", "ahead of n-gram lookup"),
    ]
    for r in rows:
        second = r["second"]
        figures = [fmt(second[key]) for key in ("tau", "macro_tau", "top1", "over_base")]
        ahead = f"{second['ahead_of_ngram']} of {len(second['by_category'])}"
        lines.append(row(r["name"], *figures, pct(second["gap_closed"]), ahead))
    second_rows = [{**r["second"], "name": r["name"]} for r in rows]
    return lines + _ablation_categories(reference, second_rows, sorted(base["by_category"]), "### By category")


def ablation_markdown(summary: dict[str, Any]) -> str:
    """``ablation.md`` from ``ablation.json``'s contents."""
    reference, rows = summary["lab_reference"], summary["variants"]
    base, target = reference["base_q4_0_ptq"], reference["target_as_drafter"]
    lines = [
        f"# Distillation ablation — lab `{summary['lab']}`",
        "",
        f"Held-out: {summary['heldout']['conversations']} conversations, k = {summary['k']}. τ at Q4_0 (QAT state or "
        f"PTQ); gap closed = (τ − τ base) / (τ target − τ base) against the lab's base drafter at Q4_0 PTQ "
        f"(τ {base['tau']:.3f}, macro {base['macro_tau']:.3f}) and the target as its own drafter "
        f"(τ {target['tau']:.3f}).",
        "",
        *header(*ABLATION_COLUMNS),
        *map(_variant_row, rows),
        *_ablation_categories(reference, rows, sorted(base["by_category"])),
        *_second_set(summary),
    ]
    shared = {r["name"]: r.get("device_shared_by", 1) for r in rows if r.get("device_shared_by", 1) > 1}
    if shared:
        # A time budget of 0 (or none) bounds a variant by its epochs alone: sharing slows it but changes no step.
        budgeted = any(r["config"].get("time_budget_s") for r in rows if r["name"] in shared)
        lines += [
            "",
            "Ran concurrently on one device (`--jobs`): "
            + ", ".join(f"{name} (shared by {n})" for name, n in shared.items())
            + ". Their device seconds overlap; "
            + (
                "each trained on fewer tokens in its time budget than it would alone."
                if budgeted
                else "bound by their epochs, not by time, they took the steps they would have taken alone."
            ),
        ]
    return "\n".join(lines) + "\n"
