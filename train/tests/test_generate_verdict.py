"""The near-tie rule the generate tests hold `specdraft generate`'s summaries to (generate_verdict.py): it passes what
the command reports for identical outputs and for a replayed near tie, and fails every way a real divergence shows."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from generate_verdict import near_tie_problems

# What generate reported on an AVX2 EPYC for the real-target test's held-out prompt math/8 (issue 40): a near tie.
TIE = {
    "run": 0,
    "position": 7,
    "expected": 2350,
    "actual": 216,
    "logitGap": 0.00067,
    "speculativeLogitGap": 0.0021,
    "kernelDisagreement": 0.0097,
    "replayedTokens": {"alone": 2350, "speculative": 216},
    "nearTie": True,
}


def summary(differences: list[dict[str, Any] | None]) -> dict[str, Any]:
    prompts = [
        {"id": f"p{i}", "identical": d is None, **({} if d is None else {"firstDifference": d})}
        for i, d in enumerate(differences)
    ]
    return {
        "prompts": prompts,
        "identical": all(d is None for d in differences),
        "nearTies": sum(1 for d in differences if d),
    }


def test_identical_outputs_and_a_replayed_near_tie_keep_the_promise():
    assert near_tie_problems(summary([None, None, None, None]), 4) == []
    assert near_tie_problems(summary([None, TIE, None, None]), 4) == []
    ended = {**TIE, "actual": None, "replayedTokens": {"alone": 2350, "speculative": 2}}  # the run ended: an end token
    assert near_tie_problems(summary([None, ended, None, None]), 4) == []


@pytest.mark.parametrize(
    "change, says",
    [
        # a verifier that kept a token the target did not choose: the replay gives the target's token back
        ({"replayedTokens": {"alone": 2350, "speculative": 2350}}, "the replays gave"),
        ({"nearTie": False}, "not a near tie"),
        # tokens whose logits are further apart than the two decode shapes' disagreement explains
        ({"logitGap": 3.5, "speculativeLogitGap": 0.4}, "do not fit a disagreement"),
        ({"logitGap": -0.5}, "do not fit a disagreement"),
        ({"kernelDisagreement": None}, "no gaps measured"),
    ],
)
def test_a_real_divergence_breaks_it(change: dict[str, Any], says: str):
    wrong = {**copy.deepcopy(TIE), **change}
    problems = near_tie_problems(summary([None, wrong, None, None]), 4)
    assert len(problems) == 1 and says in problems[0], problems


def test_too_many_parted_prompts_or_missing_ones_break_it():
    assert "only 1 of 4 prompts identical" in near_tie_problems(summary([TIE, TIE, TIE, None]), 4)[0]
    assert "3 prompts generated of 4" in near_tie_problems(summary([None, None, None]), 4)[0]
    miscounted = summary([None, TIE, None, None]) | {"nearTies": 0}
    assert "counts 0 near ties for 1" in near_tie_problems(miscounted, 4)[0]
