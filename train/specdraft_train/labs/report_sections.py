"""The lab report's sections beyond τ by variant: each renders when ``lab_report.json`` holds its field, so a lab
that measures more (the real-model lab) only has to store it. The fields:

- ``evaluation.tau.<variant>.accepted_lengths``: where walks stop, ``{"all": [n_0, …, n_k], "<category>": […]}``
  — walk steps by accepted-prefix length (``tau.accepted_length_histogram``);
- ``lookahead``: what ``bench/lookaheadSteps.ts`` prints (tokens per drafter step with M prompt-lookup candidates
  a step, per data file and category);
- ``drafter_origins``: drafters made another way, ``{"<origin>": {"label", "parameters", "tau": {"base_q4_0_ptq":
  entry, "distilled_q4_0_qat": entry}}}`` (e.g. from scratch vs from the target's own layers), each against the
  target as its own drafter;
- ``other_prompts``: ``{"label", "evaluation"}``, an evaluation (``evaluation``'s shape) on held-out prompts made
  by another method than the training prompts;
- ``llama_server``: what ``bench/llama_server_spec.py`` writes (llama.cpp's own speculative decoding with the
  drafters: acceptance, tokens/s, outputs identical to the target alone);
- ``served``: the served drafters walked by ``specdraft validate`` (llama.cpp) beside PyTorch's τ of the same
  weights, ``{"<held-out set>": {"<variant>": {"tau", "macro_tau", "by_category": {category: τ}, "pytorch_tau",
  "pytorch_macro_tau", "pytorch_by_category", "conversations", "failures"}}}``;
- ``generate``: ``specdraft generate`` runs (target + drafter, lossless check, speed-up), ``{"machine", "runs":
  [{"drafter", "k", "prompts", "max_tokens", "tau", "speed_up", "alone_ms_per_token", "ms_per_step",
  "draft_ms_per_step", "identical_prompts", "near_ties", "differing"}]}``;
- ``chat_goals``: :func:`chat_goals`'s verdicts (the real-model lab's goals).

Also the markdown table helpers and the variant keys every lab report shares (reports.py imports them).

    lines += extra_sections(report, labels)     # reports.lab_markdown: labels = dict(reports.VARIANTS)
"""

from __future__ import annotations

from typing import Any

from ..modeling.tau import category_order, gap_closed

# The variants a comparison runs from (the base drafter as served without QAT) and toward (the target drafting for
# itself), and the distilled drafter as served.
BASELINE, QAT, CEILING = "base_q4_0_ptq", "distilled_q4_0_qat", "target_as_drafter"
# The real-model lab's goals (docs/lab.md): τ(distilled QAT) over τ(base PTQ), and the share of the base → target gap.
GOAL_CHAT_RATIO = 1.5
GOAL_CHAT_GAP_CLOSED = 0.40
# Where walks stop: accepted-prefix lengths binned for the table (k itself is its own column).
STOP_BINS = ((0, 0), (1, 1), (2, 2), (3, 3), (4, 7), (8, 15))


def fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def row(*cells: Any) -> str:
    """One markdown table row; an empty cell is ``| |``."""
    return "|" + "".join(f" {c} |" if c != "" else " |" for c in cells)


def header(*names: str) -> list[str]:
    """A markdown table's header and rule."""
    return [row(*names), "|" + "---|" * len(names)]


def _section(title: str, intro: str = "") -> list[str]:
    """A section's title and its opening paragraph, each followed by a blank line."""
    return ["", f"## {title}", "", *([intro, ""] if intro else [])]


# ---------------------------------------------------------------------------------------------------------------------
# Where walks stop


def stop_shares(histogram: list[int]) -> tuple[list[float], float]:
    """Shares of steps in each of STOP_BINS' bins (within k) and at k itself, then the mean accepted length."""
    k, steps = len(histogram) - 1, max(sum(histogram), 1)
    bins = [(lo, min(hi, k - 1)) for lo, hi in STOP_BINS if lo < k]
    shares = [sum(histogram[lo : hi + 1]) / steps for lo, hi in bins] + [histogram[k] / steps]
    return shares, sum(i * n for i, n in enumerate(histogram)) / steps


