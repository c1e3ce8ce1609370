"""Shared fixtures for the training pipeline's tests: a tiny corpus (stdlib code + git-doc prose), tokenizer, target
and base drafter, built once; SmolLM2's tokenizer. The prose is Debian's git-doc in train/.cache/prose, the SmolLM2
GGUF train/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/pytest.sh fetches both).

Everything runs on CPU with one torch thread (steadier than two on a shared 2-core machine, and the same thread
count in-process and in the CLI subprocesses, so runs compare bit for bit).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from specdraft_train import __main__ as cli
from specdraft_train.commands import corpus, pretrain, reference, tokenizer
from specdraft_train.commands.corpus import preset_prose
from specdraft_train.commands.target import gguf_tokenizer
from specdraft_train.config import CorpusConfig, TokenizerConfig
from specdraft_train.presets import MICRO

TRAIN_ROOT = Path(__file__).resolve().parents[1]
REPO = TRAIN_ROOT.parent
SMOLLM2_GGUF = TRAIN_ROOT / ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"  # scripts/data/fetch_smollm2.sh
TINY_CORPUS = CorpusConfig(
    max_file_bytes=24_000, heldout_per_mille=200, dev_per_mille=150, max_code_bytes=200_000, max_prose_bytes=200_000
)
TINY_TOKENIZER = TokenizerConfig(vocab_size=512, prose_repeats=2)
# The micro preset's reference settings, scaled down; REFERENCE_FLAGS says the same on the command line.
TINY_REFERENCE = replace(
    MICRO.reference,
    max_new_tokens=16,
    min_continuation_tokens=8,
    train_prompts=48,
    dev_per_category=1,
    heldout_per_category=2,
    batch_size=16,
    shard_prompts=16,
)
REFERENCE_FLAGS = (
    "--preset",
    "micro",
    "--max-new-tokens",
    "16",
    "--min-continuation-tokens",
    "8",
    "--train-prompts",
    "48",
    "--dev-per-category",
    "1",
    "--heldout-per-category",
    "2",
    "--batch-size",
    "16",
    "--shard-prompts",
    "16",
    "--device",
    "cpu",
)

torch.set_num_threads(1)

# The longest test files (minutes each on two cores: a real 135M model, the lab's GPU jobs as CPU dry runs, llama.cpp on
# every CPU variant), run first: pytest-xdist hands files to workers in this order (scripts/pytest.sh), and one of
# them left for last would run alone while the other workers idle.
LONGEST_FIRST = (
    "test_run.py",
    "test_real_lab.py",
    "test_targets.py",
    "test_run_targets.py",
    "test_real_target.py",
    "test_parity.py",
    "test_lab_micro.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: the rest keep their order


def torchrun(nproc: int = 2) -> tuple[str, ...]:
    """A ``run_cli`` runner: ``nproc`` ranks of ``python -m specdraft_train --threads 1`` under torch.distributed.run
    (what ``torchrun`` runs), standalone: the rendezvous listens on a port the OS picks, so parallel test runs and
    other jobs on the machine never collide on a fixed port."""
    return (
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "specdraft_train",
        "--threads",
        "1",
    )


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test starts with one torch thread, whatever an earlier test (or a CLI call in-process) set: tiny models
    on a shared 2-core machine, where a second intra-op thread only spins against other processes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def assert_same_weights_up_to_summation_order(expected: Path, actual: Path) -> None:
    """Two stage directories' ``model.safetensors`` hold the same tensors, equal up to float summation order (what
    DDP over 2 processes changes against one process)."""
    a, b = load_file(str(expected / "model.safetensors")), load_file(str(actual / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)


def micro_prose() -> Path:
    """The micro preset's prose folder (git-doc); a missing one fails with the command that fetches it."""
    return preset_prose(MICRO)[0]


def smollm2_gguf() -> Path:
    """The real chat model's GGUF; a missing one fails with the command that fetches it."""
    if not SMOLLM2_GGUF.is_file():
        raise AssertionError(f"{SMOLLM2_GGUF} is missing: `bash train/scripts/data/fetch_smollm2.sh` fetches it")
    return SMOLLM2_GGUF


@pytest.fixture(scope="session")
def smollm2_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with SmolLM2-135M-Instruct's tokenizer as the `target` stage writes it into the target's checkpoint
    (tokenizer.json, tokenizer_config.json, chat_template.jinja). Copy its files into a checkpoint to give a drafter
    SmolLM2's vocabulary."""
    out = tmp_path_factory.mktemp("smollm2-tokenizer")
    gguf_tokenizer(smollm2_gguf()).save_pretrained(out)
    return out


def run_cli(
    *args: str,
    check: bool = True,
    env: dict[str, str] | None = None,
    runner: tuple[str, ...] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m specdraft_train --threads 1 <args>`` in train/ (or ``runner`` + args, e.g. torchrun).

    ``timeout`` (seconds) turns a hang, e.g. DDP ranks waiting on each other forever, into a failed test."""
    command = [*(runner or (sys.executable, "-m", "specdraft_train", "--threads", "1")), *args]
    result = subprocess.run(
        command,
        cwd=TRAIN_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{command} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


def run_main(*args: str) -> tuple[int, str, str]:
    """``python -m specdraft_train --threads 1 ARGS`` in this process (no 7 s of imports a call): exit code, stdout,
    stderr. For commands whose point is not a process of their own (a kill, torchrun)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["--threads", "1", *args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """corpus/, tokenizer/, target/ (micro target, 20 steps), base/ (micro drafter, 8 steps), reference/."""
    root = tmp_path_factory.mktemp("tiny")
    dirs = {name: root / name for name in ("corpus", "tokenizer", "target", "base", "reference")}
    corpus.build_corpus(dirs["corpus"], TINY_CORPUS, corpus.stdlib_root(), [], [micro_prose()])
    tokenizer.build(dirs["corpus"], dirs["tokenizer"], TINY_TOKENIZER)
    pretrain.run(
        dirs["corpus"],
        dirs["tokenizer"],
        dirs["target"],
        "target",
        "micro",
        replace(MICRO.pretrain_target, max_steps=20, batch_size=8, ckpt_every=100),
        MICRO.target,
        "cpu",
    )
    pretrain.run(
        dirs["corpus"],
        dirs["tokenizer"],
        dirs["base"],
        "drafter",
        "micro",
        replace(MICRO.pretrain_drafter, max_steps=8, batch_size=8, ckpt_every=100),
        MICRO.drafter,
        "cpu",
    )
    reference.run(dirs["target"], dirs["reference"], TINY_REFERENCE, corpus_dir=dirs["corpus"], device_name="cpu")
    return {**dirs, "root": root}
