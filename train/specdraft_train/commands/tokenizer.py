"""Stage `tokenizer`: a byte-level BPE for the lab, built like Qwen2/Qwen3's so it travels into GGUF the same way.

Same normalizer (NFC), pre-tokenizer (Qwen2's split regex, then byte-level), post-processor and decoder as Qwen3's
tokenizer.json, so the GGUF exporter maps it as ``tokenizer.ggml.model = "gpt2"`` with llama.cpp's ``qwen2``
pre-tokenizer. Special tokens: ``<|endoftext|>`` (document end, padding), ``<|im_start|>``/``<|im_end|>`` (chat
turns), ``<think>``/``</think>`` (so Qwen3-style chat templates with thinking off render). Trained on the train split
only (code and prose; a byte-capped sample keeps each kind's share of the pretraining stream). Outputs
``tokenizer.json`` and ``tokenizer_config.json`` (with a ChatML chat template), the train and dev splits tokenized
once for pretraining (``train.tokens.npy``, ``dev.tokens.npy``: each document followed by <|endoftext|>; in the train
stream every prose document appears `prose_repeats` times), and ``manifest.json``.

    python -m specdraft_train tokenizer --corpus runs/lab/corpus --out runs/lab/tokenizer --preset micro
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from ..config import TokenizerConfig, announce, override
from ..formats.artifacts import atomic_write_json, atomic_write_text, input_record, verify_stage_dir, write_manifest
from ..formats.documents import (
    KINDS,
    Document,
    pretraining_streams,
    read_documents,
    save_token_stream,
    stream_weight,
    subset_rank,
    token_file,
)
from ..formats.vocabulary import (
    END_OF_TEXT,
    IM_END,
    IM_START,
    SPECIAL_TOKENS,
    THINK_TOKENS,
    TOKENIZER_FILES,
    hf_pre_tokenizer,
)
from ..presets import LAB_PRESETS, add_preset_argument, get_preset

# Qwen3's template reduced to what the lab uses: system/user/assistant turns, generation prompt, thinking switch.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def build_untrained() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = hf_pre_tokenizer("qwen2")  # Qwen2's split regex, then bytes
    tokenizer.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    # decoders.ByteLevel() takes no options but serializes defaults; write Qwen3's exact decoder entry (the options do
    # not change decoding) so tokenizer.json's pipeline reads the same as a real Qwen3's.
    spec = json.loads(tokenizer.to_str())
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return Tokenizer.from_str(json.dumps(spec))


def train_tokenizer(texts: list[str], config: TokenizerConfig) -> Tokenizer:
    tokenizer = build_untrained()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size - len(THINK_TOKENS),  # the think tokens are added after training
        min_frequency=config.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte has a token: no <unk>, ever
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tokenizer.add_tokens(list(THINK_TOKENS))
    assert tokenizer.get_vocab_size() <= config.vocab_size
    return tokenizer


def tokenizer_config_json(tokenizer: Tokenizer) -> dict[str, Any]:
    """HF tokenizer_config.json in Qwen3's shape (eos = <|endoftext|> for the lab's plain-text continuations)."""
    added = {}
    for content in (*SPECIAL_TOKENS, *THINK_TOKENS):
        token_id = tokenizer.token_to_id(content)
        added[str(token_id)] = {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": content in SPECIAL_TOKENS,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": END_OF_TEXT,
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": END_OF_TEXT,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def save_tokenizer_files(tokenizer: Tokenizer, out_dir: Path) -> None:
    atomic_write_text(out_dir / "tokenizer.json", tokenizer.to_str(pretty=True))
    atomic_write_json(out_dir / "tokenizer_config.json", tokenizer_config_json(tokenizer))


def load_tokenizer(tokenizer_dir: str | Path) -> Tokenizer:
    return Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))


def special_ids(tokenizer: Tokenizer) -> dict[str, int]:
    ids = {}
    for content in SPECIAL_TOKENS:
        token_id = tokenizer.token_to_id(content)
        if token_id is None:
            raise ValueError(f"tokenizer lacks special token {content}")
        ids[content] = token_id
    return ids


def bpe_sample(documents: list[Document], config: TokenizerConfig) -> list[Document]:
    """The documents BPE trains on: all of them, or under a byte cap a hash-ordered sample of each kind sized to the
    kind's share of the pretraining stream (prose counted `prose_repeats` times): neither kind crowds out the other."""
    if config.max_train_bytes <= 0:
        return documents
    weighted = {kind: sum(d.bytes for d in documents if d.kind == kind) * stream_weight(kind, config) for kind in KINDS}
    total = max(sum(weighted.values()), 1)
    sample = []
    for kind in KINDS:
        budget = config.max_train_bytes * weighted[kind] / total
        used = 0
        for doc in sorted((d for d in documents if d.kind == kind), key=lambda d: subset_rank(d.sha256)):
            if used + doc.bytes > budget:
                break
            sample.append(doc)
            used += doc.bytes
    return sample


def build(corpus_dir: str | Path, out_dir: str | Path, config: TokenizerConfig) -> dict[str, Any]:
    start = time.time()
    corpus_manifest = verify_stage_dir(corpus_dir, "corpus")
    documents = read_documents(corpus_dir, "train")
    training_documents = bpe_sample(documents, config)
    tokenizer = train_tokenizer([d.text for d in training_documents], config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_tokenizer_files(tokenizer, out)
    streams, once = pretraining_streams(tokenizer, corpus_dir, tokenizer.token_to_id(END_OF_TEXT), config)
    for split, tokens in streams.items():
        save_token_stream(out / token_file(split), tokens)
    bytes_per_token = sum(d.bytes for d in documents) / max(sum(once.values()) - len(documents), 1)
    return write_manifest(
        out,
        "tokenizer",
        outputs=[*TOKENIZER_FILES, *(token_file(split) for split in streams)],
        params={"config": config.__dict__},
        inputs={"corpus": input_record(corpus_dir, corpus_manifest)},
        extra={
            "vocab_size": tokenizer.get_vocab_size(),
            "bytes_per_token": round(bytes_per_token, 3),
            "tokens": {split: int(len(tokens)) for split, tokens in streams.items()},
            # the train split's tokens of each kind, once, and as the pretraining stream holds them
            "train_tokens_by_kind": {
                kind: {"once": once[kind], "in_stream": once[kind] * stream_weight(kind, config)} for kind in KINDS
            },
            "prose_repeats": config.prose_repeats,
            "training_documents": len(training_documents),
            "training_bytes_by_kind": {
                kind: sum(d.bytes for d in training_documents if d.kind == kind) for kind in KINDS
            },
            "special_ids": special_ids(tokenizer),
            "seconds": time.time() - start,
        },
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tokenizer",
        help="train the lab's byte-level BPE (Qwen2-style) on the train split",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--corpus", required=True, type=Path, help="output directory of the corpus stage")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    add_preset_argument(p, choices=LAB_PRESETS)
    p.add_argument("--vocab-size", type=int, default=None, help="at most 32768 (default: preset's)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    config = override(get_preset(args.preset).tokenizer, vocab_size=args.vocab_size)
    if config.vocab_size > 32_768:
        raise ValueError(f"--vocab-size {config.vocab_size}: the lab caps vocabularies at 32768")
    announce(
        "tokenizer", args.preset, {"vocab_size": config.vocab_size, "train bytes": config.max_train_bytes or "all"}
    )
    manifest = build(args.corpus, args.out, config)
    print(json.dumps({"vocab_size": manifest["vocab_size"], "bytes_per_token": manifest["bytes_per_token"]}))
    return 0
