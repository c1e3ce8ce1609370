"""`target` on every architecture it converts (llama, qwen2, qwen3), from a GGUF and from an HF checkpoint directory,
on tiny random models with real tokenizers (tiny_targets.py): the checkpoint holds the source's weights exactly, the
tokenizer is the source's vocabulary (one fingerprint whichever way in), the served F32 GGUF loads in llama.cpp and
computes what the checkpoint computes in PyTorch; `drafter` makes drafters of each; a Qwen2 drafter exports at F32 and
at QAT Q4_0 (biases F32) and llama.cpp drafts as PyTorch does; a Llama GGUF with Mistral Nemo's Tekken vocabulary
converts and tokenizes as its source; what is not supported is refused in one line.

    bash train/scripts/pytest.sh tests/test_targets.py
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_main
from safetensors.torch import load_file
from test_export import run_gguf_greedy_all
from tiny_targets import (
    ARCHS,
    NEMO_TOKENIZER_DIR,
    QWEN3_TOKENIZER_DIR,
    tiny_gguf_target,
    tiny_hf_target,
    tokenizer_dir,
)
from transformers import AutoTokenizer

from specdraft_train.commands.export import export_gguf
from specdraft_train.commands.target import SERVED_GGUF, read_gguf
from specdraft_train.formats.artifacts import verify_stage_dir
from specdraft_train.formats.gguf_layout import LLAMA3_ROPE, llama3_rope_factors, llama3_rope_from_factors
from specdraft_train.formats.gguf_reader import GgufReader
from specdraft_train.modeling.models import load_causal_lm, load_tokenizer
from specdraft_train.training.quant import prepare_qat

EXACT_SETTINGS = {"flashAttention": False, "kvCacheType": "F32"}  # llama.cpp computing as fp32 PyTorch does
EXACT_TOLERANCE = 1e-3  # max |Δ log p| over the likely tokens at the first step (float32 summation order: ~1e-5)
CHATS = [
    [{"role": "user", "content": "What is the capital of Australia?"}],
    [{"role": "user", "content": "Write a Python function that reverses a string: 12345 naïve 日本語"}],
]
TEXTS = ["In 2024, 3.14 and x1 = 12345 apples", "naïve café 日本語 😀 — «quotes»", " 42\n  7 items\t\ttabs"]


@pytest.fixture(scope="module")
def made(smollm2_tokenizer: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    """Per architecture: the source HF checkpoint, the source GGUF (its F32 export), and `target` run on each."""
    root = tmp_path_factory.mktemp("targets")
    made = {}
    for arch in ARCHS:
        gguf_path = tiny_gguf_target(arch, tokenizer_dir(arch, smollm2_tokenizer), root / f"{arch}.gguf")
        dirs = {"gguf": gguf_path, "hf": gguf_path.with_suffix(".hf")}
        for kind in ("gguf", "hf"):
            dirs[f"from-{kind}"] = root / f"{arch}-from-{kind}"
            code, _, err = run_main("target", f"--{kind}", str(dirs[kind]), "--out", str(dirs[f"from-{kind}"]))
            assert code == 0, err
        made[arch] = dirs
    return made


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", ["gguf", "hf"])
def test_the_target_holds_the_sources_weights_and_vocabulary(made: dict[str, dict[str, Path]], arch: str, kind: str):
    dirs = made[arch]
    target = dirs[f"from-{kind}"]
    manifest = verify_stage_dir(target, "target")
    assert manifest["params"]["kind"] == kind
    expected, found = load_file(str(dirs["hf"] / "model.safetensors")), load_file(str(target / "model.safetensors"))
    assert expected.keys() == found.keys()
    for name in expected:  # exactly: F32 in, F32 out (llama's q/k rows permuted by export and back by target)
        assert torch.equal(expected[name], found[name]), name
    config = json.loads((target / "config.json").read_text())
    assert config["model_type"] == arch and config["head_dim"] == 16 and config["tie_word_embeddings"]
    stop = json.loads((target / "generation_config.json").read_text())["eos_token_id"]
    assert stop == ([2, 0] if arch == "llama" else [151_645, 151_643])  # <|im_end|>, then <|endoftext|>
    # one vocabulary whichever way in: the served file's tokens are what a drafter exported with this tokenizer carries
    assert manifest["vocab_fingerprint"] == manifest["tokenizer_vocab_fingerprint"]
    other = verify_stage_dir(dirs["from-hf" if kind == "gguf" else "from-gguf"], "target")
    assert manifest["vocab_fingerprint"] == other["vocab_fingerprint"]
    source = read_gguf(dirs["gguf"])  # one parse per file for both kinds of target
    # the chat template the GGUF carries (an HF source keeps it where it had it: Qwen's in tokenizer_config.json)
    assert load_tokenizer(target).chat_template == source.fields["tokenizer.chat_template"].contents()
    served = GgufReader(target / SERVED_GGUF)
    assert {t.tensor_type.name for t in served.tensors} == {"F32"}
    assert served.fields["general.architecture"].contents() == arch
    if kind == "hf":  # the tokenizer files as they came
        for name in ("tokenizer.json", "tokenizer_config.json"):
            assert (target / name).read_bytes() == (dirs["hf"] / name).read_bytes(), name


def log_probs_of(answer: dict, vocab_size: int) -> list[torch.Tensor]:
    """gguf_greedy.mjs's first-step probabilities (base64 float32 per prompt) as log-probabilities."""
    out = []
    for encoded in answer["firstProbabilities"]:
        probs = np.frombuffer(base64.b64decode(encoded), dtype="<f4")[:vocab_size]
        out.append(torch.from_numpy(np.log(probs.astype(np.float64))).float())
    return out


