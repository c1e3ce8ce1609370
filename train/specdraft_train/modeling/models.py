"""Causal LMs: Qwen3-architecture lab models built from a preset, any model (Llama, Qwen2, Qwen3: TRAINED_MODEL_TYPES)
loaded from a checkpoint or an HF id/path, new models of a given config, atomic saving.

A checkpoint directory is an ordinary HF model directory (config.json, generation_config.json, model.safetensors,
tokenizer.json, tokenizer_config.json) plus the stage's manifest.json, so the same loading code serves lab checkpoints
and real models such as ``Qwen/Qwen3-1.7B``.

    from specdraft_train.modeling.models import load_causal_lm
    model = load_causal_lm("runs/lab/target", device=torch.device("cpu"))
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen3Config,
)

from ..config import ModelConfig
from ..formats.artifacts import MANIFEST_NAME, read_manifest, verify_stage_dir
from ..formats.gguf_layout import ARCHITECTURES
from ..formats.vocabulary import END_OF_TEXT, IM_END, TOKENIZER_FILES

# The model types (config.model_type) the pipeline makes drafters of: `drafter` gives a target's drafter the target's
# own architecture, so it must be one of these (export writes both; see docs/export.md for why the same).
TRAINED_MODEL_TYPES = tuple(arch.model_type for arch in ARCHITECTURES)  # the architectures targets and drafters have
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors")
CHECKPOINT_FILES = MODEL_FILES + TOKENIZER_FILES
# Every file an HF tokenizer may be saved as (transformers 5 writes a chat template to its own chat_template.jinja): a
# stage's checkpoint keeps, byte for byte, each one its input checkpoint had (save_checkpoint).
CHECKPOINT_TOKENIZER_FILES = TOKENIZER_FILES + (
    "chat_template.jinja",
    "chat_template.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)
INIT_STD = 0.02  # GPT-2/Qwen initializer range; fine for these depths
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}  # --dtype's choices


def add_dtype_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--dtype`` (DTYPES, float32 by default) for a command that loads models; ``what``: whose weights it sets."""
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=sorted(DTYPES),
        help=f"{what} (default: float32; bfloat16 for real models)",
    )


# Written by `distill --qat` inside its checkpoint: per-block clip factors, fingerprints, the embedding type. evaluate
# and export find it there by themselves, so the two always score and write the same Q4_0 blocks.
QAT_STATE_FILE = "qat_state.safetensors"


def resolve_device(name: str) -> torch.device:
    """`auto` picks CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast_context(device: torch.device, cache_enabled: bool = True) -> Any:
    """bf16 autocast on CUDA (weights stay fp32 for the optimizer); plain fp32 on CPU, where bf16 is slower.

    ``cache_enabled=False`` while capturing a CUDA graph: autocast's cache of cast weights would otherwise hand the
    graph tensors that the cache frees when the autocast region ends.
    """
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache_enabled)
    return torch.autocast("cpu", enabled=False)


def qwen3_config(model: ModelConfig, vocab_size: int, eos_token_id: int, pad_token_id: int) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=model.hidden_size,
        intermediate_size=model.intermediate_size,
        num_hidden_layers=model.num_hidden_layers,
        num_attention_heads=model.num_attention_heads,
        num_key_value_heads=model.num_key_value_heads,
        head_dim=model.head_dim,
        max_position_embeddings=model.max_position_embeddings,
        rope_parameters={"rope_theta": model.rope_theta, "rope_type": "default"},
        tie_word_embeddings=model.tie_word_embeddings,
        initializer_range=INIT_STD,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        bos_token_id=None,
    )


def new_model(config: PretrainedConfig, seed: int) -> PreTrainedModel:
    """A randomly initialized causal LM of ``config``'s architecture (seeded), greedy, stopping at the config's eos."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=False
    )
    return model


def lab_generation_config(tokenizer: PreTrainedTokenizerBase) -> GenerationConfig:
    """Greedy, stopping at end-of-text or end-of-turn (chat prompts end their answer with <|im_end|>)."""
    eos = [tokenizer.convert_tokens_to_ids(t) for t in (END_OF_TEXT, IM_END)]
    return GenerationConfig(eos_token_id=eos, pad_token_id=eos[0], do_sample=False)


