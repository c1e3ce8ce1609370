"""Stage `pretrain`: train a model on the corpus's train split — a lab model from scratch, or a given checkpoint.

`--role target` builds the lab target, `--role drafter` the base drafter (Qwen3, sizes from the preset), over the
tokenizer stage's tokenizer. `--init DIR` trains the checkpoint in DIR instead (e.g. `drafter --init scratch`'s new
drafter for a real target), with its own tokenizer: the corpus's train and dev splits are tokenized with it into
``OUT/train.tokens.npy`` / ``dev.tokens.npy`` (each document followed by its end-of-text token, prose repeated as the
preset's tokenizer section says; reused by a resumed run, and `distill --replay-tokens OUT` takes them). The train
split as tokenized (each document followed by <|endoftext|>) is cut into `seq_len + 1`-token chunks; every epoch visits
the chunks in a permutation seeded by (seed, epoch), so the data order depends only on the step — which is what lets a
killed run resume to the same weights. Resumable state goes to ``OUT/resume/state.pt`` every `ckpt_every` steps; the
finished model is an HF checkpoint in OUT with tokenizer files and a manifest. Progress: a tqdm bar (loss, tokens/s);
TensorBoard events (train loss, learning rate, throughput, final dev loss) in ``OUT/tb/``. Runs under torchrun for DDP:

    python -m specdraft_train pretrain --corpus runs/lab/corpus --tokenizer runs/lab/tokenizer \\
        --out runs/lab/target --role target --preset micro
    python -m specdraft_train pretrain --corpus runs/lab/corpus --init runs/smol/drafter-init --out runs/smol/base
    torchrun --nproc_per_node 8 -m specdraft_train pretrain ... --preset lab
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn
from transformers import AutoConfig

from ..config import ModelConfig, PretrainConfig, TokenizerConfig, add_device_argument, announce, override
from ..formats.artifacts import atomic_write_json, input_record, sha256_file, verify_stage_dir, write_manifest
from ..formats.documents import STREAM_SPLITS, load_token_stream, pretraining_streams, save_token_stream, token_file
from ..formats.vocabulary import END_OF_TEXT
from ..modeling.models import (
    architecture_summary,
    autocast_context,
    checkpoint_info,
    lab_generation_config,
    load_causal_lm,
    new_model,
    qwen3_config,
    save_checkpoint,
    verify_checkpoint,
)
from ..modeling.models import (
    load_tokenizer as load_hf_tokenizer,
)
from ..presets import LAB_PRESETS, PRETRAIN_PRESETS, add_preset_argument, get_preset
from ..training.loop import (
    ChunkSampler,
    DistributedContext,
    ResumeState,
    finish_distributed,
    halt_for_test,
    init_distributed,
    lr_at,
    make_optimizer,
    open_summary_writer,
    progress_bar,
    rank_slice,
    set_lr,
    stop_by_budget,
    wrap_ddp,
)

LOG_EVERY_STEPS = 50
STREAMS_KEY = "streams.json"  # in OUT under --init: what its token streams were made from (a rerun reuses them)


def chunk_batch(
    tokens: np.ndarray, indices: np.ndarray, seq_len: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    rows = np.stack([tokens[i * seq_len : i * seq_len + seq_len + 1] for i in indices])  # (B, T + 1)
    batch = torch.from_numpy(rows.astype(np.int64)).to(device)
    return batch[:, :-1], batch[:, 1:]  # input_ids (B, T), labels (B, T)


def lm_loss(model: nn.Module, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=input_ids).logits  # (B, T, V)
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1))


@torch.no_grad()
def dev_loss(model: nn.Module, tokens: np.ndarray, config: PretrainConfig, device: torch.device) -> float | None:
    n_chunks = (len(tokens) - 1) // config.seq_len
    if n_chunks == 0:
        return None
    model.eval()
    indices = np.arange(min(n_chunks, config.eval_batches * config.batch_size))
    losses = []
    for start in range(0, len(indices), config.batch_size):
        input_ids, labels = chunk_batch(tokens, indices[start : start + config.batch_size], config.seq_len, device)
        with autocast_context(device):
            losses.append(lm_loss(model, input_ids, labels).item() * len(input_ids))
    model.train()
    return sum(losses) / len(indices)


def build_model(
    tokenizer_dir: Path, model_config: ModelConfig, config: PretrainConfig, device: torch.device
) -> nn.Module:
    """A fresh Qwen3 of ``model_config`` (seeded) over the lab tokenizer's vocabulary, <|endoftext|> as eos and pad."""
    hf_tokenizer = load_hf_tokenizer(tokenizer_dir)
    eot = hf_tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    hf_config = qwen3_config(model_config, vocab_size=len(hf_tokenizer), eos_token_id=eot, pad_token_id=eot)
    model = new_model(hf_config, seed=config.seed).to(device)
    model.generation_config = lab_generation_config(hf_tokenizer)
    model.train()
    return model