def torch_first_log_probs(checkpoint: Path, prompts: list[list[int]]) -> list[torch.Tensor]:
    model = load_causal_lm(checkpoint, torch.device("cpu"))
    with torch.no_grad():
        return [torch.log_softmax(model(input_ids=torch.tensor([p])).logits[0, -1], -1) for p in prompts]


def assert_same_first_step(ours: torch.Tensor, theirs: torch.Tensor, tolerance: float, where: str) -> None:
    likely = torch.topk(ours, 50).indices  # where a probability is large enough for float32 to carry its log
    gap = (ours[likely] - theirs[likely]).abs().max().item()
    assert gap < tolerance, f"{where}: |Δ log p| {gap:.2e} over the 50 likeliest tokens"
    assert int(theirs.nan_to_num(-1e9).argmax()) == int(ours.argmax()), where


@pytest.mark.parametrize("tokenizer_of", ["llama", "qwen"])
def test_llama_cpp_tokenizes_and_computes_as_the_checkpoint(made: dict[str, dict[str, Path]], tokenizer_of: str):
    archs = ["llama"] if tokenizer_of == "llama" else ["qwen2", "qwen3"]
    targets = [made[arch][f"from-{kind}"] for arch in archs for kind in ("gguf", "hf")]
    tokenizer = load_tokenizer(targets[0])  # the GGUF's tokenizer as `target` converts it
    chats = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in CHATS]
    texts = TEXTS + chats
    ours = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    paths = [t / SERVED_GGUF for t in targets]
    for answer in run_gguf_greedy_all(paths, {"texts": texts, "specialTokens": True}):
        assert answer["tokens"] == ours
    for other in targets[1:]:
        assert load_tokenizer(other)(texts, add_special_tokens=False)["input_ids"] == ours
    prompts = ours[len(TEXTS) :]
    request = {"prompts": prompts, "n": 1, "probabilities": True, **EXACT_SETTINGS}
    for target, answer in zip(targets, run_gguf_greedy_all(paths, request)):
        vocab = json.loads((target / "config.json").read_text())["vocab_size"]
        for i, (mine, theirs) in enumerate(zip(torch_first_log_probs(target, prompts), log_probs_of(answer, vocab))):
            assert_same_first_step(mine, theirs, EXACT_TOLERANCE, f"{target.name} prompt {i}")


