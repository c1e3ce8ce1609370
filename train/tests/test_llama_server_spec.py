"""bench/llama_server_spec.py's arithmetic on synthetic server answers: acceptance, tokens/s, the speed-up and the
outputs-identical verdict with the first differing position. (The servers themselves are not run here: building
llama-server takes ~5 minutes of CI's 20; bench/README.md has the command and bench/results the runs.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import llama_server_spec as spec  # noqa: E402


def answer(tokens: list[int], ms: float, drafted: int | None = None, accepted: int | None = None) -> dict:
    timings = {"predicted_n": len(tokens), "predicted_ms": ms}
    if drafted is not None:
        timings |= {"draft_n": drafted, "draft_n_accepted": accepted}
    return {"tokens": tokens, "timings": timings, "wall_s": ms / 1000}


def test_acceptance_speed_and_identical_outputs():
    prompts = [{"id": "a", "category": "x", "continuation_tokens": [1, 2, 3, 9]},
               {"id": "b", "category": "y", "continuation_tokens": []}]  # fmt: skip
    answers = {
        spec.ALONE: [answer([1, 2, 3, 4], 400), answer([5, 6], 200)],
        "base": [answer([1, 2, 3, 4], 200, 10, 4), answer([5, 7], 100, 6, 1)],
    }
    servers = spec.summarize(prompts, answers, ["base"])
    base = servers["base"]
    assert base["acceptance"] == 5 / 16 and base["tokens_per_s"] == 1000 * 6 / 300
    assert base["speed_up"] == (6 / 300) / (6 / 600)
    assert base["identical_to_target"] == 1 and base["differing"] == [{"id": "b", "category": "y", "position": 1}]
    assert servers[spec.ALONE]["equal_to_file_continuations"] == 3 / 4  # b has no continuation: not counted
    markdown = spec.markdown({"date": "d", "machine": "m", "servers": servers, "config": {
        "target": "t.gguf", "drafters": {"base": "b.gguf"}, "prompt_file": "p", "prompts": 2, "n_predict": 4,
        "draft_max": 16, "threads": 1}})  # fmt: skip
    assert "| base (`b.gguf`) | 0.312 | 5 / 16 | 20.0 | 2.00 | 1 of 2 |" in markdown
    assert "`b` (y) differs from the target alone at token 1" in markdown


def test_first_difference_counts_a_shorter_output():
    assert spec.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert spec.first_difference([1, 2], [1, 2, 3]) == 2 and spec.first_difference([1, 9, 3], [1, 2, 3]) == 1


def test_prompt_files_need_tokens_or_messages(tmp_path: Path):
    good = tmp_path / "good.jsonl"
    good.write_text(
        json.dumps({"id": "1", "prompt_tokens": [1, 2]})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "hi"}]})
        + "\n"
    )
    rows = spec.read_prompts(good, None)
    assert rows[0]["prompt_tokens"] == [1, 2] and rows[1]["prompt_tokens"] is None and rows[1]["messages"]
    assert len(spec.read_prompts(good, 1)) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "1", "text": "no tokens"}) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:1: neither prompt_tokens nor messages"):
        spec.read_prompts(bad, None)
