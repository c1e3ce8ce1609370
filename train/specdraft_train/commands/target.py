"""Stage `target`: a real chat model as it is distributed — a GGUF (``--gguf``) or a Hugging Face checkpoint directory
or hub id (``--hf``) of a Llama (Llama 3.x, SmolLM2), Mistral (Nemo, Small 3, Ministral: a llama GGUF), Qwen2
(Qwen2.5) or Qwen3 model, the architectures gguf_layout.ARCHITECTURES lists — → the target the pipeline trains
against, as an HF checkpoint, and the GGUF it is served from. Anything else is refused in one line naming what is
supported.

What "the target" is, defined once: **the weights the GGUF holds, dequantized to fp32** (gguf-py's dequantization,
block by block what llama.cpp computes from the file: d·q + m for Q4_1), or an HF checkpoint's weights as fp32. Both
outputs are those same weights:

- an HF checkpoint (config, fp32 ``model.safetensors``, tokenizer, ``chat_template.jinja``, generation config with the
  chat model's end tokens, ``manifest.json``) that `reference`, `distill`, `evaluate` and `drafter` load like any other;
  Q/K rows un-permuted back to HF's layout as transformers' GGUF loader does (its ``load_gguf_checkpoint``, without
  the ``accelerate`` that its ``from_pretrained(gguf_file=…)`` needs);
- ``target-f32.gguf``: the input file with every tensor stored as F32 and every metadata key kept (tokenizer,
  pre-tokenizer, chat template), which `specdraft serve` / `generate` / `validate` run; from an HF checkpoint, the
  checkpoint written by the pipeline's own export at F32 (training/gguf_export.py, llama.cpp's converter's layout).

Why not serve the quantized file as it came: llama.cpp computes a quantized matmul with its activations quantized too
(Q8_1 for Q4_1 weights), so the served Q4_1 model is another function than the fp32 model transformers runs on the same
weights, and a small chat model's greedy answers part early; training would teach a drafter a target nobody serves.
With F32 weights both sides compute the same function up to float summation order, flash attention and llama.cpp's
F16 KV cache, and their greedy tokens part only at near ties (docs/training.md has the figures).
Why not F16: Q4_1's d·q + m values are not all representable in F16, so an F16 file would be a third model.

The tokenizer comes from transformers' GGUF converter, mended where it is wrong for these files: its eos is the GGUF's
bos (SmolLM2's would end answers at ``<|im_start|>``), and it splits text with GPT-2's rule whatever the GGUF's
pre-tokenizer says (SmolLM2's ``smollm`` also isolates digits): the special tokens are set from the GGUF's ids and the
split from :func:`vocabulary.hf_pre_tokenizer`. From an HF checkpoint the tokenizer files are copied as they are. The
generation config is greedy and stops at the model's eos and at every end token its vocabulary has (``<|im_end|>``,
``<|endoftext|>``: Qwen's chat models end a turn at the first, a document at the second).
``--no-weights`` writes the checkpoint without its weights and the served GGUF: where the weights cannot go yet (a GPU
machine that receives the GGUF in parts), a drafter from scratch can already be made and pretrained with its tokenizer.

    bash train/scripts/data/fetch_smollm2.sh          # prints the Q4_1 GGUF's path (pinned by sha256)
    python -m specdraft_train target --gguf train/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf --out runs/smol/target
    python -m specdraft_train target --gguf ... --out runs/smol/target-meta --no-weights   # tokenizer and config alone
    python -m specdraft_train target --hf Qwen/Qwen2.5-0.5B-Instruct --out runs/qwen/target   # or a local directory
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.integrations.ggml import convert_gguf_tokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
from transformers.modeling_gguf_pytorch_utils import logger as gguf_loading_logger

from ..formats.artifacts import AtomicFile, sha256_file, write_manifest
from ..formats.gguf_layout import (
    ARCHITECTURES,
    GGUF_ARCHITECTURES,
    HF_CLASSES,
    Architecture,
    architecture_of,
    gguf_architecture,
    llama3_rope_from_factors,
    rope_theta,
)
from ..formats.gguf_reader import GgufReader, WeightsView, quiet, shared_reader
from ..formats.vocabulary import (
    END_OF_TEXT,
    IM_END,
    PRE_TOKENIZER_NAMES,
    find_pre_tokenizer,
    llama_cpp_pre_tokenizer,
    tokenizer_fingerprint,
    vocab_fingerprint,
)
from ..modeling.models import architecture_summary, new_model, save_checkpoint
from ..progress import progress_bar
from ..training.gguf_export import export_gguf, manifest_path

SOURCE_KINDS = ("gguf", "hf")  # --gguf FILE, --hf DIR_OR_ID
SUPPORTED = f"{GGUF_ARCHITECTURES} GGUFs and {HF_CLASSES} checkpoints"  # what every refusal names
SERVED_GGUF = "target-f32.gguf"  # in OUT: the target as specdraft serves it
# Beside the GGUF's eos: tokens that end a chat answer or a document wherever a vocabulary has them (llama.cpp counts
# both as end of generation too, so `generate` stops where `reference` does).
END_TOKENS = (IM_END, END_OF_TEXT)
# The GGUF's special token ids (tokenizer.ggml.<key>) by the HF tokenizer's name for them
SPECIAL_ID_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "pad": "padding_token_id"}


# ---------------------------------------------------------------------------------------------------------------------
# Reading the GGUF


def field_value(reader: gguf.GGUFReader, key: str) -> Any:
    """A metadata value (None when absent)."""
    field = reader.fields.get(key)
    return None if field is None else field.contents()


@functools.lru_cache(maxsize=4)
def _reader(path: Path, size: int, modified_ns: int) -> GgufReader:
    return GgufReader(path)


def read_gguf(path: Path) -> GgufReader:
    """The GGUF's reader, parsed once per process and file version: a 152k-token vocabulary's metadata takes seconds
    to parse (formats/gguf_reader.py), and `run` reads a target for its disk check, its vocabulary and its conversion.
    The reader maps the file read-only, so its users share it."""
    stat = path.resolve().stat()
    return _reader(path.resolve(), stat.st_size, stat.st_mtime_ns)


def open_gguf(path: Path) -> GgufReader:
    """The GGUF's reader, refused in one line when it is not a GGUF, not a supported architecture, or its vocabulary
    is not a GPT-2-style BPE with a pre-tokenizer this stage knows."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        reader = read_gguf(path)
    except (ValueError, OSError) as error:
        raise ValueError(f"{path}: not a readable GGUF ({error})") from error
    architecture = field_value(reader, "general.architecture")
    if gguf_architecture(architecture) is None:
        raise ValueError(f"{path}: architecture {architecture!r}: `target` converts {SUPPORTED}")
    # rope.scaling (linear, YaRN): transformers' GGUF loader reads none of it, so the checkpoint would rotate otherwise
    # than llama.cpp serves the file. Llama 3.1+'s frequency factors (rope_freqs) are read back by read_metadata.
    scaling = field_value(reader, f"{architecture}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise ValueError(
            f"{path}: RoPE scaling {scaling!r}: `target` converts GGUFs of plain RoPE (as SmolLM2, Qwen2.5 and Qwen3 "
            "have it) and of Llama 3's frequency factors (rope_freqs, Llama 3.1–3.3)"
        )
    model, pre = field_value(reader, "tokenizer.ggml.model"), field_value(reader, "tokenizer.ggml.pre")
    if model != "gpt2" or pre not in PRE_TOKENIZER_NAMES:
        raise ValueError(
            f"{path}: vocabulary {model!r} with pre-tokenizer {pre!r}: `target` converts GPT-2-style BPE vocabularies "
            f"('gpt2') with pre-tokenizer {', '.join(repr(p) for p in PRE_TOKENIZER_NAMES)}"
        )
    return reader


