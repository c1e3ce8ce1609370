"""Stage `reference`: prompts → the target's greedy continuations (and, for training data, its top-k log-probs).

Prompts come from the corpus (the opening of each file, then windows from inside files; lengths cycle through the
preset's prompt lengths, e.g. 64/96/128/192 tokens, which are also the categories `prompt-64`, …) and/or from a chat
JSONL (`--chat`, one ``{"messages": [...], "id"?, "category"?, "split"?}`` per line, rendered with the target
tokenizer's chat template, thinking off). The target continues each prompt greedily for at most `max_new_tokens`,
stopping at end-of-text / end-of-turn: by default with the static engine of `generation.py` (prompts bucketed by length,
a preallocated KV cache, the decode step as a CUDA graph), or with HF ``generate`` (`--engine hf`), its tested peer.

Outputs: ``heldout.jsonl`` and ``dev.jsonl`` in the validator's format (`id`, `category`, `prompt_tokens`,
`continuation_tokens`); ``train-NNNNN.safetensors`` shards with prompts, continuations and the target's top-k token ids
and log-probs at every continuation position (written one shard at a time, so a killed run resumes at the next shard);
``manifest.json``. The target is a lab checkpoint or any HF id / local path (real path: e.g. Qwen/Qwen3-8B):

    python -m specdraft_train reference --target runs/lab/target --corpus runs/lab/corpus --out runs/lab/reference --preset micro
    python -m specdraft_train reference --target Qwen/Qwen3-8B --chat prompts.jsonl --out runs/real/reference --dtype bfloat16
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import PreTrainedTokenizerBase

from .artifacts import AtomicFile, atomic_write_json, atomic_write_text, input_record, verify_stage_dir, write_manifest
from .config import CorpusConfig, ReferenceConfig, get_preset, override
from .corpus import read_documents, split_of
from .generation import StaticGreedyEngine, generate_greedy_hf
from .models import autocast_context, checkpoint_info, load_causal_lm, load_tokenizer, resolve_device, verify_checkpoint
from .tau import Conversation, conversation_json

EVAL_SPLITS = ("dev", "heldout")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SPLIT_SEED_OFFSETS = {"train": 0, "dev": 1, "heldout": 2}


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    tokens: list[int]


@dataclass(frozen=True)
class Continuation:
    tokens: list[int]
    topk_ids: np.ndarray | None  # (L, K) int32
    topk_logprobs: np.ndarray | None  # (L, K) float16


@dataclass(frozen=True)
class TrainExample:
    """One distillation example: the target's continuation of a prompt and its top-k distribution per position."""

    prompt_tokens: list[int]
    continuation_tokens: list[int]
    topk_ids: np.ndarray  # (L, K) int32
    topk_logprobs: np.ndarray  # (L, K) float32


# ---------------------------------------------------------------------------------------------------------------------
# Prompts


PROMPT_SOURCE_CHARS = 32_768  # prompts come from each file's first 32k characters: bounds the tokenizing cost
ENCODE_BATCH_DOCUMENTS = 1024


def corpus_prompts(
    corpus_dir: Path, tokenizer: PreTrainedTokenizerBase, split: str, count: int, lengths: Sequence[int],
    windows_per_doc: int, seed: int,
) -> list[Prompt]:
    """Up to ``count`` prompts from one split: every file's opening first, then inner windows, files in seeded order.

    Lengths cycle through ``lengths`` so the categories stay balanced; a file too short for the next length is passed
    over for that prompt. Files are tokenized lazily, in batches, only as far as the prompts need.
    """
    documents = sorted(read_documents(corpus_dir, split), key=lambda d: d.sha256)
    rng = np.random.default_rng([seed, SPLIT_SEED_OFFSETS[split]])
    order = rng.permutation(len(documents))
    encoded: dict[int, list[int]] = {}

    def tokens_of(position: int) -> list[int]:
        if order[position] not in encoded:
            batch = [int(i) for i in order[position : position + ENCODE_BATCH_DOCUMENTS]]
            texts = [documents[i].text[:PROMPT_SOURCE_CHARS] for i in batch]
            for i, text, ids in zip(batch, texts, tokenizer(texts, add_special_tokens=False)["input_ids"]):
                # A cut text's last few tokens may differ from the whole file's tokenization: drop them.
                encoded[i] = ids[:-8] if len(documents[i].text) > PROMPT_SOURCE_CHARS else ids
        return encoded[order[position]]

    prompts: list[Prompt] = []
    for window in range(windows_per_doc + 1):
        for position in range(len(order)):
            if len(prompts) >= count:
                return prompts
            tokens = tokens_of(position)
            length = lengths[len(prompts) % len(lengths)]
            if len(tokens) < length + (1 if window else 0):
                continue
            start = 0 if window == 0 else int(rng.integers(1, len(tokens) - length + 1))
            prompts.append(Prompt(f"{split}/{documents[order[position]].sha256[:12]}/{start}", f"prompt-{length}",
                                  tokens[start : start + length]))
    return prompts


