"""Reference-generation throughput: HF ``generate`` vs the static engine, same model, same prompts, one run.

Builds a random-init Qwen3 of the given shape (default: the lab target — hidden 768, 12 layers, 12 q / 4 kv heads of
64, FFN 2048, vocabulary 16,384, tied embeddings, context 1024) or loads ``--checkpoint``; makes ``--prompts`` random
prompts whose lengths cycle through ``--lengths``; continues them greedily for ``--new-tokens`` with the top-k (k = 20)
log-probs, under the reference stage's setup (``models.autocast_context``: bf16 autocast on CUDA; fp32 weights unless
``--dtype bfloat16``). HF generate, the slow peer, runs on the first ``--hf-prompts`` (every length equally; its rate is
per continuation token), the static engine on all of them. Both engines are warmed up on a few prompts first, so CUDA
initialization is not charged to either; graph capture is charged to the static engine.

Writes JSON (``--out``): tokens/s of each and the speed-up, peak GPU memory of each, whether the CUDA graph path was
taken (and why not), and the agreement on the HF subset: the share of identical continuations, the mean first-divergence
position, the log-prob gap between the two engines' tokens at each first divergence under the static engine's
distribution (near zero: a near-tie that bf16 rounding flips; large: a bug), and the largest top-k log-prob difference
on the positions both engines saw the same context.

    python3 train/scripts/gpu/bench_reference.py --out /tmp/bench-reference.json             # H200: under a minute
    python3 train/scripts/gpu/bench_reference.py --checkpoint runs/lab/target --out bench.json  # a trained target
    python3 train/scripts/gpu/bench_reference.py --prompts 16384 --batch-size 4096 --out b.json # larger batches
    cd train && .venv/bin/python scripts/gpu/bench_reference.py --device cpu --threads 1 --hidden 128 --layers 4 \\
        --heads 4 --kv-heads 2 --head-dim 32 --ffn 384 --vocab 1024 --context 512 --prompts 48 --lengths 32,48,64 \\
        --new-tokens 32 --hf-prompts 48 --hf-batch-size 16 --out /tmp/bench-micro.json      # the micro target, on CPU
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # train/: runs without PYTHONPATH too

from specdraft_train.config import ModelConfig  # noqa: E402
from specdraft_train.generation import (  # noqa: E402
    GreedyOutput,
    StaticEngineConfig,
    StaticGreedyEngine,
    generate_greedy_hf,
)
from specdraft_train.models import (  # noqa: E402
    load_causal_lm,
    new_model,
    parameter_count,
    qwen3_config,
    resolve_device,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TOP_K = 20  # the reference stage's
WARMUP_PROMPTS_PER_LENGTH = 2
WARMUP_NEW_TOKENS = 4


def timed(function: Any, *args: Any, device: torch.device, **kwargs: Any) -> tuple[Any, float]:
    """``function(*args, **kwargs)`` and its wall seconds, the device synchronized on both sides."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = function(*args, **kwargs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return result, time.perf_counter() - start


def build_model(args: argparse.Namespace, device: torch.device) -> tuple[torch.nn.Module, dict[str, Any]]:
    if args.checkpoint:
        model = load_causal_lm(args.checkpoint, device, DTYPES[args.dtype])
        source = {"checkpoint": args.checkpoint}
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
        model = new_model(config, seed=args.seed).to(device=device, dtype=DTYPES[args.dtype]).eval()
        source = {"random_init": dataclasses.asdict(shape), "vocab_size": args.vocab, "init_std": args.init_std}
    return model, {**source, "parameters": parameter_count(model), "dtype": args.dtype}


def stop_ids(model: torch.nn.Module) -> list[int]:
    eos = model.generation_config.eos_token_id
    return [int(t) for t in (eos if isinstance(eos, list) else [eos])]


def make_prompts(count: int, lengths: Sequence[int], vocab: int, stop: Sequence[int], seed: int) -> list[list[int]]:
    """Random tokens (no stop tokens), lengths cycling through ``lengths`` so every prefix is balanced."""
    rng = np.random.default_rng(seed)
    allowed = np.setdiff1d(np.arange(vocab), np.asarray(stop))
    return [rng.choice(allowed, size=lengths[i % len(lengths)]).tolist() for i in range(count)]


def agreement(static: Sequence[GreedyOutput], hf: Sequence[GreedyOutput]) -> dict[str, Any]:
    identical, divergences, gaps = 0, [], []
    max_logprob_diff, same_topk, positions = 0.0, 0, 0
    for s, h in zip(static, hf):
        common = min(len(s.tokens), len(h.tokens))
        first = next((j for j in range(common) if s.tokens[j] != h.tokens[j]), common)
        if first == common and len(s.tokens) == len(h.tokens):
            identical += 1
        else:
            divergences.append(first)
        if first < common:
            # Both engines saw the same context here; how far apart were the two chosen tokens for the static engine?
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
        "rows": len(hf),
        "identical_share": identical / max(1, len(hf)),
        "divergent_rows": len(divergences),
        "mean_first_divergence": float(np.mean(divergences)) if divergences else None,
        "divergence_gap_median": float(np.median(gaps)) if gaps else None,
        "divergence_gap_max": float(np.max(gaps)) if gaps else None,
        "max_abs_topk_logprob_diff": max_logprob_diff,
        "topk_ids_identical_share": same_topk / max(1, positions),
    }