def gguf_tokens(reader: gguf.GGUFReader) -> list[str]:
    return list(field_value(reader, "tokenizer.ggml.tokens"))


# ---------------------------------------------------------------------------------------------------------------------
# The HF checkpoint


def read_metadata(reader: GgufReader) -> dict[str, Any]:
    """transformers' reading of the GGUF's metadata: its config, its tokenizer's vocabulary and merges (and the head
    size, ``key_length``, which its mapping leaves out for some architectures)."""
    with shared_reader(reader):
        metadata = load_gguf_checkpoint(str(reader.path), return_tensors=False)
    architecture = field_value(reader, "general.architecture")
    metadata["key_length"] = field_value(reader, f"{architecture}.attention.key_length")
    factors = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    if factors is not None:  # Llama 3's RoPE scaling, which transformers' mapping leaves out
        theta = float(field_value(reader, f"{architecture}.rope.freq_base") or 10_000.0)
        config = {**metadata["config"], "head_dim": metadata["key_length"]}
        try:
            rope = llama3_rope_from_factors(np.asarray(factors.data, dtype=np.float32).reshape(-1), theta, config)
        except ValueError as error:
            raise ValueError(f"{reader.path}: {error}") from None
        metadata["rope_parameters"] = rope
    return metadata


def model_config(metadata: dict[str, Any]) -> PretrainedConfig:
    """The HF config of the GGUF's model."""
    config = AutoConfig.for_model(**metadata["config"])
    # transformers' Qwen3 mapping skips attention.key_length, and Qwen3Config's default head_dim is 128 whatever the
    # width: the head size the file says is the one llama.cpp computes with
    if (key_length := metadata.get("key_length")) is not None:
        config.head_dim = int(key_length)
    if (rope := metadata.get("rope_parameters")) is not None:
        config.rope_parameters = rope
    # float32's 1e-5 read back as 9.999999747378752e-06: the shortest decimal of the same float32 is what HF writes
    config.rms_norm_eps = float(str(np.float32(config.rms_norm_eps)))
    return config


