"""ablate: variants from a (tiny) finished lab — settings parsed and checked, category filter and QAT switch honoured,
scores against the lab's base and target, data tokens, the report, and a rerun that skips finished variants."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import run_main

from specdraft_train.commands.evaluate import drafter_tau
from specdraft_train.formats.artifacts import atomic_write_json, write_manifest
from specdraft_train.formats.gguf_reader import GgufReader
from specdraft_train.labs.reports import ablation_markdown
from specdraft_train.labs.variants import parse_variant
from specdraft_train.modeling.models import QAT_STATE_FILE, load_causal_lm
from specdraft_train.modeling.tau import gap_closed, model_tau, read_conversations
from specdraft_train.pipeline.ablate import run_ablation
from specdraft_train.training.examples import read_train_examples
from specdraft_train.training.quant import load_qat_state

LAB_SETTINGS = ["distill.batch_size=8", "distill.epochs=1", "distill.eval_every=0"]
CE_FILTERED = 'ce32:distill.loss=ce,distill.categories=["prose"],variant.qat=false'
ALL_Q4_0 = "allq4:export.embedding_type=Q4_0"


@pytest.fixture(scope="module")
def lab(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny fixture's stages laid out as a lab directory, with the lab's evaluation of base and target."""
    root = tmp_path_factory.mktemp("ablate") / "lab"
    for name in ("tokenizer", "target", "base", "reference"):
        shutil.copytree(tiny[name], root / name)
    atomic_write_json(root / "lab_state.json", {"preset": "micro", "settings": LAB_SETTINGS})
    heldout = read_conversations(root / "reference" / "heldout.jsonl")
    cpu = torch.device("cpu")
    base, mode = drafter_tau(root / "base", heldout, 16, cpu, q4=True)
    target = model_tau(load_causal_lm(root / "target", cpu), heldout, 16, cpu)
    atomic_write_json(
        root / "eval" / "results.json",
        {"tau": {"base_q4_0_ptq": {"weights": mode, **base.to_dict()}, "target_as_drafter": target.to_dict()}},
    )
    write_manifest(root / "eval", "evaluate", outputs=["results.json"])
    return root