def document_end_id(checkpoint: Path, tokenizer: Tokenizer) -> int:
    """The token a given checkpoint's pretraining stream ends each document with: <|endoftext|> where the vocabulary
    has it (Qwen's, SmolLM's: the document separator their own pretraining used), else the config's eos."""
    end = tokenizer.token_to_id(END_OF_TEXT)
    if end is not None:
        return end
    eos = AutoConfig.from_pretrained(str(checkpoint)).eos_token_id
    if eos is None:
        raise ValueError(f"{checkpoint}: neither {END_OF_TEXT} in its vocabulary nor an eos_token_id to end documents")
    return int(eos[0] if isinstance(eos, list) else eos)


def checkpoint_streams(
    init: Path,
    corpus_dir: Path,
    corpus_manifest: dict[str, Any],
    out_dir: Path,
    config: TokenizerConfig,
    ctx: Any,
    stage: str = "pretrain",
) -> dict[str, Any]:
    """The corpus tokenized with ``init``'s tokenizer into OUT (rank 0, unless a rerun's files are of the same corpus,
    tokenizer and repeats), then read by every rank; returns what made them (the key kept in OUT)."""
    tokenizer_file = init / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ValueError(f"--init {init}: no tokenizer.json (pretrain tokenizes the corpus with the checkpoint's own)")
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    key = {
        "corpus": {split: corpus_manifest["outputs"][f"{split}.jsonl"]["sha256"] for split in STREAM_SPLITS},
        "tokenizer_json": sha256_file(tokenizer_file),
        "end_id": document_end_id(init, tokenizer),
        "prose_repeats": config.prose_repeats,
    }
    if ctx.is_main:
        key_path = out_dir / STREAMS_KEY
        if not key_path.is_file() or json.loads(key_path.read_text()) != key:
            print(f"{stage}: tokenizing {corpus_dir} with {tokenizer_file}", file=sys.stderr)
            streams, _ = pretraining_streams(tokenizer, corpus_dir, key["end_id"], config)
            for split, tokens in streams.items():
                save_token_stream(out_dir / token_file(split), tokens)
            atomic_write_json(key_path, key)  # last: the streams are complete once it names them
    ctx.barrier()
    return key


def replay_text(corpus_dir: Path, checkpoint: Path, out_dir: Path, config: TokenizerConfig) -> dict[str, Any]:
    """Distillation's replay text for a drafter that starts from a model instead of a pretraining of its own (the
    target's layers, a given sibling): the corpus a scratch base would pretrain on, tokenized with ``checkpoint``'s
    tokenizer as `pretrain --init` does, and no training. Its manifest (stage ``replay``) names the tokenizer.json
    it was made with, which distillation checks against the drafter's. Returns the manifest."""
    corpus_manifest = verify_stage_dir(corpus_dir, "corpus")
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = DistributedContext(rank=0, world_size=1, device=torch.device("cpu"))
    key = checkpoint_streams(checkpoint, corpus_dir, corpus_manifest, out_dir, config, ctx, "replay")
    shutil.copy2(checkpoint / "tokenizer.json", out_dir / "tokenizer.json")
    streams = {split: int(len(load_token_stream(out_dir, split))) for split in STREAM_SPLITS}
    print(f"replay: {streams['train']:,} tokens of general text in {checkpoint}'s tokenizer", file=sys.stderr)
    return write_manifest(
        out_dir,
        "replay",
        outputs=[*(token_file(split) for split in STREAM_SPLITS), STREAMS_KEY, "tokenizer.json"],
        params={"streams": key},
        inputs={"corpus": input_record(corpus_dir, corpus_manifest), "checkpoint": checkpoint_info(checkpoint)},
        extra={"tokens": streams},
    )


