"""What a training step of `distill` and `distill --qat` costs at the real drafter's shape, each way distill runs it —
right-padded rows grouped by length with every layer recomputed (distill's old form) against packed rows, with and
without recomputed layers, with and without torch.compile — and what `evaluate`'s one-pass τ costs, all through the
stages' own code (distillation.Distillation.train_step, step_memory, tau.model_tau) on a random Qwen3-1.7B-shaped
drafter and made-up chat-like rows: prompts of 64–2,048 tokens, 256-token continuations with a top-20.

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl     # gguf, which QAT imports
    PYTHONPATH=/tmp/site:train python3 train/scripts/gpu/probe_training.py --out RESULTS [--limit-s 540]

Per configuration: tokens/s (prompt + continuation, no padding counted), continuation tokens/s, MFU (6 × parameters ×
tokens/s ÷ 790 TFLOP/s, an H200's dense bf16), peak GPU memory, tokens a step; for the packed form also the memory a
token costs as distill's `activation_checkpointing` "auto" measures it, the peak it predicts for the timed steps, and
the loss of the same rows packed and padded (flash attention over sequence boundaries against SDPA with a padding
mask). For evaluate: conversations/s as trained and at Q4_0 (QAT's fake quantization, all-Q4_0 as qwen3-chat
exports), and the minutes 5,000 held-out conversations take both ways. RESULTS/probe_training.json and
probe_training.md (the table).

Resumable: the drafter, the rows and every finished configuration stay in --work (default /tmp/probe-training); a
configuration starts only when --limit-s leaves it its usual time, else the job stops, saying so: run it again on the
same warm machine to continue. The first compiled configuration of a process pays the compilation (in its warm-up
steps, untimed); the figures are the timed steps after it.

CPU dry run (tests/test_gpu_probes.py runs it): --cpu: a tiny drafter with Qwen3's vocabulary, short rows, two timed
steps a configuration, the compiled ones skipped (tests/test_packing.py traces compiled layers on the CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import shutil
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench" / "models"))  # the random checkpoints' shapes
from make_random_checkpoint import qwen3_config  # noqa: E402

from specdraft_train.formats.artifacts import atomic_write_json, write_manifest  # noqa: E402
from specdraft_train.formats.prompts import Prompt  # noqa: E402
from specdraft_train.modeling.models import autocast_context, load_causal_lm, parameter_count  # noqa: E402
from specdraft_train.modeling.packing import use_packed_attention  # noqa: E402
from specdraft_train.modeling.tau import Conversation, conversation_json, model_tau, read_conversations  # noqa: E402
from specdraft_train.presets import get_preset  # noqa: E402
from specdraft_train.training.distillation import Distillation, DistillJob  # noqa: E402
from specdraft_train.training.examples import Continuation, collate, read_inputs, write_train_shard  # noqa: E402
from specdraft_train.training.loop import DistributedContext, synced_clock  # noqa: E402
from specdraft_train.training.losses import loss_sums  # noqa: E402
from specdraft_train.training.step_memory import GIB, measure_step_memory  # noqa: E402

PEAK_FLOPS = 790e12  # an H200's dense bf16 (SXM), the MFU denominator
HELDOUT_GOAL = 5_000  # conversations evaluate must take in ≤ 10 minutes (the real job's held-out split)
# name: (QAT, DistillConfig settings, usual seconds on the H200 with the model's load), in the order they run: what
# decides the defaults first, and the old form as their peer, so that a cut job has measured those. The padded form is
# distill's old one: rows grouped by length in runs of 64 batches, every layer recomputed.
PADDED = {"packed": False, "group_by_length": 64, "activation_checkpointing": "on", "compile": "off"}
CONFIGS: dict[str, tuple[bool, dict[str, Any], int]] = {
    "distill packed": (False, {"activation_checkpointing": "off", "compile": "off"}, 40),
    "qat packed": (True, {"activation_checkpointing": "off", "compile": "off"}, 40),
    "distill padded+recompute": (False, PADDED, 50),
    "distill packed+compile": (False, {"activation_checkpointing": "off", "compile": "on"}, 150),
    "distill packed+recompute": (False, {"activation_checkpointing": "on", "compile": "off"}, 30),
    "qat packed+compile": (True, {"activation_checkpointing": "off", "compile": "on"}, 180),
    "qat padded+recompute": (True, PADDED, 60),
}
EVAL_USUAL_S = 60
EVALUATE_AFTER = "qat packed"  # evaluate's rate, a goal of its own, runs after this configuration
RATE_KEYS = ("tokens_per_s", "continuation_tokens_per_s", "mfu", "peak_gib")  # train-rate.json's, per stage


# ---------------------------------------------------------------------------------------------------------------------
# The drafter and the rows


def make_drafter(out: Path, shape: str, device: torch.device) -> Path:
    """A random Qwen3 checkpoint of ``shape`` (bench/models/qwen3_shapes.py), bf16, drawn on ``device``; kept."""
    if (out / "config.json").is_file():
        return out
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM._from_config(qwen3_config(shape), dtype=torch.bfloat16)
    partial = out.with_name(out.name + ".partial")
    model.save_pretrained(partial)
    partial.rename(out)
    return out


def chat_rows(n: int, prompt_range: tuple[int, int], continuation: int, vocab: int, seed: int) -> list[tuple]:
    """``n`` made-up rows: (prompt tokens, continuation tokens, top-k ids, top-k log-probs), prompt lengths uniform."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        prompt = rng.integers(0, vocab, size=int(rng.integers(prompt_range[0], prompt_range[1] + 1))).tolist()
        tokens = rng.integers(0, vocab, size=continuation).tolist()
        topk = rng.integers(0, vocab, size=(continuation, 20)).astype(np.int32)
        topk[:, 0] = tokens  # the greedy token leads its top-k, as the target's does
        logprobs = np.sort(np.log(rng.dirichlet(np.ones(20), size=continuation)), axis=1)[:, ::-1]
        rows.append((prompt, tokens, topk, np.ascontiguousarray(logprobs).astype(np.float16)))
    return rows


