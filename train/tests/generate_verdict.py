"""What `specdraft generate` promises, checked on its `--out` summary: every speculative output equals the target
alone's, or parts from it only at a near tie that the command itself named and measured (docs/generate.md,
"Lossless"). llama.cpp computes a row differently by the shape of the decode it is in, and which near ties flip
depends on the CPU's kernels (AVX2 and AVX-512 machines part at different prompts), so a test cannot demand identical
outputs; it can demand that every difference is one the replay reproduced within the kernels' measured disagreement,
and that most prompts stay identical. A wrong verifier or a corrupted cache fails both: its replay does not reproduce
the token it kept, or its tokens differ at a gap wider than any rounding."""

from __future__ import annotations

from typing import Any

# The fewest prompts out of every one that must come out identical: a near tie is rare (1 of 4 held-out chat prompts
# parted on an AVX2 EPYC, 0 on AVX-512 Xeons), a systematic error parts most of them.
MIN_IDENTICAL_SHARE = 0.5
# float32 logits compared after a subtraction: the replay's own arithmetic, not a tolerance on the rule
ROUNDING = 1e-4


def near_tie_problems(
    summary: dict[str, Any], prompts: int, min_identical_share: float = MIN_IDENTICAL_SHARE
) -> list[str]:
    """Each way the summary breaks generate's promise, one line each (empty: the promise holds)."""
    problems: list[str] = []
    if len(summary["prompts"]) != prompts:
        problems.append(f"{len(summary['prompts'])} prompts generated of {prompts}")
    differing = [p for p in summary["prompts"] if not p["identical"]]
    identical = len(summary["prompts"]) - len(differing)
    if identical < min_identical_share * prompts:
        problems.append(f"only {identical} of {prompts} prompts identical to the target alone")
    if summary.get("nearTies") != len(differing):
        problems.append(f"summary counts {summary.get('nearTies')} near ties for {len(differing)} differing prompts")
    for prompt in differing:
        d = prompt.get("firstDifference") or {}
        where = f"prompt {prompt['id']} at position {d.get('position')}"
        if d.get("nearTie") is not True:
            problems.append(f"{where}: not a near tie ({d})")
            continue
        replayed = d.get("replayedTokens") or {}
        # a run that ended there (null) is reproduced by an end token, which the command checks itself
        runs = {"alone": d.get("expected"), "speculative": d.get("actual")}
        if set(replayed) != set(runs) or any(t is not None and replayed[k] != t for k, t in runs.items()):
            problems.append(f"{where}: the replays gave {replayed}, the runs {d.get('expected')} and {d.get('actual')}")
        gap, other, disagreement = d.get("logitGap"), d.get("speculativeLogitGap"), d.get("kernelDisagreement")
        if gap is None or other is None or disagreement is None:
            problems.append(f"{where}: no gaps measured ({d})")
        elif min(gap, other) < -ROUNDING or gap + other > 2 * disagreement + ROUNDING:
            problems.append(f"{where}: gaps {gap} and {other} do not fit a disagreement of {disagreement}")
    return problems
