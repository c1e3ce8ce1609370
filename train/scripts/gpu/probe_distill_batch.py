"""The largest distillation batch that fits the device: training steps of `distill` (its collate, loss and AdamW, bf16
autocast on CUDA) at growing batch sizes until one runs out of memory, then the same under QAT (the preset's Q4_0
embedding). Prints and writes JSON: per batch size the step's seconds, continuation tokens/s and peak memory.

    python train/scripts/gpu/probe_distill_batch.py --drafter DRAFTER --reference REFERENCE --out probe.json \\
        [--batches 16,32,64,128] [--preset qwen3-chat]

Each size first steps on the widest rows of the reference's training examples, the batch that needs the most memory
(its peak is the size's; that step also allocates the AdamW moments and warms cuBLAS), then times `--timed-batches`
batches in the order epoch 0 of `distill` takes them (random, or grouped by length as the preset's `group_by_length`
says), so tokens/s is the job's: their padding factor is reported beside it. A quick probe for the dress rehearsal
(real_rehearsal.sh), not a stage: nothing is saved.
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

from specdraft_train.modeling.models import (
    autocast_context,
    enable_activation_checkpointing,
    load_causal_lm,
    resolve_device,
)
from specdraft_train.presets import get_preset
from specdraft_train.training.examples import collate, epoch_order, padding_factor, read_train_examples, row_width
from specdraft_train.training.loop import make_optimizer
from specdraft_train.training.losses import loss_sums


def train_step(model: nn.Module, optimizer: Any, rows: list, pad_id: int, device: torch.device, config: Any) -> float:
    """One distill step on ``rows`` (collate, loss, backward, AdamW), synchronized: its seconds."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.time()
    batch = collate(rows, pad_id, device, packed=False)
    with autocast_context(device):
        loss = loss_sums(model, batch, config).distill / sum(len(e.continuation_tokens) for e in rows)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.time() - started


def probe(model: nn.Module, examples: list, batches: list[int], timed: int, device: torch.device, config: Any) -> list:
    """One entry per batch size, stopping at the first that runs out of memory."""
    optimizer = make_optimizer(model, 1e-9, 0.0, device)  # a tiny rate: the probe should not move the weights much
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    widths = [row_width(e) for e in examples]
    widest = np.argsort(widths, kind="stable")[::-1]
    results = []
    for size in batches:
        if size > len(examples):
            break
        order = epoch_order(widths, config.seed, 0, size, config.group_by_length)
        batches = [order[i : i + size] for i in range(0, len(order) // size * size, size)]
        entry: dict[str, Any] = {"batch": size, "padding_factor": padding_factor(widths, batches)}
        try:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            train_step(model, optimizer, [examples[i] for i in widest[:size]], pad_id, device, config)
            if device.type == "cuda":
                entry["peak_gpu_bytes"] = torch.cuda.max_memory_allocated(device)  # the widest batch's
            seconds, tokens, n_timed = 0.0, 0, max(1, min(timed, len(examples) // size))
            for b in range(n_timed):
                rows = [examples[i] for i in order[b * size : (b + 1) * size]]
                seconds += train_step(model, optimizer, rows, pad_id, device, config)
                tokens += sum(len(e.continuation_tokens) for e in rows)
            entry.update(ok=True, continuation_tokens=tokens, step_seconds=seconds / n_timed)
            entry["tokens_per_s"] = tokens / seconds
        except torch.OutOfMemoryError as error:
            entry.update(ok=False, error=str(error).splitlines()[0][:200])
        optimizer.zero_grad(set_to_none=True)
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
    ap.add_argument("--timed-batches", type=int, default=3, help="batches timed per size (default: 3)")
    ap.add_argument("--preset", default="qwen3-chat")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    preset = get_preset(args.preset)
    device = resolve_device(args.device)
    batches = [int(b) for b in args.batches.split(",")]
    examples = read_train_examples(args.reference)
    model = load_causal_lm(args.drafter, device)
    if preset.distill.activation_checkpointing != "off":  # right-padded rows, recomputed: the form distill had
        enable_activation_checkpointing(model)
    model.train()
    report: dict[str, Any] = {"drafter": args.drafter, "device": str(device), "examples": len(examples)}
    report["distill"] = probe(model, examples, batches, args.timed_batches, device, preset.distill)
    from specdraft_train.training.quant import prepare_qat  # the gguf package, as distill --qat needs it

    prepare_qat(model, embedding_type=preset.export.resolved_embedding_type())
    report["qat"] = probe(model, examples, batches, args.timed_batches, device, preset.distill)
    report["largest_batch"] = {"distill": largest(report["distill"]), "qat": largest(report["qat"])}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["largest_batch"]))


if __name__ == "__main__":
    main()
