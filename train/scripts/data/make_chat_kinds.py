"""Chat prompts of the kinds chat users send, built from templates over local text: the real-model lab's prompts
(docs/lab.md, "The real-model lab"). No hub, no network; `reference --prompts` takes the file as it is.

Thirteen categories, ``<group>/<kind>``: ``ask/question``, ``ask/explain``, ``ask/howto``, ``code/write``,
``code/fix``, ``code/explain``, ``write/email``, ``write/story``, ``write/poem``, ``text/rewrite``,
``text/summarize``, ``text/translate``, ``math/word-problem``. The text comes from man pages (a command's NAME line
and options: questions, how-to), documentation under /usr/share/doc and train/.cache/prose (headings to explain,
paragraphs to rewrite, summarize or translate), the Python standard library and node_modules (functions to write
from their docstring, to fix once a bug is put in, to explain) and /usr/bin's shell scripts; emails, stories, poems
and word problems fill word lists and seeded numbers (chat_sources.py, chat_templates.py, chat_math.py).

Forms: half the prompts are a single user turn, a quarter open with a system prompt, a quarter carry an earlier
exchange (user, assistant: an answer built from the same source, e.g. a man page's option or the function's own
source) before the last user turn, which is then either a follow-up ("Can you give an example?") or a new request.

Splits are decided by hash (``specdraft_train.formats.documents.split_of`` at ``--heldout-per-mille`` /
``--dev-per-mille``) before anything is drawn: of the source file's sha256 for prompts cut from a file, of the filled
template for the others, so no source file and no template instance feeds two splits; every line carries its
``split``. No two lines ask the same thing (their last user turns differ, but for follow-ups, whose earlier turns then
differ), and no source item serves one category twice while the split has unused ones.

Each line: ``{"id", "category", "split", "form", "source", "messages"}``. The committed file was made on the
development machine (its man pages, docs and packages; another machine's files give other prompts of the same kinds):

    train/.venv/bin/python train/scripts/data/make_chat_kinds.py --out data/chat-prompts-templates.jsonl.xz
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import random
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from chat_math import math_problem
from chat_sources import Roots, Sources, read_sources
from chat_templates import (
    Draft,
    Pools,
    ask_explain,
    ask_howto,
    ask_question,
    code_explain,
    code_fix,
    code_write,
    styled,
    task,
    text_rewrite,
    text_summarize,
    text_translate,
    write_email,
    write_poem,
    write_story,
)

from specdraft_train.config import CorpusConfig
from specdraft_train.formats.documents import split_of

Builder = Callable[[random.Random, Pools], Draft]
BUILDERS: dict[str, Builder] = {
    "ask/question": ask_question,
    "ask/explain": ask_explain,
    "ask/howto": ask_howto,
    "code/write": code_write,
    "code/fix": code_fix,
    "code/explain": code_explain,
    "write/email": write_email,
    "write/story": write_story,
    "write/poem": write_poem,
    "text/rewrite": text_rewrite,
    "text/summarize": text_summarize,
    "text/translate": text_translate,
    "math/word-problem": math_problem,
}
CATEGORIES = tuple(BUILDERS)
SPLITS = ("train", "dev", "heldout")
FORMS = ("single", "single", "system", "multi-turn")  # drawn uniformly: half single, a quarter each of the others
# System prompts by category group ("": any): a prompt's is one of its group's or a generic one.
SYSTEM_PROMPTS = {
    "": ("You are a helpful assistant.", "You are a helpful, concise assistant. Answer in as few words as needed.",
         "Answer in Markdown. Use bullet points where they help.", "You are SmolLM, a small language model. Be honest "
         "when you are not sure.", "Always answer in English, even when asked in another language."),
    "ask": ("You are an expert Linux system administrator.", "You are a patient teacher. Explain things step by step."),
    "code": ("You are a senior software engineer. Prefer working code over long explanations.",
             "You help developers debug their code. Point at the exact line that is wrong."),
    "write": ("You are a writing assistant. Keep the author's voice.", "You are a friendly assistant for a small "
              "business. Keep a professional tone."),
    "text": ("You are a writing assistant. Keep the author's voice.", "You are a careful editor and translator."),
    "math": ("You are a math tutor. Show each step and check the answer.",),
}  # fmt: skip
FOLLOW_UPS = {
    "ask": ("Can you give me an example?", "Can you explain that more simply?", "What are the alternatives?",
            "Thanks! Does that work the same on macOS?", "Why would I use that instead of something else?"),
    "code": ("Can you add type hints and comments?", "Now write unit tests for it.", "Can you do the same in Go?",
             "That still doesn't work for empty input. Can you check it again?", "Can you make it faster?"),
    "text": ("Now make it shorter.", "Can you translate that into Spanish too?", "Give me three bullet points instead.",
             "Make it sound less formal."),
    "math": ("Can you check your answer?", "Explain the second step again.", "What if all the numbers were doubled?",
             "Is there a quicker way to solve it?"),
}  # fmt: skip
RETRIES = 200


def split_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pools_by_split(sources: Sources, config: CorpusConfig) -> dict[str, Pools]:
    """Each source item in the split of its file's sha256."""
    pools = {split: Pools() for split in SPLITS}
    for page in sources.man:
        pool = pools[split_of(page.key, config)]
        pool.man.append(page)
        if todo := task(page.description):
            pool.man_tasks.append((page, todo))
        for flag, what in page.options:
            pool.options.append((page, flag, what))
            if todo := task(what):
                pool.option_tasks.append((page, flag, todo))
    by_file: dict[str, list] = defaultdict(list)
    for paragraph in sources.paragraphs:
        pools[split_of(paragraph.key, config)].paragraphs.append(paragraph)
        by_file[paragraph.key].append(paragraph)
    for key, paragraphs in by_file.items():
        if sum(len(p.text) for p in paragraphs) >= 600:
            pools[split_of(key, config)].runs.append(paragraphs)
    for topic in sources.topics:
        pools[split_of(topic.key, config)].topics.append(topic)
    for function in sources.functions:
        pool = pools[split_of(function.key, config)]
        pool.code.append(function)
        if function.language == "Python":
            pool.python.append(function)
            if todo := task(function.summary):
                pool.python_tasks.append((function, todo))
    return pools


