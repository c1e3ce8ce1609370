"""The docs cannot advise a training stage or flag that does not exist: every `python -m specdraft_train …` (and
`torchrun … -m specdraft_train …`) in a code block of README.md, docs/ and the folders' READMEs, and every inline
`` `<stage> --flag` `` span, is checked against the CLI's own parser (`specdraft_train.__main__.build_parser`).
The TypeScript CLI's commands, npm scripts, script paths, repository paths and links: test/docs/docs.test.ts."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from specdraft_train.__main__ import build_parser

REPO = Path(__file__).resolve().parents[2]
PAGES = [
    "README.md",
    *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")),
    "data/README.md",
    "models/README.md",
    "bench/README.md",
    "bench/gpu/README.md",
]


def parser_spec(parser: argparse.ArgumentParser) -> tuple[set[str], dict[str, set[str]]]:
    """The global options and, per stage, the options its subparser takes (each with --help)."""
    global_options = {s for a in parser._actions for s in a.option_strings}
    stages: dict[str, set[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                stages[name] = {s for a in sub._actions for s in a.option_strings}
    return global_options, stages


def advised(page: str, markdown: str) -> list[tuple[str, str]]:
    """(where, text) for each logical line of the page's code blocks (continuations joined) and each inline span."""
    found: list[tuple[str, str]] = []
    prose: list[str] = []
    block: list[tuple[int, str]] | None = None
    for number, line in enumerate(markdown.split("\n"), 1):
        if re.match(r"\s*(```|~~~)", line):
            if block is None:
                block = []
            else:
                pending, start = "", 0
                for n, text in block:
                    start = start or n
                    if re.search(r"\\\s*$", text):
                        pending += re.sub(r"\\\s*$", " ", text)
                        continue
                    found.append((f"{page}:{start}", pending + text))
                    pending, start = "", 0
                block = None
            prose.append("")
        elif block is not None:
            block.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    text = "\n".join(prose)
    for match in re.finditer(r"`([^`]+)`", text):
        line = text.count("\n", 0, match.start()) + 1
        found.append((f"{page}:{line}", re.sub(r"\s*\n\s*", " ", match.group(1))))
    return found


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in prose: plain words will do
        return text.split("#")[0].split()


def _segments(words: list[str]) -> list[list[str]]:
    segments: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", "||", ";", "|", "&"):
            segments.append([])
        else:
            segments[-1].append(word)
    return [s for s in segments if s]


def problems(page: str, markdown: str, spec: tuple[set[str], dict[str, set[str]]]) -> list[str]:
    global_options, stages = spec
    found: list[str] = []
    for where, text in advised(page, markdown):
        for words in _segments(_words(text)):
            if (
                "-m" in words
                and words.index("-m") + 1 < len(words)
                and words[words.index("-m") + 1] == "specdraft_train"
            ):
                args = words[words.index("-m") + 2 :]
            elif words[0] in stages and len(words) > 1 and words[1].startswith("--"):
                args = words  # an inline `distill --qat`
            else:
                continue
            i = 0
            while i < len(args) and args[i].startswith("-"):
                flag = args[i].split("=")[0]
                if flag not in global_options:
                    found.append(f"{where}: specdraft_train {flag}: no such global option ({text.strip()})")
                i += 1 + (flag == "--threads" and "=" not in args[i])
            if i >= len(args) or args[i].startswith(("<", "...", "…")) or args[i].isupper():
                continue
            stage = args[i]
            if stage not in stages:
                found.append(f"{where}: specdraft_train {stage}: no such stage ({text.strip()})")
                continue
            for word in args[i + 1 :]:
                if re.match(r"--?[A-Za-z]", word) and word.split("=")[0] not in stages[stage]:
                    found.append(
                        f"{where}: specdraft_train {stage} {word.split('=')[0]}: no such option ({text.strip()})"
                    )
    return found


def test_every_stage_and_flag_the_docs_advise_exists():
    spec = parser_spec(build_parser())
    found = [p for page in PAGES for p in problems(page, (REPO / page).read_text(), spec)]
    assert not found, "\n" + "\n".join(found)


def test_the_check_fails_on_a_made_up_flag_and_stage_naming_each():
    page = "\n".join([
        "```sh",
        "cd train",
        ".venv/bin/python -m specdraft_train --threads 1 lab --preset micro --out /tmp/m --no-such-flag",
        "torchrun --nproc-per-node 8 -m specdraft_train distill --drafter D \\",
        "    --reference R --out O --made-up-too",
        "python -m specdraft_train frobnicate --out x",
        "```",
        "",
        "Inline: `distill --also-made-up`, but `distill --qat` and `lab --set` are fine.",
    ])  # fmt: skip
    found = problems("docs/synthetic.md", page, parser_spec(build_parser()))
    expected = [
        "docs/synthetic.md:3: specdraft_train lab --no-such-flag: no such option",
        "docs/synthetic.md:4: specdraft_train distill --made-up-too: no such option",
        "docs/synthetic.md:6: specdraft_train frobnicate: no such stage",
        "docs/synthetic.md:9: specdraft_train distill --also-made-up: no such option",
    ]
    assert [p.split(" (")[0] for p in found] == expected, found
