"""The real-model path with lab models: chat prompts through the chat template, --target/--drafter as paths,
distill and evaluate on the result (the same commands serve Qwen3-8B + Qwen3-1.7B by HF id)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import run_cli

from specdraft_train import distill, reference
from specdraft_train.artifacts import verify_stage_dir
from specdraft_train.config import MICRO
from specdraft_train.models import load_tokenizer
from specdraft_train.tau import read_conversations

QUESTIONS = [
    "How do I read a file?",
    "What is a list comprehension?",
    "Explain os.path.join.",
    "Sort a dict by value.",
    "What does yield do?",
    "How to parse JSON?",
    "Why use a virtualenv?",
    "What is __init__.py?",
    "How do decorators work?",
    "What is a generator?",
    "Copy a list.",
    "Reverse a string.",
]


@pytest.fixture(scope="module")
def chat_reference(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("chat")
    chat = root / "prompts.jsonl"
    with open(chat, "w") as f:
        for i, question in enumerate(QUESTIONS):
            split = "heldout" if i < 3 else "dev" if i < 5 else "train"
            row = {
                "id": f"q{i}",
                "category": "short" if len(question) < 20 else "long",
                "split": split,
                "messages": [{"role": "system", "content": "Answer in Python."}, {"role": "user", "content": question}],
            }
            f.write(json.dumps(row) + "\n")
    out = root / "reference"
    run_cli(
        "reference",
        "--target",
        str(tiny["target"]),
        "--chat",
        str(chat),
        "--out",
        str(out),
        "--preset",
        "micro",
        "--max-new-tokens",
        "16",
        "--device",
        "cpu",
    )
    return chat, out


def test_chat_prompts_are_rendered_with_the_chat_template_thinking_off(tiny: dict[str, Path], chat_reference):
    chat, out = chat_reference
    manifest = verify_stage_dir(out, "reference")
    assert manifest["prompts"] == {"train": 7, "dev": 2, "heldout": 3}
    assert manifest["inputs"]["prompts"]["sha256"]
    tokenizer = load_tokenizer(tiny["target"])
    rows = {json.loads(line)["id"]: json.loads(line) for line in chat.read_text().splitlines()}
    held = read_conversations(out / "heldout.jsonl")
    assert sorted(c.id for c in held) == ["q0", "q1", "q2"]
    for c in held:
        text = tokenizer.decode(c.prompt_tokens)
        assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert rows[c.id]["messages"][1]["content"] in text
        assert c.category == rows[c.id]["category"]


def test_distill_and_evaluate_take_models_by_path(tiny: dict[str, Path], chat_reference, tmp_path: Path):
    _, reference = chat_reference
    distilled = tmp_path / "distilled"
    distill.run(
        str(tiny["base"]), reference, distilled, replace(MICRO.distill, batch_size=4), epochs=1, device_name="cpu"
    )
    assert verify_stage_dir(distilled, "distill")["inputs"]["drafter"]["verified"] is True
    report_path = tmp_path / "eval.json"
    result = run_cli(
        "evaluate",
        "--heldout",
        str(reference / "heldout.jsonl"),
        "--drafter",
        str(tiny["base"]),
        "--drafter",
        str(distilled),
        "--target",
        str(tiny["target"]),
        "--ngram",
        "--out",
        str(report_path),
        "--device",
        "cpu",
    )
    report = json.loads(report_path.read_text())
    assert [d["drafter"]["path"] for d in report["drafters"]] == [str(tiny["base"]), str(distilled)]
    assert set(report["drafters"][0]["as_trained"]["by_category"]) <= {"short", "long"}
    held = read_conversations(reference / "heldout.jsonl")
    # Continuations are ≤ 16 = k tokens, so the target drafting for itself needs exactly one step per conversation.
    assert report["target_as_drafter"]["steps"] == len(held)
    assert report["target_as_drafter"]["tau"] == pytest.approx(
        sum(len(c.continuation_tokens) for c in held) / len(held)
    )
    assert "target as drafter" in result.stdout and "n-gram peer" in result.stdout


def test_reference_needs_some_prompts(tiny: dict[str, Path], tmp_path: Path):
    with pytest.raises(ValueError, match="--corpus, --prompts"):
        reference.run(tiny["target"], tmp_path / "r", MICRO.reference)


def test_text_prompts_make_an_evaluation_only_set(tiny: dict[str, Path], tmp_path: Path):
    """Plain-text lines (how prompts nobody's generator made are checked): tokenized as given, cut to their
    prompt_tokens, all held out, no dev split needed without training prompts."""
    texts = tmp_path / "texts.jsonl"
    samples = [
        ("js", "function add(a, b) {\n  return a + b;\n}\nmodule.exports = { add };\n", 12),
        ("js", "const items = [1, 2, 3].map((x) => x * 2);\nconsole.log(items);\n", None),
        ("markdown", "# Install\n\nRun `npm ci`, then `npm start`. The server listens on port 8080.\n", 8),
    ]
    with open(texts, "w") as f:
        for i, (category, text, limit) in enumerate(samples):
            row = {"id": f"t{i}", "category": category, "split": "heldout", "text": text}
            if limit is not None:
                row["prompt_tokens"] = limit
            f.write(json.dumps(row) + "\n")
    out = tmp_path / "reference"
    manifest = reference.run(
        tiny["target"], out, replace(MICRO.reference, max_new_tokens=8), prompts=texts, device_name="cpu"
    )
    assert manifest is not None and manifest["prompts"] == {"train": 0, "dev": 0, "heldout": 3}
    tokenizer = load_tokenizer(tiny["target"])
    held = {c.id: c for c in read_conversations(out / "heldout.jsonl")}
    for i, (category, text, limit) in enumerate(samples):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert held[f"t{i}"].prompt_tokens == (ids[:limit] if limit else ids)
        assert held[f"t{i}"].category == category
        assert len(held[f"t{i}"].continuation_tokens) <= 8
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "x", "prompt_tokens": 0}) + "\n")
    with pytest.raises(ValueError, match="prompt_tokens"):
        reference.run(tiny["target"], tmp_path / "r2", MICRO.reference, prompts=bad, device_name="cpu")
    both = tmp_path / "both.jsonl"
    both.write_text(json.dumps({"text": "x", "messages": []}) + "\n")
    with pytest.raises(ValueError, match='"messages" or "text"'):
        reference.run(tiny["target"], tmp_path / "r3", MICRO.reference, prompts=both, device_name="cpu")


def test_the_committed_unseen_texts_are_valid_given_prompts(tiny: dict[str, Path]):
    """data/unseen-texts.jsonl (the check on prompts the lab did not make) reads as given prompts: every line held out,
    16 per kind of the eight, each its text's first prompt_tokens tokens (one of the lab's prompt lengths)."""
    from specdraft_train.config import LAB, CorpusConfig

    path = Path(__file__).resolve().parents[2] / "data" / "unseen-texts.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    tokenizer = load_tokenizer(tiny["target"])
    prompts = reference.given_prompts(path, tokenizer, CorpusConfig())
    assert len(prompts["heldout"]) == len(rows) and not prompts["train"] and not prompts["dev"]
    kinds: dict[str, int] = {}
    for row, prompt in zip(rows, prompts["heldout"]):
        assert row["prompt_tokens"] in LAB.reference.prompt_lengths
        whole = tokenizer(row["text"], add_special_tokens=False)["input_ids"]
        assert prompt.tokens == whole[: row["prompt_tokens"]] and prompt.category == row["category"]
        kinds[prompt.category] = kinds.get(prompt.category, 0) + 1
    assert len(kinds) == 8 and set(kinds.values()) == {16}


def test_evaluate_refuses_a_heldout_file_that_does_not_match_its_manifest(tiny: dict[str, Path], tmp_path: Path):
    import shutil

    from specdraft_train.artifacts import ArtifactError
    from specdraft_train.evaluate import evaluate

    shutil.copytree(tiny["reference"], tmp_path / "reference")
    held = tmp_path / "reference" / "heldout.jsonl"
    held.write_text(held.read_text().replace('"code/open/16"', '"code/open/17"', 1))
    with pytest.raises(ArtifactError, match="heldout.jsonl: sha256"):
        evaluate(held, [], 16, __import__("torch").device("cpu"), q4=False, ngram=True, target=None)