def load_model(reader: GgufReader, metadata: dict[str, Any]) -> torch.nn.Module:
    """The fp32 HF model of the GGUF's dequantized weights (transformers' own mapping of names and Q/K layout)."""
    config = model_config(metadata)
    model = new_model(config, seed=0)
    path = reader.path
    # Without the tokenizer's fields the loader warns that it cannot size the vocabulary: the model already has.
    with shared_reader(WeightsView(reader)), quiet(gguf_loading_logger):
        tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    tensors = {name: t for name, t in tensors.items() if "rope_freqs" not in name}  # in the config: rope_parameters
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"{path}: tensors the model lacks {unexpected[:3]}, or it needs {sorted(set(missing))[:3]}")
    model.tie_weights()
    model.eval()
    return model


def load_tokenizer(reader: gguf.GGUFReader, metadata: dict[str, Any]) -> PreTrainedTokenizerFast:
    """The GGUF's vocabulary as an HF fast tokenizer: transformers' conversion, its split and special tokens mended
    (module docstring), the chat template the GGUF carries."""
    converted, _ = convert_gguf_tokenizer(metadata["config"]["model_type"], metadata["tokenizer"])
    spec = json.loads(converted.to_str())
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokens = gguf_tokens(reader)
    special = {}
    for name, key in SPECIAL_ID_KEYS.items():
        if (token_id := field_value(reader, f"tokenizer.ggml.{key}")) is not None:
            special[f"{name}_token"] = tokens[int(token_id)]
    pre = find_pre_tokenizer(field_value(reader, "tokenizer.ggml.pre"))
    spec["model"]["ignore_merges"] = pre.ignore_merges
    backend = Tokenizer.from_str(json.dumps(spec))
    backend.pre_tokenizer = pre.build()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, chat_template=field_value(reader, "tokenizer.chat_template"), **special
    )
    # Saved into tokenizer_config.json, where export reads it back for tokenizer.ggml.add_space_prefix; set after
    # construction, since the constructor would rebuild the split from it.
    if (add_space_prefix := field_value(reader, "tokenizer.ggml.add_space_prefix")) is not None:
        tokenizer.init_kwargs["add_prefix_space"] = bool(add_space_prefix)
    return tokenizer


