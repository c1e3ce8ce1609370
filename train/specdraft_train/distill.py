"""Stage `distill`: teach the drafter the target's continuations (knowledge distillation), optionally with Q4_0 QAT.

Starts from a drafter checkpoint (`--drafter`: the lab's base drafter, or any HF id/path such as Qwen/Qwen3-1.7B) and
the `reference` stage's training shards. On every continuation position j of P + C the loss is

    kl_weight · KL(p_target || q_drafter) + ce_weight · (−log q_drafter(C[j]))

where p_target is the target's top-k distribution renormalized over its k tokens, and C[j] the target's greedy token
(which is what τ scores). After every epoch the dev split's τ is measured by the validator's walk (fast exact method,
tau.py); the best epoch (including the starting drafter, epoch 0) is kept. Under `--qat` the drafter's forward uses
weights fake-quantized exactly as a GGUF Q4_0 file stores them (specdraft_train.quant); the output then also holds
``qat_state.safetensors`` for `export --qat-state`. Resumable (``OUT/resume/``) and DDP-ready like pretrain:

    python -m specdraft_train distill --drafter runs/lab/base --reference runs/lab/reference --out runs/lab/distilled
    python -m specdraft_train distill --drafter runs/lab/distilled --reference runs/lab/reference \\
        --out runs/lab/distilled-qat --qat
    torchrun --nproc_per_node 8 -m specdraft_train distill ...
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .artifacts import input_record, verify_stage_dir, write_manifest
from .config import DistillConfig, get_preset, override
from .models import (
    architecture_summary, autocast_context, checkpoint_info, load_causal_lm, save_checkpoint, verify_checkpoint,
)
from .reference import TrainExample, read_train_examples
from .tau import model_tau, read_conversations
from .training import (
    ResumeState, finish_distributed, halt_for_test, init_distributed, lr_at, make_optimizer,
    rank_slice, set_lr, stop_by_budget, unwrap, wrap_ddp,
)

QAT_STATE_FILE = "qat_state.safetensors"
LOG_EVERY_STEPS = 25


def collate(examples: Sequence[TrainExample], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Right-padded inputs P + C[:-1] and, for every continuation token, where its prediction sits."""
    sequences = [e.prompt_tokens + e.continuation_tokens[:-1] for e in examples]
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    rows, cols = [], []
    for b, (example, seq) in enumerate(zip(examples, sequences)):
        input_ids[b, : len(seq)] = torch.tensor(seq)
        attention_mask[b, : len(seq)] = 1
        p, length = len(example.prompt_tokens), len(example.continuation_tokens)
        rows += [b] * length
        cols += range(p - 1, p - 1 + length)
    return {
        "input_ids": input_ids.to(device),
        "attention_mask": attention_mask.to(device),
        "rows": torch.tensor(rows, device=device),  # (N,) N = continuation tokens in the batch
        "cols": torch.tensor(cols, device=device),  # (N,)
        "labels": torch.from_numpy(np.concatenate([np.asarray(e.continuation_tokens) for e in examples])).long().to(device),
        "topk_ids": torch.from_numpy(np.concatenate([e.topk_ids for e in examples])).long().to(device),  # (N, K)
        "topk_logprobs": torch.from_numpy(np.concatenate([e.topk_logprobs for e in examples])).to(device),  # (N, K)
    }


