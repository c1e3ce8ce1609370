"""`run`'s report as Markdown (report.md): what the drafter achieves per kind of prompt beside its peers, what to
expect on this machine and how to use it, and what each stage cost. The numbers come from report.json."""

from __future__ import annotations

from typing import Any

from ..modeling.tau import category_order

PEERS = (
    ("base_q4_0_ptq", "before training (Q4_0)"),
    ("drafter_q4_0_qat", "trained (Q4_0 QAT)"),
    ("ngram", "n-gram prompt lookup"),
    ("target_as_drafter", "target as its own drafter"),
)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def category_tau(entry: dict[str, Any], category: str) -> float:
    return entry["by_category"].get(category, {}).get("tau", float("nan"))


def tau_section(evaluation: dict[str, Any], second: bool = False) -> list[str]:
    """τ by category beside its peers on one held-out set (``second``: `run --eval-prompts`' set)."""
    tau = evaluation["tau"]
    categories = sorted({c for key, _ in PEERS for c in tau[key]["by_category"]}, key=category_order)
    rows = [[c] + [f"{category_tau(tau[key], c):.3f}" for key, _ in PEERS] for c in categories]
    rows.append(["**all**"] + [f"**{tau[key]['tau']:.3f}**" for key, _ in PEERS])
    ahead = sum(
        tau["drafter_q4_0_qat"]["by_category"][c]["tau"] > tau["ngram"]["by_category"].get(c, {}).get("tau", 0)
        for c in categories
    )
    title = f"## τ on {evaluation['conversations']} held-out conversations (k = {evaluation['k']})"
    about = "τ = tokens advanced ÷ target steps, by the validator's walk, exact for greedy drafting."
    if second:
        title = title.replace("held-out conversations", "conversations of the second set")
        about = f"Prompts of `{evaluation['prompts']}` (`--eval-prompts`), none of them trained on."
    return [
        title,
        "",
        about,
        "",
        *table(["category", *(label for _, label in PEERS)], rows),
        "",
        f"The trained drafter is ahead of n-gram prompt lookup in {ahead} of {len(categories)} categories.",
    ]


def served_section(validate: dict[str, Any]) -> list[str]:
    summary = validate["summary"]
    return [
        f"Served by `specdraft serve` and walked by `specdraft validate` over {summary['samples']} of these "
        f"conversations at k = {summary['draft_tokens']}: τ **{summary['tau']:.3f}** "
        f"({summary['failures']['total']} failed requests); per category and plots: `{validate['html']}`.",
    ]


def speed_section(speed: dict[str, Any]) -> list[str]:
    projection, measured, best = speed["projection"], speed["generate"], speed["best"]
    rows = [
        [
            str(r["k"]),
            f"{r['tau']:.2f}" + ("*" if r["tauDerived"] else ""),
            f"{r['verifyMs']:.2f}",
            f"{r['draftMs']:.2f}",
            f"{r['steadySpeedUp']:.2f}×",
            f"{r['speedUp']:.2f}×",
        ]
        for r in projection["rows"]
    ]
    kept = "yes" if measured["identical"] else f"{measured.get('nearTies', 0)} near ties named"
    error = measured["speedUp"] / best["speedUp"] - 1
    return [
        "## What to expect on this machine",
        "",
        f"Step costs measured through llama.cpp (`specdraft speedup`, {projection['device']}, "
        f"{projection['threads']} threads): the target alone {projection['aloneMsPerToken']:.2f} ms a token; "
        "speed-up(k) ≈ τ(k) · alone ÷ (verify(k + 1) + draft(k)), and with a "
        f"{projection['promptTokens']}-token prompt's cost over {projection['maxTokens']} tokens "
        "(τ marked * derived from the largest k's).",
        "",
        *table(["k", "τ(k)", "verify k + 1 (ms)", "draft k (ms)", "steady", "with the prompt"], rows),
        "",
        f"Best k: **{best['k']}**, projected **{best['speedUp']:.2f}×**. `specdraft generate` at that k on "
        f"{len(measured['prompts'])} held-out prompts measured **{measured['speedUp']:.2f}×** "
        f"({error:+.0%} against the projection; τ {measured['tau']:.2f}; outputs identical to the target alone: "
        f"{kept}).",
        "",
        lookahead_line(projection.get("lookahead")),
        "",
        "Use it:",
        "",
        "```sh",
        projection["commands"]["serve"],
        projection["commands"]["llamaServer"],
        "```",
    ]


def lookahead_line(lookahead: dict[str, Any] | None) -> str:
    """Which prompt-lookup candidates the drafts were timed with, and the folder serves with."""
    if lookahead is None:  # a projection from before `speedup` compared them
        return "Drafts timed with serve's default prompt-lookup candidates for this machine's backend."
    compared = lookahead.get("compared") or {}
    each = "; ".join(f"{c} candidates {best['speedUp']:.2f}× at k = {best['k']}" for c, best in compared.items())
    timed = f" (best projected by prompt-lookup candidates a drafter step: {each})" if each else ""
    if lookahead["isDefault"]:
        return f"Drafts timed with serve's default of {lookahead['candidates']} prompt-lookup candidates{timed}."
    return (
        f"Drafts without prompt-lookup candidates were faster here{timed}: the folder serves with "
        f"`--lookahead {lookahead['candidates']}`."
    )


def run_markdown(report: dict[str, Any]) -> str:
    seconds = report["stage_seconds"]
    lines = [
        f"# specdraft run: {report['target']}",
        "",
        f"Drafter: {report['drafter']}; preset {report['preset']}"
        + (f", {' '.join(report['settings'])}" if report["settings"] else "")
        + f". Packed folder: `{report['folder']}`; GGUF {report['gguf']['bytes']:,} B.",
        "",
        *tau_section(report["evaluation"]),
        "",
        *served_section(report["validate"]),  # walks the first set: beneath it, so "these conversations" are its
        "",
        *(tau_section(report["evaluation"]["second"], second=True) + [""] if "second" in report["evaluation"] else []),
        *speed_section(report["speedup"]),
        "",
        "## What each stage cost",
        "",
        *table(["stage", "seconds"], [[name, f"{s:.1f}"] for name, s in seconds.items() if isinstance(s, int | float)]),
        "",
        "## selfcheck",
        "",
        "```text",
        report["selfcheck"].rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)