def gguf_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    """The target's tokenizer alone, as the stage writes it into the checkpoint (e.g. for a drafter's vocabulary)."""
    reader = open_gguf(path)
    return load_tokenizer(reader, read_metadata(reader))


def stop_generation_config(
    vocab: dict[str, int], eos: list[int], bos: int | None, pad: int | None, where: str
) -> GenerationConfig:
    """Greedy, stopping at the model's ``eos`` ids and at every END_TOKENS the vocabulary has."""
    stop = list(dict.fromkeys(eos + [vocab[t] for t in END_TOKENS if t in vocab]))
    if not stop:
        raise ValueError(
            f"{where}: the model names no eos token and its vocabulary has none of {', '.join(END_TOKENS)}"
        )
    return GenerationConfig(
        bos_token_id=bos, eos_token_id=stop, pad_token_id=stop[0] if pad is None else pad, do_sample=False
    )


def generation_config(reader: gguf.GGUFReader) -> GenerationConfig:
    """Greedy, stopping at the GGUF's eos and at every END_TOKENS the vocabulary has."""
    vocab = {token: i for i, token in reversed(list(enumerate(gguf_tokens(reader))))}  # a repeated string: its first id
    ids = {key: field_value(reader, f"tokenizer.ggml.{key}_token_id") for key in ("eos", "bos", "padding")}
    ids = {key: None if value is None else int(value) for key, value in ids.items()}
    eos = [] if ids["eos"] is None else [ids["eos"]]
    return stop_generation_config(vocab, eos, ids["bos"], ids["padding"], "the GGUF")


# ---------------------------------------------------------------------------------------------------------------------
# The served GGUF


