"""Reference-generation throughput: the static engine in several configurations (and optionally HF ``generate``) on
the same model and prompts in one run, with the agreement of their outputs.

The model: a random-weight Qwen3 of a real shape drawn on the device (``--shape qwen3-8b``: the shapes of
bench/models/qwen3_shapes.py, bf16, as make_random_checkpoint.py makes them), a random-init Qwen3 of the given sizes
(default: the lab target's), or ``--checkpoint``. The prompts: ``--chat-prompts N`` chat prompts from
train/scripts/data/make_chat_prompts.py rendered with ``--tokenizer``'s chat template (the real job's kind: ~30 to
~3,000 tokens), else ``--prompts`` random prompts whose lengths cycle through ``--lengths``. Each is continued
greedily for ``--new-tokens`` with the top-20 log-probs, under the reference stage's setup
(``models.autocast_context``). Random models never stop, so every row decodes to the cap, as a real batch does to its
longest row.

``--engines`` lists the configurations, the first being the one reported (``PREFILL+DECODE[@KV_FRACTION][/ROWS]``,
each optionally marked ``+compiled`` or ``+eager`` (the norms and MLPs compiled or not: StaticEngineConfig.compile;
unmarked, the engine's default: eager), or ``auto`` = the engine's defaults with ``--batch-size`` rows at
most, ``today`` = ``masked+matmul+eager@0.5/512``, the
engine and batch cap of the 2026-12-01 rehearsal). Per configuration: continuation tokens/s, prompt tokens, prefill
and decode seconds, ms per decode step of each batch (rows × width: graph capture excluded), graph captures, peak
GPU memory (allocated and reserved); then each configuration's speed-up over the second one (its peer in the same
run), and the agreement of every configuration's outputs with the first's (share of identical continuations, mean
first divergence, the log-prob gap between the two chosen tokens at each first divergence under the first's
distribution: ~0 is a bf16 near-tie of a random model, large a bug; the largest top-k log-prob difference where both
saw the same context). On CUDA the varlen kernel's check (static_cache.flash_varlen_problem) is printed first.

    # the real job's target on one H200 (~2.5 minutes; carry .gpu-real/qwen3-tokenizer.tar.xz, bench/gpu/stage.sh)
    mkdir -p /tmp/qwen3-tok && tar -C /tmp/qwen3-tok -xJf .gpu-real/qwen3-tokenizer.tar.xz
    python3 train/scripts/gpu/bench_reference.py --shape qwen3-8b --tokenizer /tmp/qwen3-tok --chat-prompts 1536 \\
        --new-tokens 256 --engines auto,packed+flash --out /tmp/bench-reference-8b.json
    python3 train/scripts/gpu/bench_reference.py --out /tmp/bench-reference.json --hf-prompts 768   # lab target, + HF
    cd train && .venv/bin/python scripts/gpu/bench_reference.py --device cpu --threads 1 --hidden 128 --layers 4 \\
        --heads 4 --kv-heads 2 --head-dim 32 --ffn 384 --vocab 1024 --context 512 --prompts 48 --lengths 32,48,64 \\
        --new-tokens 32 --engines packed+flash,today --out /tmp/bench-micro.json   # the micro target, on CPU
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "train"))  # runs without PYTHONPATH too
sys.path.insert(0, str(REPO / "bench" / "models"))  # make_random_checkpoint's Qwen3 shapes
sys.path.insert(0, str(REPO / "train" / "scripts" / "data"))  # make_chat_prompts

from specdraft_train.config import ModelConfig  # noqa: E402
from specdraft_train.engine.generation import generate_greedy_hf  # noqa: E402
from specdraft_train.engine.static_cache import flash_varlen_problem, kv_cache_dtype, kv_shape  # noqa: E402
from specdraft_train.engine.static_engine import (  # noqa: E402
    EngineStats,
    GreedyOutput,
    StaticEngineConfig,
    StaticGreedyEngine,
)
from specdraft_train.formats.prompts import render_chat  # noqa: E402
from specdraft_train.modeling.models import (  # noqa: E402
    autocast_context,
    load_causal_lm,
    load_tokenizer,
    new_model,
    parameter_count,
    qwen3_config,
    resolve_device,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TOP_K = 20  # the reference stage's
WARMUP_PROMPTS = 6
WARMUP_NEW_TOKENS = 4
ALIASES = {"today": "masked+matmul+eager@0.5/512"}  # the 2026-12-01 rehearsal's engine and its preset's batch cap
COMPILE_MARKS = {"+compiled": "on", "+eager": "off"}  # an engine spec's marks for StaticEngineConfig.compile


def parse_engine(spec: str, batch_size: int) -> tuple[StaticEngineConfig, int]:
    """``auto``, ``today`` or ``PREFILL+DECODE[@KV_FRACTION][/ROWS]``, each optionally with ``+compiled`` or
    ``+eager`` (the norms and MLPs compiled or not: StaticEngineConfig.compile) → (engine config, rows cap)."""
    text, compiled = ALIASES.get(spec, spec), "auto"
    for mark, value in COMPILE_MARKS.items():
        if mark in text:
            compiled, text = value, text.replace(mark, "")
    if text == "auto":
        return StaticEngineConfig(compile=compiled), batch_size
    text, _, rows = text.partition("/")
    text, _, fraction = text.partition("@")
    prefill, _, decode = text.partition("+")
    if not decode:
        raise SystemExit(
            f"bench_reference: engine {spec!r}: expected auto, today or "
            "PREFILL+DECODE[+compiled|+eager][@FRACTION][/ROWS]"
        )
    config = StaticEngineConfig(prefill=prefill, decode_attention=decode, compile=compiled)
    if fraction:
        config = dataclasses.replace(config, kv_cache_fraction=float(fraction))
    return config, int(rows) if rows else batch_size


def build_model(args: argparse.Namespace, device: torch.device) -> tuple[torch.nn.Module, dict[str, Any]]:
    if args.checkpoint:
        model = load_causal_lm(args.checkpoint, device, DTYPES[args.dtype])
        source: dict[str, Any] = {"checkpoint": args.checkpoint}
    elif args.shape:
        from make_random_checkpoint import QWEN3_GENERATION_CONFIG
        from make_random_checkpoint import qwen3_config as real_shape  # bench/models/: torch and transformers only

        torch.manual_seed(args.seed)
        with torch.device(device):  # HF's init drawn where the weights live (an 8B on an H200 in seconds)
            model = transformers.Qwen3ForCausalLM._from_config(real_shape(args.shape), dtype=DTYPES[args.dtype])
        model.generation_config = transformers.GenerationConfig(**QWEN3_GENERATION_CONFIG)  # its two stop tokens
        source = {"shape": args.shape}
    else:
        shape = ModelConfig(
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            num_key_value_heads=args.kv_heads,
            head_dim=args.head_dim,
            intermediate_size=args.ffn,
            max_position_embeddings=args.context,
        )
        config = qwen3_config(shape, args.vocab, eos_token_id=0, pad_token_id=0)
        config.initializer_range = args.init_std
        model = new_model(config, seed=args.seed).to(device=device, dtype=DTYPES[args.dtype])
        source = {"random_init": dataclasses.asdict(shape), "vocab_size": args.vocab, "init_std": args.init_std}
    return model.eval(), {**source, "parameters": parameter_count(model), "dtype": args.dtype}


def stop_ids(model: torch.nn.Module) -> list[int]:
    eos = model.generation_config.eos_token_id
    return [int(t) for t in (eos if isinstance(eos, list) else [eos])]


def make_prompts(args: argparse.Namespace, vocab: int, stop: Sequence[int]) -> list[list[int]]:
    """Chat prompts rendered with the tokenizer's template, or random tokens (no stop tokens) of cycling lengths."""
    if args.chat_prompts:
        from make_chat_prompts import chat_prompts, read_texts, text_files

        tokenizer = load_tokenizer(args.tokenizer)
        roots = [REPO / "docs", REPO / "README.md", Path(os.__file__).parent]  # as make_chat_prompts.py's default
        lines = chat_prompts(read_texts(text_files(roots)), args.chat_prompts, args.seed)
        return [render_chat(tokenizer, line["messages"]) for line in lines]
    rng = np.random.default_rng(args.seed)
    allowed = np.setdiff1d(np.arange(vocab), np.asarray(stop))
    lengths = [int(n) for n in args.lengths.split(",")]
    return [rng.choice(allowed, size=lengths[i % len(lengths)]).tolist() for i in range(args.prompts)]