@pytest.mark.parametrize("arch", ARCHS)
def test_drafters_of_each_target_keep_its_tokenizer_and_layers(made: dict[str, dict[str, Path]], arch: str, tmp_path):
    target = made[arch]["from-gguf"]
    code, out, err = run_main("drafter", "--target", str(target), "--out", str(tmp_path / "l"), "--init", "layers")
    assert code == 2 and "--init layers needs --layers N" in err
    code, out, err = run_main(
        "drafter", "--target", str(target), "--out", str(tmp_path / "l"), "--init", "layers", "--layers", "1"
    )
    assert code == 0, err
    assert json.loads(out)["target_layers"] == [0]
    ours, theirs = load_file(str(tmp_path / "l" / "model.safetensors")), load_file(str(target / "model.safetensors"))
    assert ours.keys() == {n for n in theirs if not n.startswith("model.layers.1.")}
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name
    flags = ("--init", "scratch", "--layers", "1", "--hidden-size", "32", "--heads", "2", "--kv-heads", "1")
    code, out, err = run_main("drafter", "--target", str(target), "--out", str(tmp_path / "s"), *flags)
    assert code == 0, err
    assert json.loads(out)["architecture"] == json.loads((target / "config.json").read_text())["architectures"][0]
    for drafter in (tmp_path / "l", tmp_path / "s"):
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
            assert (drafter / name).read_bytes() == (target / name).read_bytes(), (drafter, name)


def test_a_qwen2_drafter_exports_at_f32_and_qat_q4_0_and_drafts_in_llama_cpp(
    made: dict[str, dict[str, Path]], tmp_path: Path
):
    """The drafter of the Qwen2 target's first layer, exported at F32 (llama.cpp = PyTorch up to summation order) and
    with a QAT state at Q4_0: the blocks QAT computes (export checks them), the q/k/v biases F32 and exact, and
    llama.cpp's first step as the fake-quantized model's up to its Q8_0 activations."""
    code, _, err = run_main(
        "drafter", "--target", str(made["qwen2"]["from-hf"]), "--out", str(tmp_path / "d"), "--init", "layers",
        "--layers", "1",
    )  # fmt: skip
    assert code == 0, err
    drafter = tmp_path / "d"
    f32 = export_gguf(drafter, tmp_path / "d-f32.gguf", "F32")
    model = load_causal_lm(drafter, torch.device("cpu"))
    qat = prepare_qat(model)
    state = qat.save(tmp_path / "qat_state.safetensors")
    q4 = export_gguf(drafter, tmp_path / "d-q4_0.gguf", "Q4_0", qat_state=state)
    tensors = {t.name: t for t in GgufReader(q4).tensors}
    checkpoint = load_file(str(drafter / "model.safetensors"))
    for part in ("q", "k", "v"):
        bias = tensors[f"blk.0.attn_{part}.bias"]
        assert bias.tensor_type.name == "F32"
        assert np.array_equal(np.asarray(bias.data), checkpoint[f"model.layers.0.self_attn.{part}_proj.bias"].numpy())
    assert tensors["blk.0.attn_q.weight"].tensor_type.name == "Q4_0" and "blk.0.attn_output.bias" not in tensors

    tokenizer = load_tokenizer(drafter)
    chats = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in CHATS]
    prompts = [tokenizer(chat, add_special_tokens=False)["input_ids"] for chat in chats]
    request = {"prompts": prompts, "n": 4, "probabilities": True, **EXACT_SETTINGS}
    served_f32, served_q4 = run_gguf_greedy_all([f32, q4], request)
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            ours = list(prompt)
            for _ in range(4):  # greedy with the fake-quantized weights
                ours.append(int(model(input_ids=torch.tensor([ours])).logits[0, -1].argmax()))
            first = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1], -1)
            theirs = log_probs_of(served_q4, 151_936)[i]
            assert_same_first_step(first, theirs, 0.1, f"Q4_0 prompt {i}")
            print(f"Q4_0 prompt {i}: llama.cpp {served_q4['drafts'][i]}, PyTorch {ours[len(prompt) :]}")
    qat.remove()
    plain = torch_first_log_probs(drafter, prompts)
    for i, (mine, theirs) in enumerate(zip(plain, log_probs_of(served_f32, 151_936))):
        assert_same_first_step(mine, theirs, EXACT_TOLERANCE, f"F32 prompt {i}")


