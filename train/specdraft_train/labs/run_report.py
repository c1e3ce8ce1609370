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


def tau_section(evaluation: dict[str, Any]) -> list[str]:
    tau = evaluation["tau"]
    categories = sorted({c for key, _ in PEERS for c in tau[key]["by_category"]}, key=category_order)
    rows = [[c] + [f"{category_tau(tau[key], c):.3f}" for key, _ in PEERS] for c in categories]
    rows.append(["**all**"] + [f"**{tau[key]['tau']:.3f}**" for key, _ in PEERS])
    ahead = sum(
        tau["drafter_q4_0_qat"]["by_category"][c]["tau"] > tau["ngram"]["by_category"].get(c, {}).get("tau", 0)
        for c in categories
    )
    return [
        f"## τ on {evaluation['conversations']} held-out conversations (k = {evaluation['k']})",
        "",
        "τ = tokens advanced ÷ target steps, by the validator's walk, exact for greedy drafting.",
        "",
        *table(["category", *(label for _, label in PEERS)], rows),
        "",
        f"The trained drafter is ahead of n-gram prompt lookup in {ahead} of {len(categories)} categories.",
    ]


def speed_section(speed: dict[str, Any]) -> list[str]:
    projection, measured = speed["projection"], speed["generate"]
    best = projection["best"]
    rows = [
        [str(r["k"]), f"{r['tau']:.2f}", f"{r['verify_ms']:.2f}", f"{r['draft_ms']:.2f}", f"{r['speed_up']:.2f}×"]
        for r in projection["rows"]
    ]
    settings = measured.get("settings", {})
    kept = "yes" if measured["identical"] else f"{measured.get('nearTies', 0)} near ties named"
    return [
        "## What to expect on this machine",
        "",
        f"Step costs measured through llama.cpp ({projection.get('machine', 'this machine')}); "
        "speed-up(k) ≈ τ(k) · alone ÷ (verify(k + 1) + draft(k)), alone = "
        f"{projection['alone_ms']:.2f} ms a token.",
        "",
        *table(["k", "τ(k)", "verify k + 1 (ms)", "draft k (ms)", "projected speed-up"], rows),
        "",
        f"Best k: **{best['k']}**, projected **{best['speed_up']:.2f}×**. `specdraft generate` at k = "
        f"{settings.get('draftLength', best['k'])} on {len(measured['prompts'])} held-out prompts measured "
        f"**{measured['speedUp']:.2f}×** (τ {measured['tau']:.2f}; outputs identical to the target alone: "
        f"{kept}).",
        "",
        "Use it:",
        "",
        "```sh",
        *projection["commands"],
        "```",
    ]


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
