"""The vocabulary a GGUF drafter carries, and its fingerprint: what the server reports and the validator compares.

`export` writes ``tokenizer.ggml.tokens`` from a checkpoint's tokenizer by :func:`gguf_vocabulary` (the rules of
llama.cpp's convert_hf_to_gguf.py for a Qwen vocabulary); :func:`vocab_fingerprint` is the sha256 of that token list as
JSON, the Python twin of src/engine/gguf.ts ``vocabFingerprint`` (``JSON.stringify`` of the list, UTF-8), which
``GET /info`` reports as ``vocab_fingerprint`` and pack records in architecture.json. `reference` records its
target's fingerprint in its manifest, so `specdraft validate` can refuse a server whose drafter speaks other token ids
than the data (tests/test_real_path.py checks the twin against the TypeScript function).

    from specdraft_train.vocabulary import tokenizer_fingerprint
    tokenizer_fingerprint(load_tokenizer("Qwen/Qwen3-8B"), vocab_size=151_936)
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tokenizers import Tokenizer

# The lab tokenizer's special tokens, Qwen3's: <|endoftext|> ends a document (and pads), ChatML's markers frame turns.
END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END)
# Not special in Qwen3 either (ordinary added tokens): the chat template writes them as text when thinking is off.
THINK_TOKENS = ("<think>", "</think>")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # what a checkpoint's tokenizer is saved as
# The split regex of Qwen2/Qwen3's pre-tokenizer (tokenizer.json of Qwen/Qwen3-*), which llama.cpp implements natively
# as tokenizer.ggml.pre "qwen2": the lab's tokenizer splits with it, and export refuses a tokenizer that splits
# otherwise (it would tokenize differently in llama.cpp than in training, silently).
QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# How each id is typed in the GGUF (export maps these onto gguf.TokenType): convert_hf_to_gguf.py's rules.
NORMAL, CONTROL, USER_DEFINED, UNUSED = "normal", "control", "user_defined", "unused"


def looks_special(token: str) -> bool:
    """convert_hf_to_gguf.py's does_token_look_special, for the token shapes a Qwen vocabulary has."""
    return (token.startswith("<|") and token.endswith("|>")) or (token.startswith("<｜") and token.endswith("｜>"))


def backend_tokenizer(tokenizer: Any) -> Tokenizer:
    """The `tokenizers` object behind an HF fast tokenizer (or the object itself)."""
    return tokenizer if isinstance(tokenizer, Tokenizer) else tokenizer.backend_tokenizer


def gguf_vocabulary(tokenizer: Any, vocab_size: int) -> tuple[list[str], list[str]]:
    """Token strings and kinds for ids 0..vocab_size-1, as the GGUF stores them (ids the tokenizer lacks: ``[PAD{i}]``,
    unused; added tokens not normalized are stored pre-normalized, as llama.cpp expects control/user-defined tokens)."""
    tokenizer = backend_tokenizer(tokenizer)
    reverse = {i: t for t, i in tokenizer.get_vocab(with_added_tokens=True).items()}
    added = tokenizer.get_added_tokens_decoder()
    if max(reverse) >= vocab_size:
        raise ValueError(f"tokenizer has id {max(reverse)} but the model's vocab_size is {vocab_size}.")
    tokens: list[str] = []
    kinds: list[str] = []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            kinds.append(UNUSED)
            continue
        token = reverse[i]
        if i in added:
            if not added[i].normalized:
                token = tokenizer.decode(
                    tokenizer.encode(token, add_special_tokens=False).ids, skip_special_tokens=False
                )
            kinds.append(CONTROL if added[i].special or looks_special(token) else USER_DEFINED)
        else:
            kinds.append(NORMAL)
        tokens.append(token)
    return tokens, kinds


def vocab_fingerprint(tokens: list[str]) -> str:
    """sha256 (hex) of the token list as JavaScript's ``JSON.stringify`` writes it: no spaces, non-ASCII as is,
    control characters escaped the way both languages escape them."""
    text = json.dumps(tokens, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokenizer_fingerprint(tokenizer: Any, vocab_size: int) -> str:
    """The fingerprint a GGUF exported with this tokenizer and vocabulary size will have."""
    return vocab_fingerprint(gguf_vocabulary(tokenizer, vocab_size)[0])