def _stop_columns(k: int) -> list[str]:
    names = [str(lo) if lo == hi else f"{lo}–{min(hi, k - 1)}" for lo, hi in STOP_BINS if lo < k]
    return [*names, f"{k} (all)"]


def walk_stops(evaluation: dict[str, Any], labels: dict[str, str]) -> list[str]:
    tau = evaluation["tau"]
    keys = [key for key in tau if "accepted_lengths" in tau[key]]
    if not keys:
        return []
    k = len(tau[keys[0]]["accepted_lengths"]["all"]) - 1
    lines = _section(
        "Where walks stop",
        f"Share of walk steps by the length of the accepted prefix (k = {k}; a step that reaches a continuation's end "
        "is capped there, so short shares there are not all misses). τ = 1 + the mean accepted length, per step.",
    ) + header("drafter", *_stop_columns(k), "mean accepted")
    for key in keys:
        shares, mean = stop_shares(tau[key]["accepted_lengths"]["all"])
        lines.append(row(labels.get(key, key), *map(pct, shares), fmt(mean, 2)))
    pair = [key for key in (BASELINE, QAT) if key in keys]
    categories = sorted((c for c in tau[keys[0]]["accepted_lengths"] if c != "all"), key=category_order)
    if pair and categories:
        names = [labels.get(key, key) for key in pair]
        lines += ["", *header("category", *(f"{n}: none accepted · all {k}" for n in names))]
        for category in categories:
            cells = []
            for key in pair:
                shares, _ = stop_shares(tau[key]["accepted_lengths"].get(category, [0] * (k + 1)))
                cells.append(f"{pct(shares[0])} · {pct(shares[-1])}")
            lines.append(row(category, *cells))
    return lines


# ---------------------------------------------------------------------------------------------------------------------
# Lookahead: tokens per drafter step


def _lookahead_cell(entry: dict[str, Any], config: str, n_key: str) -> str:
    return fmt(entry.get(config, {}).get(n_key, {}).get("tokens_per_step"), 2)


def lookahead(steps: dict[str, Any]) -> list[str]:
    n = max(steps["draft_lengths"])
    n_key, configs = f"n{n}", steps["configurations"]
    lines = _section(
        "Tokens per drafter step with lookahead",
        f"Drafts of {n} tokens along the held-out walks, one stream; MX = X prompt-lookup candidates checked in each "
        "drafter step (`serve --lookahead`), M0 = none. Tokens per step > 1 is what lookahead saves; the drafts stay "
        "the plain drafter's. From `bench/lookaheadSteps.ts`.",
    )
    for name, data in steps["files"].items():
        repeated = data["repeated_4gram_share"]
        lines += [f"`{name}` ({data['conversations']} conversations, {repeated:.0%} repeated 4-grams):"]
        lines += ["", *header("category", "repeated 4-grams", *configs)]
        for category in sorted(data["categories"], key=category_order):
            entry = data["categories"][category]
            cells = (_lookahead_cell(entry, c, n_key) for c in configs)
            lines.append(row(category, pct(entry["repeated_4gram_share"]), *cells))
        lines += [row("all", pct(repeated), *(_lookahead_cell(data["all"], c, n_key) for c in configs)), ""]
    return lines


# ---------------------------------------------------------------------------------------------------------------------
# Drafters made another way; prompts made another way


