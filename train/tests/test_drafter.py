"""`drafter`: a new drafter for a target (its architecture, tokenizer and generation config; from scratch or from its
layers), and `pretrain --init`, which trains such a drafter as a general base on the corpus in its own tokenizer.
On the tiny lab's Qwen3 target (conftest); the Llama path on the real SmolLM2 target is test_real_target.py's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_main
from safetensors.torch import load_file
from tiny_targets import QWEN3_TOKENIZER_DIR, tiny_hf_target

from specdraft_train.commands import drafter
from specdraft_train.commands.tokenizer import load_tokenizer as load_lab_tokenizer
from specdraft_train.formats.artifacts import verify_stage_dir
from specdraft_train.formats.documents import load_token_stream, read_documents, token_stream
from specdraft_train.formats.vocabulary import END_OF_TEXT, TOKENIZER_FILES
from specdraft_train.modeling.models import load_causal_lm, load_tokenizer, parameter_count
from specdraft_train.training.examples import load_replay_tokens


def make_drafter(target: Path, out: Path, *flags: str) -> tuple[int, str, str]:
    return run_main("drafter", "--target", str(target), "--out", str(out), *flags)


def logits(checkpoint: Path, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return load_causal_lm(checkpoint, torch.device("cpu"))(input_ids=ids).logits


def test_a_drafter_of_every_target_layer_is_the_target(tiny: dict[str, Path], tmp_path: Path):
    target_layers = load_causal_lm(tiny["target"], torch.device("cpu")).config.num_hidden_layers
    code, out, err = make_drafter(tiny["target"], tmp_path / "all", "--init", "layers", "--layers", str(target_layers))
    assert code == 0, err
    assert json.loads(out)["target_layers"] == list(range(target_layers))
    ids = torch.tensor([[5, 17, 200, 3, 9, 41, 77, 12]])
    assert torch.equal(logits(tmp_path / "all", ids), logits(tiny["target"], ids))
    manifest = verify_stage_dir(tmp_path / "all", "drafter")
    assert manifest["inputs"]["target"]["verified"]
    for name in (*TOKENIZER_FILES, "generation_config.json"):  # the target's, byte for byte
        assert (tmp_path / "all" / name).read_bytes() == (tiny["target"] / name).read_bytes(), name


def test_kept_layers_are_the_targets_layers_in_order_with_its_embedding(tiny: dict[str, Path], tmp_path: Path):
    code, _, err = make_drafter(tiny["target"], tmp_path / "d", "--init", "layers", "--keep-layers", "1,3")
    assert code == 0, err
    ours, theirs = (
        load_file(str(tmp_path / "d" / "model.safetensors")),
        load_file(str(tiny["target"] / "model.safetensors")),
    )
    for new, old in ((0, 1), (1, 3)):
        names = [n for n in ours if n.startswith(f"model.layers.{new}.")]
        assert names
        for name in names:
            assert torch.equal(ours[name], theirs[name.replace(f"layers.{new}.", f"layers.{old}.")]), name
    assert torch.equal(ours["model.embed_tokens.weight"], theirs["model.embed_tokens.weight"])
    assert torch.equal(ours["model.norm.weight"], theirs["model.norm.weight"])
    assert not any(n.startswith("model.layers.2.") for n in ours)
    assert drafter.evenly_spaced(3, 30) == [0, 14, 29] and drafter.evenly_spaced(2, 30) == [0, 29]


def test_a_scratch_drafter_has_the_shape_asked_and_the_targets_architecture(tiny: dict[str, Path], tmp_path: Path):
    code, out, err = make_drafter(
        tiny["target"],
        tmp_path / "s",
        "--init",
        "scratch",
        "--layers",
        "1",
        "--hidden-size",
        "96",
        "--intermediate-size",
        "160",
        "--heads",
        "3",
        "--kv-heads",
        "1",
    )
    assert code == 0, err
    model = load_causal_lm(tmp_path / "s", torch.device("cpu"))
    target = load_causal_lm(tiny["target"], torch.device("cpu"))
    assert type(model) is type(target)
    config, vocab, head_dim = model.config, target.config.vocab_size, target.config.head_dim
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (1, 96, 160)
    attention = 96 * 3 * head_dim * 2 + 96 * 1 * head_dim * 2 + 2 * head_dim  # q, o; k, v; Qwen3's q/k norms
    per_layer = attention + 3 * 96 * 160 + 2 * 96
    assert parameter_count(model) == json.loads(out)["parameters"] == vocab * 96 + per_layer + 96  # tied head
    # seeded: the same command makes the same weights
    code, _, err = make_drafter(
        tiny["target"],
        tmp_path / "again",
        "--init",
        "scratch",
        "--layers",
        "1",
        "--hidden-size",
        "96",
        "--intermediate-size",
        "160",
        "--heads",
        "3",
        "--kv-heads",
        "1",
    )
    assert code == 0, err
    assert (tmp_path / "s" / "model.safetensors").read_bytes() == (
        tmp_path / "again" / "model.safetensors"
    ).read_bytes()


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--init", "layers", "--layers", "99"), "--layers 99: the target has 4 layers"),
        (("--init", "layers", "--keep-layers", "3,1"), "--keep-layers 3,1: expected increasing indices"),
        (("--init", "layers", "--layers", "2", "--hidden-size", "64"), "--hidden-size: --init layers keeps"),
        (("--init", "layers"), "needs --layers N or --keep-layers"),
        (("--init", "scratch", "--keep-layers", "0"), "--keep-layers picks the target's layers"),
        (("--init", "scratch", "--layers", "1", "--heads", "3", "--kv-heads", "2"), "--heads 3 is not a multiple"),
    ],
)
def test_bad_drafter_requests_get_one_line(tiny: dict[str, Path], tmp_path: Path, flags: tuple[str, ...], message: str):
    code, _, err = make_drafter(tiny["target"], tmp_path / "d", *flags)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_target_of_another_architecture_is_refused_naming_the_supported(tmp_path: Path):
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    code, _, err = run_main(
        "drafter", "--target", str(tmp_path / "gpt2"), "--out", str(tmp_path / "d"), "--init", "layers", "--layers", "1"
    )
    assert code == 2 and "model type 'gpt2'" in err and "llama, mistral, qwen2, qwen3" in err, err


def test_distill_refuses_a_drafter_of_another_vocabulary_before_training(tiny: dict[str, Path], tmp_path: Path):
    """A drafter given by hand (no manifest, so no tokenizer.json hash to compare) with Qwen3's vocabulary, against
    reference data of the lab target's: refused by the vocabulary fingerprint, in one line, nothing trained."""
    foreign = tiny_hf_target("qwen3", QWEN3_TOKENIZER_DIR, tmp_path / "qwen3")
    out = tmp_path / "distilled"
    flags = ("--preset", "micro", "--device", "cpu", "--batch-size", "8")
    code, _, err = run_main(
        "distill", "--drafter", str(foreign), "--reference", str(tiny["reference"]), "--out", str(out), *flags
    )
    assert code == 2 and "has another vocabulary than the target of the reference data" in err, err
    assert len([line for line in err.strip().splitlines() if "vocabulary" in line]) == 1, err
    assert not (out / "model.safetensors").exists()