def test_mistral_nemo_converts_from_gguf_and_hf_and_tokenizes_as_its_source(tmp_path: Path):
    """Mistral Nemo, Mistral Small 3 and Ministral: an HF MistralForCausalLM of full attention with Tekken's vocabulary
    (131,072 tokens), which llama.cpp's converter writes as a llama GGUF with pre-tokenizer "tekken" (whole words
    before merges). `target` converts both forms to the same weights and vocabulary; the tokenizer cuts text as the
    source's tokenizer.json does (camel case, non-Latin scripts); llama.cpp tokenizes and computes each served file as
    its checkpoint does in PyTorch; a drafter of one layer exports as a llama GGUF that computes as PyTorch does."""
    gguf_path = tiny_gguf_target("mistral", NEMO_TOKENIZER_DIR, tmp_path / "nemo.gguf")
    source = read_gguf(gguf_path)
    assert source.fields["general.architecture"].contents() == "llama"
    assert source.fields["tokenizer.ggml.pre"].contents() == "tekken"
    targets = {kind: tmp_path / f"from-{kind}" for kind in ("gguf", "hf")}
    for kind, src in (("gguf", gguf_path), ("hf", gguf_path.with_suffix(".hf"))):
        code, _, err = run_main("target", f"--{kind}", str(src), "--out", str(targets[kind]))
        assert code == 0, err
    manifests = {kind: verify_stage_dir(target, "target") for kind, target in targets.items()}
    assert (
        len({m[key] for m in manifests.values() for key in ("vocab_fingerprint", "tokenizer_vocab_fingerprint")}) == 1
    )
    from_gguf, from_hf = (load_file(str(t / "model.safetensors")) for t in targets.values())
    assert from_gguf.keys() == from_hf.keys() and all(torch.equal(from_gguf[n], from_hf[n]) for n in from_gguf)
    assert json.loads((targets["hf"] / "config.json").read_text())["model_type"] == "mistral"
    for target in targets.values():
        assert json.loads((target / "generation_config.json").read_text())["eos_token_id"] == [2]  # </s>

    tokenizer, original = load_tokenizer(targets["gguf"]), AutoTokenizer.from_pretrained(NEMO_TOKENIZER_DIR)
    chats = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in CHATS]
    assert chats[0] == "<s>[INST]What is the capital of Australia?[/INST]"
    texts = [*TEXTS, "HelloWorld camelCaseWords ÀÉÎ straße Привет мир", "a/b\n/path/to\r\n", *chats]
    ours = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    assert ours == [original(text, add_special_tokens=False)["input_ids"] for text in texts]
    prompts = ours[-len(chats) :]

    code, _, err = run_main(
        "drafter", "--target", str(targets["hf"]), "--out", str(tmp_path / "d"), "--init", "layers", "--layers", "1"
    )
    assert code == 0, err
    drafter = export_gguf(tmp_path / "d", tmp_path / "d-f32.gguf", "F32")
    assert GgufReader(drafter).fields["general.architecture"].contents() == "llama"
    checkpoints = [*targets.values(), tmp_path / "d"]
    served = [targets["gguf"] / SERVED_GGUF, targets["hf"] / SERVED_GGUF, drafter]
    for answer in run_gguf_greedy_all(served, {"texts": texts, "specialTokens": True}):
        assert answer["tokens"] == ours
    request = {"prompts": prompts, "n": 1, "probabilities": True, **EXACT_SETTINGS}
    for checkpoint, answer in zip(checkpoints, run_gguf_greedy_all(served, request)):
        for i, (mine, theirs) in enumerate(
            zip(torch_first_log_probs(checkpoint, prompts), log_probs_of(answer, 131_072))
        ):
            assert_same_first_step(mine, theirs, EXACT_TOLERANCE, f"{checkpoint.name} prompt {i}")


def test_what_target_cannot_convert_is_refused_in_one_line(made: dict[str, dict[str, Path]], tmp_path: Path):
    config = json.loads((made["llama"]["hf"] / "config.json").read_text())
    unsupported = {  # another architecture; Mistral 7B's sliding-window attention, which llama.cpp's llama lacks
        "gemma2": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2"},
        "mistral-swa": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": 4096},
    }
    for name, fields in unsupported.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({**config, **fields}))
    cases = {
        str(
            tmp_path / "gemma2"
        ): "Gemma2ForCausalLM: `target` converts llama, qwen2, qwen3 GGUFs and Qwen3ForCausalLM, ",
        str(
            tmp_path / "mistral-swa"
        ): "a MistralForCausalLM with sliding_window 4096; export writes Mistral checkpoints",
        str(tmp_path / "nothing"): "not an HF checkpoint directory or hub id",
    }
    for source, says in cases.items():
        code, _, err = run_main("target", "--hf", source, "--out", str(tmp_path / "out"))
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):  # one source: argparse's usage error
        run_main(
            "target",
            "--hf",
            str(tmp_path / "gemma2"),
            "--gguf",
            str(made["qwen2"]["gguf"]),
            "--out",
            str(tmp_path / "o"),
        )