class Drafter:
    """Draws drafts of one split: a source-free draft is kept only when its key hashes to the split, and a source
    item (the draft's ``source``) serves a category once until the split has none left unused."""

    def __init__(self, split: str, pools: Pools, config: CorpusConfig, rng: random.Random):
        self.split, self.pools, self.config, self.rng = split, pools, config, rng
        self.used: set[tuple[str, str]] = set()

    def draw(self, category: str, fresh: bool = True) -> Draft:
        fallback = None
        for _ in range(RETRIES):
            try:
                draft = BUILDERS[category](self.rng, self.pools)
            except IndexError:  # rng.choice of an empty pool
                raise ValueError(f"{category}: the {self.split} split has no sources of the kind it needs") from None
            if draft.key is not None and split_of(split_key(draft.key), self.config) != self.split:
                continue
            if fresh and (category, draft.source) in self.used and draft.key is None:
                fallback = fallback or draft
                continue
            self.used.add((category, draft.source))
            return draft
        if fallback is None:
            raise ValueError(f"{category}: no draft for the {self.split} split in {RETRIES} tries (too few sources?)")
        return fallback


ANSWERABLE = (
    "ask/question",
    "ask/howto",
    "code/write",
    "code/fix",
    "text/rewrite",
    "text/summarize",
    "math/word-problem",
)  # kinds whose builders write a reply to their own request (always or mostly)


def earlier_exchange(drafter: Drafter, category: str) -> tuple[Draft, bool]:
    """A request with its reply for a multi-turn prompt's first exchange: of ``category`` where its builder wrote a
    reply, else of another kind; and whether it is of ``category``."""
    draft = drafter.draw(category, fresh=False)
    if draft.reply is not None:
        return draft, True
    for _ in range(RETRIES):
        draft = drafter.draw(drafter.rng.choice([c for c in ANSWERABLE if c != category]), fresh=False)
        if draft.reply is not None:
            return draft, False
    raise ValueError(f"{category}: no earlier exchange with a reply for the {drafter.split} split")


