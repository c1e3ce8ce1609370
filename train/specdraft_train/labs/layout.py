"""What a lab's folder holds, by the kind of lab, for commands that build on a lab (`ablate`, `real-lab-report`).

The toy lab's folder (`specdraft_train lab`): its preset and ``--set`` values in ``lab_state.json``, the tokenizer
stage's text replayed beside distillation, the base's and target's τ from its evaluate stage (``eval/results.json``).
A `run` folder (``run_state.json``, which holds its preset and ``--set`` values): its starting drafter in
``base/`` (pretrained from scratch, whose text is replayed) or ``drafter/`` (made of the target's layers or given;
the text replayed is ``replay/``, where the run made it), the base's and target's τ from its evaluate stage
(``eval/results.json``).
The real-model lab's (train/scripts/gpu/real_lab.sh): ``real_lab.json``, the smollm2-chat preset, the base's
pretraining text replayed as real_lab.sh does, the base's and target's τ from ``eval-templates.json`` once its
evaluate stage ran. Its evaluation in the toy lab's shape (:func:`lab_evaluation`) lives here too, since both the
real-model lab's report (`real-lab-report`) and ablate read it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import LabPreset, apply_settings
from ..formats.artifacts import stage_complete
from ..presets import get_preset

# A second held-out set's reference folder, by the kind of lab: `run --eval-prompts`' and the real-model lab's
# target-written prompts'
SECOND_HELDOUT_FOLDERS = {"run": "reference-eval", "real_lab": "reference-other"}
REAL_LAB_PRESET = "smollm2-chat"  # the real-model lab's (real_lab.sh, `real-lab-report`)
# The lab report's variants: the checkpoint folder each is evaluated from, as trained or at Q4_0 (evaluate's fields).
VARIANT_SOURCES = {
    "base": ("base", "as_trained"),
    "base_q4_0_ptq": ("base", "q4_0"),
    "distilled": ("distilled", "as_trained"),
    "distilled_q4_0_ptq": ("distilled", "q4_0"),
    "distilled_qat_latent": ("distilled-qat", "as_trained"),
    "distilled_q4_0_qat": ("distilled-qat", "q4_0"),
}


@dataclass(frozen=True)
class LabLayout:
    """What ablate reads from a lab's folder, by the kind of lab (module docstring)."""

    path: Path
    kind: str  # "lab" (the toy lab's folder), "real_lab" or "run"
    preset: LabPreset
    replay: Path | None  # the text replayed beside the distillation loss (its token stream), if any
    evaluation: Path  # the lab's own τ of its base and target, once its evaluate stage ran
    stages: tuple[tuple[str, str], ...]  # (folder, stage) that must be complete
    base: Path  # the drafter distillation starts from

    @property
    def distilled(self) -> Path:
        """The lab's own distilled drafter (before QAT)."""
        return self.path / "distilled"

    @property
    def second_heldout(self) -> Path | None:
        """The held-out conversations of the lab's second prompt set, where it made one (SECOND_HELDOUT_FOLDERS)."""
        folder = SECOND_HELDOUT_FOLDERS.get(self.kind)
        path = self.path / folder / "heldout.jsonl" if folder else None
        return path if path is not None and path.is_file() else None

    @property
    def evaluated(self) -> bool:
        if self.kind == "lab":
            return stage_complete(self.evaluation.parent, "evaluate")
        return self.evaluation.is_file()

    def reference_tau(self) -> dict[str, Any]:
        """The lab's base drafter at Q4_0 PTQ and target as its own drafter (and the lab's own distilled QAT drafter,
        where it has one), from the lab's evaluation."""
        saved = json.loads(self.evaluation.read_text())
        tau = lab_evaluation(saved)["tau"] if self.kind == "real_lab" else dict(saved["tau"])
        if "drafter_q4_0_qat" in tau:  # a run's trained drafter, in the other labs' name
            tau["distilled_q4_0_qat"] = tau["drafter_q4_0_qat"]
        keys = ("base_q4_0_ptq", "target_as_drafter", "distilled_q4_0_qat", "ngram")
        return {key: tau[key] for key in keys if key in tau}


def lab_evaluation(evaluation: dict[str, Any]) -> dict[str, Any]:
    """`evaluate`'s output in the shape of the lab's ``evaluation`` (a τ entry per variant of VARIANT_SOURCES found
    among its drafters, the n-gram peer, the target as its own drafter)."""
    drafters = {Path(entry["drafter"]["path"]).name: entry for entry in evaluation["drafters"]}
    tau: dict[str, Any] = {}
    for key, (folder, weights) in VARIANT_SOURCES.items():
        if weights in drafters.get(folder, {}):
            entry = drafters[folder][weights]
            tau[key] = {**entry, "checkpoint": folder, "weights": entry.get("mode", "as trained")}
    tau["ngram"] = evaluation["ngram"]
    tau["target_as_drafter"] = {k: v for k, v in evaluation["target_as_drafter"].items() if k != "target"}
    fields = ("k", "heldout", "repeated_4gram_share", "repeated_4gram_share_by_category")
    return {**{field: evaluation[field] for field in fields}, "tau": tau}


def run_layout(folder: Path) -> LabLayout:
    """A `run` folder (module docstring)."""
    state = json.loads((folder / "run_state.json").read_text())
    if "reference" not in state.get("stamps", {}):
        raise ValueError(f"{folder}: `run` has not made its reference data yet; run it to the end of distill first")
    # run_state.json's preset; a folder `run` made before it recorded one has it in its stamps
    said = state.get("preset") or {"name": state["stamps"]["reference"]["preset"], **state["stamps"]["reference"]}
    preset = apply_settings(get_preset(said["name"]), said.get("settings", []))
    scratch = (folder / "base").is_dir()
    base = folder / ("base" if scratch else "drafter")
    stages = ((base.name, "pretrain" if scratch else "drafter"), ("reference", "reference"))
    evaluation = folder / "eval" / "results.json"
    replay = base if scratch else folder / "replay" if stage_complete(folder / "replay", "replay") else None
    return LabLayout(folder, "run", preset, replay, evaluation, stages, base)


def lab_layout(lab: Path) -> LabLayout:
    """The toy lab's folder (lab_state.json), the real-model lab's (real_lab.json) or a `run` folder
    (run_state.json); anything else is refused."""
    base_and_reference = (("base", "pretrain"), ("reference", "reference"))
    if (lab / "real_lab.json").is_file():
        evaluation = lab / "eval-templates.json"
        return LabLayout(
            lab, "real_lab", get_preset(REAL_LAB_PRESET), lab / "base", evaluation, base_and_reference, lab / "base"
        )
    if (lab / "run_state.json").is_file():
        return run_layout(lab)
    state_path = lab / "lab_state.json"
    if not state_path.is_file():
        raise ValueError(
            f"{lab}: none of lab_state.json, real_lab.json or run_state.json; expected a folder made by "
            "`specdraft_train lab`, `specdraft_train run` or train/scripts/gpu/real_lab.sh"
        )
    state = json.loads(state_path.read_text())
    preset = apply_settings(get_preset(state["preset"]), state.get("settings", []))
    stages = (*base_and_reference, ("tokenizer", "tokenizer"))
    return LabLayout(lab, "lab", preset, lab / "tokenizer", lab / "eval" / "results.json", stages, lab / "base")