def write_served_gguf(reader: gguf.GGUFReader, out_path: Path, progress: bool = True) -> None:
    """The input GGUF with every tensor dequantized to F32 (the same values the HF checkpoint holds, in the GGUF's own
    layout) and every metadata key kept but the file type; written atomically, one tensor in memory at a time."""
    architecture = field_value(reader, "general.architecture")
    writer = gguf.GGUFWriter(path=None, arch=architecture)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        value = field.contents()
        if field.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.ALL_F32)
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)
    for tensor in reader.tensors:
        shape = tuple(int(n) for n in reversed(tensor.shape))  # ggml's ne reversed: numpy's row-major shape
        writer.add_tensor_info(tensor.name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
    with AtomicFile(out_path) as tmp:
        writer.write_header_to_file(path=tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        bar = progress_bar(len(reader.tensors), f"target: {out_path.name}", "tensor", enabled=progress)
        for tensor in reader.tensors:
            shape = tuple(int(n) for n in reversed(tensor.shape))
            writer.write_tensor_data(gguf.dequantize(tensor.data, tensor.tensor_type).reshape(shape))
            bar.update(1)
        bar.close()
        writer.close()


# ---------------------------------------------------------------------------------------------------------------------
# From a Hugging Face checkpoint


def hf_architecture(source: str, config: PretrainedConfig) -> Architecture:
    """The architecture of an HF checkpoint's config, refused in one line when it is none this stage converts (or
    one export cannot write as the served GGUF: biases where the architecture has none, RoPE scaling)."""
    classes = config.architectures or []
    if not any(a.hf_class in classes or (not classes and a.model_type == config.model_type) for a in ARCHITECTURES):
        found = ", ".join(classes) or config.model_type
        raise ValueError(f"{source}: {found}: `target` converts {SUPPORTED}")
    arch = architecture_of(config.to_dict(), source)
    rope_theta(config.to_dict())
    return arch


def hf_tokenizer(source: str) -> PreTrainedTokenizerBase:
    """The checkpoint's tokenizer, refused in one line when llama.cpp would split its text otherwise (export's rule)."""
    tokenizer = AutoTokenizer.from_pretrained(source)
    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        raise ValueError(f"{source}: no tokenizer.json: `target` converts byte-level BPE tokenizers (a fast tokenizer)")
    try:
        llama_cpp_pre_tokenizer(json.loads(tokenizer.backend_tokenizer.to_str()))
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None
    return tokenizer


def hf_generation_config(source: str, config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase) -> GenerationConfig:
    """Greedy, stopping at the checkpoint's eos ids (its generation config's, else its config's and its tokenizer's) and
    at every END_TOKENS the vocabulary has; its sampling settings are not the target's (the target is greedy)."""
    try:
        given = GenerationConfig.from_pretrained(source)
    except OSError:  # no generation_config.json
        given = GenerationConfig.from_model_config(config)
    eos = given.eos_token_id if given.eos_token_id is not None else config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    bos = given.bos_token_id if given.bos_token_id is not None else config.bos_token_id
    bos = bos[0] if isinstance(bos, list) else bos
    pad = given.pad_token_id if given.pad_token_id is not None else tokenizer.pad_token_id
    return stop_generation_config(tokenizer.get_vocab(), eos, bos, pad, source)


def hf_inputs(source: str) -> dict[str, Any]:
    """What the manifest records of an HF source: the directory's model, config and tokenizer files by sha256, or
    the hub id."""
    path = Path(source)
    if not path.is_dir():
        return {"id": source}
    names = sorted(p.name for p in path.iterdir() if p.suffix in (".safetensors", ".json", ".jinja"))
    return {"path": source, "sha256": {name: sha256_file(path / name) for name in names}}


def convert_hf(source: str, out_dir: Path, progress: bool, weights: bool) -> tuple[torch.nn.Module, Any, list[str]]:
    """The HF checkpoint's weights as fp32 into ``out_dir`` with its tokenizer files as they are, and (with weights)
    the served F32 GGUF written by export; returns the model, its tokenizer and the files written."""
    try:
        config = AutoConfig.from_pretrained(source)
    except OSError as error:  # no such directory, no config.json, no such hub id (or no hub)
        raise ValueError(
            f"--hf {source}: not an HF checkpoint directory or hub id ({str(error).splitlines()[0]})"
        ) from None
    hf_architecture(source, config)
    tokenizer = hf_tokenizer(source)  # both refused before any weight is read
    if weights:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    else:
        with torch.device("meta"):
            model = new_model(config, seed=0)
    model.generation_config = hf_generation_config(source, config, tokenizer)
    model.eval()
    outputs = save_checkpoint(model, out_dir, source, weights=weights)
    if weights:
        export_gguf(out_dir, out_dir / SERVED_GGUF, "F32", progress=progress, ptq=True)
        manifest_path(out_dir / SERVED_GGUF).unlink()  # the target's manifest records the file
        outputs.append(SERVED_GGUF)
    return model, tokenizer, outputs


# ---------------------------------------------------------------------------------------------------------------------
# The stage


def source_kind(source: Path | str, kind: str | None) -> str:
    """``kind`` when given, else "gguf" for a file and "hf" for a directory or a hub id."""
    if kind is not None:
        if kind not in SOURCE_KINDS:
            raise ValueError(f"source kind {kind!r}: expected one of {', '.join(SOURCE_KINDS)}")
        return kind
    return "gguf" if Path(source).is_file() or str(source).endswith(".gguf") else "hf"


def source_tokens(source: Path | str) -> list[str]:
    """A model's token strings by id as given, before any conversion: a GGUF's ``tokenizer.ggml.tokens``, or an HF
    tokenizer's vocabulary (the same byte-level strings for the BPE vocabularies this stage converts)."""
    if source_kind(source, None) == "gguf":
        return gguf_tokens(open_gguf(Path(source)))
    vocabulary = hf_tokenizer(str(source)).get_vocab()
    tokens = [""] * (max(vocabulary.values()) + 1)
    for token, token_id in vocabulary.items():
        tokens[token_id] = token
    return tokens


def source_stamp(path_or_id: str) -> dict[str, Any]:
    """What identifies a given input (a model, a prompts file): a file's sha256, a folder's files by name and size, or
    the hub id itself."""
    path = Path(path_or_id)
    if path.is_file():
        return {"file": path.name, "sha256": sha256_file(path)}
    if path.is_dir():
        return {"dir": {p.name: p.stat().st_size for p in sorted(path.iterdir()) if p.is_file()}}
    return {"id": path_or_id}


PADDING_TOKEN = re.compile(r"\[PAD\d+\]|")  # the rows a vocabulary is padded with to its embedding's size, or none


def check_same_vocabulary(target_source: str, drafter_source: str) -> None:
    """A drafter whose vocabulary is plainly another — a token at an id where the target has another — refused
    before anything is converted (an 8B target takes minutes); the converted checkpoints' fingerprints decide the
    rest."""
    ours, theirs = source_tokens(drafter_source), source_tokens(target_source)
    for token_id, (mine, its) in enumerate(zip(ours, theirs)):
        if mine != its and not (PADDING_TOKEN.fullmatch(mine) or PADDING_TOKEN.fullmatch(its)):
            raise ValueError(
                f"{drafter_source}: the drafter's vocabulary is not the target's (token {token_id} is {mine!r}, the "
                f"target's {its!r}): a drafter must share its target's tokenizer"
            )


def weights_bytes(source: str) -> int:
    """What a model's weights take in fp32 (a GGUF's tensors' elements × 4; an HF folder's safetensors, counted as if
    they were 16-bit); 0 for a hub id, whose size is unknown before it is fetched."""
    path = Path(source)
    if path.is_file():
        return 4 * sum(int(tensor.n_elements) for tensor in read_gguf(path).tensors)
    return 2 * sum(p.stat().st_size for p in path.glob("*.safetensors")) if path.is_dir() else 0


def check_disk(source: str, out: Path) -> None:
    """Refuse before writing anything a target whose fp32 checkpoint and served F32 GGUF (and a margin for the
    drafter's checkpoints) would not fit the disk."""
    needed = int(2.5 * weights_bytes(source))
    free = shutil.disk_usage(out).free
    if needed > free:
        raise ValueError(
            f"{out}: the target's fp32 checkpoint and served GGUF need about {needed / 1e9:.1f} GB, "
            f"and the disk has {free / 1e9:.1f} GB free"
        )


def convert_gguf(gguf_path: Path, out_dir: Path, progress: bool, weights: bool) -> tuple[Any, ...]:
    """The GGUF's dequantized weights into ``out_dir`` (module docstring); returns the model, its tokenizer, the files
    written, and the manifest's inputs and extra fields of a GGUF source."""
    reader = open_gguf(gguf_path)
    metadata = read_metadata(reader)
    tokenizer = load_tokenizer(reader, metadata)
    if weights:
        model = load_model(reader, metadata)
    else:
        with torch.device("meta"):  # the architecture and its parameter count, no memory
            model = new_model(model_config(metadata), seed=0)
    model.generation_config = generation_config(reader)
    vocab_size = model.config.vocab_size
    if len(gguf_tokens(reader)) != vocab_size:
        raise ValueError(f"{gguf_path}: {len(gguf_tokens(reader))} tokens, but the model's vocab_size is {vocab_size}")
    outputs = save_checkpoint(model, out_dir, tokenizer, weights=weights)
    if weights:
        write_served_gguf(reader, out_dir / SERVED_GGUF, progress)
        outputs.append(SERVED_GGUF)
    types: dict[str, int] = {}
    for tensor in reader.tensors:
        types[tensor.tensor_type.name] = types.get(tensor.tensor_type.name, 0) + 1
    inputs = {"gguf": {"path": str(gguf_path), "sha256": sha256_file(gguf_path), "tensor_types": types}}
    keys = ("general.name", "general.architecture", "general.file_type", "tokenizer.ggml.pre")
    extra = {
        "gguf": {key: field_value(reader, key) for key in keys},
        "vocab_fingerprint": vocab_fingerprint(gguf_tokens(reader)),
    }
    return model, tokenizer, outputs, inputs, extra


def run(
    gguf_path: Path | str,
    out_dir: Path,
    progress: bool = True,
    weights: bool = True,
    kind: str | None = None,
) -> dict[str, Any]:
    """Convert the target ``gguf_path`` — a GGUF file, or with ``kind="hf"`` (the default for a directory or a hub id)
    an HF checkpoint — into ``out_dir`` (module docstring); returns the manifest. ``weights=False``: the checkpoint's
    other files alone (config, tokenizer, chat template, generation config: all that `drafter --init scratch` reads),
    the same bytes as in the full checkpoint, and no served GGUF."""
    start = time.time()
    source, kind = gguf_path, source_kind(gguf_path, kind)
    if kind == "gguf":
        model, tokenizer, outputs, inputs, extra = convert_gguf(Path(source), out_dir, progress, weights)
    else:
        model, tokenizer, outputs = convert_hf(str(source), out_dir, progress, weights)
        inputs, extra = {"hf": hf_inputs(str(source))}, {}
        # the served file's token list, as the GGUF path records its input's (without weights: what export will write)
        served = out_dir / SERVED_GGUF
        tokens = gguf_tokens(GgufReader(served)) if weights else None
        extra["vocab_fingerprint"] = (
            tokenizer_fingerprint(tokenizer, model.config.vocab_size) if tokens is None else vocab_fingerprint(tokens)
        )
    vocab_size = model.config.vocab_size
    return write_manifest(
        out_dir,
        "target",
        outputs=outputs,
        params={"served": {"file": SERVED_GGUF, "type": "F32"} if weights else None, "weights": weights, "kind": kind},
        inputs=inputs,
        extra={
            "architecture": architecture_summary(model),
            **extra,
            "special_ids": {
                "bos": tokenizer.bos_token_id,
                "eos": tokenizer.eos_token_id,
                "pad": tokenizer.pad_token_id,
                "stop": model.generation_config.eos_token_id,
            },
            # the served file's token list and the tokenizer's, as export would write it: validate and generate compare
            # fingerprints, so the two must be one vocabulary
            "tokenizer_vocab_fingerprint": tokenizer_fingerprint(tokenizer, vocab_size),
            "seconds": time.time() - start,
        },
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "target",
        help="a Llama/Qwen2/Qwen3 GGUF or HF checkpoint → the target's HF checkpoint and its F32 GGUF for serving",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--gguf", type=Path, help="the target as distributed (any type gguf-py dequantizes)")
    source.add_argument("--hf", help="the target as an HF checkpoint directory or hub id (e.g. Qwen/Qwen3-1.7B)")
    p.add_argument("--out", required=True, type=Path, help=f"checkpoint directory to write (with {SERVED_GGUF})")
    p.add_argument(
        "--no-weights",
        dest="weights",
        action="store_false",
        help="only the config, tokenizer, chat template and generation config (a few MB; all `drafter --init "
        "scratch` needs): no weights, no served GGUF",
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.gguf is not None:
        manifest = run(args.gguf, args.out, weights=args.weights, kind="gguf")
    else:
        manifest = run(args.hf, args.out, weights=args.weights, kind="hf")
    summary = manifest["architecture"]
    print(
        json.dumps(
            {
                "checkpoint": str(args.out),
                "served": str(args.out / SERVED_GGUF) if args.weights else None,
                "architecture": summary["architecture"],
                "parameters": summary["parameters"],
                "special_ids": manifest["special_ids"],
            }
        )
    )
    return 0
