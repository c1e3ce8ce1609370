"""The largest distillation batch that fits the device: training steps of `distill` (its collate, loss and AdamW, bf16
autocast on CUDA) at growing batch sizes until one runs out of memory, then the same under QAT (the preset's Q4_0
embedding). Prints and writes JSON: per batch size the step's seconds, continuation tokens/s and peak memory.

    python train/scripts/gpu/probe_distill_batch.py --drafter DRAFTER --reference REFERENCE --out probe.json \\
        [--batches 16,32,64,128] [--preset qwen3-chat]

Rows are the reference's training examples in the order epoch 0 of `distill` takes them, so a batch has the job's
lengths; each size runs two steps and reports the second (the first allocates the AdamW moments and warms cuBLAS).
A quick probe for the dress rehearsal (real_rehearsal.sh), not a stage: nothing is saved.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from specdraft_train.config import get_preset
from specdraft_train.examples import collate, read_train_examples
from specdraft_train.losses import loss_sums
from specdraft_train.models import autocast_context, enable_activation_checkpointing, load_causal_lm, resolve_device
from specdraft_train.training import make_optimizer

STEPS_PER_SIZE = 2  # the first allocates AdamW's moments and warms cuBLAS: the second is timed


def probe(model: nn.Module, examples: list, batches: list[int], device: torch.device, config: Any) -> list[dict]:
    """One entry per batch size, stopping at the first that runs out of memory."""
    optimizer = make_optimizer(model, 1e-9, 0.0, device)  # a tiny rate: the probe should not move the weights much
    order = np.random.default_rng([config.seed, 0]).permutation(len(examples))
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    results = []
    for size in batches:
        if size > len(examples):
            break
        rows = [examples[i] for i in order[:size]]
        tokens = sum(len(e.continuation_tokens) for e in rows)
        entry: dict[str, Any] = {"batch": size, "continuation_tokens": tokens}
        batch = None
        try:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            for _ in range(STEPS_PER_SIZE):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                started = time.time()
                batch = collate(rows, pad_id, device)
                with autocast_context(device):
                    loss = loss_sums(model, batch, config).distill / tokens
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                seconds = time.time() - started
            entry.update(ok=True, step_seconds=seconds, tokens_per_s=tokens / seconds)
            if device.type == "cuda":
                entry["peak_gpu_bytes"] = torch.cuda.max_memory_allocated(device)
        except torch.OutOfMemoryError as error:
            entry.update(ok=False, error=str(error).splitlines()[0][:200])
        optimizer.zero_grad(set_to_none=True)
        del batch
        if device.type == "cuda":
            torch.cuda.empty_cache()
        results.append(entry)
        print(json.dumps(entry), flush=True)
        if not entry["ok"]:
            break
    del optimizer
    return results


def largest(results: list[dict]) -> int | None:
    return max((r["batch"] for r in results if r["ok"]), default=None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--reference", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--batches", default="16,32,64,128", help="batch sizes to try, in order (default: 16,32,64,128)")
    ap.add_argument("--preset", default="qwen3-chat")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    preset = get_preset(args.preset)
    device = resolve_device(args.device)
    batches = [int(b) for b in args.batches.split(",")]
    examples = read_train_examples(args.reference)
    model = load_causal_lm(args.drafter, device)
    if preset.distill.activation_checkpointing:
        enable_activation_checkpointing(model)
    model.train()
    report: dict[str, Any] = {"drafter": args.drafter, "device": str(device), "examples": len(examples)}
    report["distill"] = probe(model, examples, batches, device, preset.distill)
    from specdraft_train.quant import prepare_qat  # the gguf package, as distill --qat needs it

    prepare_qat(model, embedding_type=preset.export.resolved_embedding_type())
    report["qat"] = probe(model, examples, batches, device, preset.distill)
    report["largest_batch"] = {"distill": largest(report["distill"]), "qat": largest(report["qat"])}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["largest_batch"]))


if __name__ == "__main__":
    main()