def train_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    resume: ResumeState,
    train_tokens: np.ndarray,
    config: PretrainConfig,
    role: str,
    ctx: DistributedContext,
    tb: Any,
    start: tuple[int, dict[str, Any]],
    halt_after_steps: int | None,
) -> tuple[int, float]:
    """Optimizer steps from ``start`` (step, the loop's saved extras) until max_steps or the time budget, the resumable
    state saved every ckpt_every steps; returns the last step and the training seconds (earlier runs included)."""
    step, extra = start
    ddp_model = wrap_ddp(model, ctx)
    sampler = ChunkSampler(len(train_tokens), config.seq_len, config.batch_size, config.seed)
    my_rows = rank_slice(config.batch_size, ctx)
    tokens_per_step = config.batch_size * config.seq_len
    segment_start, segment_start_step = time.time(), step
    last_loss: torch.Tensor | None = None
    bar = progress_bar(ctx, total=config.max_steps, initial=step, desc=f"pretrain[{role}]")
    while step < config.max_steps:
        elapsed = extra["train_seconds"] + time.time() - segment_start
        if stop_by_budget(ctx, elapsed, config.time_budget_s):
            if ctx.is_main:
                reached = f"pretrain[{role}]: time budget {config.time_budget_s:.0f}s reached at step {step}"
                bar.write(reached, file=sys.stderr)
            break
        lr = lr_at(step, config.max_steps, config.warmup_steps, config.lr, config.min_lr_ratio)
        set_lr(optimizer, lr)
        input_ids, labels = chunk_batch(train_tokens, sampler.batch_indices(step)[my_rows], config.seq_len, ctx.device)
        with autocast_context(ctx.device):
            loss = lm_loss(ddp_model, input_ids, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(ddp_model.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        last_loss = loss.detach()  # .item() only when logging or saving: a per-step sync would stall the GPU queue
        if step % LOG_EVERY_STEPS == 0 or step % config.ckpt_every == 0 or step == config.max_steps:
            extra["last_loss"] = last_loss.item()
        bar.update(1)
        if ctx.is_main and (step % LOG_EVERY_STEPS == 0 or step == config.max_steps):
            seconds = time.time() - segment_start
            rate = (step - segment_start_step) * tokens_per_step / max(seconds, 1e-9)
            bar.set_postfix(loss=f"{extra['last_loss']:.4f}", tok_s=f"{rate:,.0f}", refresh=False)
            tb.add_scalar("train/loss", extra["last_loss"], step)
            tb.add_scalar("train/lr", lr, step)
            tb.add_scalar("train/tokens_per_s", rate, step)
        if step % config.ckpt_every == 0 and step < config.max_steps:
            extra_now = {**extra, "train_seconds": extra["train_seconds"] + time.time() - segment_start}
            if ctx.is_main:
                tb.flush()  # events so far on disk before the state a rerun resumes from
                resume.save(model, optimizer, step, extra_now)
            ctx.barrier()
            halt_for_test(step, halt_after_steps)
    bar.close()
    if last_loss is not None:
        extra["last_loss"] = last_loss.item()
    return step, extra["train_seconds"] + time.time() - segment_start


@dataclass
class Start:
    """What a run trains and on what: the model (fresh or given), its token streams, and what the manifest records."""

    model: nn.Module
    train_tokens: np.ndarray
    dev_tokens: np.ndarray
    tokenizer_source: Path  # the directory whose tokenizer files the checkpoint copies
    inputs: dict[str, Any]
    model_record: dict[str, Any]
    stream_files: list[str]  # token streams written into OUT (under --init)


def lab_start(
    corpus_dir: Path, tokenizer_dir: Path, model_config: ModelConfig, config: PretrainConfig, ctx: Any
) -> Start:
    """A fresh lab model over the tokenizer stage's tokenizer and streams (tokenized once by that stage)."""
    tokenizer_manifest = verify_stage_dir(tokenizer_dir, "tokenizer")
    return Start(
        build_model(tokenizer_dir, model_config, config, ctx.device),
        load_token_stream(tokenizer_dir, "train"),
        load_token_stream(tokenizer_dir, "dev"),
        tokenizer_dir,
        {"tokenizer": input_record(tokenizer_dir, tokenizer_manifest)},
        model_config.__dict__,
        [],
    )


def init_start(
    corpus_dir: Path, corpus_manifest: dict[str, Any], init: Path, out_dir: Path, preset: str, ctx: Any
) -> Start:
    """The given checkpoint, and the corpus in its own tokenizer (:func:`checkpoint_streams`)."""
    if not init.is_dir():
        raise ValueError(f"--init {init}: expected a checkpoint directory (e.g. the drafter stage's output)")
    init_manifest = verify_checkpoint(init)
    out_dir.mkdir(parents=True, exist_ok=True)
    key = checkpoint_streams(init, corpus_dir, corpus_manifest, out_dir, get_preset(preset).tokenizer, ctx)
    model = load_causal_lm(init, ctx.device)
    model.train()
    return Start(
        model,
        load_token_stream(out_dir, "train"),
        load_token_stream(out_dir, "dev"),
        init,
        {"init": {**checkpoint_info(init), "verified": init_manifest is not None}, "streams": key},
        architecture_summary(model)["config"],
        [*(token_file(split) for split in STREAM_SPLITS), STREAMS_KEY],
    )


def run(
    corpus_dir: Path,
    tokenizer_dir: Path | None,
    out_dir: Path,
    role: str,
    preset_name: str,
    config: PretrainConfig,
    model_config: ModelConfig,
    device_name: str = "auto",
    halt_after_steps: int | None = None,
    init: Path | None = None,
) -> dict[str, Any] | None:
    """Train one model: ``init``'s checkpoint, else a fresh one of ``model_config`` over ``tokenizer_dir``'s tokenizer
    (``role``, ``preset_name``: recorded). Returns the manifest (rank 0)."""
    ctx = init_distributed(device_name)
    corpus_manifest = verify_stage_dir(corpus_dir, "corpus")
    if init is not None:
        start = init_start(corpus_dir, corpus_manifest, init, out_dir, preset_name, ctx)
    elif tokenizer_dir is None:
        raise ValueError("pretrain needs --tokenizer (a lab model) or --init (a given checkpoint)")
    else:
        start = lab_start(corpus_dir, tokenizer_dir, model_config, config, ctx)
    model, train_tokens = start.model, start.train_tokens
    optimizer = make_optimizer(model, config.lr, config.weight_decay, ctx.device)
    resume = ResumeState(out_dir / "resume")
    step, extra = 0, {"train_seconds": 0.0, "last_loss": None}
    if resume.exists():
        step, extra = resume.load(model, optimizer)
        if ctx.is_main:
            print(f"pretrain[{role}]: resuming at step {step}", file=sys.stderr)
    tb = open_summary_writer(ctx, out_dir, step)
    step, train_seconds = train_steps(
        model, optimizer, resume, train_tokens, config, role, ctx, tb, (step, extra), halt_after_steps
    )
    manifest = None
    if ctx.is_main:
        final_dev_loss = dev_loss(model, start.dev_tokens, config, ctx.device)
        if final_dev_loss is not None:
            tb.add_scalar("dev/loss", final_dev_loss, step)
        tb.close()
        tokens_per_step = config.batch_size * config.seq_len
        losses = [
            f"{name} loss {value:.4f}"
            for name, value in (("train", extra["last_loss"]), ("dev", final_dev_loss))
            if value is not None
        ]
        print(
            f"pretrain[{role}]: {step} steps, {', '.join(losses)}, "
            f"{step * tokens_per_step / max(train_seconds, 1e-9):,.0f} tok/s over {train_seconds:.1f} s",
            file=sys.stderr,
        )
        files = save_checkpoint(model, out_dir, start.tokenizer_source)
        manifest = write_manifest(
            out_dir,
            "pretrain",
            outputs=[*files, *start.stream_files],
            params={
                "role": role,
                "preset": preset_name,
                "config": config.__dict__,
                "model": start.model_record,
                "world_size": ctx.world_size,
            },
            inputs={"corpus": input_record(corpus_dir, corpus_manifest), **start.inputs},
            extra={
                "architecture": architecture_summary(model),
                "metrics": {
                    "steps": step,
                    "train_tokens_seen": step * tokens_per_step,
                    "train_split_tokens": int(len(train_tokens)),
                    "last_train_loss": extra["last_loss"],
                    "dev_loss": final_dev_loss,
                    "train_seconds": train_seconds,
                    "tokens_per_second": step * tokens_per_step / max(train_seconds, 1e-9),
                },
            },
        )
        shutil.rmtree(out_dir / "resume", ignore_errors=True)
    finish_distributed(ctx)
    return manifest


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "pretrain",
        help="train the lab target or base drafter from scratch, or a given checkpoint (--init) (DDP-ready)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--corpus", required=True, type=Path, help="output directory of the corpus stage")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--tokenizer", type=Path, help="output directory of the tokenizer stage (a lab model)")
    source.add_argument(
        "--init",
        type=Path,
        help="a checkpoint to train instead of a lab model, over its own tokenizer (e.g. the drafter stage's output)",
    )
    p.add_argument("--out", required=True, type=Path, help="checkpoint directory to write")
    p.add_argument(
        "--role",
        choices=("target", "drafter"),
        default=None,
        help="which preset model to build, and whose pretraining settings (required without --init; default: drafter)",
    )
    add_preset_argument(p, choices=PRETRAIN_PRESETS)
    add_device_argument(p)
    p.add_argument("--max-steps", type=int, default=None, help="optimizer steps (default: preset's)")
    p.add_argument("--batch-size", type=int, default=None, help="global batch in sequences (default: preset's)")
    p.add_argument(
        "--time-budget", type=float, default=None, help="stop after this many training seconds (default: preset's)"
    )
    p.add_argument(
        "--ckpt-every", type=int, default=None, help="steps between resumable checkpoints (default: preset's)"
    )
    p.add_argument("--halt-after-steps", type=int, default=None, help=argparse.SUPPRESS)  # tests: SIGKILL here
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.role is None and args.init is None:
        raise ValueError("--role target|drafter: which lab model to build (only --init implies drafter)")
    if args.init is None and args.preset not in LAB_PRESETS:
        raise ValueError(f"--preset {args.preset} sizes no lab model: give --init DIR (the drafter stage's output)")
    args.role = args.role or "drafter"
    model_config, pretraining = get_preset(args.preset).pretraining(args.role)
    config = override(
        pretraining,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        time_budget_s=args.time_budget,
        ckpt_every=args.ckpt_every,
    )
    if int(os.environ.get("RANK", "0")) == 0:
        budget = f"{config.time_budget_s:g} s" if config.time_budget_s > 0 else "none"
        steps = {"max_steps": config.max_steps, "batch": config.batch_size, "seq_len": config.seq_len}
        announce(f"pretrain[{args.role}]", args.preset, {**steps, "time budget": budget})
    manifest = run(
        args.corpus,
        args.tokenizer,
        args.out,
        args.role,
        args.preset,
        config,
        model_config,
        args.device,
        args.halt_after_steps,
        init=args.init,
    )
    if manifest is not None:
        print(json.dumps(manifest["metrics"]))
    return 0
