"""Build data/unseen-texts.jsonl: prompts the lab's generator never made, for `reference --prompts` (text lines).

The lab's corpus is Python source and three Debian documentation packages (linux-doc, python3.11-doc, git-doc).
A drafter checked only on prompts cut the way its training prompts were cut has not been checked, so this set is
cut from text that exists on a CPU machine of this project and is none of that: JavaScript, TypeScript declarations
and Markdown READMEs of the npm packages, the C++ of node-llama-cpp's addon and llama.cpp's headers, JSON package
manifests, shell scripts, license texts, and Python the lab never saw (this repository's own, written after it).
Each kind gets PER_KIND prompts from distinct files (ordered by a hash of their path), half from a file's opening and
half from a seeded line inside it, asked for at 64, 192 and 512 tokens in turn (the lab's prompt lengths); each line
holds the text from there, long enough for its token count (the target's tokenizer cuts it: ``prompt_tokens``).

    python train/scripts/data/make_unseen_texts.py --out data/unseen-texts.jsonl  # from the repo root, after npm ci
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Iterable
from pathlib import Path

PER_KIND = 16
PROMPT_TOKENS = (64, 192, 512)
CHARS_PER_TOKEN = 6  # generous: the lab tokenizer reads 3-4 characters a token on text like its own, fewer elsewhere
MIN_FILE_CHARS = 600
SHELL_SHEBANGS = ("#!/bin/sh", "#!/bin/bash", "#!/usr/bin/env bash", "#!/usr/bin/env sh")


def files(root: Path, patterns: Iterable[str], exclude: tuple[str, ...] = ()) -> list[Path]:
    found = {p for pattern in patterns for p in root.glob(pattern) if p.is_file()}
    return sorted(
        (p for p in found if not any(part in p.as_posix() for part in exclude)),
        key=lambda p: hashlib.sha256(p.as_posix().encode()).hexdigest(),
    )


def kinds(repo: Path) -> dict[str, list[Path]]:
    modules = repo / "node_modules"
    llama = ("node-llama-cpp/llama/llama.cpp", "node-llama-cpp/llama/gitRelease")
    return {
        "javascript": files(modules, ["*/dist/**/*.js", "*/lib/**/*.js", "@*/*/dist/**/*.js"], (*llama, ".min.")),
        "typescript-declarations": files(modules, ["*/dist/**/*.d.ts", "@*/*/dist/**/*.d.ts", "*/types/**/*.d.ts"]),
        "markdown": files(modules, ["*/README.md", "@*/*/README.md", "*/docs/**/*.md"]),
        "cpp": files(modules, ["node-llama-cpp/llama/addon/**/*.cpp", "node-llama-cpp/llama/addon/**/*.h"])
        + files(repo, ["build/llama-headers/include/*.h", "src/engine/native/*.cpp"]),
        "json": files(modules, ["*/package.json", "@*/*/package.json", "*/*.json"], ("package-lock",)),
        "shell": files(Path("/usr/bin"), ["*"]) + files(repo, ["**/*.sh"], ("node_modules", "/.")),
        "license": files(Path("/usr/share/common-licenses"), ["*"]) + files(modules, ["*/LICENSE", "@*/*/LICENSE"]),
        "python-unseen": files(repo, ["train/specdraft_train/*.py", "train/scripts/**/*.py", "bench/**/*.py"]),
    }


def readable(path: Path, kind: str) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    if len(text) < MIN_FILE_CHARS or "\x00" in text:
        return None
    if kind == "shell" and not text.startswith(SHELL_SHEBANGS):
        return None
    return text


def cut(text: str, inner: bool, chars: int, rng: random.Random) -> str:
    """From the opening, or from the start of a seeded line in the file's first part (so the window still holds
    ``chars`` characters where the file has them)."""
    if not inner:
        return text[:chars]
    lines = [i + 1 for i, ch in enumerate(text[: max(1, len(text) - chars)]) if ch == "\n"]
    start = rng.choice(lines) if lines else 0
    return text[start : start + chars]


def build(repo: Path, seed: int = 0) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for kind, paths in kinds(repo).items():
        rng = random.Random(f"{seed}/{kind}")
        taken = 0
        for path in paths:
            if taken == PER_KIND:
                break
            text = readable(path, kind)
            if text is None:
                continue
            tokens = PROMPT_TOKENS[taken % len(PROMPT_TOKENS)]
            inner = taken % 2 == 1
            window = cut(text, inner, tokens * CHARS_PER_TOKEN, rng)
            if len(window.strip()) < 100:
                continue
            source = path.relative_to(repo) if path.is_relative_to(repo) else path
            rows.append(
                {
                    "id": f"unseen/{kind}/{taken:02d}",
                    "category": f"unseen/{kind}",
                    "split": "heldout",
                    "prompt_tokens": tokens,
                    "position": "inner" if inner else "open",
                    "source": source.as_posix(),
                    "text": window,
                }
            )
            taken += 1
        if taken < PER_KIND:
            raise SystemExit(f"{kind}: {taken} usable files of {PER_KIND} (run from the repository root, after npm ci)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSONL to write")
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="repository root (default: .)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = build(args.repo.resolve(), args.seed)
    args.out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    by_kind: dict[str, int] = {}
    for row in rows:
        by_kind[str(row["category"])] = by_kind.get(str(row["category"]), 0) + 1
    print(f"{args.out}: {len(rows)} prompts, {args.out.stat().st_size:,} bytes; {by_kind}")


if __name__ == "__main__":
    main()
