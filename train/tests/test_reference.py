"""reference: batched, left-padded greedy generation equals one prompt at a time; top-k log-probs are the target's;
prompts of every category (inner windows reached at the lab's scale); held-out/dev keep the first candidates whose
continuation is long enough; validator JSONL format; a run killed between shards resumes to the same files."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REFERENCE_FLAGS, TINY_REFERENCE, run_cli, torchrun

from specdraft_train.commands import reference
from specdraft_train.engine import eval_sets
from specdraft_train.engine.eval_sets import MAX_CANDIDATES_PER_KEPT, EvalPool, corpus_eval_pools, generate_eval_sets
from specdraft_train.engine.generation import generate_continuations
from specdraft_train.formats.artifacts import verify_stage_dir
from specdraft_train.formats.documents import Document
from specdraft_train.formats.prompts import Category, Prompt, corpus_categories, select_prompts, train_category_counts
from specdraft_train.modeling.models import load_causal_lm, load_tokenizer
from specdraft_train.presets import LAB
from specdraft_train.training.examples import Continuation, read_train_examples

CPU = torch.device("cpu")


def test_batched_left_padded_generation_equals_one_at_a_time(tiny: dict[str, Path]):
    model = load_causal_lm(tiny["target"], CPU)
    tokenizer = load_tokenizer(tiny["target"])
    texts = ["import os\n", "def main(argv):\n    return", 'class Foo(Bar):\n    """Doc."""\n\n    def __init__(self']
    prompts = [Prompt(str(i), "c", tokenizer(t, add_special_tokens=False)["input_ids"]) for i, t in enumerate(texts)]
    assert len({len(p.tokens) for p in prompts}) == 3  # mixed lengths: the batch is left-padded
    batched = generate_continuations(model, tokenizer, prompts, 12, batch_size=3, device=CPU, top_k=5)
    for prompt, together in zip(prompts, batched):
        alone = generate_continuations(model, tokenizer, [prompt], 12, batch_size=1, device=CPU, top_k=5)[0]
        assert together.tokens == alone.tokens
        torch.testing.assert_close(
            torch.from_numpy(together.topk_logprobs).float(),
            torch.from_numpy(alone.topk_logprobs).float(),
            atol=2e-3,
            rtol=0,
        )
        # The captured top-k are the target's teacher-forced log-probs at each continuation position.
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt.tokens + together.tokens])).logits[0]
        p = len(prompt.tokens)
        values, ids = torch.log_softmax(logits[p - 1 : p - 1 + len(together.tokens)], dim=-1).topk(5)
        assert torch.equal(ids[:, 0].int(), torch.from_numpy(together.topk_ids[:, 0]))
        assert together.tokens == ids[:, 0].tolist()  # greedy token = top-1
        torch.testing.assert_close(values, torch.from_numpy(together.topk_logprobs).float(), atol=2e-3, rtol=0)


def test_reference_outputs_validator_jsonl_and_training_shards(tiny: dict[str, Path]):
    manifest = verify_stage_dir(tiny["reference"], "reference")
    names = [c.name for c in corpus_categories(("code", "prose"), TINY_REFERENCE.prompt_lengths)]
    assert len(names) == 12 and "prose/inner/64" in names
    for split, keep in (("heldout", TINY_REFERENCE.heldout_per_category), ("dev", TINY_REFERENCE.dev_per_category)):
        rows = [json.loads(line) for line in (tiny["reference"] / f"{split}.jsonl").read_text().splitlines()]
        assert Counter(r["category"] for r in rows) == {name: keep for name in names}  # every category, its count
        assert manifest["categories"][split] == {name: keep for name in names}
        assert all(set(r) == {"id", "category", "prompt_tokens", "continuation_tokens"} for r in rows)
        assert len({r["id"] for r in rows}) == len(rows)
        assert all(len(r["prompt_tokens"]) == int(r["category"].split("/")[2]) for r in rows)
        assert all(TINY_REFERENCE.min_continuation_tokens <= len(r["continuation_tokens"]) <= 16 for r in rows)
        inner = [r for r in rows if "/inner/" in r["category"]]
        assert inner and all(int(r["id"].split("/")[2].split("+")[0]) >= 1 for r in inner)
    assert manifest["eval_candidates"]["generated"] >= manifest["eval_candidates"]["kept"] == 12 * 3
    assert manifest["prompts"]["train"] == 48 and set(manifest["categories"]["train"]) == set(names)
    assert manifest["categories"]["train"] == manifest["train_asked"]
    examples = read_train_examples(tiny["reference"])
    assert len(examples) == 48
    for e in examples:
        assert e.topk_ids.shape == e.topk_logprobs.shape == (len(e.continuation_tokens), 20)
        assert (e.topk_ids[:, 0] == e.continuation_tokens).all()
        assert (e.topk_logprobs[:, :-1] >= e.topk_logprobs[:, 1:]).all()  # sorted, largest first


def test_reference_killed_between_shards_resumes_to_the_same_files(tiny: dict[str, Path], tmp_path: Path):
    out = tmp_path / "reference"
    args = (
        "reference",
        "--target",
        str(tiny["target"]),
        "--corpus",
        str(tiny["corpus"]),
        "--out",
        str(out),
        *REFERENCE_FLAGS,
    )
    killed = run_cli(*args, "--halt-after-shards", "1", check=False)
    assert killed.returncode == -9
    assert sorted(p.name for p in out.glob("train-*")) == ["train-00000.safetensors"]
    first_shard = (out / "train-00000.safetensors").stat().st_mtime_ns
    reference.run(tiny["target"], out, TINY_REFERENCE, corpus_dir=tiny["corpus"], device_name="cpu")  # as the CLI would
    assert (out / "train-00000.safetensors").stat().st_mtime_ns == first_shard  # not regenerated
    ours = verify_stage_dir(out, "reference")["outputs"]
    straight = verify_stage_dir(tiny["reference"], "reference")["outputs"]
    assert ours == straight


# 96 prompts in shards of 8: twelve shards, enough that the rank generating the eval sets (rank 0) takes some too.
SHARDED = replace(TINY_REFERENCE, train_prompts=96, shard_prompts=8)
SHARDED_FLAGS = (*REFERENCE_FLAGS, "--train-prompts", "96", "--shard-prompts", "8")  # what SHARDED says


@pytest.fixture(scope="module")
def one_process(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("one") / "reference"
    reference.run(tiny["target"], out, SHARDED, corpus_dir=tiny["corpus"], device_name="cpu")
    return out


def _same_files(a: Path, b: Path) -> None:
    """Both finished, listing the same outputs, each byte for byte equal."""
    ours, theirs = verify_stage_dir(a, "reference")["outputs"], verify_stage_dir(b, "reference")["outputs"]
    assert sorted(ours) == sorted(theirs) and len([n for n in ours if n.startswith("train-")]) == 12
    for name in ours:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _reference_cli(tiny: dict[str, Path], out: Path, *extra: str, check: bool = True):
    return run_cli(
        "reference",
        "--target",
        str(tiny["target"]),
        "--corpus",
        str(tiny["corpus"]),
        "--out",
        str(out),
        *SHARDED_FLAGS,
        *extra,
        check=check,
        runner=torchrun(2),
        timeout=300,
    )


def test_sharded_reference_killed_mid_way_resumes_with_another_rank_count(
    tiny: dict[str, Path], one_process: Path, tmp_path: Path
):
    out = tmp_path / "reference"
    killed = _reference_cli(tiny, out, "--halt-after-shards", "1", check=False)  # each rank dies after its first
    assert killed.returncode != 0 and not (out / "manifest.json").exists()
    kept = {p.name: p.stat().st_mtime_ns for p in out.glob("train-*.safetensors")}
    assert 1 <= len(kept) < 12
    # One process finishes what the two ranks left: only the missing shards, the finished ones untouched.
    manifest = reference.run(tiny["target"], out, SHARDED, corpus_dir=tiny["corpus"], device_name="cpu")
    assert manifest["generation"]["train_shards"] == 12 - len(kept)
    assert {name: (out / name).stat().st_mtime_ns for name in kept} == kept
    _same_files(one_process, out)


class _CharTokenizer:
    """A stand-in for the HF tokenizer: one token per character (its code point), as arrays (the lab-scale test
    tokenizes 43M characters: a list of ints per character took ten seconds of it)."""

    def __call__(self, texts: list[str], add_special_tokens: bool = False) -> dict[str, list[np.ndarray]]:
        return {"input_ids": [np.frombuffer(text.encode("utf-32-le"), dtype="<u4").astype(np.int32) for text in texts]}


def _synthetic_split(n_code: int, n_prose: int, seed: int) -> list[Document]:
    """Files of random letters, 100–3,000 characters (= tokens) long: some too short for the longest prompts."""
    rng = np.random.default_rng(seed)
    documents = []
    for kind, n in (("code", n_code), ("prose", n_prose)):
        lengths = rng.integers(100, 3000, size=n)
        letters = rng.integers(97, 123, size=int(lengths.sum()), dtype=np.uint8).tobytes().decode("ascii")
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        for i in range(n):
            text = letters[offsets[i] : offsets[i + 1]]
            documents.append(Document(kind, kind, f"{kind}/{i}", hashlib.sha256(text.encode()).hexdigest(), text))
    return documents


def _check_windows(
    documents: list[Document], selected: dict[Category, list[Prompt]], distinct_files: bool = True
) -> None:
    by_prefix = {d.sha256[:12]: d for d in documents}
    for category, prompts in selected.items():
        files = set()
        for prompt in prompts:
            _, prefix, window = prompt.id.split("/")
            start, length = (int(x) for x in window.split("+"))
            document = by_prefix[prefix]
            assert document.kind == category.kind and length == category.length == len(prompt.tokens)
            assert (start == 0) == (category.position == "open")  # inner windows start at ≥ 1
            assert prompt.tokens == [ord(ch) for ch in document.text[start : start + length]]
            files.add(prefix)
        if distinct_files:
            assert len(files) == len(prompts)  # held-out/dev: a file serves a category once
        else:
            assert len({p.id for p in prompts}) == len(
                prompts
            )  # train: a file may give several windows, never twice the same


def test_prompts_reach_every_category_at_the_lab_scale():
    """With 22,877 train files and 8,192 prompts the old selection took only openings (the calibration in
    bench/results/2026-11-30-h200-lab/README.md). A corpus shaped like the lab's (tens of thousands of files) gets
    every category at the lab's counts (65,536 prompts), inner windows included."""
    documents = _synthetic_split(22_877, 5_400, seed=0)
    categories = corpus_categories(("code", "prose"), LAB.reference.prompt_lengths)
    counts = train_category_counts(categories, LAB.reference)
    assert sum(counts.values()) == LAB.reference.train_prompts == 65_536
    inner = sum(n for c, n in counts.items() if c.position == "inner")
    assert inner == pytest.approx(65_536 * (1 - LAB.reference.train_open_share), abs=len(categories))
    selected = select_prompts(documents, _CharTokenizer(), counts, "train", seed=0)
    assert {c: len(p) for c, p in selected.items()} == counts  # inner windows of every length reached
    _check_windows(documents, selected, distinct_files=False)
    # 5,400 prose files cannot give 7,282 prose/inner/64 prompts once each: long files give several windows
    prose_inner = selected[next(c for c in counts if c.name == "prose/inner/64")]
    assert len({p.id.split("/")[1] for p in prose_inner}) < len(prose_inner)
    starts = [int(p.id.split("/")[2].split("+")[0]) for c, ps in selected.items() if c.position == "inner" for p in ps]
    assert len(set(starts)) > 1000 and max(starts) > 1000  # spread over the files, not one offset
    assert select_prompts(documents, _CharTokenizer(), counts, "train", seed=0) == selected  # deterministic