def test_variant_specs_parse_and_bad_ones_are_refused():
    variant = parse_variant('v1:distill.categories=["code/inner","prose"],distill.ce_weight=1,variant.qat=false')
    assert variant.name == "v1" and variant.qat is False
    assert variant.distill_settings == ('distill.categories=["code/inner","prose"]', "distill.ce_weight=1")
    assert parse_variant("baseline:") == parse_variant("baseline:") and parse_variant("baseline:").qat is True
    allq4 = parse_variant("allq4:export.embedding_type=Q4_0,distill.ce_weight=1")
    assert allq4.export_settings == ("export.embedding_type=Q4_0",)
    assert allq4.distill_settings == ("distill.ce_weight=1",)
    assert "export_settings" not in parse_variant("kl:").spec()  # specs of variants run before export settings match
    assert "init" not in parse_variant("kl:").spec() and parse_variant("kl:").target_layers() is None
    layers = parse_variant("deep:variant.init=layers:4,distill.epochs=2")
    assert layers.init == "layers:4" and layers.target_layers() == 4 and layers.spec()["init"] == "layers:4"
    assert parse_variant(layers.text()) == layers
    for bad, message in (
        ("no-colon", "expected NAME:"),
        ("a/b:distill.lr=1", "expected NAME:"),
        ("x:lr=1", "expected distill.FIELD=VALUE, export.FIELD=VALUE"),
        ("x:variant.qat=maybe", "variant.qat"),
        ("x:variant.init=layers:0", "variant.init=base|layers:N"),
        ("x:variant.init=layers", "variant.init=base|layers:N"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_variant(bad)


def test_ablation_scores_variants_against_the_labs_base_and_target(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "ablation"
    variants = [parse_variant("kl:"), parse_variant(CE_FILTERED), parse_variant(ALL_Q4_0)]
    summary = run_ablation(lab, out, variants, device_name="cpu")
    assert [r["name"] for r in summary["variants"]] == ["kl", "ce32", "allq4"]
    kl, ce32, allq4 = summary["variants"]
    assert kl["weights"] == "q4_0-qat" and ce32["weights"] == "q4_0-ptq"  # QAT like the lab, or skipped

    # all-Q4_0: QAT trained the (tied) embedding at Q4_0, τ is scored so, and the exported GGUF stores it so
    assert allq4["weights"] == "q4_0-qat-q4_0-embedding" and allq4["export"]["embedding_type"] == "Q4_0"
    assert load_qat_state(out / "allq4" / "distilled-qat" / QAT_STATE_FILE).types["model.embed_tokens.weight"] == "Q4_0"
    assert load_qat_state(out / "kl" / "distilled-qat" / QAT_STATE_FILE).types["model.embed_tokens.weight"] == "Q8_0"
    for row, vocab_type in ((kl, "Q8_0"), (allq4, "Q4_0"), (ce32, "Q8_0")):
        tensors = {t.name: t.tensor_type.name for t in GgufReader(row["export"]["gguf"]).tensors}
        assert tensors["token_embd.weight"] == vocab_type and row["export"]["gguf_bytes"] > 0
    assert allq4["export"]["gguf_bytes"] < kl["export"]["gguf_bytes"]
    assert ce32["config"]["loss"] == "ce" and ce32["config"]["batch_size"] == 8  # the variant's and the lab's settings
    examples = read_train_examples(lab / "reference")
    all_tokens = sum(len(e.continuation_tokens) for e in examples)
    only_prose = [e for e in examples if e.category.startswith("prose")]
    assert len(examples) % 8 == 0 and len(only_prose) % 8 == 0  # every example trains once an epoch (no remainder)
    assert kl["data_tokens"] == 2 * all_tokens  # one distill epoch and one QAT epoch
    assert ce32["data_tokens"] == sum(len(e.continuation_tokens) for e in only_prose) and ce32["examples"] == len(
        only_prose
    )
    assert set(kl["stages"]) == {"distilled", "distilled-qat"} and set(ce32["stages"]) == {"distilled"}
    reference = summary["lab_reference"]
    base, target = reference["base_q4_0_ptq"], reference["target_as_drafter"]
    for row in (kl, ce32):
        assert row["over_base"] == pytest.approx(row["tau"] / base["tau"])
        assert row["gap_closed"] == pytest.approx(gap_closed(row["tau"], base["tau"], target["tau"]))
        for name, category in row["by_category"].items():
            assert category["over_base"] == pytest.approx(category["tau"] / base["by_category"][name]["tau"])
        assert row["beats_base_everywhere"] == all(c["tau"] > c["base_tau"] for c in row["by_category"].values())
        assert 0 <= row["top1"] <= 1 and row["device_seconds"] > 0 and row["device"] == "cpu"
    # The held-out τ recorded is the final checkpoint's, scored the way evaluate scores it.
    held = read_conversations(lab / "reference" / "heldout.jsonl")
    again, mode = drafter_tau(out / "ce32" / "distilled", held, 16, torch.device("cpu"), q4=True)
    assert mode == "q4_0-ptq" and again.tau == ce32["tau"] and again.macro_tau == ce32["macro_tau"]
    markdown = (out / "ablation.md").read_text()
    assert (
        "| kl | `lab defaults` | q4_0-qat |" in markdown
        and '`distill.loss=ce, distill.categories=["prose"], variant.qat=false`' in markdown
        and "| allq4 | `export.embedding_type=Q4_0` | q4_0-qat-q4_0-embedding |" in markdown
        and f"| {allq4['export']['gguf_bytes']:,} |" in markdown
    )
    # τ as trained (fp32) beside τ at Q4_0: what quantization costs each variant
    assert f"| q4_0-ptq | {ce32['fp32']['tau']:.3f} | {ce32['tau']:.3f} |" in markdown
    assert json.loads((out / "ablation.json").read_text()) == summary

    # A rerun skips finished variants (nothing retrained), and a name reused with other settings is refused.
    capsys.readouterr()
    modified = os.stat(out / "kl" / "result.json").st_mtime_ns
    assert run_ablation(lab, out, variants, device_name="cpu") == summary
    assert "ablate: kl: finished" in capsys.readouterr().err
    assert os.stat(out / "kl" / "result.json").st_mtime_ns == modified
    with pytest.raises(ValueError, match="another name"):
        run_ablation(lab, out, [parse_variant("kl:distill.loss=tvd")], device_name="cpu")


def test_jobs_run_variants_in_parallel_processes_and_score_them_alike(
    lab: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """--jobs 2: each variant in its own process at once, recorded as sharing the device; the results equal what the
    same variant gives alone (CPU training is deterministic), and the report says they ran concurrently. The command
    runs in this process (its variants in theirs), one torch thread everywhere."""
    out = tmp_path / "parallel"
    specs = ["kl:variant.qat=false", "tvd:distill.loss=tvd,variant.qat=false"]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    code, _, err = run_main(
        "ablate", "--lab", str(lab), "--out", str(out), *[a for s in specs for a in ("--variant", s)],
        "--jobs", "2", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    assert "kl: started in its own process" in err and "tvd: started in its own process" in err
    summary = json.loads((out / "ablation.json").read_text())
    assert [r["name"] for r in summary["variants"]] == ["kl", "tvd"]
    assert all(r["device_shared_by"] == 2 for r in summary["variants"])
    alone = run_ablation(lab, tmp_path / "alone", [parse_variant(specs[0])], device_name="cpu")["variants"][0]
    assert alone["device_shared_by"] == 1
    parallel_kl = summary["variants"][0]
    assert parallel_kl["tau"] == alone["tau"] and parallel_kl["by_category"] == alone["by_category"]
    assert summary["variants"][1]["config"]["loss"] == "tvd"
    markdown = (out / "ablation.md").read_text()
    assert "Ran concurrently on one device (`--jobs`): kl (shared by 2), tvd (shared by 2)" in markdown
    # epoch-bound variants (no time budget) take their steps however the device is shared; budgeted ones do not
    assert summary["variants"][0]["config"]["time_budget_s"] == 0 and "steps they would have taken alone" in markdown
    for r in summary["variants"]:
        r["config"]["time_budget_s"] = 60
    assert "fewer tokens in its time budget" in ablation_markdown(summary)
    assert parse_variant(parse_variant(specs[1]).text()) == parse_variant(specs[1])


def test_ablate_cli_refuses_an_unknown_setting_before_training(lab: Path, tmp_path: Path):
    code, _, err = run_main(
        "ablate", "--lab", str(lab), "--out", str(tmp_path / "a"), "--variant", "ok:",
        "--variant", "typo:distill.loss_weight=2", "--device", "cpu",
    )  # fmt: skip
    assert code == 2
    assert "--variant typo" in err and "no setting 'distill.loss_weight'" in err
    assert not (tmp_path / "a" / "ok").exists()  # refused before any variant ran
    layers = json.loads((lab / "target" / "config.json").read_text())["num_hidden_layers"]
    code, _, err = run_main(
        "ablate", "--lab", str(lab), "--out", str(tmp_path / "b"), "--variant", "ok:",
        "--variant", f"deep:variant.init=layers:{layers + 1}", "--device", "cpu",
    )  # fmt: skip
    assert code == 2 and f"the lab's target has {layers} layers" in err
    assert not (tmp_path / "b" / "ok").exists()
    with pytest.raises(ValueError, match="--variant q6: Unknown embedding type 'Q6_K'"):
        run_ablation(lab, tmp_path / "b", [parse_variant("q6:export.embedding_type=Q6_K")], device_name="cpu")
    assert not (tmp_path / "b" / "q6").exists()


def test_variants_go_on_from_the_distilled_drafter_with_onpolicy_data_or_token_selection(lab: Path, tmp_path: Path):
    from dataclasses import replace

    from specdraft_train.commands import distill
    from specdraft_train.formats.artifacts import verify_stage_dir
    from specdraft_train.presets import MICRO
    from specdraft_train.training.distillation import DistillJob

    studied = tmp_path / "lab"
    shutil.copytree(lab, studied)
    names = ["rounds", "onpolicy", "select"]
    variants = [  # rounds: the lab's recipe with one on-policy round (`run`'s onpolicy.rounds)
        parse_variant("rounds:variant.init=distilled,onpolicy.rounds=1,onpolicy.max_new_tokens=8,variant.qat=false"),
        parse_variant(
            "onpolicy:variant.init=distilled,variant.onpolicy=true,onpolicy.max_new_tokens=8,variant.qat=false"
        ),
        parse_variant("select:variant.select_reference=distilled,distill.select_tokens=0.5,variant.qat=false"),
    ]
    with pytest.raises(ValueError, match="not distilled yet"):
        run_ablation(studied, tmp_path / "out", variants[:1], device_name="cpu")
    config = replace(MICRO.distill, batch_size=8, epochs=1, eval_every=0)
    distill.run(DistillJob(studied / "base", studied / "reference", studied / "distilled", config, device="cpu"))
    summary = run_ablation(studied, tmp_path / "out", variants, device_name="cpu")
    assert [r["name"] for r in summary["variants"]] == names
    manifests = {n: verify_stage_dir(tmp_path / "out" / n / "distilled", "distill") for n in names}
    for name in ("rounds", "onpolicy"):  # both go on from the lab's distilled drafter
        assert manifests[name]["inputs"]["drafter"]["path"] == str(studied / "distilled")
    # the round: the variant's distilled drafter writes on-policy data, then distillation goes on from it over both
    rounds = tmp_path / "out" / "rounds"
    round_data = verify_stage_dir(rounds / "onpolicy-1", "onpolicy")
    round_distill = verify_stage_dir(rounds / "distilled-1", "distill")
    assert round_data["inputs"]["drafter"]["path"] == str(rounds / "distilled")
    assert round_distill["inputs"]["drafter"]["path"] == str(rounds / "distilled")
    assert round_distill["inputs"]["onpolicy"][0]["path"] == str(rounds / "onpolicy-1")
    assert "onpolicy" not in manifests["rounds"]["inputs"] or not manifests["rounds"]["inputs"]["onpolicy"]
    first = summary["variants"][0]
    assert first["checkpoint"] == str(rounds / "distilled-1") and set(first["stages"]) == {"distilled", "distilled-1"}
    assert manifests["select"]["inputs"]["drafter"]["path"] == str(studied / "base")
    assert manifests["select"]["inputs"]["select_reference"]["path"] == str(studied / "distilled")
    data = verify_stage_dir(tmp_path / "out" / "onpolicy" / "onpolicy", "onpolicy")
    assert data["inputs"]["drafter"]["path"] == str(studied / "distilled") and data["params"]["max_new_tokens"] == 8
    assert manifests["onpolicy"]["inputs"]["onpolicy"][0]["path"] == str(tmp_path / "out" / "onpolicy" / "onpolicy")
    examples = len(read_train_examples(studied / "reference"))
    assert summary["variants"][1]["examples"] == 2 * examples  # the reference's rows and as many of its own
    assert "onpolicy" in json.loads((tmp_path / "out" / "onpolicy" / "progress.json").read_text())["seconds"]
    assert parse_variant(variants[1].text()) == variants[1] and variants[2].spec()["select_reference"] == "distilled"
    markdown = (tmp_path / "out" / "ablation.md").read_text()
    assert "variant.onpolicy=true" in markdown and "variant.select_reference=distilled" in markdown


def test_a_run_folder_is_a_lab_whose_base_is_its_starting_drafter(tmp_path: Path):
    from specdraft_train.labs.layout import lab_layout

    run = tmp_path / "run"
    (run / "drafter").mkdir(parents=True)
    preset = {"name": "micro", "settings": ["distill.epochs=5"]}
    atomic_write_json(run / "run_state.json", {"preset": preset, "stamps": {"reference": {"reference": {}}}})
    layout = lab_layout(run)
    assert layout.kind == "run" and layout.base == run / "drafter" and layout.replay is None
    assert layout.preset.distill.epochs == 5 and layout.evaluation == run / "eval" / "results.json"
    # the general text the run replayed for its drafter of the target's layers, once that stage finished
    (run / "replay").mkdir()
    assert lab_layout(run).replay is None
    (run / "replay" / "train.tokens.npy").write_bytes(b"tokens")
    write_manifest(run / "replay", "replay", ["train.tokens.npy"])
    assert lab_layout(run).replay == run / "replay"
    # a folder from before run_state.json said its preset: the reference stage's stamp said it
    atomic_write_json(
        run / "run_state.json", {"stamps": {"reference": {"preset": "micro", "settings": ["distill.epochs=4"]}}}
    )
    assert lab_layout(run).preset.distill.epochs == 4
    (run / "base").mkdir()
    layout = lab_layout(run)
    assert layout.base == run / "base" == layout.replay and ("base", "pretrain") in layout.stages
    atomic_write_json(run / "run_state.json", {"stamps": {}})
    with pytest.raises(ValueError, match="reference data"):
        lab_layout(run)