def drafter_origins(origins: dict[str, Any], ceiling: dict[str, Any]) -> list[str]:
    lines = _section(
        "Drafters made another way",
        "The same recipe (pretrain where the drafter needs it, distill, QAT) from drafters made differently; "
        "ratio and gap closed against each one's own base at Q4_0 PTQ, toward the target as its own drafter "
        f"(τ {ceiling['tau']:.3f}).",
    ) + header("drafter", "parameters", "τ base Q4_0 PTQ", "τ distilled Q4_0 QAT", "ratio", "gap closed", "macro τ")
    for info in origins.values():
        base, qat = info["tau"][BASELINE], info["tau"][QAT]
        ratio = qat["tau"] / base["tau"] if base["tau"] else None
        closed = gap_closed(qat["tau"], base["tau"], ceiling["tau"])
        params = f"{info['parameters']:,}" if info.get("parameters") else "—"
        cells = [fmt(base["tau"]), fmt(qat["tau"]), fmt(ratio), pct(closed), fmt(qat["macro_tau"])]
        lines.append(row(info["label"], params, *cells))
    categories = sorted({c for info in origins.values() for c in info["tau"][QAT]["by_category"]}, key=category_order)
    lines += ["", *header("category", *(f"{info['label']}: base → distilled" for info in origins.values()))]
    for category in categories:
        cells = []
        for info in origins.values():
            base = info["tau"][BASELINE]["by_category"].get(category, {}).get("tau")
            cells.append(f"{fmt(base)} → {fmt(info['tau'][QAT]['by_category'].get(category, {}).get('tau'))}")
        lines.append(row(category, *cells))
    return lines


def other_prompts(other: dict[str, Any], labels: dict[str, str]) -> list[str]:
    evaluation = other["evaluation"]
    tau = evaluation["tau"]
    keys = [key for key in labels if key in tau]
    categories = sorted(tau[keys[0]]["by_category"], key=category_order)
    lines = _section(
        f"Prompts made by another method: {other['label']}",
        f"{evaluation['heldout']['conversations']} held-out conversations, "
        f"{evaluation['heldout']['continuation_tokens']:,} continuation tokens; repeated-4-gram share "
        f"{evaluation['repeated_4gram_share']:.1%}. Ratio · gap closed: distilled Q4_0 QAT against base Q4_0 PTQ.",
    ) + header("category", "repeated 4-grams", *(labels[key] for key in keys), "ratio · gap closed")
    repeated = evaluation.get("repeated_4gram_share_by_category", {})
    for category in categories:
        cells = [fmt(tau[key]["by_category"].get(category, {}).get("tau")) for key in keys]
        lines.append(row(category, pct(repeated.get(category)), *cells, _versus(tau, category)))
    overall = [fmt(tau[key]["tau"]) for key in keys]
    lines.append(row("all", pct(evaluation["repeated_4gram_share"]), *overall, _versus(tau)))
    lines.append(row("macro", "", *(fmt(tau[key]["macro_tau"]) for key in keys), _versus(tau, macro=True)))
    return lines


def _versus(tau: dict[str, Any], category: str | None = None, macro: bool = False) -> str:
    """τ(distilled QAT) ÷ τ(base PTQ) · gap closed toward the target, overall, macro or in one category."""
    if not all(key in tau for key in (BASELINE, QAT, CEILING)):
        return "—"

    def value(key: str) -> float | None:
        entry = tau[key]
        if category is not None:
            return entry["by_category"].get(category, {}).get("tau")
        return entry["macro_tau"] if macro else entry["tau"]

    base, qat, ceiling = value(BASELINE), value(QAT), value(CEILING)
    if base is None or qat is None or ceiling is None:
        return "—"
    return f"{qat / base:.3f}× · {pct(gap_closed(qat, base, ceiling))}"


# ---------------------------------------------------------------------------------------------------------------------
# llama.cpp's own speculative decoding; the real-model lab's goals


def llama_server(summary: dict[str, Any]) -> list[str]:
    config, servers = summary["config"], summary["servers"]
    lines = _section(
        "llama.cpp's own speculative decoding with these drafters",
        f"`llama-server -m <target> -md <drafter> --spec-type draft-simple --spec-draft-n-max {config['draft_max']}`, "
        f"{config['prompts']} held-out prompts × {config['n_predict']} tokens, greedy, {config['threads']} thread(s), "
        f"{summary['date']} on {summary['machine']} (`bench/llama_server_spec.py`).",
    ) + header("drafter", "acceptance", "accepted / drafted", "tokens/s", "× target alone", "identical to target")
    for name, entry in servers.items():
        if "acceptance" not in entry:
            lines.append(row(name, "", "", fmt(entry["tokens_per_s"], 1), "1.00", ""))
            continue
        drafted = f"{entry['accepted_tokens']:,} / {entry['draft_tokens']:,}"
        identical = f"{entry['identical_to_target']} of {config['prompts']}"
        speed = [fmt(entry["tokens_per_s"], 1), fmt(entry["speed_up"], 2)]
        lines.append(row(name, fmt(entry["acceptance"]), drafted, *speed, identical))
    return lines


