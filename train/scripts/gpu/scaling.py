"""Multi-GPU scaling: reference generation and distillation throughput on 2 ranks against 1, in one job.

Builds, in ``--work``, what the two stages need without a trained lab: a code-only corpus of this interpreter's
standard library (capped by ``--corpus-bytes``), a byte-level BPE of ``--vocab`` tokens on it, and two randomly
initialised Qwen3 checkpoints — the target and the drafter, each of a named shape (default: the lab preset's 88M
target, hidden 768, 12 layers, for both, so that distillation is compute-bound as a real drafter's is). Then, for
each rank count in ``--procs`` (capped by the GPUs present), it runs the real commands under torch.distributed.run:

- ``reference`` on ``--prompts`` corpus prompts (the lab's 64/192/512-token categories), continuations of
  ``--new-tokens``; throughput = tokens generated (training shards and eval sets) ÷ the generation phase's wall time,
  from the stage's manifest. The outputs of every rank count are compared with the one-rank run's (sha256).
- ``distill`` of the drafter on the one-rank reference data for one epoch, ``--batch-per-rank`` continuations per
  rank and step (weak scaling: N ranks take N× the global batch, as one would to use N GPUs); throughput =
  continuation tokens ÷ training seconds, from its manifest. With ``--fsdp`` also ``distill --fsdp`` on each rank
  count above 1 (``distill_fsdp``, against the same one-rank run).

Writes ``--out`` (JSON): per rank count the tokens, seconds and tokens/s of each stage, the speed-ups over one rank,
the goal (≥ 1.8× on 2), whether it is met, and the device; each command's output goes to a log beside it. On a
1-GPU machine it measures the one-rank throughput only. Exit 1 if a command failed (the JSON says which).

    bash train/scripts/gpu/scaling.sh RESULTS      # on the GPU machine, from the checkout root: ~4 minutes
    cd train && .venv/bin/python scripts/gpu/scaling.py --device cpu --threads 1 --shape tiny --vocab 512 \\
        --corpus-bytes 400000 --max-file-bytes 24000 --eval-per-category 1 --prompts 48 --new-tokens 8 \\
        --batch-size 16 --shard-prompts 8 --batch-per-rank 4 --out /tmp/scaling/scaling.json   # CPU, gloo
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # train/: runs without PYTHONPATH too

from specdraft_train.commands import corpus, tokenizer  # noqa: E402
from specdraft_train.config import CorpusConfig, ModelConfig, TokenizerConfig, add_device_argument  # noqa: E402
from specdraft_train.formats.artifacts import stage_complete, verify_stage_dir  # noqa: E402
from specdraft_train.formats.vocabulary import END_OF_TEXT  # noqa: E402
from specdraft_train.modeling.models import (  # noqa: E402
    lab_generation_config,
    load_tokenizer,
    new_model,
    parameter_count,
    qwen3_config,
    save_checkpoint,
)
from specdraft_train.presets import LAB  # noqa: E402

GOAL_SPEEDUP = 1.8  # the issue's, for 2 ranks against 1
SHAPES = {
    "lab-target": LAB.target,  # 88M with the lab's 16k vocabulary
    "lab-drafter": LAB.drafter,  # 7.3M: per-step overheads dominate, a weak test of scaling
    "tiny": ModelConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        intermediate_size=128,
        max_position_embeddings=1024,
    ),
}
# Large held-out and dev shares, so that a stdlib-only corpus has candidates for every category.
CORPUS = CorpusConfig(heldout_per_mille=100, dev_per_mille=100)


def prepare(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Corpus, tokenizer, random target and drafter in ``work`` (each kept when already there)."""
    d = {name: work / name for name in ("corpus", "tokenizer", "target", "drafter")}
    if not stage_complete(d["corpus"], "corpus"):
        config = replace(CORPUS, max_code_bytes=args.corpus_bytes, max_file_bytes=args.max_file_bytes)
        corpus.build_corpus(d["corpus"], config, corpus.stdlib_root(), [])
    if not stage_complete(d["tokenizer"], "tokenizer"):
        tokenizer.build(d["corpus"], d["tokenizer"], TokenizerConfig(vocab_size=args.vocab, prose_repeats=1))
    hf_tokenizer = load_tokenizer(d["tokenizer"])
    eot = hf_tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    models = {}
    for role, shape_name, seed in (("target", args.shape, 0), ("drafter", args.drafter_shape or args.shape, 1)):
        config = qwen3_config(SHAPES[shape_name], vocab_size=len(hf_tokenizer), eos_token_id=eot, pad_token_id=eot)
        model = new_model(config, seed=seed)
        if not (d[role] / "config.json").is_file():
            model.generation_config = lab_generation_config(hf_tokenizer)
            save_checkpoint(model, d[role], d["tokenizer"])
        models[role] = {"shape": shape_name, **asdict(SHAPES[shape_name]), "parameters": parameter_count(model)}
    return {"dirs": d, "vocab_size": len(hf_tokenizer), "models": models}