def make_reference(out: Path, rows: int, heldout: int, prompt_range: tuple[int, int], continuation: int) -> Path:
    """A reference stage's directory of made-up rows (train shard, dev.jsonl, heldout.jsonl, manifest); kept."""
    if (out / "manifest.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    vocab = qwen3_config("qwen3-1.7b").vocab_size
    train = chat_rows(rows, prompt_range, continuation, vocab, seed=1)
    prompts = [Prompt(f"train/{i}", "chat", p) for i, (p, _, _, _) in enumerate(train)]
    write_train_shard(out / "train-00000.safetensors", prompts, [Continuation(t, k, lp) for _, t, k, lp in train])
    for name, count, seed in (("dev.jsonl", 8, 2), ("heldout.jsonl", heldout, 3)):
        lines = [
            conversation_json(Conversation(f"{name}/{i}", "chat", p, t))
            for i, (p, t, _, _) in enumerate(chat_rows(count, prompt_range, continuation, vocab, seed))
        ]
        (out / name).write_text("\n".join(lines) + "\n")
    outputs = ["train-00000.safetensors", "dev.jsonl", "heldout.jsonl"]
    write_manifest(out, "reference", outputs=outputs, params={"made_up": "train/scripts/gpu/probe_training.py"})
    return out


# ---------------------------------------------------------------------------------------------------------------------
# One configuration


def packed_against_padded(run: Distillation, rows: int = 4) -> float:
    """Relative difference of the loss of the first step's first rows, packed against right-padded (no step taken)."""
    examples = [run.inputs.examples[i] for i in run.epoch_plan(0)[0][:rows]]
    values = []
    with torch.no_grad(), autocast_context(run.ctx.device):
        for packed in (True, False):
            run.model.set_attn_implementation("specdraft_packed" if packed else "sdpa")
            batch = collate(examples, run.pad_id, run.ctx.device, packed=packed)
            values.append(float(loss_sums(run.model, batch, run.config).distill))
    use_packed_attention(run.model)
    return abs(values[0] - values[1]) / abs(values[1])


def measure_config(name: str, args: argparse.Namespace, work: Path, ctx: DistributedContext) -> dict[str, Any]:
    qat, settings, _ = CONFIGS[name]
    preset = get_preset("qwen3-chat")
    config = replace(preset.distill, batch_size=args.rows_per_step, epochs=99, qat_epochs=99, **settings)
    out = work / "runs" / name.replace(" ", "_").replace("+", "-")
    shutil.rmtree(out, ignore_errors=True)
    job = DistillJob(
        work / "drafter",
        work / "reference",
        out,
        config,
        qat=qat,
        embedding_type=preset.export.resolved_embedding_type(),
        device=str(ctx.device),
    )
    started = time.time()
    run = Distillation(job, ctx, read_inputs(job.drafter, job.reference, config, ctx))
    entry: dict[str, Any] = {"qat": qat, "settings": settings, "activation_checkpointing": run.recompute_why}
    cuda = ctx.device.type == "cuda"
    if config.packed and config.compile == "off":
        entry["packed_vs_padded_loss"] = packed_against_padded(run)
        if cuda:
            memory = measure_step_memory(run.model, config, ctx.device, replicas=False, step=run.weights_quantized_once)
            entry["memory_per_token_mib"] = memory.per_token_bytes / 2**20
            entry["memory_fixed_gib"] = memory.fixed_bytes / GIB
    if cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    run.segment_start = time.time()
    for _ in range(args.warmup_steps):  # the first steps pay cuBLAS set-up, the moments' allocation, compilation
        run.train_step()
    clock = synced_clock(ctx.device)
    tokens = continuation = 0
    for _ in range(args.steps):
        epoch, within = divmod(run.step, run.steps_per_epoch)
        rows = run.epoch_plan(epoch)[within]
        tokens += int(run.widths[rows].sum())
        continuation += int(run.continuation[rows].sum())
        run.train_step()
    seconds = synced_clock(ctx.device) - clock
    parameters = parameter_count(run.model)
    entry.update(
        steps=args.steps,
        step_tokens=tokens / args.steps,
        seconds_per_step=seconds / args.steps,
        tokens_per_s=tokens / seconds,
        continuation_tokens_per_s=continuation / seconds,
        mfu=6 * parameters * tokens / seconds / PEAK_FLOPS,
        parameters=parameters,
        peak_gib=torch.cuda.max_memory_allocated(ctx.device) / GIB if cuda else None,
    )
    if cuda and "memory_per_token_mib" in entry:  # what "auto" would predict for these steps, and decide for the run
        entry["predicted_peak_gib"] = (memory.need(max_step(run)) - memory.fixed_bytes) / GIB + entry[
            "memory_fixed_gib"
        ]
        entry["auto_would_recompute"] = not memory.fits(run.largest_step_tokens())
    entry["seconds"] = time.time() - started
    run.bar.close()
    run.tb.close()
    del run
    gc.collect()
    torch._dynamo.reset()
    if cuda:
        torch.cuda.empty_cache()
    return entry


def max_step(run: Distillation) -> int:
    return max(run.step_tokens(rows) for rows in run.epoch_plan(0))


def measure_evaluate(args: argparse.Namespace, work: Path, device: torch.device) -> dict[str, Any]:
    """One-pass τ on the held-out conversations, as trained and at Q4_0: conversations/s, 5,000 projected."""
    from specdraft_train.training.quant import prepare_qat

    preset = get_preset("qwen3-chat")
    conversations = read_conversations(work / "reference" / "heldout.jsonl")
    tokens = sum(len(c.prompt_tokens) + len(c.continuation_tokens) - 1 for c in conversations)
    entry: dict[str, Any] = {"conversations": len(conversations), "tokens": tokens}
    model = load_causal_lm(work / "drafter", device)
    qat = None
    for mode in ("as_trained", "q4_0"):
        if mode == "q4_0":
            qat = prepare_qat(model, embedding_type=preset.export.resolved_embedding_type())
        model_tau(model, conversations[:4], 16, device, preset.evaluate.batch_tokens)  # warm-up
        clock = synced_clock(device)
        with qat.held() if qat is not None else contextlib.nullcontext():  # as evaluate --q4 runs it
            model_tau(model, conversations, 16, device, preset.evaluate.batch_tokens)
        seconds = synced_clock(device) - clock
        entry[mode] = {"seconds": seconds, "conversations_per_s": len(conversations) / seconds}
        entry[mode]["tokens_per_s"] = tokens / seconds
    both = sum(HELDOUT_GOAL / entry[m]["conversations_per_s"] for m in ("as_trained", "q4_0"))
    entry["heldout_5000_minutes"] = both / 60  # a drafter as trained and at Q4_0, as evaluate --q4 scores it
    entry["batch_tokens"] = preset.evaluate.batch_tokens
    del model
    gc.collect()
    return entry


# ---------------------------------------------------------------------------------------------------------------------
# The job


def guarded(measure: Any, device: torch.device) -> dict[str, Any]:
    """``measure()``, or the error it raised as the entry (its traceback on stderr): one configuration that fails on
    the GPU — a kernel refusing a shape, memory running out — leaves the others' figures to read."""
    try:
        return measure()
    except Exception as error:  # anything a configuration raises is its result
        traceback.print_exc()
        gc.collect()
        torch._dynamo.reset()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return {"error": f"{type(error).__name__}: {error}"[:1000]}


def stage_rates(report: dict[str, Any]) -> dict[str, Any]:
    """What the stages run at with distill's defaults on a GPU (packed, compiled layers), in the form
    real_rehearsal_report.py reads as ``train-rate.json``; evaluate's rate is one drafter in one mode, the harmonic
    mean of as trained and Q4_0 (the job walks each drafter both ways). On the CPU, where compiling is off, the packed
    form. (The probe has no compiled form with recomputed layers: the compiled steps fit without, at less memory.)"""
    rates: dict[str, Any] = {}
    compiled = report.get("device") != "CPU dry run"
    for stage in ("distill", "qat"):
        name = f"{stage} packed+compile" if compiled else f"{stage} packed"
        entry = report["configs"].get(name) or {}
        if "tokens_per_s" in entry:
            rates[stage] = {key: entry.get(key) for key in RATE_KEYS} | {"configuration": name}
    evaluation = report.get("evaluate") or {}
    if "as_trained" in evaluation:
        seconds = sum(1 / evaluation[mode]["conversations_per_s"] for mode in ("as_trained", "q4_0")) / 2
        rates["evaluate"] = {"conversations_per_s": 1 / seconds, "peak_gib": evaluation.get("peak_gib")}
    return rates


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Training and evaluation probe ({report['device']}, {report['shape']})",
        "",
        f"{report['rows']} made-up rows (prompts {report['prompt_range'][0]}–{report['prompt_range'][1]} tokens, "
        f"{report['continuation']}-token continuations, top-20), {report['rows_per_step']} rows' tokens a step; "
        "tokens/s count no padding; MFU = 6 × parameters × tokens/s ÷ 790 TFLOP/s.",
        "",
        "| configuration | tokens/s | continuation tok/s | MFU | peak GiB | tokens a step | recompute |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in report["configs"].items():
        if "skipped" in e or "error" in e:
            lines.append(f"| {name} | {e.get('skipped') or e['error'].splitlines()[0][:120]} | | | | | |")
            continue
        peak = f"{e['peak_gib']:.1f}" if e.get("peak_gib") is not None else "–"
        lines.append(
            f"| {name} | {e['tokens_per_s']:,.0f} | {e['continuation_tokens_per_s']:,.0f} | {e['mfu']:.1%} | {peak} | "
            f"{e['step_tokens']:,.0f} | {e['activation_checkpointing']} |"
        )
    evaluation = report.get("evaluate")
    if evaluation and "error" in evaluation:
        lines += ["", f"evaluate: {evaluation['error'].splitlines()[0][:200]}"]
    elif evaluation:
        lines += [
            "",
            f"evaluate, {evaluation['conversations']} held-out conversations ({evaluation['tokens']:,} tokens):",
        ]
        for mode in ("as_trained", "q4_0"):
            m = evaluation[mode]
            lines.append(f"- {mode}: {m['conversations_per_s']:.1f} conversations/s, {m['tokens_per_s']:,.0f} tokens/s")
        lines.append(f"- 5,000 conversations, both: {evaluation['heldout_5000_minutes']:.1f} minutes")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="results folder: probe_training.json and .md")
    ap.add_argument("--work", type=Path, default=Path("/tmp/probe-training"), help="scratch folder, kept for reruns")
    ap.add_argument("--limit-s", type=float, default=540, help="stop before a configuration would pass this (s)")
    ap.add_argument(
        "--only", action="append", default=[], help="configurations to run, or evaluate (repeatable; default: all)"
    )
    ap.add_argument("--cpu", action="store_true", help="the CPU dry run: tiny shapes, compiled configurations skipped")
    args = ap.parse_args()
    started = time.time()
    device = torch.device("cpu" if args.cpu else "cuda")
    if args.cpu:
        args.shape, rows, heldout, prompt_range, continuation = "tiny-drafter", 24, 6, (8, 40), 16
        args.rows_per_step, args.warmup_steps, args.steps = 4, 1, 2
    else:
        args.shape, rows, heldout, prompt_range, continuation = "qwen3-1.7b", 192, 256, (64, 2048), 256
        args.rows_per_step, args.warmup_steps, args.steps = 16, 3, 6
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # as init_distributed sets for training
    ctx = DistributedContext(rank=0, world_size=1, device=device)
    make_drafter(args.work / "drafter", args.shape, device)
    make_reference(args.work / "reference", rows, heldout, prompt_range, continuation)
    state_path = args.work / "probe_training.json"
    report = json.loads(state_path.read_text()) if state_path.is_file() else {"configs": {}}
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU dry run"
    report.update(device=device_name, shape=args.shape, rows=rows, prompt_range=prompt_range)
    report.update(continuation=continuation, rows_per_step=args.rows_per_step)
    report.update(torch=torch.__version__, transformers=transformers.__version__)
    stopped = None
    for name in [n for c in CONFIGS for n in ((c, "evaluate") if c == EVALUATE_AFTER else (c,))]:
        if name == "evaluate":
            if "evaluate" in report or (args.only and name not in args.only):
                continue
            if not args.cpu and time.time() - started + EVAL_USUAL_S > args.limit_s:
                stopped = name
                break
            report["evaluate"] = guarded(lambda: measure_evaluate(args, args.work, device), device)
            atomic_write_json(state_path, report)
            continue
        _, settings, usual = CONFIGS[name]
        if name in report["configs"] or (args.only and name not in args.only):
            continue
        if args.cpu and settings.get("compile") == "on":
            report["configs"][name] = {"skipped": "CPU dry run"}
            continue
        if not args.cpu and time.time() - started + usual > args.limit_s:
            stopped = name
            break
        print(f"probe_training: {name} …", file=sys.stderr, flush=True)
        report["configs"][name] = guarded(lambda name=name: measure_config(name, args, args.work, ctx), device)
        print(f"probe_training: {name}: {json.dumps(report['configs'][name])}", file=sys.stderr, flush=True)
        atomic_write_json(state_path, report)
    atomic_write_json(args.out / "probe_training.json", report)
    atomic_write_json(args.out / "train-rate.json", stage_rates(report))
    (args.out / "probe_training.md").write_text(markdown(report))
    if stopped is not None:
        print(f"probe_training: stopped before {stopped} (--limit-s {args.limit_s:g}): run again to continue")
        return 3
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