def served(sets: dict[str, Any], labels: dict[str, str]) -> list[str]:
    lines = _section(
        "The served drafters, walked by `specdraft validate`",
        "Each Q4_0 GGUF served by `specdraft serve` (llama.cpp, CPU) and walked over the held-out set by `specdraft "
        "validate` (k = 16), beside PyTorch's τ of the same blocks (the tables above): the same τ within float "
        "summation order and llama.cpp's near ties.",
    ) + header("held-out set", "drafter", "τ served", "τ PyTorch", "difference", "macro τ served", "failed requests")
    for name, drafters in sets.items():
        for key, entry in drafters.items():
            pytorch = entry.get("pytorch_tau")
            diff = f"{entry['tau'] / pytorch - 1:+.2%}" if pytorch else "—"
            cells = [fmt(entry["tau"]), fmt(pytorch), diff, fmt(entry["macro_tau"]), entry.get("failures", 0)]
            lines.append(row(name, labels.get(key, key), *cells))
    for name, drafters in sets.items():
        keys = list(drafters)
        categories = sorted({c for e in drafters.values() for c in e["by_category"]}, key=category_order)
        lines += ["", f"`{name}`, τ served (PyTorch) by category:", ""]
        lines += header("category", *(labels.get(key, key) for key in keys))
        for category in categories:
            cells = [
                f"{fmt(drafters[k]['by_category'].get(category))} "
                f"({fmt(drafters[k].get('pytorch_by_category', {}).get(category))})"
                for k in keys
            ]
            lines.append(row(category, *cells))
    return lines


GENERATE_COLUMNS = ("drafter", "k", "prompts × tokens", "τ", "speed-up", "target alone ms/token", "ms/step")
GENERATE_COLUMNS += ("drafting ms/step", "identical", "near ties")


def generate(summary: dict[str, Any], labels: dict[str, str]) -> list[str]:
    runs = summary["runs"]
    best = {}
    for run in runs:
        if run["drafter"] not in best or run["speed_up"] > best[run["drafter"]]["speed_up"]:
            best[run["drafter"]] = run
    lines = _section(
        "Speculative generation with the real target (`specdraft generate`)",
        f"The F32 target greedily alone and with each drafter's drafts of k tokens, {summary['machine']}: outputs "
        "compared token by token (a difference is allowed only at a near tie, which `generate` names). A step's cost "
        "is the target verifying k + 1 tokens plus the drafter drafting k: what bounds the speed-up is that cost over "
        "the target's own per-token cost, against the τ tokens a step yields. Best k per drafter in bold.",
    ) + header(*GENERATE_COLUMNS)
    for run in runs:
        mark = "**" if best[run["drafter"]] is run else ""
        cells = [
            run["k"],
            f"{run['prompts']} × {run['max_tokens']}",
            fmt(run["tau"], 2),
            f"{mark}{run['speed_up']:.2f}×{mark}",
            fmt(run["alone_ms_per_token"], 1),
            fmt(run["ms_per_step"], 1),
            fmt(run["draft_ms_per_step"], 1),
            f"{run['identical_prompts']} of {run['prompts']}",
            run["near_ties"],
        ]
        lines.append(row(labels.get(run["drafter"], run["drafter"]), *cells))
    return lines