def agreement(ours: Sequence[GreedyOutput], peer: Sequence[GreedyOutput]) -> dict[str, Any]:
    identical, divergences, gaps = 0, [], []
    max_logprob_diff, same_topk, positions = 0.0, 0, 0
    for s, h in zip(ours, peer):
        common = min(len(s.tokens), len(h.tokens))
        first = next((j for j in range(common) if s.tokens[j] != h.tokens[j]), common)
        if first == common and len(s.tokens) == len(h.tokens):
            identical += 1
        else:
            divergences.append(first)
        if first < common:
            # Both engines saw the same context here; how far apart were the two chosen tokens for `ours`?
            ids, values = s.topk_ids[first], s.topk_logprobs[first]
            hit = np.flatnonzero(ids == h.tokens[first])
            gaps.append(float(values[0] - (values[hit[0]] if hit.size else values[-1])))
        seen = min(first + 1, common)  # positions with the same context, the divergence included
        if seen:
            diff = np.abs(s.topk_logprobs[:seen] - h.topk_logprobs[:seen]).max()  # sorted values: comparable at ties
            max_logprob_diff = max(max_logprob_diff, float(diff))
            same_topk += int((s.topk_ids[:seen] == h.topk_ids[:seen]).all(axis=1).sum())
            positions += seen
    return {
        "rows": len(peer),
        "identical_share": identical / max(1, len(peer)),
        "divergent_rows": len(divergences),
        "mean_first_divergence": float(np.mean(divergences)) if divergences else None,
        "divergence_gap_median": float(np.median(gaps)) if gaps else None,
        "divergence_gap_max": float(np.max(gaps)) if gaps else None,
        "max_abs_topk_logprob_diff": max_logprob_diff,
        "topk_ids_identical_share": same_topk / max(1, positions),
    }