def measure(
    function: Any, *args: Any, device: torch.device, **kwargs: Any
) -> tuple[list[GreedyOutput], dict[str, Any]]:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    outputs, seconds = timed(function, *args, device=device, **kwargs)
    tokens = sum(len(o.tokens) for o in outputs)
    result = {"prompts": len(outputs), "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
    if device.type == "cuda":
        result["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return outputs, result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="JSON report path")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="weights (default: float32, as the lab)")
    p.add_argument("--checkpoint", default=None, help="HF model dir or id instead of a random-init model")
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=16_384)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--init-std", type=float, default=0.02, help="random init's std (default: 0.02, HF's)")
    p.add_argument("--prompts", type=int, default=4096, help="prompts for the static engine (default: 4096)")
    p.add_argument("--lengths", default="64,192,512", help="prompt lengths, cycled (default: 64,192,512)")
    p.add_argument("--new-tokens", type=int, default=128, help="continuation cap (default: 128)")
    p.add_argument("--batch-size", type=int, default=1024, help="static engine's rows cap (default: 1024)")
    p.add_argument(
        "--hf-prompts",
        type=int,
        default=768,
        help="the HF peer's prompts, the first of the static engine's (default: 768)",
    )
    p.add_argument("--hf-batch-size", type=int, default=256, help="HF generate's batch (default: 256)")
    p.add_argument(
        "--decode-attention",
        default="matmul,sdpa",
        help="the static engine's decode attention; the "
        "first is the one reported and compared, the others are timed too (default: matmul,sdpa)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    model, model_info = build_model(args, device)
    stop = stop_ids(model)
    lengths = [int(n) for n in args.lengths.split(",")]
    prompts = make_prompts(args.prompts, lengths, model.config.vocab_size, stop, args.seed)
    hf_prompts = prompts[: args.hf_prompts]

    warmup = prompts[: WARMUP_PROMPTS_PER_LENGTH * len(lengths)]
    generate_greedy_hf(model, warmup, WARMUP_NEW_TOKENS, stop, stop[0], TOP_K, args.hf_batch_size, device)
    StaticGreedyEngine(model, device).generate(warmup, WARMUP_NEW_TOKENS, stop, TOP_K)

    hf_outputs, hf = measure(
        generate_greedy_hf,
        model,
        hf_prompts,
        args.new_tokens,
        stop,
        stop[0],
        TOP_K,
        args.hf_batch_size,
        device,
        device=device,
    )
    runs = {}
    for kernel in args.decode_attention.split(","):
        engine = StaticGreedyEngine(model, device, StaticEngineConfig(decode_attention=kernel))
        outputs, run = measure(
            engine.generate, prompts, args.new_tokens, stop, TOP_K, max_batch_size=args.batch_size, device=device
        )
        stats = engine.stats
        run.update(
            decode_attention=kernel,
            cuda_graph=stats.used_cuda_graph,
            cuda_graph_failure=stats.cuda_graph_failure,
            batches=stats.batches,
            padded_batches=stats.padded_batches,
            graph_captures=stats.graph_captures,
            graph_capture_seconds=stats.graph_capture_seconds,
            decode_steps=stats.decode_steps,
            batch_shapes=sorted(set(stats.batch_shapes)),
        )
        runs[kernel] = (outputs, run)
    static_outputs, static = runs[args.decode_attention.split(",")[0]]
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model": model_info,
        "workload": {
            "prompts": len(prompts),
            "lengths": lengths,
            "new_tokens": args.new_tokens,
            "top_k": TOP_K,
            "static_batch_size": args.batch_size,
            "hf_prompts": len(hf_prompts),
            "hf_batch_size": args.hf_batch_size,
            "stop_ids": stop,
        },
        "hf": hf,
        "static": static,
        "static_decode_attention_tokens_per_s": {k: r["tokens_per_s"] for k, (_, r) in runs.items()},
        "speedup": static["tokens_per_s"] / hf["tokens_per_s"],
        "agreement": agreement(static_outputs[: len(hf_prompts)], hf_outputs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"hf {hf['tokens_per_s']:,.0f} tok/s ({hf['tokens']} tokens) | static {static['tokens_per_s']:,.0f} tok/s "
        f"({static['tokens']} tokens, CUDA graph: {static['cuda_graph']}) | speed-up {report['speedup']:.1f}x | "
        f"identical {report['agreement']['identical_share']:.1%}"
    )
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
