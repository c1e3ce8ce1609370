"""The prompts `reference` continues: cut from the corpus by category, or given as JSONL lines (chat or text).

Corpus prompts fall into categories ``<kind>/<position>/<length>`` (kind code | prose, position open: a file's first
`length` tokens | inner: a window at a seeded random start ≥ 1, one length of the preset's `prompt_lengths`), drawn per
split in a seeded order so that every category is reached however many files there are (:func:`select_prompts`).
Given prompts are ``{"messages": [...]}`` lines, rendered with the target tokenizer's chat template, or ``{"text": …}``
lines taken as plain text, split by their own ``"split"`` or by the corpus's hash rule (:func:`given_prompts`; the
reference stage's docstring has the line format).

    counts = train_category_counts(corpus_categories(("code", "prose"), (64, 192, 512)), config)
    selected = select_prompts(documents, tokenizer, counts, "train", seed=0)   # {Category: [Prompt, …]}
"""

from __future__ import annotations

import hashlib
import json
import lzma
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from ..config import CorpusConfig, ReferenceConfig
from .documents import KINDS, Document, split_of

# ---------------------------------------------------------------------------------------------------------------------
# Corpus prompts by category


@dataclass(frozen=True)
class Prompt:
    """A prompt the target continues: ``<split>/<file sha256 prefix>/<start>+<length>`` from the corpus, or a given
    line's id; its category; its token ids."""

    id: str
    category: str
    tokens: list[int]


SPLIT_SEED_OFFSETS = {"train": 0, "dev": 1, "heldout": 2}
POSITIONS = ("open", "inner")  # a file's first tokens | a window starting at a seeded random token ≥ 1
PROMPT_SOURCE_CHARS = 32_768  # prompts come from each file's first 32k characters: bounds the tokenizing cost
ENCODE_BATCH_DOCUMENTS = 1024


@dataclass(frozen=True)
class Category:
    """A corpus prompt's category ``<kind>/<position>/<length>``, e.g. ``prose/inner/512``."""

    kind: str
    position: str
    length: int

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.position}/{self.length}"

    def fits(self, n_tokens: int) -> bool:
        return n_tokens >= self.length + (1 if self.position == "inner" else 0)  # an inner window starts at ≥ 1


def corpus_categories(kinds: Iterable[str], lengths: Sequence[int]) -> list[Category]:
    """Every category of the given kinds, in report order: kind, then position, then length."""
    present = set(kinds)
    return [
        Category(kind, position, length)
        for kind in KINDS
        if kind in present
        for position in POSITIONS
        for length in lengths
    ]


def largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` into integers that sum to it (ties: earlier weights first)."""
    exact = [total * w / sum(weights) for w in weights]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: -(exact[i] - counts[i]))[: total - sum(counts)]:
        counts[i] += 1
    return counts


def train_category_counts(categories: Sequence[Category], config: ReferenceConfig) -> dict[Category, int]:
    """Training prompts per category: kinds by `train_prose_share`, positions by `train_open_share`, lengths evenly;
    shares are renormalized over the kinds present (a code-only corpus gives only code prompts)."""
    kind_share = {"code": 1 - config.train_prose_share, "prose": config.train_prose_share}
    position_share = {"open": config.train_open_share, "inner": 1 - config.train_open_share}
    weights = [kind_share[c.kind] * position_share[c.position] for c in categories]
    return dict(zip(categories, largest_remainder(config.train_prompts, weights)))


class _LazyTokens:
    """Token ids (np.int32) of documents in a given order, tokenized in batches only as far as they are asked for."""

    def __init__(self, documents: Sequence[Document], order: np.ndarray, tokenizer: PreTrainedTokenizerBase):
        self.documents, self.order, self.tokenizer = documents, order, tokenizer
        self.encoded: dict[int, np.ndarray] = {}

    def __call__(self, position: int) -> np.ndarray:
        index = int(self.order[position])
        if index not in self.encoded:
            batch = [int(i) for i in self.order[position : position + ENCODE_BATCH_DOCUMENTS]]
            texts = [self.documents[i].text[:PROMPT_SOURCE_CHARS] for i in batch]
            for i, ids in zip(batch, self.tokenizer(texts, add_special_tokens=False)["input_ids"]):
                # A cut text's last few tokens may differ from the whole file's tokenization: drop them.
                cut = len(self.documents[i].text) > PROMPT_SOURCE_CHARS
                self.encoded[i] = np.asarray(ids[:-8] if cut else ids, dtype=np.int32)
        return self.encoded[index]


def select_prompts(
    documents: Sequence[Document],
    tokenizer: PreTrainedTokenizerBase,
    counts: dict[Category, int],
    split: str,
    seed: int,
) -> dict[Category, list[Prompt]]:
    """Up to ``counts[c]`` prompts of each category from one split's documents, in draw order.

    Per kind, the files go in a seeded order, and each file in turn serves the category furthest behind its count
    (largest share still missing; ties in category order) among those it is long enough for and still has room for.
    Passes over the files repeat while some category still lacks prompts and the last pass served one. So the first
    pass puts the categories on distinct files and every position of every length is reached however many files there
    are. A file has one opening, so it serves an ``open`` category once; it serves an ``inner`` category at most as
    many times as it holds disjoint windows of that length (len − 1) // length, each a new seeded random window
    starting at a token ≥ 1 — so a corpus of few long files can still fill a large training set.
    """
    selected: dict[Category, list[Prompt]] = {c: [] for c in counts}
    for kind_index, kind in enumerate(KINDS):
        wanted = [c for c in counts if c.kind == kind and counts[c] > 0]
        documents_of_kind = sorted((d for d in documents if d.kind == kind), key=lambda d: d.sha256)
        if not wanted or not documents_of_kind:
            continue
        rng = np.random.default_rng([seed, SPLIT_SEED_OFFSETS[split], kind_index])
        order = rng.permutation(len(documents_of_kind))
        tokens_at = _LazyTokens(documents_of_kind, order, tokenizer)
        served: list[dict[Category, int]] = [{} for _ in order]
        starts_used: list[set[tuple[Category, int]]] = [set() for _ in order]
        served_any = True
        while served_any:
            served_any = False
            for position in range(len(order)):
                missing = [c for c in wanted if len(selected[c]) < counts[c]]
                if not missing:
                    break
                tokens = tokens_at(position)
                fitting = [
                    c
                    for c in missing
                    if c.fits(len(tokens)) and served[position].get(c, 0) < _room(c, len(tokens), split)
                ]
                if not fitting:
                    continue
                category = max(fitting, key=lambda c: (1 - len(selected[c]) / counts[c], -wanted.index(c)))
                start = 0 if category.position == "open" else int(rng.integers(1, len(tokens) - category.length + 1))
                # a file's next window of a category is a new one (room ≤ the file's possible starts, so this ends)
                while (category, start) in starts_used[position]:
                    start = int(rng.integers(1, len(tokens) - category.length + 1))
                starts_used[position].add((category, start))
                document = documents_of_kind[order[position]]
                selected[category].append(
                    Prompt(
                        f"{split}/{document.sha256[:12]}/{start}+{category.length}",
                        category.name,
                        tokens[start : start + category.length].tolist(),
                    )
                )
                served[position][category] = served[position].get(category, 0) + 1
                served_any = True
    return selected


def _room(category: Category, n_tokens: int, split: str) -> int:
    """How many prompts of ``category`` one file of ``n_tokens`` may give (select_prompts says why)."""
    if split != "train" or category.position == "open":
        return 1
    return max(1, (n_tokens - 1) // category.length)


# ---------------------------------------------------------------------------------------------------------------------
# Given prompts


CHAT_ROLES = ("system", "user", "assistant", "tool")


def check_messages(messages: Any, where: str) -> None:
    """Refuse what a chat template would choke on with a traceback, naming the line and the field: messages must be
    a non-empty list of {"role", "content"} with a known role and string content (not OpenAI's content parts)."""
    if not isinstance(messages, list) or not messages:
        raise ValueError(f'{where}: "messages" must be a non-empty list of {{"role", "content"}}')
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"{where}: messages[{i}] must be an object with role and content")
        if message.get("role") not in CHAT_ROLES:
            raise ValueError(
                f"{where}: messages[{i}].role {message.get('role')!r}: expected one of {', '.join(CHAT_ROLES)}"
            )
        content = message.get("content")
        if isinstance(content, list):
            raise ValueError(
                f"{where}: messages[{i}].content is a list (OpenAI-style content parts); expected a string: "
                "join the text parts into one string"
            )
        if not isinstance(content, str):
            raise ValueError(f"{where}: messages[{i}].content must be a string, got {type(content).__name__}")


def render_chat(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], enable_thinking: bool = False
) -> list[int]:
    """The chat prompt as the target sees it before answering: chat template, generation prompt, thinking as asked
    (off: Qwen3's template closes an empty <think> block; on, Qwen3's default: the model opens it)."""
    rendered = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, enable_thinking=enable_thinking, tokenize=True
    )
    if isinstance(rendered, dict) or hasattr(rendered, "keys"):
        rendered = rendered["input_ids"]
    return [int(t) for t in rendered]


def _chat_tokens(tokenizer: PreTrainedTokenizerBase, messages: Any, where: str, enable_thinking: bool) -> list[int]:
    check_messages(messages, where)
    try:
        return render_chat(tokenizer, messages, enable_thinking)
    except Exception as error:  # jinja2's TemplateError and whatever a template's own code raises
        raise ValueError(f"{where}: the chat template cannot render these messages: {error}") from error


def prompt_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each line of a given prompts file (the module docstring has the format; a name ending in .xz is read through
    xz) as (where, row), checked for its form: one clear error naming the line and what is wrong."""
    with lzma.open(path, "rt", encoding="utf-8") if path.suffix == ".xz" else open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not JSON ({error})") from error
            if not isinstance(row, dict) or ("messages" in row) == ("text" in row):
                raise ValueError(f'{where}: expected a JSON object with "messages" or "text" (one of them)')
            messages = row.get("messages")
            if "messages" in row and (
                not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages)
            ):
                raise ValueError(f'{where}: "messages" must be a non-empty list of {{"role", "content"}} objects')
            if "text" in row and (not isinstance(row["text"], str) or not row["text"]):
                raise ValueError(f'{where}: "text" must be a non-empty string')
            limit = row.get("prompt_tokens")
            if limit is not None and (type(limit) is not int or limit < 1):
                raise ValueError(f'{where}: "prompt_tokens" must be a positive integer, got {limit!r}')
            if row.get("split") not in (None, "train", "dev", "heldout"):
                raise ValueError(f"{where}: split {row['split']!r}: expected train, dev or heldout")
            yield where, row


def given_prompts(
    path: Path, tokenizer: PreTrainedTokenizerBase, corpus_config: CorpusConfig, enable_thinking: bool = False
) -> dict[str, list[Prompt]]:
    """Given prompts by split (the module docstring has the line format; a file whose name ends in .xz is read
    through xz): a line's own "split", else the corpus rule applied to the sha256 of its messages or text."""
    by_split: dict[str, list[Prompt]] = {"train": [], "dev": [], "heldout": []}
    for where, row in prompt_rows(path):
        if "messages" in row:
            digest = hashlib.sha256(json.dumps(row["messages"], sort_keys=True).encode()).hexdigest()
            tokens, default_category = _chat_tokens(tokenizer, row["messages"], where, enable_thinking), "chat"
        else:
            digest = hashlib.sha256(row["text"].encode()).hexdigest()
            tokens, default_category = tokenizer(row["text"], add_special_tokens=False)["input_ids"], "text"
            if row.get("prompt_tokens") is not None:
                tokens = tokens[: row["prompt_tokens"]]
        split = row.get("split") or split_of(digest, corpus_config)
        by_split[split].append(
            Prompt(
                str(row.get("id", f"{default_category}/{digest[:12]}")),
                str(row.get("category", default_category)),
                [int(t) for t in tokens],
            )
        )
    return by_split


def check_prompts_file(flag: str, path: Path) -> Path:
    """A prompts file given as ``flag``, checked before anything runs: it exists, every line is well formed, and some
    are held out (or none says its split); returns its absolute path."""
    if not path.is_file():
        raise FileNotFoundError(f"{flag} {path}: no such file")
    splits = Counter(row.get("split") for _, row in prompt_rows(path))
    if not splits["heldout"] and None not in splits:
        raise ValueError(f'{flag} {path}: no held-out lines to evaluate on ("split": "heldout")')
    return path.resolve()


def check_renderable(tokenizer: PreTrainedTokenizerBase, target: str, paths: Iterable[Path | None]) -> None:
    """Chat prompts need the target's chat template: refuse prompts files with ``messages`` lines when it has none."""
    if tokenizer.chat_template is not None:
        return
    for path in paths:
        if path is not None and any("messages" in row for _, row in prompt_rows(path)):
            raise ValueError(
                f"{target}: the target has no chat template, so the chat prompts of {path} cannot be rendered; "
                'give prompts as {"text": …} lines'
            )