def launcher(nproc: int, args: argparse.Namespace) -> list[str]:
    threads = ["--threads", str(args.threads)] if args.threads else []
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # a free port for the rendezvous
        f"--nproc-per-node={nproc}",
        "-m",
        "specdraft_train",
        *threads,
    ]


def run_logged(command: list[str], log: Path, nproc: int, args: argparse.Namespace) -> float:
    """Run ``command`` on the first ``nproc`` GPUs (all output into ``log``); its wall seconds."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.device != "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(nproc))
    env.setdefault("OMP_NUM_THREADS", str(args.threads or 1))
    start = time.time()
    with open(log, "w") as f:
        f.write("$ " + " ".join(command) + "\n")
        f.flush()
        subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env, check=True, timeout=args.command_timeout)
    return time.time() - start


def measure_reference(d: dict[str, Path], nproc: int, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    out = args.work / f"reference-{nproc}"
    shutil.rmtree(out, ignore_errors=True)  # a fresh run: a resumed one would generate less
    command = launcher(nproc, args) + [
        "reference",
        "--target",
        str(d["target"]),
        "--corpus",
        str(d["corpus"]),
        "--out",
        str(out),
        "--preset",
        "lab",
        "--device",
        args.device,
        "--train-prompts",
        str(args.prompts),
        "--dev-per-category",
        str(args.eval_per_category),
        "--heldout-per-category",
        str(args.eval_per_category),
        "--min-continuation-tokens",
        "1",  # kept whatever their length: a random model may stop anywhere
        "--max-new-tokens",
        str(args.new_tokens),
        "--batch-size",
        str(args.batch_size),
        "--shard-prompts",
        str(args.shard_prompts),
    ]
    wall = run_logged(command, logs / f"reference-{nproc}.log", nproc, args)
    manifest = verify_stage_dir(out, "reference")
    generation = manifest["generation"]
    return {
        "ranks": nproc,
        "tokens": generation["tokens"],
        "seconds": generation["seconds"],
        "tokens_per_s": generation["tokens_per_s"],
        "train_prompts": manifest["prompts"]["train"],
        "per_rank": generation["per_rank"],
        "command_seconds": wall,
        "outputs": {name: info["sha256"] for name, info in manifest["outputs"].items()},
    }


def measure_distill(
    d: dict[str, Path], reference: Path, nproc: int, args: argparse.Namespace, logs: Path, fsdp: bool = False
) -> dict[str, Any]:
    name = f"distill{'_fsdp' if fsdp else ''}-{nproc}"
    out = args.work / name
    shutil.rmtree(out, ignore_errors=True)
    command = launcher(nproc, args) + [
        "distill",
        "--drafter",
        str(d["drafter"]),
        "--reference",
        str(reference),
        "--out",
        str(out),
        "--preset",
        "lab",
        "--device",
        args.device,
        "--epochs",
        "1",
        "--batch-size",
        str(args.batch_per_rank * nproc),
        "--lr",
        "1e-4",
        "--eval-every",
        "0",  # dev τ at the start and the end only: both small (--eval-per-category)
        "--patience",
        "0",
        "--time-budget",
        "0",  # a budget would all-reduce every step; one epoch bounds the run instead
        "--ckpt-every",
        "1000000",  # no resumable saves inside the measured loop
        *(["--fsdp"] if fsdp else []),
    ]
    wall = run_logged(command, logs / f"{name}.log", nproc, args)
    metrics = verify_stage_dir(out, "distill")["metrics"]
    return {
        "ranks": nproc,
        "global_batch": args.batch_per_rank * nproc,
        "steps": metrics["steps"],
        "tokens": metrics["train_tokens"],
        "seconds": metrics["train_seconds"],
        "tokens_per_s": metrics["train_tokens"] / max(metrics["train_seconds"], 1e-9),
        "command_seconds": wall,
    }


def summarize(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A stage's runs by rank count, with each count's speed-up over one rank and whether 2 ranks reach the goal."""
    base = runs.get("1", {}).get("tokens_per_s")
    speedup = {n: r["tokens_per_s"] / base for n, r in runs.items() if n != "1" and base and "tokens_per_s" in r}
    return {"runs": runs, "speedup": speedup, "meets_goal": speedup["2"] >= GOAL_SPEEDUP if "2" in speedup else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="JSON report path (logs go beside it)")
    p.add_argument("--work", type=Path, default=Path("/tmp/gpu_scaling"), help="scratch directory")
    add_device_argument(p, default="cuda", help="cuda (NCCL for distill) | cpu (gloo; the tests') (default: cuda)")
    p.add_argument("--procs", default="1,2", help="rank counts to measure, capped by the GPUs present (default: 1,2)")
    p.add_argument("--shape", default="lab-target", choices=sorted(SHAPES), help="target shape (default: lab-target)")
    p.add_argument("--drafter-shape", default=None, choices=sorted(SHAPES), help="drafter shape (default: --shape)")
    p.add_argument("--vocab", type=int, default=16_384, help="BPE vocabulary (default: 16384, the lab's)")
    p.add_argument(
        "--corpus-bytes", type=int, default=0, help="stdlib code kept, 0 = all (default: 0; ~28 MB in 3.11's)"
    )
    p.add_argument("--max-file-bytes", type=int, default=200_000, help="larger files are left out (default: 200 kB)")
    p.add_argument("--prompts", type=int, default=16_384, help="training prompts for reference (default: 16384)")
    p.add_argument("--new-tokens", type=int, default=128, help="continuation length cap (default: 128, the lab's)")
    p.add_argument("--batch-size", type=int, default=1024, help="reference rows per batch (default: 1024, the lab's)")
    p.add_argument("--shard-prompts", type=int, default=2048, help="prompts per reference shard (default: 2048)")
    p.add_argument(
        "--eval-per-category",
        type=int,
        default=2,
        help="held-out and dev prompts each: rank 0 generates them alone, a serial part (default: 2)",
    )
    p.add_argument("--batch-per-rank", type=int, default=64, help="distill continuations per rank (default: 64)")
    p.add_argument(
        "--fsdp",
        action="store_true",
        help="also distill with --fsdp on each rank count above 1 (distill_fsdp; speed-up against 1 rank, which is "
        "the same with or without FSDP)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads per rank (the CPU run: 1)")
    p.add_argument("--command-timeout", type=float, default=300, help="seconds per command (default: 300)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logs = args.out.parent
    logs.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    gpus = torch.cuda.device_count() if args.device != "cpu" else 0
    wanted = [int(n) for n in args.procs.split(",")]
    procs = wanted if args.device == "cpu" else [n for n in wanted if n <= gpus]
    start = time.time()
    prepared = prepare(args.work, args)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "device": torch.cuda.get_device_name(0) if gpus else platform.processor() or "cpu",
        "gpus_present": gpus,
        "ranks_measured": procs,
        "ranks_skipped": [n for n in wanted if n not in procs],  # more ranks than GPUs
        "torch": torch.__version__,
        "workload": {
            "models": prepared["models"],
            "vocab_size": prepared["vocab_size"],
            "prompts": args.prompts,
            "new_tokens": args.new_tokens,
            "reference_batch_size": args.batch_size,
            "shard_prompts": args.shard_prompts,
            "eval_per_category": args.eval_per_category,
            "distill_batch_per_rank": args.batch_per_rank,
        },
        "prepare_seconds": time.time() - start,
        "goal_speedup": GOAL_SPEEDUP,
        "errors": [],
    }
    d = prepared["dirs"]
    runs: dict[str, dict[str, dict[str, Any]]] = {
        "reference": {},
        "distill": {},
        **({"distill_fsdp": {}} if args.fsdp else {}),
    }

    def attempt(stage: str, nproc: int, measure: Any) -> None:
        try:
            runs[stage][str(nproc)] = measure()
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError, ValueError) as error:
            runs[stage][str(nproc)] = {"error": f"{type(error).__name__}: {error}"}
            report["errors"].append(f"{stage} on {nproc} rank(s): see {logs / f'{stage}-{nproc}.log'}")

    for n in procs:
        attempt("reference", n, lambda n=n: measure_reference(d, n, args, logs))
    for n in procs:  # all on the one-rank reference data, so every run trains on the same examples
        attempt("distill", n, lambda n=n: measure_distill(d, args.work / "reference-1", n, args, logs))
    if args.fsdp:
        for n in (n for n in procs if n > 1):
            attempt("distill_fsdp", n, lambda n=n: measure_distill(d, args.work / "reference-1", n, args, logs, True))
        if "1" in runs["distill"]:
            runs["distill_fsdp"] = {"1": runs["distill"]["1"], **runs["distill_fsdp"]}
    for stage in runs:
        report[stage] = summarize(runs[stage])
    outputs = {n: r.pop("outputs", None) for n, r in runs["reference"].items()}  # sha256 by file: compared, not kept
    report["reference"]["outputs_identical_to_one_rank"] = {
        n: files == outputs["1"] for n, files in outputs.items() if n != "1" and files and outputs.get("1")
    }
    report["seconds"] = time.time() - start
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    rates = {stage: {n: round(r.get("tokens_per_s", 0)) for n, r in runs[stage].items()} for stage in runs}
    print(
        f"gpu_scaling: tokens/s {json.dumps(rates)}; speed-ups "
        f"{json.dumps({stage: report[stage]['speedup'] for stage in runs})} (goal ≥ {GOAL_SPEEDUP}); "
        f"{report['seconds']:.0f} s; {args.out}"
    )
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