def render_chat(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    """The chat prompt as the target sees it before answering: chat template, generation prompt, thinking off."""
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=False, tokenize=True)
    if isinstance(rendered, dict) or hasattr(rendered, "keys"):
        rendered = rendered["input_ids"]
    return [int(t) for t in rendered]


def chat_prompts(path: Path, tokenizer: PreTrainedTokenizerBase, corpus_config: CorpusConfig) -> dict[str, list[Prompt]]:
    """Chat prompts by split: a line's own "split", else the corpus rule applied to the sha256 of its messages."""
    by_split: dict[str, list[Prompt]] = {"train": [], "dev": [], "heldout": []}
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "messages" not in row:
                raise ValueError(f"{path}:{line_no}: expected a JSON object with \"messages\"")
            digest = hashlib.sha256(json.dumps(row["messages"], sort_keys=True).encode()).hexdigest()
            split = row.get("split") or split_of(digest, corpus_config)
            if split not in by_split:
                raise ValueError(f"{path}:{line_no}: split {split!r}: expected train, dev or heldout")
            by_split[split].append(Prompt(str(row.get("id", f"chat/{digest[:12]}")), str(row.get("category", "chat")),
                                          render_chat(tokenizer, row["messages"])))
    return by_split


# ---------------------------------------------------------------------------------------------------------------------
# Generation


ENGINES = ("static", "hf")


def stop_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    eos = getattr(model.generation_config, "eos_token_id", None) or tokenizer.eos_token_id
    return [int(t) for t in (eos if isinstance(eos, list) else [eos])]


@torch.no_grad()
def generate_continuations(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[Prompt], max_new_tokens: int,
    batch_size: int, device: torch.device, top_k: int | None, engine: str = "static", progress: bool = False,
) -> list[Continuation]:
    """Greedy continuations up to and including the first stop token, with the top-k log-probs when ``top_k``.

    ``engine="static"``: :class:`generation.StaticGreedyEngine` (static KV cache, CUDA-graph decode, batches of up to
    ``batch_size`` rows as the memory budget allows); ``"hf"``: HF ``generate`` in batches of ``batch_size``, the
    peer both are tested against. Either way, equal-length prompts share batches unpadded, others are left-padded.
    """
    eos = stop_ids(model, tokenizer)
    tokens = [p.tokens for p in prompts]
    if engine == "static":
        outputs = StaticGreedyEngine(model, device).generate(tokens, max_new_tokens, eos, top_k,
                                                             max_batch_size=batch_size, progress=progress)
    elif engine == "hf":
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        outputs = generate_greedy_hf(model, tokens, max_new_tokens, eos, pad, top_k, batch_size, device,
                                     progress=progress)
    else:
        raise ValueError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    return [
        Continuation(o.tokens, o.topk_ids, o.topk_logprobs.astype(np.float16) if o.topk_logprobs is not None else None)
        for o in outputs
    ]


# ---------------------------------------------------------------------------------------------------------------------
# Files


