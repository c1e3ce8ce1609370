"""The training pipeline's command line: one subcommand per stage; stages talk only through files.

python -m specdraft_train --help
python -m specdraft_train lab --preset micro --out runs/micro
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .formats.artifacts import ArtifactError

# `run` first (every stage for a user's target), then the stages in pipeline order (`ablate` runs after a finished lab;
# `target` and `drafter` make a real target and its drafter; `real_lab` writes the real-model lab's report,
# `real-lab-report`);
# each module (a command, or an orchestrator of commands) registers its subcommand with add_parser.
STAGE_MODULES = (
    "pipeline.run",
    "commands.corpus",
    "commands.tokenizer",
    "commands.target",
    "commands.drafter",
    "commands.pretrain",
    "commands.reference",
    "commands.distill",
    "commands.onpolicy",
    "commands.export",
    "commands.evaluate",
    "pipeline.lab",
    "pipeline.ablate",
    "commands.real_lab",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specdraft_train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: torch's, one per core); 1 is fastest on a busy machine",
    )
    subparsers = parser.add_subparsers(dest="stage", required=True, metavar="<stage>")
    for name in STAGE_MODULES:
        importlib.import_module(f"specdraft_train.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for a stage that starts itself again (lab)
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-file load/save bars drown the stages' own progress lines
    try:
        return int(args.func(args) or 0)
    except (ArtifactError, FileNotFoundError, ValueError) as error:
        print(f"specdraft_train {args.stage}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