def measure(function: Any, *args: Any, device: torch.device, **kwargs: Any) -> tuple[list[GreedyOutput], dict]:
    """``function``'s outputs, wall seconds (device synchronized), continuation tokens/s and peak GPU memory."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    outputs = function(*args, **kwargs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    tokens = sum(len(o.tokens) for o in outputs)
    result = {"prompts": len(outputs), "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
    if device.type == "cuda":
        result["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        result["peak_reserved_gib"] = torch.cuda.max_memory_reserved(device) / 2**30
    return outputs, result


def capture_outcome(stats: EngineStats) -> dict[str, Any]:
    """How an engine's CUDA-graph captures went: the failure that made it decode eagerly, the retried attempts."""
    return {"cuda_graph_failure": stats.cuda_graph_failure, "capture_retries": stats.capture_retries}


def run_engine(
    model: torch.nn.Module, prompts: list[list[int]], spec: str, args: argparse.Namespace, stop: list[int], device: Any
) -> tuple[list[GreedyOutput], dict[str, Any]]:
    config, rows = parse_engine(spec, args.batch_size)
    engine = StaticGreedyEngine(model, device, config)
    # Compiled modules and kernels (torch.compile, split-kv's Triton kernel) warm up outside the timed run, as a long
    # reference stage pays them once; each prompt twice: batches of two rows or more, the shapes a run has.
    start = time.perf_counter()
    engine.generate(prompts[:WARMUP_PROMPTS] * 2, WARMUP_NEW_TOKENS, stop, TOP_K)
    compile_seconds = time.perf_counter() - start
    warmup = capture_outcome(engine.stats)
    engine.stats = EngineStats()  # the run's own figures (the engine resolves its modes again)
    outputs, run = measure(engine.generate, prompts, args.new_tokens, stop, TOP_K, max_batch_size=rows, device=device)
    run["compiled"], run["compile_warmup_seconds"], run["warmup_capture"] = engine.compiled, compile_seconds, warmup
    stats = engine.stats
    engine.close()  # the next configuration gets the model uncompiled
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the next configuration's budget sees what this one held
    batches = [
        {
            **entry,
            "ms_per_step": 1000 * (entry["decode_s"] - entry["capture_s"]) / max(1, entry["steps"] - 1),
            "prompt_tokens_per_s": entry["prompt_tokens"] / max(entry["prefill_s"], 1e-9),
        }
        for entry in stats.batch_log
    ]
    run.update(
        prefill=stats.prefill,
        decode_attention=stats.decode_attention,
        kv_cache_fraction=config.kv_cache_fraction,
        max_rows=rows,
        flash_problem=stats.flash_problem,
        split_kv_problem=stats.split_kv_problem,
        cuda_graph=stats.used_cuda_graph,
        cuda_graph_failure=stats.cuda_graph_failure,
        capture_retries=stats.capture_retries,
        graph_captures=stats.graph_captures,
        graph_capture_seconds=stats.graph_capture_seconds,
        prompt_tokens=stats.prompt_tokens,
        prefill_seconds=stats.prefill_seconds,
        decode_seconds=stats.decode_seconds,
        prompt_tokens_per_s=stats.prompt_tokens / max(stats.prefill_seconds, 1e-9),
        decode_steps=stats.decode_steps,
        batches=batches,
    )
    return outputs, run


