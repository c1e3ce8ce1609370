"""Chat prompts for `reference --prompts` cut from any text at hand: the dress rehearsal's stand-in for the real job's
chat data (tests/test_real_path.py uses the same lines at CPU scale).

Each line is ``{"id", "category", "messages"}`` (and ``"split"`` when asked), the user turns windows of the texts:

- form: ``single`` (one user turn, half of the lines), ``system`` (a system prompt, then a user turn, a quarter) or
  ``multi-turn`` (user, assistant, user: an earlier exchange in context, a quarter);
- length of the last user turn: ``short`` (~150 characters), ``medium`` (~800) or ``long`` (~3,000, a pasted
  document), a third each; category = ``<form>/<length>``, so held-out τ comes out per kind of prompt.

Lines carry no "split" by default, so `reference` splits them by the hash of their messages as it splits real prompts
(the preset's per-mille shares); ``--heldout N --dev N`` gives the first lines explicit splits instead.

    python train/scripts/data/make_chat_prompts.py --out prompts.jsonl --count 3000 [--root DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

LENGTHS = {"short": 150, "medium": 800, "long": 3000}  # characters of the last user turn
FORMS = ("single", "single", "system", "multi-turn")  # drawn uniformly: half single, a quarter each of the others
SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a senior engineer. Answer briefly and precisely, with code where it helps.",
    "Answer in the language of the question. Use Markdown.",
)
QUESTIONS = ("Explain this:", "Summarize the following.", "What does this do?", "Review this text:", "Continue:")
MIN_FILE_CHARS = 2000
SUFFIXES = (".py", ".md", ".rst", ".txt")


def text_files(roots: Iterable[Path], limit: int = 4000) -> list[Path]:
    """Up to ``limit`` readable text files under ``roots``, in a fixed order."""
    found: list[Path] = []
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES)
        found += [p for p in files if "site-packages" not in p.parts and "node_modules" not in p.parts]
    return found[:limit]


def read_texts(files: Sequence[Path]) -> list[str]:
    texts = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) >= MIN_FILE_CHARS and "\x00" not in text:
            texts.append(text)
    if not texts:
        raise ValueError(f"no text file of at least {MIN_FILE_CHARS} characters among {len(files)} files")
    return texts


def window(rng: random.Random, texts: Sequence[str], chars: int) -> str:
    """About ``chars`` characters of one text, from a line start, whitespace trimmed."""
    text = rng.choice(texts)
    start = rng.randrange(max(1, len(text) - chars))
    start = text.rfind("\n", 0, start) + 1
    return text[start : start + chars].strip() or text[:chars].strip()


def chat_prompts(texts: Sequence[str], count: int, seed: int = 0, heldout: int = 0, dev: int = 0) -> list[dict]:
    """``count`` prompt lines (the module docstring says which); the first ``heldout`` then ``dev`` get that split."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        form, length = rng.choice(FORMS), rng.choice(tuple(LENGTHS))
        messages = []
        if form == "system":
            messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        if form == "multi-turn":
            messages += [
                {"role": "user", "content": f"{rng.choice(QUESTIONS)}\n\n{window(rng, texts, 400)}"},
                {"role": "assistant", "content": window(rng, texts, 600)},
            ]
        messages.append(
            {"role": "user", "content": f"{rng.choice(QUESTIONS)}\n\n{window(rng, texts, LENGTHS[length])}"}
        )
        line = {"id": f"chat-{i:06d}", "category": f"{form}/{length}", "messages": messages}
        if i < heldout + dev:
            line["split"] = "heldout" if i < heldout else "dev"
        lines.append(line)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heldout", type=int, default=0, help="first N lines held out (default: split by hash)")
    ap.add_argument("--dev", type=int, default=0, help="next N lines dev (default: split by hash)")
    ap.add_argument(
        "--root",
        type=Path,
        action="append",
        default=None,
        help="text folder or file (repeatable; default: this interpreter's standard library and the checkout's docs)",
    )
    args = ap.parse_args()
    repo = Path(__file__).resolve().parents[3]
    roots = args.root or [repo / "docs", repo / "README.md", Path(os.__file__).parent]  # os.py sits in the stdlib
    lines = chat_prompts(read_texts(text_files(roots)), args.count, args.seed, args.heldout, args.dev)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    print(f"make_chat_prompts: {len(lines)} prompts into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