def test_small_splits_reuse_files_across_categories_but_never_within_one():
    documents = _synthetic_split(30, 20, seed=1)
    categories = corpus_categories(("code", "prose"), (64, 512, 2900))
    selected = select_prompts(documents, _CharTokenizer(), {c: 25 for c in categories}, "heldout", seed=0)
    _check_windows(documents, selected)
    for category, prompts in selected.items():
        eligible = sum(1 for d in documents if d.kind == category.kind and category.fits(len(d.text)))
        assert len(prompts) == min(25, eligible)  # every long-enough file serves each category once, when needed
    assert len(selected[Category("code", "open", 64)]) == 25 and len(selected[Category("prose", "inner", 64)]) == 20


def test_train_counts_follow_the_shares_and_renormalize_over_kinds_present():
    config = replace(LAB.reference, train_prompts=1000, train_prose_share=0.25, train_open_share=0.5)
    counts = train_category_counts(corpus_categories(("code", "prose"), (64, 192, 512)), config)
    assert sum(counts.values()) == 1000
    assert sum(n for c, n in counts.items() if c.kind == "prose") == pytest.approx(250, abs=1)
    assert sum(n for c, n in counts.items() if c.position == "open") == pytest.approx(500, abs=1)
    code_only = train_category_counts(corpus_categories(("code",), (64, 192, 512)), config)
    assert sum(code_only.values()) == 1000 and {c.kind for c in code_only} == {"code"}


