"""The lab report's data-driven sections (report_sections.py) on synthetic reports: each renders only when its field
is there, with the figures its field implies; and the walk's accepted-prefix lengths they read (tau.py)."""

from __future__ import annotations

from typing import Any

from specdraft_train.labs.report_sections import chat_goals, stop_shares
from specdraft_train.labs.reports import comparison, goals, lab_markdown
from specdraft_train.modeling.tau import Conversation, accepted_length_histogram, walk_accepted, walk_steps

CATEGORIES = ("ask/question", "code/fix")


def test_walk_accepted_is_the_walk_and_the_histogram_counts_its_steps():
    matches = [True, True, False, False, True]
    assert walk_accepted(matches, 16) == [2, 0, 1]  # 2 accepted (→ 3), a miss (→ 4), the last 1 capped at the end
    assert walk_accepted([True] * 40, 16) == [16, 16, 6]
    assert walk_accepted([True] * 5, 2) == [2, 2]  # k caps a step: 2 + 1, then 2 more
    for seed in range(20):  # walk_steps counts the same steps
        bits = [(seed * 7919 + i * 104729) % 5 != 0 for i in range(50)]
        assert walk_steps(bits, 4) == len(walk_accepted(bits, 4))
    conversations = [Conversation("a", "x", [1], [0] * 5), Conversation("b", "y", [1], [0] * 40)]
    histogram = accepted_length_histogram(conversations, [matches, [True] * 40], 16)
    assert histogram["x"][:3] == [1, 1, 1] and sum(histogram["x"]) == 3
    assert histogram["y"][16] == 2 and histogram["y"][6] == 1
    assert histogram["all"] == [a + b for a, b in zip(histogram["x"], histogram["y"])]


def tau_entry(overall: float, by_category: dict[str, float], **extra: Any) -> dict[str, Any]:
    return {
        "tau": overall,
        "macro_tau": sum(by_category.values()) / len(by_category),
        "top1": None,
        "tokens": 100,
        "steps": 10,
        "conversations": 4,
        "by_category": {c: {"tau": t, "conversations": 2, "tokens": 50, "steps": 5} for c, t in by_category.items()},
        **extra,
    }


def evaluation(base: float, qat: float, target: float, qat_code: float | None = None) -> dict[str, Any]:
    """An evaluation where every drafter has τ ``value`` in ask/question and code/fix (the QAT drafter ``qat_code``
    in code/fix when given)."""
    values = dict.fromkeys(("base", "base_q4_0_ptq"), base) | {"ngram": 2.0, "target_as_drafter": target}
    values |= dict.fromkeys(("distilled", "distilled_q4_0_ptq", "distilled_qat_latent", "distilled_q4_0_qat"), qat)
    tau = {key: tau_entry(v, dict.fromkeys(CATEGORIES, v)) for key, v in values.items()}
    if qat_code is not None:
        tau["distilled_q4_0_qat"]["by_category"]["code/fix"]["tau"] = qat_code
    tau["ngram"]["n_max"] = 3
    return {
        "k": 16,
        "heldout": {"conversations": 4, "continuation_tokens": 100},
        "repeated_4gram_share": 0.25,
        "repeated_4gram_share_by_category": dict.fromkeys(CATEGORIES, 0.25),
        "tau": tau,
    }


def report(**fields: Any) -> dict[str, Any]:
    ev = fields.pop("evaluation", None) or evaluation(4.0, 7.0, 16.0)
    return {
        "preset": "smollm2-chat",
        "date": "2026-12-03",
        "machine": "test",
        "device": "cpu",
        "evaluation": ev,
        "comparison": comparison(ev["tau"]),
        "goals": goals(ev["tau"]),
        "model_sizes": {"target": {"parameters": 10, "safetensors_bytes": 40}, "drafter_gguf_q4_0_bytes": 8},
        "export": {"path": "export/drafter-q4_0.gguf"},
        "stage_seconds": {"reference": 1.0},
        **fields,
    }


SECTIONS = (
    "## Where walks stop",
    "## Tokens per drafter step with lookahead",
    "## Drafters made another way",
    "## Prompts made by another method",
    "## llama.cpp's own speculative decoding",
    "## Goals (the real-model lab's)",
)


def test_a_report_without_the_new_fields_has_none_of_their_sections():
    markdown = lab_markdown(report())
    assert "## τ by category" in markdown and not any(title in markdown for title in SECTIONS)


def test_where_walks_stop_renders_shares_per_drafter_and_category():
    ev = evaluation(4.0, 7.0, 16.0)
    histogram = [2, 1, 0, 0] + [0] * 12 + [1]  # 4 steps: 2 accept nothing, 1 one token, 1 all 16
    ev["tau"]["base_q4_0_ptq"]["accepted_lengths"] = {"all": histogram, "code/fix": histogram, "ask/question": [0] * 17}
    ev["tau"]["distilled_q4_0_qat"]["accepted_lengths"] = {"all": [0] * 16 + [4], "code/fix": [0] * 16 + [4]}
    shares, mean = stop_shares(histogram)
    assert shares == [0.5, 0.25, 0.0, 0.0, 0.0, 0.0, 0.25] and mean == (1 + 16) / 4
    markdown = lab_markdown(report(evaluation=ev))
    assert "| drafter | 0 | 1 | 2 | 3 | 4–7 | 8–15 | 16 (all) | mean accepted |" in markdown
    assert "| base, Q4_0 PTQ | 50% | 25% | 0% | 0% | 0% | 0% | 25% | 4.25 |" in markdown
    assert "| distilled, Q4_0 QAT | 0% | 0% | 0% | 0% | 0% | 0% | 100% | 16.00 |" in markdown
    assert "| code/fix | 50% · 25% | 0% · 100% |" in markdown
    assert "| ask/question | 0% · 0% | 0% · 0% |" in markdown  # no steps there for either: no division by zero