def test_a_qwen_hf_checkpoint_without_generation_config_still_stops_at_im_end(tmp_path: Path):
    source = tiny_hf_target("qwen3", QWEN3_TOKENIZER_DIR, tmp_path / "src")
    (source / "generation_config.json").unlink()
    code, _, err = run_main("target", "--hf", str(source), "--out", str(tmp_path / "t"), "--no-weights")
    assert code == 0, err
    assert json.loads((tmp_path / "t" / "generation_config.json").read_text())["eos_token_id"] == [151_645, 151_643]
    assert not (tmp_path / "t" / SERVED_GGUF).exists() and not (tmp_path / "t" / "model.safetensors").exists()


def test_a_llama_3_rope_scaled_gguf_reads_back_and_llama_cpp_rotates_as_the_checkpoint(
    smollm2_tokenizer: Path, tmp_path: Path
):
    """Llama 3.1–3.3's RoPE scaling travels as rope_freqs in a GGUF: export writes it from the config, `target` reads
    it back into the config, and llama.cpp on the served GGUF computes what the checkpoint computes at positions where
    the scaling changes the rotation (a checkpoint without it computes otherwise there)."""
    rope = {"rope_type": "llama3", "rope_theta": 100_000.0, "factor": 32.0, **LLAMA3_ROPE}
    source = tiny_hf_target("llama", smollm2_tokenizer, tmp_path / "llama3.hf", rope=rope)
    path = export_gguf(source, tmp_path / "llama3.gguf", "F32", ptq=True)
    factors = {t.name: np.asarray(t.data) for t in GgufReader(path).tensors}["rope_freqs.weight"]
    config = json.loads((source / "config.json").read_text())
    np.testing.assert_array_equal(factors, llama3_rope_factors(config))
    assert 1.0 in factors and 32.0 in factors  # some frequencies kept, some scaled, at this head size and base
    code, _, err = run_main("target", "--gguf", str(path), "--out", str(tmp_path / "target"))
    assert code == 0, err
    converted = json.loads((tmp_path / "target" / "config.json").read_text())
    assert converted["rope_parameters"] == rope
    ours, theirs = load_file(str(source / "model.safetensors")), load_file(str(tmp_path / "target/model.safetensors"))
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    prompts = [[(37 * i + 11 * j) % 40_000 + 100 for i in range(300)] for j in range(2)]  # 300 positions
    request = {"prompts": prompts, "n": 1, "probabilities": True, **EXACT_SETTINGS}
    [answer] = run_gguf_greedy_all([tmp_path / "target" / SERVED_GGUF], request)
    plain = tmp_path / "plain"
    shutil.copytree(tmp_path / "target", plain)
    (plain / "config.json").write_text(
        json.dumps({**converted, "rope_parameters": {"rope_type": "default", "rope_theta": 100_000.0}})
    )
    for i, (mine, wrong, served) in enumerate(
        zip(
            torch_first_log_probs(tmp_path / "target", prompts),
            torch_first_log_probs(plain, prompts),
            log_probs_of(answer, 49_152),
        )
    ):
        assert_same_first_step(mine, served, EXACT_TOLERANCE, f"prompt {i}")
        likely = torch.topk(mine, 50).indices
        assert (mine[likely] - wrong[likely]).abs().max().item() > 10 * EXACT_TOLERANCE  # the scaling matters here


def test_rope_freqs_other_than_llama_3s_are_refused():
    config = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16}
    rope = {"rope_type": "llama3", "rope_theta": 100_000.0, "factor": 8.0, **LLAMA3_ROPE}
    factors = llama3_rope_factors({**config, "rope_parameters": rope})
    assert llama3_rope_from_factors(factors, 100_000.0, config) == rope
    with pytest.raises(ValueError, match="other than Llama 3's"):
        llama3_rope_from_factors(factors * 1.01, 100_000.0, config)