def _fake_generation(lengths: dict[str, int], calls: list[int]):
    def generate(model, tokenizer, prompts, max_new_tokens, batch_size, device, top_k, engine="static", progress=False):
        calls.append(len(prompts))
        return [Continuation([7] * min(lengths[p.id], max_new_tokens), None, None) for p in prompts]

    return generate


def test_eval_sets_keep_the_first_candidates_whose_continuation_is_long_enough(monkeypatch: pytest.MonkeyPatch):
    config = replace(LAB.reference, max_new_tokens=20, min_continuation_tokens=10, eval_oversample=1.5)
    # Category a: every third continuation stops early; b: all long; c: only the last candidates are long.
    lengths, pools = {}, []
    for name, pattern in (("a", [20, 20, 3] * 8), ("b", [20] * 24), ("c", [2] * 10 + [15] * 14)):
        prompts = [Prompt(f"{name}{i}", name, [1, 2]) for i in range(len(pattern))]
        lengths.update({p.id: n for p, n in zip(prompts, pattern)})
        pools.append(EvalPool("heldout", name, prompts, 6, config.min_continuation_tokens))
    calls: list[int] = []
    monkeypatch.setattr(eval_sets, "generate_continuations", _fake_generation(lengths, calls))
    generated = generate_eval_sets(None, None, pools, config, torch.device("cpu"))
    kept = {pool.category: [p.id for p, _ in pool.kept] for pool in pools}
    assert kept["a"] == ["a0", "a1", "a3", "a4", "a6", "a7"]  # the first 6 that reach 10 tokens, in candidate order
    assert kept["b"] == [f"b{i}" for i in range(6)]
    assert kept["c"] == [f"c{i}" for i in range(10, 16)]
    # Round 1: 9 of each (6 × 1.5); a had 6 there, b 6; c none, so round 2 asks 18 more of c, then it is full.
    assert calls == [27, 15] and generated == 42
    assert all(len(c.tokens) >= 10 for pool in pools for _, c in pool.kept)


