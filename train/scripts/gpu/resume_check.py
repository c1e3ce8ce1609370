"""GPU check: `pretrain` and `distill` runs SIGKILLed mid-run on CUDA resume, and end where uninterrupted runs end.

The H200 rerun of an interrupted lab failed with ``TypeError: RNG state must be a torch.ByteTensor`` (the resume
state's CPU RNG tensor was read onto the GPU). This builds a tiny lab on the GPU (a 200 kB slice of this interpreter's
standard library, a 512-token BPE, a micro target and base drafter), then for pretrain (the base) and for distill
(mid-epoch evaluations, replay text on): one uninterrupted run, a second one to measure run-to-run noise, and a run
killed with ``--halt-after-steps`` (a subprocess: SIGKILL, no cleanup), then resumed (the state.pt it left, loaded
onto the GPU: the path that failed). PASS when every resume finishes and ends within the noise floor of the
uninterrupted run: bit for bit where two uninterrupted runs agree bit for bit, else no further from it than
RESUME_NOISE_FACTOR × the second run's distance (bf16 GPU kernels need not be bitwise deterministic run to run).
Compared: the final weights (pretrain; for distill, the selected checkpoint, which may predate the kill) and, for
distill, the train loss of every logged window after the kill (which depends on the whole resumed trajectory,
whichever checkpoint dev τ selects) and the steps of the dev evaluations. Prints PASS or FAIL (exit 0 or 1); ~50 s
on an H200, a third of it two CLI start-ups.

From the repository root on the GPU machine (PYTHONPATH holding train/):

    python3 train/scripts/gpu/resume_check.py [--device cuda] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file

from specdraft_train.commands import corpus, distill, pretrain, reference, tokenizer
from specdraft_train.config import CorpusConfig, TokenizerConfig, add_device_argument
from specdraft_train.formats.artifacts import verify_stage_dir
from specdraft_train.presets import MICRO
from specdraft_train.training.distillation import DistillJob

TINY_CORPUS = CorpusConfig(max_file_bytes=24_000, heldout_per_mille=200, dev_per_mille=150, max_code_bytes=200_000)
# The conftest fixture's sizes, where distillation measurably helps the base on dev.
TARGET = replace(MICRO.pretrain_target, max_steps=20, batch_size=8, ckpt_every=100)
PRETRAIN = replace(MICRO.pretrain_drafter, max_steps=12, batch_size=8, ckpt_every=4)
PRETRAIN_FLAGS = ("--max-steps", "12", "--batch-size", "8", "--ckpt-every", "4")
REFERENCE = replace(
    MICRO.reference,
    max_new_tokens=32,
    min_continuation_tokens=8,
    train_prompts=64,
    dev_per_category=3,
    heldout_per_category=2,
    batch_size=64,
    shard_prompts=64,
)
DISTILL = replace(
    MICRO.distill,
    epochs=2,
    batch_size=8,
    ckpt_every=2,
    eval_every=3,
    replay_weight=0.5,
    replay_seq_len=32,
    replay_batch_size=4,
)
DISTILL_FLAGS = (
    "--epochs",
    "2",
    "--batch-size",
    "8",
    "--ckpt-every",
    "2",
    "--eval-every",
    "3",
    "--replay-weight",
    "0.5",
    "--set",
    "replay_seq_len=32",
    "--set",
    "replay_batch_size=4",
)
HALT_PRETRAIN, HALT_DISTILL = 4, 4  # mid-run: of 12 pretrain steps; of 16 distill steps, evaluated at 3, 6, …
RESUME_NOISE_FACTOR = 4.0  # a resumed run may differ from the straight one by a few times the run-to-run noise


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specdraft_train", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def max_difference(a_dir: Path, b_dir: Path) -> float:
    a, b = load_file(str(a_dir / "model.safetensors")), load_file(str(b_dir / "model.safetensors"))
    if a.keys() != b.keys():
        return float("inf")
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def within_noise(label: str, difference: float, noise: float) -> bool:
    ok = difference == 0 if noise == 0 else difference <= RESUME_NOISE_FACTOR * noise
    rule = "bit for bit" if noise == 0 else f"≤ {RESUME_NOISE_FACTOR:g} × run-to-run noise {noise:.3g}"
    print(f"gpu_resume_check: {label}: resumed vs straight {difference:.3g} ({rule}): {'ok' if ok else 'MISMATCH'}")
    return ok


def compare_weights(label: str, straight: Path, again: Path, resumed: Path) -> bool:
    return within_noise(f"{label}: max |Δw|", max_difference(straight, resumed), max_difference(straight, again))


def compare_history(straight: Path, again: Path, resumed: Path, after_step: int) -> bool:
    """Train losses logged after the kill, and the evaluation steps, of distill's histories."""
    histories = [verify_stage_dir(d, "distill")["metrics"]["history"] for d in (straight, again, resumed)]
    steps = [[h["step"] for h in history] for history in histories]
    losses = [[h["loss"] for h in history if h["step"] > after_step] for history in histories]
    if steps[0] != steps[2] or len(losses[0]) != len(losses[2]) or not losses[0]:
        print(f"gpu_resume_check: distill: evaluation steps differ: straight {steps[0]}, resumed {steps[2]}: MISMATCH")
        return False
    difference = max(abs(a - b) for a, b in zip(losses[0], losses[2]))
    noise = max(abs(a - b) for a, b in zip(losses[0], losses[1]))
    print(
        f"gpu_resume_check: distill: dev macro τ at steps {steps[0]}: "
        f"{[round(h['dev_macro_tau'], 3) for h in histories[2]]} (resumed)"
    )
    return within_noise(f"distill: train loss at the {len(losses[0])} evaluations after the kill", difference, noise)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_device_argument(parser, default="cuda", help="device to check (default: cuda)")
    parser.add_argument("--work", type=Path, default=None, help="scratch directory (default: a new temp dir)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_resume_check: FAIL (no CUDA device)")
        return 1
    start = time.time()

    def phase(name: str) -> None:
        print(f"gpu_resume_check: {time.time() - start:5.1f} s: {name}", flush=True)

    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-resume-check."))
    d = {
        name: work / name
        for name in (
            "corpus",
            "tokenizer",
            "target",
            "base",
            "base-again",
            "base-resumed",
            "reference",
            "distilled",
            "distilled-again",
            "distilled-resumed",
        )
    }
    phase("corpus, tokenizer")
    corpus.build_corpus(d["corpus"], TINY_CORPUS, corpus.stdlib_root(), [])
    tokenizer.build(d["corpus"], d["tokenizer"], TokenizerConfig(vocab_size=512))
    ok = True

    phase("pretrain: straight twice, killed, resumed")
    for name in ("base", "base-again"):
        pretrain.run(d["corpus"], d["tokenizer"], d[name], "drafter", "micro", PRETRAIN, MICRO.drafter, args.device)
    pretrain_args = (
        "pretrain",
        "--corpus",
        str(d["corpus"]),
        "--tokenizer",
        str(d["tokenizer"]),
        "--out",
        str(d["base-resumed"]),
        "--role",
        "drafter",
        "--preset",
        "micro",
        "--device",
        args.device,
        *PRETRAIN_FLAGS,
    )
    killed = cli(*pretrain_args, "--halt-after-steps", str(HALT_PRETRAIN))
    if killed.returncode != -9:
        print(
            f"gpu_resume_check: pretrain was not killed as planned (exit {killed.returncode})\n{killed.stderr[-3000:]}"
        )
        ok = False
    try:
        pretrain.run(
            d["corpus"], d["tokenizer"], d["base-resumed"], "drafter", "micro", PRETRAIN, MICRO.drafter, args.device
        )
        ok = compare_weights("pretrain", d["base"], d["base-again"], d["base-resumed"]) and ok
    except Exception as error:  # the H200's rerun failed here: TypeError: RNG state must be a torch.ByteTensor
        print(f"gpu_resume_check: pretrain resume failed: {type(error).__name__}: {error}")
        ok = False

    phase("target, reference")
    pretrain.run(d["corpus"], d["tokenizer"], d["target"], "target", "micro", TARGET, MICRO.target, args.device)
    reference.run(d["target"], d["reference"], REFERENCE, corpus_dir=d["corpus"], device_name=args.device)
    phase("distill: straight twice, killed, resumed")
    for name in ("distilled", "distilled-again"):
        distill.run(
            DistillJob(d["base"], d["reference"], d[name], DISTILL, replay_tokens=d["tokenizer"], device=args.device)
        )
    distill_args = (
        "distill",
        "--drafter",
        str(d["base"]),
        "--reference",
        str(d["reference"]),
        "--out",
        str(d["distilled-resumed"]),
        "--preset",
        "micro",
        "--device",
        args.device,
        "--replay-tokens",
        str(d["tokenizer"]),
        *DISTILL_FLAGS,
    )
    killed = cli(*distill_args, "--halt-after-steps", str(HALT_DISTILL))
    if killed.returncode != -9:
        print(
            f"gpu_resume_check: distill was not killed as planned (exit {killed.returncode})\n{killed.stderr[-3000:]}"
        )
        ok = False
    try:
        resumed = d["distilled-resumed"]
        distill.run(
            DistillJob(d["base"], d["reference"], resumed, DISTILL, replay_tokens=d["tokenizer"], device=args.device)
        )
        ok = compare_weights("distill", d["distilled"], d["distilled-again"], d["distilled-resumed"]) and ok
        ok = compare_history(d["distilled"], d["distilled-again"], d["distilled-resumed"], HALT_DISTILL) and ok
    except Exception as error:
        print(f"gpu_resume_check: distill resume failed: {type(error).__name__}: {error}")
        ok = False
    if ok and args.work is None:
        shutil.rmtree(work, ignore_errors=True)  # kept on FAIL, to look into
    print(
        f"gpu_resume_check: {'PASS' if ok else 'FAIL'} ({time.time() - start:.0f} s on "
        f"{torch.cuda.get_device_name() if args.device.startswith('cuda') else args.device}"
        f"{'' if ok and args.work is None else f'; work dir {work}'})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
