"""The vocabulary a GGUF drafter carries, and its fingerprint: what the server reports and the validator compares.

`export` writes ``tokenizer.ggml.tokens`` from a checkpoint's tokenizer by :func:`gguf_vocabulary` (the rules of
llama.cpp's convert_hf_to_gguf.py for a GPT-2-style BPE vocabulary) and ``tokenizer.ggml.pre`` by
:func:`llama_cpp_pre_tokenizer` (:data:`PRE_TOKENIZERS`); :func:`vocab_fingerprint` is the sha256 of that token list as
JSON, the Python twin of src/engine/gguf.ts ``vocabFingerprint`` (``JSON.stringify`` of the list, UTF-8), which
``GET /info`` reports as ``vocab_fingerprint`` and pack records in architecture.json. `reference` records its
target's fingerprint in its manifest, so `specdraft validate` can refuse a server whose drafter speaks other token ids
than the data (tests/test_real_path.py checks the twin against the TypeScript function).

    from specdraft_train.formats.vocabulary import tokenizer_fingerprint
    tokenizer_fingerprint(load_tokenizer("Qwen/Qwen3-8B"), vocab_size=151_936)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tokenizers import Regex, Tokenizer, pre_tokenizers

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
# Llama 3's split regex (tokenizer.json of meta-llama/Meta-Llama-3-8B), llama.cpp's "llama-bpe".
LLAMA3_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Tekken's split regex (tokenizer.json of mistralai/Mistral-Nemo-Instruct-2407, also Mistral Small 3 and Ministral),
# llama.cpp's "tekken": a word is cut where lowercase meets uppercase, as the case classes say.
TEKKEN_SPLIT_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
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


# --------------------------------------------------------------------------------------------------------------------
# Pre-tokenizers: how text is cut into words before BPE merges them


@dataclass(frozen=True)
class PreTokenizer:
    """One of llama.cpp's BPE pre-tokenizers (src/llama-vocab.cpp implements each name's split natively) with the
    Hugging Face pre-tokenizer that cuts text the same way."""

    name: str  # tokenizer.ggml.pre
    models: str  # whose tokenizers cut text this way
    build: Callable[[], pre_tokenizers.PreTokenizer]
    ignore_merges: bool = False  # the BPE takes a word found whole in the vocabulary as is (llama.cpp: llama-bpe)


# What export writes. llama.cpp knows more names (several share one split: starcoder, refact, smollm, …); a tokenizer
# not listed here is refused rather than guessed. The name is chosen by what the tokenizer does, not by the model it
# came from: a tokenizer trained with Qwen2's split is "qwen2" whatever its vocabulary.
PRE_TOKENIZERS = (
    PreTokenizer(
        "qwen2",
        "Qwen2, Qwen2.5, Qwen3 and the lab's tokenizer: Qwen2's split regex, then bytes",
        lambda: pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
            ]
        ),
    ),
    PreTokenizer(
        "llama-bpe",
        "Llama 3: its split regex, then bytes, whole words first",
        lambda: pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_SPLIT_REGEX), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
            ]
        ),
        ignore_merges=True,
    ),
    PreTokenizer(
        "smollm",
        "SmolLM, SmolLM2: single digits, then GPT-2's byte-level regex",
        lambda: pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            ]
        ),
    ),
    PreTokenizer(
        "tekken",
        "Mistral Nemo, Mistral Small 3, Ministral (Tekken): its split regex, then bytes, whole words first",
        lambda: pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(TEKKEN_SPLIT_REGEX), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
            ]
        ),
        ignore_merges=True,
    ),
    PreTokenizer(
        "gpt-2",
        "GPT-2: its byte-level regex",
        lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ),
)


PRE_TOKENIZER_NAMES = tuple(pre.name for pre in PRE_TOKENIZERS)


def find_pre_tokenizer(name: str) -> PreTokenizer:
    """The entry of :data:`PRE_TOKENIZERS` called ``name`` (a GGUF's ``tokenizer.ggml.pre``)."""
    for pre in PRE_TOKENIZERS:
        if pre.name == name:
            return pre
    raise ValueError(f"Unknown pre-tokenizer {name!r}: expected one of {', '.join(PRE_TOKENIZER_NAMES)}.")


def hf_pre_tokenizer(name: str) -> pre_tokenizers.PreTokenizer:
    """The Hugging Face pre-tokenizer that cuts text as llama.cpp's ``name`` does (e.g. to give a tokenizer converted
    from a GGUF the split its ``tokenizer.ggml.pre`` names)."""
    return find_pre_tokenizer(name).build()


def _split_steps(pre_tokenizer: dict[str, Any] | None) -> tuple[tuple[Any, ...], ...]:
    """What a tokenizer.json pre-tokenizer does, step by step, without the fields that do not change the split
    (``trim_offsets`` moves offsets only)."""
    if not pre_tokenizer:
        return ()
    if pre_tokenizer.get("type") == "Sequence":
        return tuple(step for inner in pre_tokenizer.get("pretokenizers", []) for step in _split_steps(inner))
    kind = pre_tokenizer.get("type")
    if kind == "Split":
        pattern = json.dumps(pre_tokenizer.get("pattern", {}), sort_keys=True)
        return ((kind, pattern, pre_tokenizer.get("behavior"), pre_tokenizer.get("invert")),)
    if kind == "ByteLevel":  # tokenizers' defaults: a prefix space, GPT-2's regex
        return ((kind, pre_tokenizer.get("add_prefix_space", True), pre_tokenizer.get("use_regex", True)),)
    if kind == "Digits":
        return ((kind, pre_tokenizer.get("individual_digits", False)),)
    return ((kind, json.dumps(pre_tokenizer, sort_keys=True)),)


def _describe(steps: tuple[tuple[Any, ...], ...], ignore_merges: bool) -> str:
    words = []
    for kind, *fields in steps:
        if kind == "Split":
            pattern = json.loads(fields[0])
            text = pattern.get("Regex", pattern.get("String", ""))
            words.append(f"Split({text[:40]!r}{'…' if len(text) > 40 else ''}, {fields[1]})")
        elif kind == "ByteLevel":
            words.append(f"ByteLevel(add_prefix_space={fields[0]}, use_regex={fields[1]})")
        elif kind == "Digits":
            words.append(f"Digits(individual_digits={fields[0]})")
        else:
            words.append(kind or "?")
    return " → ".join(words or ["none"]) + (" with ignore_merges" if ignore_merges else "")


def llama_cpp_pre_tokenizer(tokenizer_json: dict[str, Any]) -> str:
    """llama.cpp's name (``tokenizer.ggml.pre``) for the pre-tokenizer of a byte-level BPE ``tokenizer.json``: the
    entry of :data:`PRE_TOKENIZERS` that splits text exactly as it does. Anything else (another model type, a split
    none of them does) is refused in one line naming what was found and what is supported: llama.cpp would tokenize
    text differently from training, silently."""
    supported = "; ".join(f"{p.name} ({p.models})" for p in PRE_TOKENIZERS)
    model = tokenizer_json.get("model") or {}
    if model.get("type") != "BPE":
        raise ValueError(
            f"the tokenizer holds a {model.get('type')} model; export writes GPT-2-style byte-level BPE tokenizers "
            f"with one of llama.cpp's pre-tokenizers: {supported}."
        )
    steps = _split_steps(tokenizer_json.get("pre_tokenizer"))
    ignore_merges = bool(model.get("ignore_merges", False))
    for pre in PRE_TOKENIZERS:
        if steps == _split_steps(json.loads(pre.build().__getstate__())) and ignore_merges == pre.ignore_merges:
            return pre.name
    raise ValueError(
        f"the tokenizer's pre-tokenizer {_describe(steps, ignore_merges)} is none of llama.cpp's that export writes "
        f"(llama.cpp would tokenize text differently): supported are {supported}."
    )