def is_local_checkpoint(name_or_path: str | Path) -> bool:
    return Path(name_or_path).is_dir()


def verify_checkpoint(name_or_path: str | Path) -> dict[str, Any] | None:
    """Verify a lab checkpoint's manifest (refusing mismatched hashes); HF ids and manifest-less dirs return None."""
    if is_local_checkpoint(name_or_path) and (Path(name_or_path) / MANIFEST_NAME).is_file():
        return verify_stage_dir(name_or_path)
    return None


def checkpoint_qat_state(name_or_path: str | Path) -> Path | None:
    """The QAT state inside a local checkpoint (`distill --qat`'s output), or None."""
    path = Path(name_or_path) / QAT_STATE_FILE
    return path if is_local_checkpoint(name_or_path) and path.is_file() else None


def _loading(name_or_path: str | Path, what: str, load: Any) -> Any:
    """``load()``, with transformers' multi-line failure for an HF id it cannot fetch (no network, no such repo, not in
    the cache) turned into one line naming the model: the stage CLIs print ValueErrors as one line."""
    try:
        return load()
    except OSError as error:
        first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        where = "a local directory" if is_local_checkpoint(name_or_path) else "not a local directory; as an HF id"
        raise ValueError(
            f"cannot load the {what} of {str(name_or_path)!r} ({where}): {first} "
            "(an HF id needs the hub or its cache: download it first, e.g. huggingface-cli download, or give a path)"
        ) from error


def load_causal_lm(name_or_path: str | Path, device: torch.device, dtype: torch.dtype = torch.float32) -> nn.Module:
    model = _loading(
        name_or_path, "model", lambda: AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=dtype)
    )
    model.to(device)
    model.eval()
    return model


def load_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerBase:
    return _loading(name_or_path, "tokenizer", lambda: AutoTokenizer.from_pretrained(str(name_or_path)))


def final_hidden_states(model: nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
    """The decoder's last hidden states (after its final norm), (B, T, H), without the (B, T, V) logits: the forward
    runs through ``model`` itself (DDP's and FSDP's hooks need that) with no position kept for its head; callers apply
    the head where they score (losses.head_terms, tau.greedy_matches). ``inputs``: ``input_ids`` with an
    ``attention_mask`` (right-padded rows) or with packed sequences' ``position_ids`` and ``cu_seq_lens_*``
    (packing.layout, for a model using packing.PACKED_ATTENTION)."""
    outputs = model(
        **inputs,
        output_hidden_states=True,
        logits_to_keep=torch.zeros(0, dtype=torch.long, device=inputs["input_ids"].device),
        use_cache=False,  # one teacher-forced pass: no cache to build (and activation checkpointing refuses one)
    )
    return outputs.hidden_states[-1]


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Each decoder layer's activations recomputed in the backward pass (DistillConfig.activation_checkpointing);
    non-reentrant, which DDP, FSDP and QAT's quantized weights all take."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def compile_decoder_layers(model: nn.Module, backend: str = "inductor") -> int:
    """torch.compile each decoder layer in place (DistillConfig.compile), with dynamic shapes, since packed steps
    differ in tokens; returns how many. Layer by layer, as torchtitan does: every layer shares one compiled graph,
    and the model's own Python around them (masks, embeddings, the head in chunks) stays eager. A layer is any
    transformers GradientCheckpointingLayer (Qwen3's, Llama's decoder layers), so recomputation wraps the compiled
    layer as it wraps an eager one."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    for layer in layers:
        layer.compile(backend=backend, dynamic=True)
    return len(layers)


# The modules the reference engine compiles (StaticEngineConfig.compile), by class name, as transformers names them in
# every decoder it has (Qwen3RMSNorm, LlamaMLP, ...).
POINTWISE_MODULE_SUFFIXES = ("RMSNorm", "MLP")


def compile_pointwise_modules(model: nn.Module, backend: str = "inductor") -> Callable[[], None]:
    """torch.compile the forward of each RMSNorm and MLP of a decoder, with dynamic shapes; returns what undoes it.
    transformers' RMSNorm is about eight kernels (casts to fp32 and back, square, mean, rsqrt, two products) and the
    MLP's SiLU × up two, each a pass over the activations: a decode step of an 8B target ran ~1,800 such kernels
    (bench/results/2026-12-03-h200-decode-profile). Compiled, each module's pointwise work is one or two kernels.
    Attention and the KV cache stay eager: a cache write indexes its layer, which would give every layer a graph of
    its own. Modules of one class share their graphs (one code object; dynamo guards on the class)."""
    modules = [m for m in model.modules() if type(m).__name__.endswith(POINTWISE_MODULE_SUFFIXES)]
    # Inductor's emulate_precision_casts: a fused kernel rounds each intermediate to the dtype eager gives it (bf16
    # between the norm's and the MLP's ops), as eager does, where by default it keeps fp32 throughout.
    options = {"emulate_precision_casts": True} if backend == "inductor" else None
    for module in modules:  # an instance attribute
        module.forward = torch.compile(module.forward, backend=backend, dynamic=True, options=options)

    def undo() -> None:
        for module in modules:
            del module.forward  # the class's own forward again

    return undo


def output_weight(model: nn.Module) -> torch.Tensor:
    """The output head's weight (V, H) of a model (or of the model inside DDP), read once a step: under QAT the
    fake-quantized one, computed once and shared by every chunk of positions."""
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    head = inner.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise ValueError("an output head with a bias: the chunked head computes x · Wᵀ only (Qwen3 has none)")
    return head.weight


def parameter_count(model: nn.Module) -> int:
    """Unique parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def architecture_summary(model: nn.Module) -> dict[str, Any]:
    config = model.config
    return {
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "parameters": parameter_count(model),
        "embedding_parameters": model.get_input_embeddings().weight.numel(),
        "config": {
            k: getattr(config, k)
            for k in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "max_position_embeddings",
                "tie_word_embeddings",
                "rms_norm_eps",
                "rope_parameters",
            )
            if hasattr(config, k)
        },
    }


