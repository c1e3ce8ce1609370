"""Stage `drafter`: a new drafter for a given target — the target's architecture, tokenizer, chat template and
generation config, and a shape of its own — from scratch or from the target's own weights.

- ``--init scratch``: random weights (seeded) of the shape asked (`--layers`, and `--hidden-size`,
  `--intermediate-size`, `--heads`, `--kv-heads`, `--head-dim`, each the target's unless given). Then `pretrain
  --init OUT` trains it as a general base on the corpus's code and prose, tokenized with this tokenizer (never on the
  target's own output: that is what `distill` teaches afterwards).
- ``--init layers``: `--layers N` of the target's decoder layers (evenly spaced, first and last included) or exactly
  `--keep-layers I,J,…`, with the target's embedding, final norm and output head; the target's width, so no shape
  flags. A drafter of all the target's layers is the target itself.

Its architecture is the target's (Llama → Llama, Qwen2 → Qwen2, Qwen3 → Qwen3: models.TRAINED_MODEL_TYPES, the
architectures gguf_layout.ARCHITECTURES lists; another is refused): the
same rope, norm and attention conventions, so layers copy across unchanged, and `export` writes it with the target's
llama.cpp architecture. Tokenizer files are copied byte for byte (`distill` checks a drafter's tokenizer.json against
the reference target's); the manifest records the shape, the parameters (the embedding's apart) and, for `layers`,
which target layer each drafter layer is.

    python -m specdraft_train drafter --target runs/smol/target --out runs/smol/drafter-init --init scratch --layers 2
    python -m specdraft_train pretrain --init runs/smol/drafter-init --corpus runs/smol/corpus --out runs/smol/base
    python -m specdraft_train drafter --target runs/smol/target --out runs/smol/layers --init layers --layers 2

`--preset NAME` takes the shape of the preset's drafter section (`smollm2-chat`: 2 layers at SmolLM2's width) where no
flag gives it: its layer count for either init, and for ``scratch`` its width too. A ``scratch`` drafter reads only the
target's config and tokenizer files, so `target --no-weights`'s folder will do.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from transformers import AutoConfig, GenerationConfig, PretrainedConfig

from ..config import LabPreset, announce
from ..formats.artifacts import write_manifest
from ..formats.vocabulary import tokenizer_fingerprint
from ..modeling.models import (
    TRAINED_MODEL_TYPES,
    architecture_summary,
    checkpoint_info,
    load_tokenizer,
    new_model,
    save_checkpoint,
    verify_checkpoint,
)
from ..presets import PRESETS, get_preset

INITS = ("scratch", "layers")
# --init scratch's shape flags: the config field each sets
SHAPE_FIELDS = {
    "hidden_size": "--hidden-size",
    "intermediate_size": "--intermediate-size",
    "num_attention_heads": "--heads",
    "num_key_value_heads": "--kv-heads",
    "head_dim": "--head-dim",
}
LAYER_PREFIX = re.compile(r"^model\.layers\.(\d+)\.")
WEIGHT_INDEX = "model.safetensors.index.json"  # a sharded checkpoint's map of tensor name → shard file


def evenly_spaced(n: int, total: int) -> list[int]:
    """``n`` of ``total`` layer indices, evenly spaced, first and last included (one layer: the first)."""
    if not 1 <= n <= total:
        raise ValueError(f"--layers {n}: the target has {total} layers (1 to {total})")
    if n == 1:
        return [0]
    return [round(i * (total - 1) / (n - 1)) for i in range(n)]


def default_depth(preset: LabPreset, target_layers: int) -> int:
    """``--init layers`` without N: the preset's drafter depth, chosen by the speed-up it buys (a drafter step costs
    by depth; docs/lab.md, "What limits τ"), and fewer layers than the target's own where it has more than one: a
    drafter of all of them is the target."""
    return max(1, min(preset.drafter.num_hidden_layers, target_layers - 1))


def parse_layers(text: str, total: int) -> list[int]:
    """``--keep-layers I,J,…``: increasing indices of the target's layers."""
    try:
        keep = [int(part) for part in text.split(",")]
    except ValueError as error:
        raise ValueError(f"--keep-layers {text!r}: expected comma-separated layer indices, e.g. 0,15,29") from error
    if any(b <= a for a, b in zip(keep, keep[1:])) or keep[0] < 0 or keep[-1] >= total:
        raise ValueError(f"--keep-layers {text}: expected increasing indices from 0 to {total - 1}")
    return keep


