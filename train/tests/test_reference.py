"""reference: batched, left-padded greedy generation equals one prompt at a time; top-k log-probs are the target's;
validator JSONL format; a run killed between shards resumes to the same files."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from specdraft_train import reference
from specdraft_train.artifacts import verify_stage_dir
from specdraft_train.models import load_causal_lm, load_tokenizer
from specdraft_train.reference import Prompt, generate_continuations, read_train_examples

from conftest import REFERENCE_FLAGS, TINY_REFERENCE, run_cli

CPU = torch.device("cpu")


def test_batched_left_padded_generation_equals_one_at_a_time(tiny: dict[str, Path]):
    model = load_causal_lm(tiny["target"], CPU)
    tokenizer = load_tokenizer(tiny["target"])
    texts = ["import os\n", "def main(argv):\n    return", "class Foo(Bar):\n    \"\"\"Doc.\"\"\"\n\n    def __init__(self"]
    prompts = [Prompt(str(i), "c", tokenizer(t, add_special_tokens=False)["input_ids"]) for i, t in enumerate(texts)]
    assert len({len(p.tokens) for p in prompts}) == 3  # mixed lengths: the batch is left-padded
    batched = generate_continuations(model, tokenizer, prompts, 12, batch_size=3, device=CPU, top_k=5)
    for prompt, together in zip(prompts, batched):
        alone = generate_continuations(model, tokenizer, [prompt], 12, batch_size=1, device=CPU, top_k=5)[0]
        assert together.tokens == alone.tokens
        torch.testing.assert_close(torch.from_numpy(together.topk_logprobs).float(),
                                   torch.from_numpy(alone.topk_logprobs).float(), atol=2e-3, rtol=0)
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
    lines = (tiny["reference"] / "heldout.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    # 8 asked for; fewer only if the tiny held-out split has too few windows (each file gives ≤ 4)
    assert manifest["prompts"]["train"] == 48 and manifest["prompts"]["heldout"] == len(rows) >= 4
    assert all(set(r) == {"id", "category", "prompt_tokens", "continuation_tokens"} for r in rows)
    assert {r["category"] for r in rows} == {"prompt-32", "prompt-48", "prompt-64"}
    assert len({r["id"] for r in rows}) == len(rows)
    assert all(len(r["prompt_tokens"]) == int(r["category"].split("-")[1]) for r in rows)
    assert all(1 <= len(r["continuation_tokens"]) <= 16 for r in rows)
    examples = read_train_examples(tiny["reference"])
    assert len(examples) == 48
    for e in examples:
        assert e.topk_ids.shape == e.topk_logprobs.shape == (len(e.continuation_tokens), 20)
        assert (e.topk_ids[:, 0] == e.continuation_tokens).all()
        assert (e.topk_logprobs[:, :-1] >= e.topk_logprobs[:, 1:]).all()  # sorted, largest first


def test_reference_killed_between_shards_resumes_to_the_same_files(tiny: dict[str, Path], tmp_path: Path):
    out = tmp_path / "reference"
    args = ("reference", "--target", str(tiny["target"]), "--corpus", str(tiny["corpus"]), "--out", str(out),
            *REFERENCE_FLAGS)
    killed = run_cli(*args, "--halt-after-shards", "1", check=False)
    assert killed.returncode == -9
    assert sorted(p.name for p in out.glob("train-*")) == ["train-00000.safetensors"]
    first_shard = (out / "train-00000.safetensors").stat().st_mtime_ns
    reference.run(tiny["target"], out, TINY_REFERENCE, corpus_dir=tiny["corpus"], device_name="cpu")  # as the CLI would
    assert (out / "train-00000.safetensors").stat().st_mtime_ns == first_shard  # not regenerated
    ours = verify_stage_dir(out, "reference")["outputs"]
    straight = verify_stage_dir(tiny["reference"], "reference")["outputs"]
    assert ours == straight