def conversation(drafter: Drafter, category: str, form: str) -> tuple[list[dict[str, str]], str, bool]:
    """The messages of one prompt of ``category`` in ``form``, the source of its last user turn, and whether that
    turn is a follow-up."""
    rng = drafter.rng
    messages: list[dict[str, str]] = []
    if form == "system":
        group = category.split("/")[0]
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS[""] + SYSTEM_PROMPTS[group])})
    if form == "multi-turn":
        earlier, same_kind = earlier_exchange(drafter, category)
        messages += [
            {"role": "user", "content": styled(rng, earlier.content)},
            {"role": "assistant", "content": earlier.reply or ""},
        ]
        group = category.split("/")[0]
        if same_kind and group in FOLLOW_UPS and rng.random() < 0.4:
            messages.append({"role": "user", "content": rng.choice(FOLLOW_UPS[group])})
            return messages, earlier.source, True
    draft = drafter.draw(category)
    messages.append({"role": "user", "content": styled(rng, draft.content)})
    return messages, draft.source, False


def make_prompts(pools: dict[str, Pools], counts: dict[str, int], config: CorpusConfig, seed: int) -> list[dict]:
    """``counts[split]`` prompts of every category in every split, no two last user turns alike (but follow-ups)."""
    lines: list[dict] = []
    seen: set[str] = set()
    for split in SPLITS:
        for category in CATEGORIES:
            rng = random.Random(f"{seed}/{split}/{category}")
            drafter = Drafter(split, pools[split], config, rng)
            made = 0
            for _ in range(counts[split] * 20):
                if made == counts[split]:
                    break
                form = rng.choice(FORMS)
                messages, source, follow_up = conversation(drafter, category, form)
                # no two requests alike: a follow-up ("Can you give me an example?") differs by what came before it
                digest = split_key(json.dumps(messages if follow_up else messages[-1]["content"], sort_keys=True))
                if digest in seen:
                    continue
                seen.add(digest)
                lines.append({"id": f"tmpl/{split}/{category}/{made:05d}", "category": category, "split": split,
                              "form": form, "source": source, "messages": messages})  # fmt: skip
                made += 1
            if made < counts[split]:
                raise ValueError(f"{category}: only {made} distinct {split} prompts of {counts[split]}")
    return lines


def write_jsonl(path: Path, lines: list[dict]) -> None:
    """JSONL, xz-compressed when the name ends in .xz (`reference --prompts` reads both)."""
    data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME) if path.suffix == ".xz" else data)


def count_table(lines: list[dict]) -> str:
    """Prompts per category and split, and per form, as a markdown table."""
    counts = Counter((line["category"], line["split"]) for line in lines)
    forms = Counter(line["form"] for line in lines)
    rows = ["| category | train | dev | heldout |", "|---|---|---|---|"]
    rows += [f"| {c} | " + " | ".join(str(counts[c, s]) for s in SPLITS) + " |" for c in CATEGORIES]
    rows.append("| all | " + " | ".join(str(sum(counts[c, s] for c in CATEGORIES)) for s in SPLITS) + " |")
    return "\n".join(rows) + "\n\nforms: " + ", ".join(f"{f} {n}" for f, n in sorted(forms.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="JSONL to write (.xz: compressed)")
    ap.add_argument("--train-per-category", type=int, default=1200)
    ap.add_argument("--dev-per-category", type=int, default=24)
    ap.add_argument("--heldout-per-category", type=int, default=48)
    ap.add_argument("--heldout-per-mille", type=int, default=100, help="source files held out (default: 10 %%)")
    ap.add_argument("--dev-per-mille", type=int, default=50, help="source files for dev (default: 5 %%)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    counts = {"train": args.train_per_category, "dev": args.dev_per_category, "heldout": args.heldout_per_category}
    if min(counts.values()) < 0 or args.heldout_per_mille + args.dev_per_mille >= 1000:
        ap.error("counts must be ≥ 0 and held-out + dev per mille < 1000")
    config = CorpusConfig(heldout_per_mille=args.heldout_per_mille, dev_per_mille=args.dev_per_mille)
    repo = Path(__file__).resolve().parents[3]
    sources = read_sources(Roots.default(repo))
    print(f"make_chat_kinds: sources {sources.counts()}", file=sys.stderr)
    try:
        lines = make_prompts(pools_by_split(sources, config), counts, config, args.seed)
    except ValueError as error:
        print(f"make_chat_kinds: {error}", file=sys.stderr)
        return 2
    write_jsonl(args.out, lines)
    print(f"make_chat_kinds: {len(lines)} prompts into {args.out}\n\n{count_table(lines)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