def save_checkpoint(
    model: nn.Module, out_dir: Path, tokenizer_source: str | Path | PreTrainedTokenizerBase, weights: bool = True
) -> list[str]:
    """Write an HF model directory into ``out_dir`` file by file, each file atomically (temp dir + os.replace).

    Tokenizer files come from ``tokenizer_source``: a directory holding tokenizer.json (each of its
    CHECKPOINT_TOKENIZER_FILES copied byte for byte, the chat template's file included), a tokenizer object, or an HF
    id whose tokenizer is saved; so the checkpoint is self-contained. ``weights=False``: every file but the weights
    (transformers' own config and generation config files, so a model on the meta device will do). Returns the file
    names written; callers write the stage manifest afterwards, which is what marks the checkpoint complete.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)  # the checkpoint is incomplete until a new manifest lands
    tmp = Path(tempfile.mkdtemp(prefix=".save.", dir=out_dir))
    try:
        model.save_pretrained(tmp, safe_serialization=True, **({} if weights else {"state_dict": {}}))
        if isinstance(tokenizer_source, PreTrainedTokenizerBase):
            tokenizer_source.save_pretrained(tmp)
        elif (Path(tokenizer_source) / "tokenizer.json").is_file():
            for name in CHECKPOINT_TOKENIZER_FILES:
                src = Path(tokenizer_source) / name
                if src.is_file():
                    shutil.copyfile(src, tmp / name)
        else:
            load_tokenizer(tokenizer_source).save_pretrained(tmp)
        names = sorted(p.name for p in tmp.iterdir() if p.is_file())
        for name in names:
            with open(tmp / name, "rb+") as f:
                os.fsync(f.fileno())
            (tmp / name).replace(out_dir / name)
        return names
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def checkpoint_info(name_or_path: str | Path) -> dict[str, Any]:
    """What a consuming stage records about a model input: path or id, and its manifest's hashes when it has one."""
    manifest = read_manifest(name_or_path) if is_local_checkpoint(name_or_path) else None
    if manifest is None:
        return {"path": str(name_or_path), "verified": False}
    return {
        "path": str(name_or_path),
        "stage": manifest["stage"],
        "verified": True,
        "outputs": {rel: info["sha256"] for rel, info in manifest["outputs"].items()},
    }