def test_eval_sets_fail_clearly_when_the_candidates_run_out(monkeypatch: pytest.MonkeyPatch):
    config = replace(LAB.reference, max_new_tokens=20, min_continuation_tokens=10)
    prompts = [Prompt(f"x{i}", "prose/inner/512", [1]) for i in range(8)]
    monkeypatch.setattr(eval_sets, "generate_continuations", _fake_generation({p.id: 5 for p in prompts}, []))
    pool = EvalPool("heldout", "prose/inner/512", prompts, 4, config.min_continuation_tokens)
    with pytest.raises(
        ValueError,
        match=r"heldout category prose/inner/512: only 0 of 4 .* reached 10 tokens, "
        r"from all 8 candidates",
    ):
        generate_eval_sets(None, None, [pool], config, torch.device("cpu"))


def test_eval_pools_draw_spare_candidates_and_refuse_a_split_too_small_for_a_category():
    documents = {split: _synthetic_split(60, 40, seed=i) for i, split in enumerate(("train", "dev", "heldout"))}
    config = replace(LAB.reference, prompt_lengths=(64, 512), heldout_per_category=8, dev_per_category=4)
    categories = corpus_categories(("code", "prose"), config.prompt_lengths)
    pools = corpus_eval_pools(documents, _CharTokenizer(), categories, config)
    assert [(p.split, p.category, p.keep) for p in pools] == [
        (split, c.name, keep) for split, keep in (("dev", 4), ("heldout", 8)) for c in categories
    ]
    assert all(len(p.candidates) == p.keep * MAX_CANDIDATES_PER_KEPT for p in pools if p.split == "dev")
    with pytest.raises(
        ValueError,
        match=r"dev category code/open/2900: \d candidate prompts for 4: the dev split has "
        r"too few code files of at least 2900 tokens",
    ):
        corpus_eval_pools(documents, _CharTokenizer(), corpus_categories(("code", "prose"), (2900,)), config)
    with pytest.raises(ValueError, match=r"heldout category code/inner/2900: .* of at least 2901 tokens"):
        corpus_eval_pools(
            documents, _CharTokenizer(), [Category("code", "inner", 2900)], replace(config, dev_per_category=1)
        )