def test_lookahead_renders_tokens_per_step_at_the_longest_draft():
    def cell(m0: float, m4: float) -> dict[str, Any]:
        return {"M0": {"n16": {"tokens_per_step": m0}, "n8": {"tokens_per_step": 9.0}},
                "M4": {"n16": {"tokens_per_step": m4}, "n8": {"tokens_per_step": 9.0}}}  # fmt: skip

    steps = {
        "draft_lengths": [8, 16],
        "configurations": ["M0", "M4"],
        "files": {
            "heldout.jsonl": {
                "conversations": 4,
                "repeated_4gram_share": 0.5,
                "all": cell(1.0, 2.25),
                "categories": {"code/fix": {"conversations": 2, "repeated_4gram_share": 0.75, **cell(1.0, 3.5)}},
            }
        },
    }
    markdown = lab_markdown(report(lookahead=steps))
    assert "Drafts of 16 tokens" in markdown and "| category | repeated 4-grams | M0 | M4 |" in markdown
    assert "| code/fix | 75% | 1.00 | 3.50 |" in markdown and "| all | 50% | 1.00 | 2.25 |" in markdown


def test_drafter_origins_compare_each_against_its_own_base():
    origins = {
        "scratch": {"label": "from scratch", "parameters": 30_000_000,
                    "tau": {"base_q4_0_ptq": tau_entry(4.0, dict.fromkeys(CATEGORIES, 4.0)),
                            "distilled_q4_0_qat": tau_entry(6.0, {"ask/question": 5.0, "code/fix": 7.0})}},
        "layers": {"label": "target's layers", "parameters": None,
                   "tau": {"base_q4_0_ptq": tau_entry(8.0, dict.fromkeys(CATEGORIES, 8.0)),
                           "distilled_q4_0_qat": tau_entry(12.0, dict.fromkeys(CATEGORIES, 12.0))}},
    }  # fmt: skip
    markdown = lab_markdown(report(drafter_origins=origins))
    # ratio 1.5 both; gap closed toward the target's 16: (6 − 4) / 12 and (12 − 8) / 8
    assert "| from scratch | 30,000,000 | 4.000 | 6.000 | 1.500 | 17% | 6.000 |" in markdown
    assert "| target's layers | — | 8.000 | 12.000 | 1.500 | 50% | 12.000 |" in markdown
    assert "| code/fix | 4.000 → 7.000 | 8.000 → 12.000 |" in markdown


def test_prompts_made_by_another_method_get_their_own_table_and_goals():
    other = {"label": "written by the target", "evaluation": evaluation(5.0, 8.0, 15.0, qat_code=4.0)}
    full = report(other_prompts=other)
    full["chat_goals"] = chat_goals(full)
    markdown = lab_markdown(full)
    assert "## Prompts made by another method: written by the target" in markdown
    assert "| ask/question | 25% |" in markdown and "| 1.600× · 30% |" in markdown  # 8 / 5, (8 − 5) / (15 − 5)
    assert "| code/fix | 25% |" in markdown and "| 0.800× · -10% |" in markdown
    held, other_goals = full["chat_goals"]["heldout"], full["chat_goals"]["other_prompts"]
    assert (
        held["ratio"] == 7.0 / 4.0 and held["ratio_met"] and held["gap_closed"] == 0.25 and not held["gap_closed_met"]
    )
    assert held["not_better_in"] == [] and other_goals["not_better_in"] == ["code/fix"]
    assert "better in every category: no (code/fix)" in markdown


def test_llama_server_figures_and_the_acceptance_goal():
    summary = {
        "date": "2026-12-03",
        "machine": "x86_64",
        "config": {"draft_max": 16, "prompts": 24, "n_predict": 128, "threads": 1},
        "servers": {
            "target-alone": {"tokens": 3072, "tokens_per_s": 40.0, "wall_s": 80.0},
            "base": {"tokens": 3072, "tokens_per_s": 50.0, "acceptance": 0.5, "accepted_tokens": 500,
                     "draft_tokens": 1000, "speed_up": 1.25, "identical_to_target": 24},
            "distilled": {"tokens": 3072, "tokens_per_s": 60.0, "acceptance": 0.4, "accepted_tokens": 400,
                          "draft_tokens": 1000, "speed_up": 1.5, "identical_to_target": 23},
        },
    }  # fmt: skip
    full = report(llama_server=summary)
    full["chat_goals"] = chat_goals(full)
    markdown = lab_markdown(full)
    assert "| target-alone | | | 40.0 | 1.00 | |" in markdown
    assert "| distilled | 0.400 | 400 / 1,000 | 60.0 | 1.50 | 23 of 24 |" in markdown
    assert full["chat_goals"]["llama_server_acceptance"] == {"base": 0.5, "distilled": 0.4, "met": False}
    assert "llama-server acceptance: distilled 0.400 vs base 0.500 (not met)" in markdown
