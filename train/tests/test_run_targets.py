"""`run` on the other architectures it takes: tiny random Qwen2 and Qwen3 GGUFs with Qwen3's real tokenizer and chat
template (tiny_targets.py) run to a drafter that selfcheck passes and generate checks losslessly; and a drafter of
another vocabulary than the target's (a Qwen3 one for SmolLM2 cut to a layer) is refused before anything is
converted. Apart from test_run.py so that the two files run side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_main, smollm2_gguf
from generate_verdict import near_tie_problems
from run_helpers import TINY, run_command, run_env, small_prompts
from tiny_targets import QWEN3_TOKENIZER_DIR, tiny_gguf_target

from specdraft_train.formats.gguf_reader import GgufReader


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_prompts(tmp_path_factory.mktemp("prompts") / "prompts.jsonl", {"train": 3, "dev": 1, "heldout": 1})


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_gguf_targets_run_to_a_checked_drafter(prompts: Path, arch: str, tmp_path: Path):
    target = tiny_gguf_target(arch, QWEN3_TOKENIZER_DIR, tmp_path / f"{arch}.gguf")
    out = tmp_path / "out"
    args = ["--target", str(target), "--out", str(out), "--prompts", str(prompts), *TINY]
    result = subprocess.run(run_command(*args), env=run_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((out / "report.json").read_text())
    assert report["drafter"] == "1 of the target's 2 layers, distilled"
    assert "all 7 gates passed" in report["selfcheck"]
    assert near_tie_problems(report["speedup"]["generate"], 3) == []
    drafter = GgufReader(out / "export" / "drafter-q4_0.gguf")
    assert drafter.fields["general.architecture"].contents() == arch


def test_a_drafter_of_another_vocabulary_is_refused_before_training(prompts: Path, tmp_path: Path):
    target = tmp_path / "smollm2-1-layer.gguf"
    cut = [sys.executable, str(REPO / "bench/models/truncate_gguf.py"), "--model", str(smollm2_gguf())]
    subprocess.run([*cut, "--layers", "1", "--out", str(target)], check=True, capture_output=True)
    other = tiny_gguf_target("qwen3", QWEN3_TOKENIZER_DIR, tmp_path / "qwen3.gguf")
    out = tmp_path / "out"
    args = ["--target", str(target), "--drafter", str(other), "--out", str(out), "--prompts"]
    code, _, err = run_main("run", *args, str(prompts), "--device", "cpu")
    assert code == 2 and "Traceback" not in err, err
    assert "is not the target's (token 0 is '!', the target's '<|endoftext|>')" in err
    assert not (out / "target").exists() and not (out / "drafter").exists()  # refused before any conversion