def _flat(rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    flat = np.concatenate([np.asarray(r, dtype=np.int32) for r in rows]) if rows else np.zeros(0, dtype=np.int32)
    return torch.from_numpy(flat), torch.from_numpy(offsets)


def write_train_shard(path: Path, prompts: Sequence[Prompt], continuations: Sequence[Continuation]) -> None:
    prompt_flat, prompt_offsets = _flat([p.tokens for p in prompts])
    cont_flat, cont_offsets = _flat([c.tokens for c in continuations])
    tensors = {
        "prompt_tokens": prompt_flat,  # (ΣP,)
        "prompt_offsets": prompt_offsets,  # (N + 1,)
        "continuation_tokens": cont_flat,  # (ΣL,)
        "continuation_offsets": cont_offsets,  # (N + 1,)
        "topk_ids": torch.from_numpy(np.concatenate([c.topk_ids for c in continuations])),  # (ΣL, K)
        "topk_logprobs": torch.from_numpy(np.concatenate([c.topk_logprobs for c in continuations])),  # (ΣL, K)
    }
    # One metadata key: safetensors writes several in hash-map order, which would change the file's bytes per process.
    metadata = {"examples": json.dumps({"ids": [p.id for p in prompts], "categories": [p.category for p in prompts]})}
    with AtomicFile(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def read_train_examples(reference_dir: str | Path) -> list[TrainExample]:
    """All training examples of a finished reference stage (callers verify its manifest first)."""
    examples = []
    for shard in sorted(Path(reference_dir).glob("train-*.safetensors")):
        with safe_open(str(shard), framework="np") as f:
            t = {name: f.get_tensor(name) for name in f.keys()}
        po, co = t["prompt_offsets"], t["continuation_offsets"]
        for i in range(len(po) - 1):
            examples.append(TrainExample(
                t["prompt_tokens"][po[i] : po[i + 1]].tolist(),
                t["continuation_tokens"][co[i] : co[i + 1]].tolist(),
                t["topk_ids"][co[i] : co[i + 1]],
                t["topk_logprobs"][co[i] : co[i + 1]].astype(np.float32),
            ))
    return examples


def write_conversations(path: Path, prompts: Sequence[Prompt], continuations: Sequence[Continuation]) -> None:
    lines = [conversation_json(Conversation(p.id, p.category, p.tokens, c.tokens)) for p, c in zip(prompts, continuations)]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


def _plan_fingerprint(target: dict[str, Any], prompts: dict[str, list[Prompt]], config: ReferenceConfig) -> str:
    digest = hashlib.sha256(json.dumps([target, config.__dict__], sort_keys=True, default=str).encode())
    for split in sorted(prompts):
        for p in prompts[split]:
            digest.update(json.dumps([split, p.id, p.category, p.tokens]).encode())
    return digest.hexdigest()


def run(
    target: str | Path, out_dir: Path, config: ReferenceConfig, corpus_dir: Path | None = None,
    chat: Path | None = None, corpus_config: CorpusConfig | None = None, device_name: str = "auto",
    dtype: str = "float32", halt_after_shards: int | None = None,
) -> dict[str, Any]:
    if corpus_dir is None and chat is None:
        raise ValueError("reference needs prompts: give --corpus, --chat, or both")
    start_time = time.time()
    device = resolve_device(device_name)
    target_manifest = verify_checkpoint(target)
    inputs: dict[str, Any] = {"target": checkpoint_info(target)}
    tokenizer = load_tokenizer(target)
    prompts: dict[str, list[Prompt]] = {"train": [], "dev": [], "heldout": []}
    counts = {"train": config.train_prompts, "dev": config.dev_prompts, "heldout": config.heldout_prompts}
    if corpus_dir is not None:
        inputs["corpus"] = input_record(corpus_dir, verify_stage_dir(corpus_dir, "corpus"))
        for split in prompts:
            windows = config.train_windows_per_doc if split == "train" else config.eval_windows_per_doc
            prompts[split] += corpus_prompts(corpus_dir, tokenizer, split, counts[split], config.prompt_lengths,
                                             windows, config.seed)
    if chat is not None:
        from .artifacts import sha256_file

        inputs["chat"] = {"path": str(chat), "sha256": sha256_file(chat)}
        for split, rows in chat_prompts(chat, tokenizer, corpus_config or CorpusConfig()).items():
            prompts[split] += rows[: counts[split]]
    for split in EVAL_SPLITS:
        if not prompts[split]:
            raise ValueError(f"no {split} prompts: the {split} split has no file long enough for the prompt lengths")
    out_dir.mkdir(parents=True, exist_ok=True)
    fingerprint = _plan_fingerprint(inputs["target"], prompts, config)
    progress_path = out_dir / "progress.json"
    if progress_path.is_file() and json.loads(progress_path.read_text()).get("plan") != fingerprint:
        for stale in out_dir.glob("train-*.safetensors"):  # another target or other prompts: start over
            stale.unlink()
    atomic_write_json(progress_path, {"plan": fingerprint})
    model = load_causal_lm(target, device, DTYPES[dtype])
    outputs = []
    for split in EVAL_SPLITS:
        path = out_dir / f"{split}.jsonl"
        continuations = generate_continuations(model, tokenizer, prompts[split], config.max_new_tokens,
                                               config.batch_size, device, top_k=None, engine=config.engine)
        write_conversations(path, prompts[split], continuations)
        outputs.append(path.name)
    train = prompts["train"]
    shards = [train[i : i + config.shard_prompts] for i in range(0, len(train), config.shard_prompts)]
    for index, shard_prompts in enumerate(shards):
        path = out_dir / f"train-{index:05d}.safetensors"
        outputs.append(path.name)
        if path.is_file():
            continue  # finished before a restart (written atomically, under the same plan)
        generation_start = time.time()
        continuations = generate_continuations(model, tokenizer, shard_prompts, config.max_new_tokens,
                                                config.batch_size, device, top_k=config.top_k,
                                                engine=config.engine, progress=True)
        write_train_shard(path, shard_prompts, continuations)
        tokens = sum(len(c.tokens) for c in continuations)
        print(f"reference: shard {index + 1}/{len(shards)}: {len(shard_prompts)} continuations, {tokens} tokens, "
              f"{tokens / (time.time() - generation_start):,.0f} tok/s", file=sys.stderr)
        if halt_after_shards is not None and index + 1 >= halt_after_shards:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGKILL)  # tests: a crash between shards
    counts_written = {split: len(rows) for split, rows in prompts.items()}
    return write_manifest(
        out_dir, "reference", outputs=outputs,
        params={"config": config.__dict__, "dtype": dtype, "device": str(device)},
        inputs=inputs,
        extra={"prompts": counts_written, "target_verified": target_manifest is not None,
               "seconds": time.time() - start_time},
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("reference", help="the target's greedy continuations (+ top-k log-probs for training)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, help="target: lab checkpoint directory, local HF model, or HF id")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--corpus", type=Path, default=None, help="corpus stage directory (prompts from its files)")
    p.add_argument("--chat", type=Path, default=None, help="chat prompts JSONL ({\"messages\": [...]} per line)")
    p.add_argument("--preset", default="lab", help="micro | lab (default: lab)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="weights' dtype (default: float32; "
                   "bfloat16 for real models)")
    p.add_argument("--train-prompts", type=int, default=None, help="training continuations (default: preset's)")
    p.add_argument("--dev-prompts", type=int, default=None, help="dev conversations (default: preset's)")
    p.add_argument("--heldout-prompts", type=int, default=None, help="held-out conversations (default: preset's)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="continuation cap (default: preset's)")
    p.add_argument("--batch-size", type=int, default=None, help="prompts per batch; the static engine takes fewer "
                   "when its KV-cache budget holds fewer (default: preset's)")
    p.add_argument("--shard-prompts", type=int, default=None, help="prompts per resumable shard (default: preset's)")
    p.add_argument("--engine", choices=ENGINES, default=None, help="static: static KV cache + CUDA-graph decode; hf: "
                   "HF generate, the slower peer (default: preset's, static)")
    p.add_argument("--halt-after-shards", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    preset = get_preset(args.preset)
    config = override(preset.reference, train_prompts=args.train_prompts, dev_prompts=args.dev_prompts,
                      heldout_prompts=args.heldout_prompts, max_new_tokens=args.max_new_tokens,
                      batch_size=args.batch_size, shard_prompts=args.shard_prompts, engine=args.engine)
    manifest = run(args.target, args.out, config, args.corpus, args.chat, preset.corpus, args.device, args.dtype,
                   args.halt_after_shards)
    print(json.dumps(manifest["prompts"]))
    return 0