def drafter_config(target: PretrainedConfig, layers: int, shape: dict[str, int]) -> PretrainedConfig:
    """The target's config with ``layers`` decoder layers and ``shape``'s fields (SHAPE_FIELDS) over its own."""
    values = {**target.to_dict(), **shape, "num_hidden_layers": layers}
    values.pop("_model_name_or_path", None)  # the target's name (a GGUF's general.name), not the drafter's
    if isinstance(values.get("layer_types"), list):  # per-layer attention kinds (Qwen3): the kept layers' own
        values["layer_types"] = values["layer_types"][:layers]
    config = type(target).from_dict(values)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    if heads % kv_heads:
        raise ValueError(f"--heads {heads} is not a multiple of --kv-heads {kv_heads}")
    return config


def target_tensors(target: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """``names`` read from the target's safetensors (one file or shards), nothing else loaded, as fp32."""
    index = target / WEIGHT_INDEX
    if index.is_file():
        where = json.loads(index.read_text())["weight_map"]
    elif (target / "model.safetensors").is_file():
        where = dict.fromkeys(names, "model.safetensors")
    else:
        raise ValueError(f"{target}: no model.safetensors (nor {WEIGHT_INDEX}); --init layers reads the weights there")
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted({where[name] for name in names if name in where}):
        with safe_open(str(target / shard), framework="pt") as f:
            for name in names:
                if where.get(name) == shard:
                    tensors[name] = f.get_tensor(name).float()
    return tensors


def copy_layers(model: torch.nn.Module, target: Path, keep: list[int]) -> None:
    """The drafter's weights from the target's: layer j is the target's layer keep[j]; embedding, norm, head as is."""
    wanted = {}
    for name in model.state_dict():
        match = LAYER_PREFIX.match(name)
        wanted[name] = name if match is None else f"model.layers.{keep[int(match[1])]}.{name[match.end() :]}"
    tied = "lm_head.weight" if model.config.tie_word_embeddings else None
    found = target_tensors(target, [source for name, source in wanted.items() if name != tied])
    missing = [source for name, source in wanted.items() if name != tied and source not in found]
    if missing:
        raise ValueError(f"{target}: the checkpoint lacks {', '.join(missing[:3])}")
    model.load_state_dict({name: found[source] for name, source in wanted.items() if name != tied}, strict=False)
    model.tie_weights()


def build(
    target: Path, init: str, layers: int | None, keep_layers: str | None, shape: dict[str, int], seed: int
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The drafter and what the manifest says of its making."""
    config = AutoConfig.from_pretrained(str(target))
    if config.model_type not in TRAINED_MODEL_TYPES:
        raise ValueError(
            f"{target}: model type {config.model_type!r}: drafters are made for "
            f"{', '.join(sorted(TRAINED_MODEL_TYPES))} targets"
        )
    total = config.num_hidden_layers
    if init == "layers":
        if shape:
            flags = ", ".join(SHAPE_FIELDS[name] for name in shape)
            raise ValueError(f"{flags}: --init layers keeps the target's width (only --layers / --keep-layers)")
        if keep_layers is None and layers is None:
            raise ValueError("--init layers needs --layers N or --keep-layers I,J,…")
        keep = parse_layers(keep_layers, total) if keep_layers else evenly_spaced(layers, total)
        model = new_model(drafter_config(config, len(keep), {}), seed)
        copy_layers(model, target, keep)
        made = {"init": init, "target_layers": keep}
    else:
        if keep_layers:
            raise ValueError("--keep-layers picks the target's layers: it needs --init layers")
        if layers is None or layers < 1:
            raise ValueError("--init scratch needs --layers N (N ≥ 1)")
        model = new_model(drafter_config(config, layers, shape), seed)
        made = {"init": init, "seed": seed}
    generation = target / "generation_config.json"
    if generation.is_file():
        model.generation_config = GenerationConfig.from_pretrained(str(target))
    model.eval()
    return model, made


def run(
    target: Path,
    out_dir: Path,
    init: str,
    layers: int | None = None,
    keep_layers: str | None = None,
    shape: dict[str, int] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Make the drafter into ``out_dir`` (module docstring); returns the manifest."""
    start = time.time()
    if not target.is_dir():
        raise ValueError(
            f"--target {target}: expected a checkpoint directory (the target stage's output, or an HF one)"
        )
    target_manifest = verify_checkpoint(target)
    model, made = build(target, init, layers, keep_layers, shape or {}, seed)
    outputs = save_checkpoint(model, out_dir, target)
    return write_manifest(
        out_dir,
        "drafter",
        outputs=outputs,
        params={**made, "shape": shape or {}},
        inputs={"target": {**checkpoint_info(target), "verified": target_manifest is not None}},
        extra={"architecture": architecture_summary(model), "seconds": time.time() - start},
    )


def vocabulary_fingerprint(checkpoint: Path) -> str:
    """The fingerprint a GGUF of this checkpoint's vocabulary would carry (what a server reports, validate checks)."""
    tokenizer = load_tokenizer(checkpoint)
    return tokenizer_fingerprint(tokenizer, len(tokenizer))


def check_vocabulary(target_dir: Path, drafter_dir: Path) -> None:
    """A drafter proposes token ids the target reads: the same vocabulary, or nothing trains (a given drafter, checked
    once both are converted)."""
    ours, theirs = vocabulary_fingerprint(drafter_dir), vocabulary_fingerprint(target_dir)
    if ours != theirs:
        raise ValueError(
            f"{drafter_dir}: the drafter's vocabulary (fingerprint {ours[:16]}) is not the target's ({theirs[:16]}): "
            "a drafter must share its target's tokenizer"
        )


def parse_init(value: str) -> tuple[str, int | None]:
    """``layers:N``, ``layers`` (the default depth) or ``scratch``."""
    kind, _, count = value.partition(":")
    if kind == "scratch" and not count:
        return kind, None
    if kind == "layers" and (not count or (count.isdigit() and int(count) > 0)):
        return kind, int(count) if count else None
    raise argparse.ArgumentTypeError(f"--init {value}: expected layers:N (N ≥ 1), layers or scratch")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "drafter",
        help="a new drafter for a target: its architecture and tokenizer, from scratch or from its layers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", required=True, type=Path, help="the target's checkpoint directory")
    p.add_argument("--out", required=True, type=Path, help="checkpoint directory to write")
    p.add_argument("--init", required=True, choices=INITS, help="scratch: random weights; layers: the target's")
    p.add_argument("--layers", type=int, default=None, help="decoder layers (layers: evenly spaced target layers)")
    p.add_argument("--keep-layers", default=None, help="--init layers: exactly these target layers, e.g. 0,29")
    for field, flag in SHAPE_FIELDS.items():
        p.add_argument(flag, dest=field, type=int, default=None, help=f"--init scratch: {field} (default: target's)")
    p.add_argument("--seed", type=int, default=0, help="--init scratch: the random weights' seed (default: 0)")
    p.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default=None,
        help="the shape of this preset's drafter (layers; for scratch also the width) where no flag gives it "
        "(default: none, the target's width)",
    )
    p.set_defaults(func=main)


def preset_shape(args: argparse.Namespace) -> tuple[int | None, dict[str, int]]:
    """--layers and the shape flags, each from the preset's drafter section where the command line has none."""
    given = {field: getattr(args, field) for field in SHAPE_FIELDS if getattr(args, field) is not None}
    if args.preset is None:
        return args.layers, given
    drafter = get_preset(args.preset).drafter
    layers = args.layers if args.layers is not None or args.keep_layers else drafter.num_hidden_layers
    if args.init != "scratch":
        return layers, given
    return layers, {**{field: getattr(drafter, field) for field in SHAPE_FIELDS}, **given}


def main(args: argparse.Namespace) -> int:
    layers, shape = preset_shape(args)
    if args.preset is not None:
        announce("drafter", args.preset, {"init": args.init, "layers": args.keep_layers or layers, **shape})
    manifest = run(args.target, args.out, args.init, layers, args.keep_layers, shape, args.seed)
    summary = manifest["architecture"]
    print(
        json.dumps(
            {
                "architecture": summary["architecture"],
                "parameters": summary["parameters"],
                "embedding_parameters": summary["embedding_parameters"],
                **{k: v for k, v in manifest["params"].items() if k != "shape"},
                "config": summary["config"],
            }
        )
    )
    return 0