def print_engine(spec: str, run: dict[str, Any]) -> None:
    peak = f", peak {run['peak_gib']:.1f} GiB (reserved {run['peak_reserved_gib']:.1f})" if "peak_gib" in run else ""
    print(
        f"{spec} [{run['prefill']} prefill, {run['decode_attention']} decode, ≤ {run['max_rows']} rows, KV "
        f"{run['kv_cache_fraction']:.2f}]: {run['tokens_per_s']:,.0f} continuation tok/s ({run['tokens']:,} in "
        f"{run['seconds']:.1f} s); prefill {run['prefill_seconds']:.1f} s ({run['prompt_tokens_per_s']:,.0f} prompt "
        f"tok/s), decode {run['decode_seconds']:.1f} s; {run['graph_captures']} graph captures "
        f"({run['graph_capture_seconds']:.1f} s){peak}"
    )
    for b in run["batches"]:
        print(
            f"    {b['rows']:5d} rows × width {b['width']:5d}: prefill {b['prefill_s']:6.2f} s "
            f"({b['prompt_tokens_per_s']:,.0f} tok/s), {b['steps']} steps at {b['ms_per_step']:.2f} ms"
        )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="JSON report path")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument(
        "--dtype",
        default=None,
        choices=sorted(DTYPES),
        help="weights (default: bfloat16 with --shape, else float32, as the lab)",
    )
    p.add_argument("--checkpoint", default=None, help="HF model dir or id instead of a random-weight model")
    p.add_argument("--shape", default=None, help="a real model's shape, random weights (bench/models/qwen3_shapes.py)")
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=16_384)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--init-std", type=float, default=0.02, help="random init's std (default: 0.02, HF's)")
    p.add_argument("--chat-prompts", type=int, default=0, help="chat prompts rendered with --tokenizer (default: 0)")
    p.add_argument("--tokenizer", default=None, help="folder with the target's tokenizer.json and tokenizer_config")
    p.add_argument("--prompts", type=int, default=4096, help="random prompts without --chat-prompts (default: 4096)")
    p.add_argument("--lengths", default="64,192,512", help="random prompts' lengths, cycled (default: 64,192,512)")
    p.add_argument("--new-tokens", type=int, default=128, help="continuation cap (default: 128)")
    p.add_argument("--batch-size", type=int, default=1024, help="rows cap of specs without /ROWS (default: 1024)")
    p.add_argument("--engines", default="auto,today", help="configurations, the first reported (default: auto,today)")
    p.add_argument("--hf-prompts", type=int, default=0, help="HF generate on the first N prompts (default: 0, none)")
    p.add_argument("--hf-batch-size", type=int, default=256, help="HF generate's batch (default: 256)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = p.parse_args()
    args.dtype = args.dtype or ("bfloat16" if args.shape else "float32")
    if args.chat_prompts and not args.tokenizer:
        p.error("--chat-prompts needs --tokenizer (a folder with tokenizer.json and tokenizer_config.json)")
    return args


def main() -> int:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    started = time.perf_counter()
    model, model_info = build_model(args, device)
    stop = stop_ids(model)
    prompts = make_prompts(args, model.config.vocab_size, stop)
    lengths = [len(p) for p in prompts]
    _, kv_heads, head_dim = kv_shape(model)
    with autocast_context(device):
        dtype = kv_cache_dtype(model, device)
    flash = flash_varlen_problem(device, dtype, model.config.num_attention_heads, kv_heads, head_dim) or "ok"
    print(
        f"model {model_info} ready in {time.perf_counter() - started:.0f} s; {len(prompts)} prompts of "
        f"{np.mean(lengths):.0f} tokens on average (max {max(lengths)}); varlen kernel: {flash}"
    )

    warm = StaticGreedyEngine(model, device)  # cuBLAS, the allocator; closed, as every engine is after its run
    warm.generate(prompts[:WARMUP_PROMPTS], WARMUP_NEW_TOKENS, stop, TOP_K)
    warm.close()
    # a fresh process's first engine: its first capture is the one a reference stage's first batch makes
    first_capture = capture_outcome(warm.stats)
    specs = args.engines.split(",")
    runs = {spec: run_engine(model, prompts, spec, args, stop, device) for spec in specs}
    first_outputs = runs[specs[0]][0]
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model": model_info,
        "varlen_kernel": flash,
        "first_capture": first_capture,
        "workload": {
            "prompts": len(prompts),
            "chat": bool(args.chat_prompts),
            "prompt_tokens_mean": float(np.mean(lengths)),
            "prompt_tokens_max": max(lengths),
            "new_tokens": args.new_tokens,
            "top_k": TOP_K,
            "stop_ids": stop,
        },
        "engines": {spec: run for spec, (_, run) in runs.items()},
        "speedup_over_second": {
            spec: run["tokens_per_s"] / runs[specs[1]][1]["tokens_per_s"] for spec, (_, run) in runs.items()
        }
        if len(specs) > 1
        else {},
        "agreement_with_first": {spec: agreement(out, first_outputs) for spec, (out, _) in list(runs.items())[1:]},
    }
    for spec, (_, run) in runs.items():
        print_engine(spec, run)
    if args.hf_prompts:
        warmup = prompts[:WARMUP_PROMPTS]
        generate_greedy_hf(model, warmup, WARMUP_NEW_TOKENS, stop, stop[0], TOP_K, args.hf_batch_size, device)
        hf_prompts = prompts[: args.hf_prompts]
        hf_args = (model, hf_prompts, args.new_tokens, stop, stop[0], TOP_K, args.hf_batch_size, device)
        hf_outputs, report["hf"] = measure(generate_greedy_hf, *hf_args, device=device)
        report["agreement_with_hf"] = agreement(first_outputs[: args.hf_prompts], hf_outputs)
        print(f"hf generate: {report['hf']['tokens_per_s']:,.0f} tok/s on {args.hf_prompts} prompts")
    for spec, ratio in report["speedup_over_second"].items():
        print(f"{spec}: {ratio:.2f}× {specs[1]}")
    for spec, agreed in report["agreement_with_first"].items():
        print(
            f"{spec} vs {specs[0]}: identical {agreed['identical_share']:.1%}, top-k log-prob diff ≤ "
            f"{agreed['max_abs_topk_logprob_diff']:.2g} up to the first divergence, gap there "
            f"≤ {agreed['divergence_gap_max'] or 0:.3f} nats"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {args.out} ({time.perf_counter() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