def test_pretrain_init_trains_a_given_checkpoint_on_the_corpus_in_its_own_tokenizer(
    tiny: dict[str, Path], tmp_path: Path
):
    code, _, err = make_drafter(tiny["target"], tmp_path / "init", "--init", "scratch", "--layers", "1")
    assert code == 0, err
    flags = ("--corpus", str(tiny["corpus"]), "--init", str(tmp_path / "init"), "--out", str(tmp_path / "base"))
    code, out, err = run_main(
        "pretrain", *flags, "--preset", "micro", "--max-steps", "3", "--batch-size", "4", "--device", "cpu"
    )
    assert code == 0, err
    assert "pretrain[drafter]: preset micro" in err and json.loads(out)["steps"] == 3
    manifest = verify_stage_dir(tmp_path / "base", "pretrain")
    assert manifest["inputs"]["init"]["stage"] == "drafter"
    assert {"train.tokens.npy", "dev.tokens.npy", "tokenizer.json"} <= set(manifest["outputs"])
    # the dev split, each document followed by <|endoftext|>, in the checkpoint's tokenizer (here the lab's)
    tk = load_lab_tokenizer(tmp_path / "init")
    dev = [d.text for d in read_documents(tiny["corpus"], "dev")]
    assert np.array_equal(
        load_token_stream(tmp_path / "base", "dev"), token_stream(tk, dev, tk.token_to_id(END_OF_TEXT))
    )
    trained, start = (
        load_file(str(tmp_path / "base" / "model.safetensors")),
        load_file(str(tmp_path / "init" / "model.safetensors")),
    )
    assert trained.keys() == start.keys() and not torch.equal(trained["model.norm.weight"], start["model.norm.weight"])
    assert load_tokenizer(tmp_path / "base").get_vocab() == load_tokenizer(tmp_path / "init").get_vocab()
    assert "pretrain: tokenizing" in err
    streams = (tmp_path / "base" / "train.tokens.npy").read_bytes()
    code, _, err = run_main("pretrain", *flags, "--preset", "micro", "--max-steps", "1", "--device", "cpu")
    assert code == 0 and "pretrain: tokenizing" not in err, err  # a rerun reuses the streams of the same inputs
    assert (tmp_path / "base" / "train.tokens.npy").read_bytes() == streams
    # distill's replay reads the streams from the pretrain directory, recorded with its tokenizer.json's hash
    tokens, record = load_replay_tokens(tmp_path / "base")
    assert len(tokens) == manifest["metrics"]["train_split_tokens"] and "tokenizer.json" in record["outputs"]


def test_pretrain_needs_a_role_or_an_init(tiny: dict[str, Path], tmp_path: Path):
    code, _, err = run_main(
        "pretrain", "--corpus", str(tiny["corpus"]), "--tokenizer", str(tiny["tokenizer"]), "--out", str(tmp_path)
    )
    assert code == 2 and "--role target|drafter" in err, err


def test_pretrain_under_a_preset_without_lab_models_needs_an_init(tiny: dict[str, Path], tmp_path: Path):
    flags = ("--corpus", str(tiny["corpus"]), "--tokenizer", str(tiny["tokenizer"]), "--out", str(tmp_path / "p"))
    code, _, err = run_main("pretrain", *flags, "--role", "drafter", "--preset", "smollm2-chat")
    assert code == 2 and "--preset smollm2-chat sizes no lab model: give --init DIR" in err, err
    assert not (tmp_path / "p").exists()