def _goal_verdicts(tau: dict[str, Any]) -> dict[str, Any]:
    base, qat, ceiling = tau[BASELINE], tau[QAT], tau[CEILING]
    worse = [c for c, e in qat["by_category"].items() if e["tau"] <= base["by_category"].get(c, {}).get("tau", 0)]
    ratio, closed = qat["tau"] / base["tau"], gap_closed(qat["tau"], base["tau"], ceiling["tau"])
    return {
        "ratio": ratio,
        "ratio_met": ratio >= GOAL_CHAT_RATIO,
        "gap_closed": closed,
        "gap_closed_met": closed is not None and closed >= GOAL_CHAT_GAP_CLOSED,
        "not_better_in": sorted(worse, key=category_order),
    }


def chat_goals(report: dict[str, Any]) -> dict[str, Any]:
    """The real-model lab's goals, measured: on the held-out chat prompts and, when the report has them, on prompts
    made by another method; and llama-server's acceptance, distilled above base, when measured."""
    goals: dict[str, Any] = {"heldout": _goal_verdicts(report["evaluation"]["tau"])}
    if "other_prompts" in report:
        goals["other_prompts"] = _goal_verdicts(report["other_prompts"]["evaluation"]["tau"])
    servers = report.get("llama_server", {}).get("servers", {})
    if "base" in servers and "distilled" in servers:
        base, distilled = servers["base"]["acceptance"], servers["distilled"]["acceptance"]
        goals["llama_server_acceptance"] = {"base": base, "distilled": distilled, "met": distilled > base}
    if "generate" in report:
        runs = report["generate"]["runs"]
        differing = sorted({d for run in runs for d in run["differing"]})
        goals["generate_lossless"] = {
            "prompts": sum(run["prompts"] for run in runs),
            "near_ties": sum(run["near_ties"] for run in runs),
            "differing": differing,  # prompts whose outputs parted elsewhere than at a near tie
            "met": not differing,
        }
    return goals


def chat_goals_section(goals: dict[str, Any]) -> list[str]:
    lines = _section("Goals (the real-model lab's)")
    for where, label in (("heldout", "held-out chat"), ("other_prompts", "prompts made by another method")):
        if where not in goals:
            continue
        g = goals[where]
        lines += [
            f"- {label}: τ(distilled QAT) / τ(base PTQ) = {g['ratio']:.3f} (goal ≥ {GOAL_CHAT_RATIO}: "
            f"{'met' if g['ratio_met'] else 'not met'}); gap closed {pct(g['gap_closed'])} (goal ≥ "
            f"{GOAL_CHAT_GAP_CLOSED:.0%}: {'met' if g['gap_closed_met'] else 'not met'}); better in every category: "
            + ("yes" if not g["not_better_in"] else "no (" + ", ".join(g["not_better_in"]) + ")"),
        ]
    if "llama_server_acceptance" in goals:
        a = goals["llama_server_acceptance"]
        lines.append(
            f"- llama-server acceptance: distilled {a['distilled']:.3f} vs base {a['base']:.3f} "
            f"({'met' if a['met'] else 'not met'})"
        )
    if "generate_lossless" in goals:
        g = goals["generate_lossless"]
        where = "" if g["met"] else " — differing: " + ", ".join(g["differing"])
        lines.append(
            f"- `generate` lossless on every prompt: {g['prompts']} generations, {g['near_ties']} parted at a named "
            f"near tie ({'met' if g['met'] else 'not met'}{where})"
        )
    return lines


def extra_sections(report: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """Every section whose field the report holds, in report order; ``labels`` with the report's own
    ``drafter_labels`` (drafters its variants do not name) over them."""
    evaluation, lines = report["evaluation"], []
    labels = {**labels, **report.get("drafter_labels", {})}
    lines += walk_stops(evaluation, labels)
    if "lookahead" in report:
        lines += lookahead(report["lookahead"])
    if "drafter_origins" in report:
        lines += drafter_origins(report["drafter_origins"], evaluation["tau"][CEILING])
    if "other_prompts" in report:
        lines += other_prompts(report["other_prompts"], labels)
    if "served" in report:
        lines += served(report["served"], labels)
    if "generate" in report:
        lines += generate(report["generate"], labels)
    if "llama_server" in report:
        lines += llama_server(report["llama_server"])
    if "chat_goals" in report:
        lines += chat_goals_section(report["chat_goals"])
    return lines