def distill_loss_sum(model: nn.Module, batch: dict[str, torch.Tensor], config: DistillConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """Summed (not averaged) loss over the batch's continuation positions, and its parts per token."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (B, T, V)
    selected = logits[batch["rows"], batch["cols"]].float()  # (N, V)
    log_q = F.log_softmax(selected, dim=-1)  # (N, V)
    log_p = F.log_softmax(batch["topk_logprobs"], dim=-1)  # (N, K): the target's top-k, renormalized
    kl = (log_p.exp() * (log_p - log_q.gather(1, batch["topk_ids"]))).sum(dim=-1)  # (N,)
    ce = -log_q.gather(1, batch["labels"][:, None]).squeeze(1)  # (N,)
    loss = config.kl_weight * kl.sum() + config.ce_weight * ce.sum()
    n = max(len(ce), 1)
    return loss, {"kl": kl.sum().item() / n, "ce": ce.sum().item() / n}


def check_vocabularies(drafter: str | Path, reference_manifest: dict[str, Any], vocab_size: int,
                       examples: Sequence[TrainExample]) -> None:
    """Refuse a drafter whose token ids cannot be the target's: different lab tokenizer, or ids out of range."""
    drafter_info = checkpoint_info(drafter)
    target_info = reference_manifest["inputs"].get("target", {})
    ours = drafter_info.get("outputs", {}).get("tokenizer.json")
    theirs = target_info.get("outputs", {}).get("tokenizer.json")
    if ours and theirs and ours != theirs:
        raise ValueError(f"drafter {drafter} has another tokenizer.json than the target of the reference data "
                         f"(sha256 {ours[:12]}… vs {theirs[:12]}…)")
    top = max((max(e.continuation_tokens + e.prompt_tokens) for e in examples), default=0)
    if top >= vocab_size:
        raise ValueError(f"reference data uses token id {top}; the drafter's vocabulary has {vocab_size}")


def load_qat_state_into(qat: Any, path: Path) -> None:
    """Put a saved QAT state's per-block clip factors into a freshly prepared model, then check its fingerprints."""
    from .quant import load_qat_state

    saved = load_qat_state(path)
    with torch.no_grad():
        for name, clip in saved.clips.items():
            qat.targets[name].parametrization.clip.copy_(clip)
    if qat.fingerprints() != saved.fingerprints:
        raise ValueError(f"{path}: the model's quantized weights do not match the QAT state's fingerprints")


def run(
    drafter: str | Path, reference_dir: Path, out_dir: Path, config: DistillConfig, qat: bool = False,
    clip_search: bool = False, device_name: str = "auto", halt_after_steps: int | None = None,
    epochs: int | None = None, lr: float | None = None,
) -> dict[str, Any] | None:
    ctx = init_distributed(device_name)
    start_time = time.time()
    epochs = epochs if epochs is not None else (config.qat_epochs if qat else config.epochs)
    peak_lr = lr if lr is not None else (config.qat_lr if qat else config.lr)
    reference_manifest = verify_stage_dir(reference_dir, "reference")
    drafter_manifest = verify_checkpoint(drafter)
    examples = read_train_examples(reference_dir)
    dev = read_conversations(reference_dir / "dev.jsonl")
    if not examples:
        raise ValueError(f"{reference_dir}: no training examples")
    model = load_causal_lm(drafter, ctx.device)
    vocab_size = model.get_input_embeddings().weight.shape[0]
    check_vocabularies(drafter, reference_manifest, vocab_size, examples)
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    qat_state = None
    if qat:
        from .quant import prepare_qat  # the GGUF-exact fake quantization (needs the `gguf` package)

        qat_state = prepare_qat(model, clip_search=clip_search)
    model.train()
    optimizer = make_optimizer(model, peak_lr, config.weight_decay, ctx.device)
    global_batch = min(config.batch_size, len(examples) - len(examples) % ctx.world_size)
    steps_per_epoch = max(1, len(examples) // global_batch)
    max_steps = epochs * steps_per_epoch
    resume = ResumeState(out_dir / "resume")
    step = 0
    extra: dict[str, Any] = {"train_seconds": 0.0, "history": [], "best_tau": None, "best_epoch": None, "last": {}}
    if resume.exists():
        step, extra = resume.load(model, optimizer, ctx.device)
        if ctx.is_main:
            print(f"distill: resuming at step {step}", file=sys.stderr)
    elif ctx.is_main:
        dev_tau = model_tau(model, dev, config.eval_k, ctx.device).tau
        extra.update(history=[{"epoch": 0, "step": 0, "dev_tau": dev_tau}], best_tau=dev_tau, best_epoch=0)
        resume.save_best(model)
        print(f"distill: epoch 0 (start) dev τ {dev_tau:.3f}", file=sys.stderr)
    ddp_model = wrap_ddp(model, ctx)
    my_rows = rank_slice(global_batch, ctx)
    segment_start = time.time()
    stopped_early = False

    def evaluate_epoch(epoch: int) -> None:
        if not ctx.is_main:
            return
        dev_tau = model_tau(unwrap(ddp_model), dev, config.eval_k, ctx.device).tau
        extra["history"].append({"epoch": epoch, "step": step, "dev_tau": dev_tau, **extra["last"]})
        if dev_tau > extra["best_tau"]:
            extra.update(best_tau=dev_tau, best_epoch=epoch)
            resume.save_best(ddp_model)
        print(f"distill: epoch {epoch} dev τ {dev_tau:.3f} (best {extra['best_tau']:.3f} at epoch "
              f"{extra['best_epoch']})", file=sys.stderr)

    while step < max_steps:
        elapsed = extra["train_seconds"] + time.time() - segment_start
        if stop_by_budget(ctx, elapsed, config.time_budget_s):
            stopped_early = True
            break
        epoch, within = divmod(step, steps_per_epoch)
        if within == 0 and qat_state is not None and clip_search:
            qat_state.refresh_clip()
        order = np.random.default_rng([config.seed, epoch]).permutation(len(examples))
        indices = order[within * global_batch : (within + 1) * global_batch][my_rows]
        batch = collate([examples[i] for i in indices], pad_id, ctx.device)
        n_global = ctx.all_reduce_sum(torch.tensor([float(len(batch["labels"]))], device=ctx.device)).item()
        set_lr(optimizer, lr_at(step, max_steps, config.warmup_steps, peak_lr, config.min_lr_ratio))
        with autocast_context(ctx.device):
            loss_sum, parts = distill_loss_sum(ddp_model, batch, config)
        # DDP averages gradients over ranks; scaling by world size makes that the mean over all ranks' tokens.
        loss = loss_sum * ctx.world_size / n_global
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(ddp_model.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        extra["last"] = {"loss": loss.item() / ctx.world_size, **parts}
        if ctx.is_main and step % LOG_EVERY_STEPS == 0:
            print(f"distill step {step}/{max_steps} loss {extra['last']['loss']:.4f} kl {parts['kl']:.4f} "
                  f"ce {parts['ce']:.4f}", file=sys.stderr)
        if step % steps_per_epoch == 0:
            evaluate_epoch(step // steps_per_epoch)
        # Also at every epoch end, so the saved state always agrees with best.pt and the history.
        if (step % config.ckpt_every == 0 or step % steps_per_epoch == 0) and step < max_steps:
            extra["train_seconds"] += time.time() - segment_start
            segment_start = time.time()
            if ctx.is_main:
                resume.save(model, optimizer, step, extra)
            ctx.barrier()
            halt_for_test(step, halt_after_steps)
    if stopped_early and step % steps_per_epoch:
        evaluate_epoch(step / steps_per_epoch)  # the partial epoch's weights compete too
    train_seconds = extra["train_seconds"] + time.time() - segment_start
    manifest = None
    if ctx.is_main:
        resume.load_best(model)
        outputs: list[str]
        if qat_state is not None:
            with qat_state.unwrapped():  # latent fp32 weights under their HF names; export quantizes them exactly
                outputs = save_checkpoint(model, out_dir, drafter)
            qat_state.save(out_dir / QAT_STATE_FILE)
            outputs.append(QAT_STATE_FILE)
        else:
            outputs = save_checkpoint(model, out_dir, drafter)
        manifest = write_manifest(
            out_dir, "distill", outputs=outputs,
            params={"config": config.__dict__, "qat": qat, "clip_search": clip_search, "epochs": epochs,
                    "lr": peak_lr, "global_batch": global_batch, "world_size": ctx.world_size},
            inputs={"drafter": checkpoint_info(drafter), "reference": input_record(reference_dir, reference_manifest)},
            extra={
                "architecture": architecture_summary(model),
                "metrics": {
                    "steps": step, "steps_per_epoch": steps_per_epoch, "examples": len(examples),
                    "best_dev_tau": extra["best_tau"], "best_epoch": extra["best_epoch"], "history": extra["history"],
                    "stopped_by_time_budget": stopped_early, "train_seconds": train_seconds,
                    "seconds": time.time() - start_time, "drafter_verified": drafter_manifest is not None,
                },
            },
        )
        shutil.rmtree(out_dir / "resume", ignore_errors=True)
    finish_distributed(ctx)
    return manifest


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("distill", help="distill the target's continuations into the drafter (+ --qat)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--drafter", required=True, help="starting drafter: lab checkpoint, local HF model, or HF id")
    p.add_argument("--reference", required=True, type=Path, help="output directory of the reference stage")
    p.add_argument("--out", required=True, type=Path, help="checkpoint directory to write")
    p.add_argument("--qat", action="store_true", help="train through GGUF Q4_0 fake quantization (quant.py)")
    p.add_argument("--clip-search", action="store_true", help="with --qat: per-block clip search, refreshed each epoch")
    p.add_argument("--preset", default="lab", help="micro | lab (default: lab)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default: preset's; qat_epochs with --qat)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: preset's; qat_lr with --qat)")
    p.add_argument("--batch-size", type=int, default=None, help="global batch in continuations (default: preset's)")
    p.add_argument("--time-budget", type=float, default=None, help="stop after this many training seconds (default: preset's)")
    p.add_argument("--ckpt-every", type=int, default=None, help="steps between resumable checkpoints (default: preset's)")
    p.add_argument("--halt-after-steps", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    config = override(get_preset(args.preset).distill, batch_size=args.batch_size, time_budget_s=args.time_budget,
                      ckpt_every=args.ckpt_every)
    manifest = run(args.drafter, args.reference, args.out, config, args.qat, args.clip_search, args.device,
                   args.halt_after_steps, args.epochs, args.lr)
    if manifest is not None:
        metrics = manifest["metrics"]
        print(json.dumps({k: metrics[k] for k in ("best_dev_tau", "best_epoch", "steps", "train_seconds")}))
    return 0
