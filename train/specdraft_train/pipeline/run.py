"""Orchestrator `run`: one command from a target model to a served, checked drafter that says what speed-up to expect.

    python -m specdraft_train run --target MODEL.gguf --out runs/mine            # a GGUF (llama, qwen2, qwen3)
    python -m specdraft_train run --target Qwen/Qwen3-8B --drafter Qwen/Qwen3-1.7B --out runs/q3 --preset qwen3-chat

Stages, each in its own folder under ``--out`` and stamped (runner.py: run again after a cut, it goes on where it
stopped; a changed input runs again what depends on it, and says so):

1. ``target``: the target as the pipeline trains against it (an HF checkpoint of its weights in fp32) and as it is
   served (``target/target-f32.gguf``) — `target`'s stage, for a GGUF or an HF directory or id;
2. ``drafter``: ``--drafter M`` (a smaller sibling, HF or GGUF: its vocabulary must be the target's), or
   ``--init layers:N`` (N of the target's layers), or ``--init scratch`` (the preset's drafter shape, pretrained on
   general text first: ``corpus``, ``pretrain``); by default ``--init layers`` at the preset's drafter depth
   (``drafter.default_depth``);
3. ``reference``: the target's greedy answers to the chat prompts (``--prompts``, or the built-in chat prompt set),
   with their top-k log-probs; held-out and dev lines as the prompts' own splits say; ``reference-eval``: the same
   for ``--eval-prompts``, a second set evaluated on and never trained on;
4. ``distill`` and ``qat``: distillation, the preset's on-policy rounds (``onpolicy-N``, then ``distill-N`` over the
   reference's rows and the drafter's own scored text; ``--set onpolicy.rounds=1``, 0 by default), then
   quantization-aware training exact to Q4_0; each replays general text as the preset says (a scratch base's own;
   for a drafter that starts from a model, ``corpus`` and ``replay`` make it first: the same corpus in its tokenizer);
5. ``evaluate``: τ on the held-out conversations, overall and per category, for the drafter before training (its
   Q4_0 PTQ), the trained drafter (Q4_0 QAT, and τ(k) at each ``--k``), n-gram prompt lookup and the target as its
   own drafter; the same on the second set;
6. ``export``: the Q4_0 GGUF;
7. ``speedup``: the target's and the drafter's step costs measured through llama.cpp on this machine (the drafts
   along held-out conversations, with serve's prompt-lookup candidates and without: the faster is kept), the
   projected speed-up at each k, and `generate` at the best k on held-out prompts to check it;
8. ``pack``, ``selfcheck``, ``validate``: the drafter folder (``DIR/drafter-folder``, serving with the lookahead
   ``speedup`` kept), checked as a grader would, then served and walked over held-out conversations;

then ``report.json`` and ``report.md``. The settings that bound each stage are printed before it starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from ..commands import corpus, distill, drafter, evaluate, export, onpolicy, pretrain, reference, target
from ..config import LabPreset, add_device_argument, add_settings_argument, announce, apply_settings
from ..formats.artifacts import DRAFTER_GGUF, atomic_write_json, sha256_file, stage_complete
from ..formats.prompts import check_prompts_file, check_renderable
from ..labs.layout import SECOND_HELDOUT_FOLDERS
from ..modeling.models import QAT_STATE_FILE, load_causal_lm, load_tokenizer, resolve_device
from ..presets import PRESETS, get_preset
from ..training.distillation import DistillJob, recipe
from ..training.gguf_export import refuse_over_cap
from .runner import Runner, StopAfter
from .specdraft_cli import REPO, cli_gpu, node_step, serve_and_walk, specdraft_command, speedup_and_check, write_output

DEFAULT_PROMPTS = REPO / "data" / "chat-prompts-templates.jsonl.xz"  # the built-in chat prompts (data/README.md)
DEFAULT_PRESET = "smollm2-chat"
DEFAULT_KS = (1, 2, 4, 8, 16)
SELFCHECK_VERDICT = Path("selfcheck") / "selfcheck.txt"  # what `specdraft selfcheck` printed on the packed folder
# Every stage `run` may run, in order (`--until` takes one); pretrain only for --init scratch, corpus for it and for
# replay (a drafter that starts from a model, where the preset replays general text).
STAGES = (
    "target",
    "drafter",
    "corpus",
    "pretrain",
    "reference",
    "reference-eval",
    "replay",
    "distill",
    "qat",
    "evaluate",
    "export",
    "speedup",
    "pack",
    "selfcheck",
    "validate",
)


class Run:
    """One `run` folder: its preset, its stages' folders and the stamps that chain them."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out: Path = args.out.resolve()
        self.preset: LabPreset = apply_settings(get_preset(args.preset), args.settings)
        self.device = resolve_device(args.device)
        self.runner = Runner(self.out, "run", until=args.until)
        names = ("target", "drafter", "reference", "distilled", "qat", "eval", SECOND_HELDOUT_FOLDERS["run"])
        self.d = {name: self.out / name for name in names}
        self.keys: dict[str, str] = {}
        self.drafter_label = ""
        # what `ablate --lab` and the report read the preset back from
        self.runner.data["preset"] = {"name": self.preset.name, "settings": list(args.settings)}

    def stage(
        self,
        name: str,
        directory: Path,
        fn: Any,
        complete: Any,
        inputs: dict[str, Any],
        sections: tuple[str, ...] = (),
        **extra: Any,
    ) -> None:
        """Run stage ``name`` unless done with the same inputs and the same settings of the preset ``sections`` that
        bound it: a setting changed reruns the stages it bounds and what follows them, not every stage."""
        bound = {}
        for section in sections:
            value = getattr(self.preset, section)
            value = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
            bound[section] = json.loads(json.dumps(value))  # as run_state.json holds it: tuples become lists
        self.keys[name] = self.runner.stage(name, directory, fn, complete, {**bound, **inputs}, **extra)

    # --- the target and the drafter ---------------------------------------------------------------------------------

    def make_target(self) -> None:
        source = self.args.target

        def prepare() -> None:
            target.check_disk(source, self.out)
            target.run(source, self.d["target"])  # `target`'s stage: a GGUF file, an HF directory or id

        self.stage(
            "target",
            self.d["target"],
            prepare,
            lambda: stage_complete(self.d["target"], "target"),
            {"target": target.source_stamp(source)},
        )

    def make_drafter(self) -> Path:
        """The drafter training starts from; its vocabulary checked against the target's before any training."""
        args, preset = self.args, self.preset
        if args.drafter is not None:

            def convert_and_check() -> None:
                target.run(args.drafter, self.d["drafter"])
                try:
                    drafter.check_vocabulary(self.d["target"], self.d["drafter"])
                except ValueError:
                    shutil.rmtree(self.d["drafter"])  # no drafter of another vocabulary left to look finished
                    raise

            self.stage(
                "drafter",
                self.d["drafter"],
                convert_and_check,
                lambda: stage_complete(self.d["drafter"], "target"),
                {"drafter": target.source_stamp(args.drafter), "target": self.keys["target"]},
            )
            self.drafter_label = f"{args.drafter}, distilled"
            return self.d["drafter"]
        kind, layers = args.init
        if kind == "layers":
            total = load_causal_lm(self.d["target"], torch.device("cpu")).config.num_hidden_layers
            layers = layers or drafter.default_depth(preset, total)
            self.drafter_label = f"{layers} of the target's {total} layers, distilled"
            announce("drafter", preset.name, {"init": f"{layers} of the target's {total} layers"})
            self.stage(
                "drafter",
                self.d["drafter"],
                lambda: drafter.run(self.d["target"], self.d["drafter"], "layers", layers),
                lambda: stage_complete(self.d["drafter"], "drafter"),
                {"init": f"layers:{layers}", "target": self.keys["target"]},
            )
            return self.d["drafter"]
        return self.make_scratch_drafter()

    def make_corpus(self, prose_required: bool) -> Path:
        """General text: the stdlib and ``--extra`` trees as code, ``--prose`` folders or the preset's prose packages
        as prose (where not ``prose_required``, those of them fetched). A scratch base pretrains on it; distillation
        replays it where the drafter has no pretraining text of its own."""
        preset, corpus_dir = self.preset, self.out / "corpus"
        given = [d.resolve() for d in self.args.prose]
        prose = given or corpus.preset_prose(preset, required=prose_required)
        # the preset's packages are bound by its section; other prose (given, or the packages short of one) by name
        named = given or (prose if len(prose) < len(preset.prose_packages) else [])
        self.stage(
            "corpus",
            corpus_dir,
            lambda: corpus.build_corpus(corpus_dir, preset.corpus, corpus.stdlib_root(), self.args.extra, prose),
            lambda: stage_complete(corpus_dir, "corpus"),
            {"extra": [str(e) for e in self.args.extra], **({"prose": [str(d) for d in named]} if named else {})},
            sections=("corpus", "prose_packages"),
        )
        return corpus_dir

    def make_scratch_drafter(self) -> Path:
        """The preset's drafter shape, random, then pretrained on general text (code and prose) as a base."""
        preset, base = self.preset, self.out / "base"
        corpus_dir = self.make_corpus(prose_required=True)
        shape = {f: getattr(preset.drafter, f) for f in drafter.SHAPE_FIELDS}
        self.stage(
            "drafter",
            self.d["drafter"],
            lambda: drafter.run(
                self.d["target"], self.d["drafter"], "scratch", preset.drafter.num_hidden_layers, None, shape
            ),
            lambda: stage_complete(self.d["drafter"], "drafter"),
            {"init": "scratch", "shape": shape, "target": self.keys["target"]},
            sections=("drafter",),
        )
        self.drafter_label = f"{preset.drafter.num_hidden_layers} layers from scratch, pretrained and distilled"
        config = preset.pretrain_drafter
        announce("pretrain", preset.name, {"steps": config.max_steps, "time budget": config.time_budget_s})
        self.stage(
            "pretrain",
            base,
            lambda: pretrain.run(
                corpus_dir,
                None,
                base,
                "drafter",
                preset.name,
                config,
                preset.drafter,
                self.args.device,
                init=self.d["drafter"],
            ),
            lambda: stage_complete(base, "pretrain"),
            {"drafter": self.keys["drafter"], "corpus": self.keys["corpus"]},
            sections=("pretrain_drafter", "tokenizer"),
            every_rank=True,
        )
        self.keys["drafter"] = self.keys["pretrain"]
        return base

    # --- reference, distillation, QAT -------------------------------------------------------------------------------

    def make_reference(self) -> None:
        prompts = self.args.prompts
        config = self.preset.reference
        announce(
            "reference", self.preset.name, {"train prompts": config.train_prompts, "new tokens": config.max_new_tokens}
        )
        self.stage(
            "reference",
            self.d["reference"],
            lambda: reference.run(
                self.d["target"], self.d["reference"], config, prompts=prompts, device_name=self.args.device
            ),
            lambda: stage_complete(self.d["reference"], "reference"),
            {"prompts": target.source_stamp(str(prompts)), "target": self.keys["target"]},
            sections=("reference",),
            every_rank=True,
        )
        if self.args.eval_prompts is not None:  # a second held-out set: every line held out or dev, none trained on
            second, out = dataclasses.replace(config, train_prompts=0), self.d["reference-eval"]
            self.stage(
                "reference-eval",
                out,
                lambda: reference.run(
                    self.d["target"], out, second, prompts=self.args.eval_prompts, device_name=self.args.device
                ),
                lambda: stage_complete(out, "reference"),
                {"prompts": target.source_stamp(str(self.args.eval_prompts)), "target": self.keys["target"]},
                sections=("reference",),
                every_rank=True,
            )

    def replay_text(self, start: Path) -> Path | None:
        """The general text distillation replays beside the target's answers (the preset's ``replay_weight`` of the
        loss, so that training on chat answers alone does not wear away what the drafter knew of other text): a
        scratch base's own pretraining text; for a drafter that starts from a model (the target's layers,
        ``--drafter``), the same corpus in its tokenizer (stage ``replay``); None where the preset replays nothing."""
        if self.args.drafter is None and self.args.init[0] == "scratch":
            return self.out / "base"
        if self.preset.distill.replay_weight <= 0:
            return None
        announce("replay", self.preset.name, {"weight": self.preset.distill.replay_weight, "text": "the corpus"})
        corpus_dir, out = self.make_corpus(prose_required=False), self.out / "replay"
        self.stage(
            "replay",
            out,
            lambda: pretrain.replay_text(corpus_dir, start, out, self.preset.tokenizer),
            lambda: stage_complete(out, "replay"),
            {"corpus": self.keys["corpus"], "drafter": self.keys["drafter"]},
            sections=("tokenizer",),
        )
        return out

    def distill_stages(self, start: Path) -> None:
        """distill from ``start``, the preset's on-policy rounds (each: the last drafter writes `onpolicy` data, then
        distillation goes on from it over the reference's rows and those), then QAT from the last drafter; the
        preset's replay of general text throughout (:meth:`replay_text`)."""
        config = self.preset.distill
        replay = self.replay_text(start)
        embedding = self.preset.export.resolved_embedding_type()
        folders = {"distill": self.d["distilled"], "qat": self.d["qat"]}
        last, last_key = start, "drafter"
        for step in recipe(config, self.preset.onpolicy):
            name, out, qat = step.name, folders.get(step.name, self.out / f"distilled-{step.onpolicy_round}"), step.qat
            stamp = {"from": self.keys[last_key], "reference": self.keys["reference"]}
            if "replay" in self.keys:  # a scratch base's text is stamped through "from"
                stamp["replay"] = self.keys["replay"]
            onpolicy_data: tuple[Path, ...] = ()
            if step.onpolicy_round:
                onpolicy_data = (self.onpolicy_stage(step.onpolicy_round, last, last_key),)
                stamp["onpolicy"] = self.keys[f"onpolicy-{step.onpolicy_round}"]
            job = DistillJob(
                last,
                self.d["reference"],
                out,
                step.config,
                qat=qat,
                embedding_type=embedding,
                replay_tokens=replay,
                device=self.args.device,
                onpolicy=onpolicy_data,
            )
            announce(name, self.preset.name, distill.budget(job))
            self.stage(
                name,
                out,
                lambda job=job: distill.run(job),
                lambda out=out: stage_complete(out, "distill"),
                stamp,
                sections=("distill", "export") if qat else ("distill", "onpolicy") if onpolicy_data else ("distill",),
                every_rank=True,
            )
            last, last_key = out, name

    def onpolicy_stage(self, round_: int, drafter_dir: Path, drafter_key: str) -> Path:
        """Round ``round_``'s on-policy data, written by the drafter of ``drafter_dir`` and scored by the target."""
        name, out = f"onpolicy-{round_}", self.out / f"onpolicy-{round_}"
        job = onpolicy.OnPolicyJob(
            drafter_dir,
            self.d["target"],
            self.d["reference"],
            out,
            self.preset.onpolicy,
            self.args.device,
        )
        announce(name, self.preset.name, onpolicy.budget(job))
        self.stage(
            name,
            out,
            lambda: onpolicy.run(job),
            lambda: stage_complete(out, "onpolicy"),
            {"drafter": self.keys[drafter_key], "target": self.keys["target"], "reference": self.keys["reference"]},
            sections=("onpolicy",),
        )
        return out

    # --- evaluation and what ships ----------------------------------------------------------------------------------

    def evaluate(self, base: Path) -> dict[str, Any]:
        """τ of the drafter before and after training and of its peers on the held-out set, and on the second one
        (``--eval-prompts``) where given."""
        sets = {"main": self.d["reference"] / "heldout.jsonl"}
        if self.args.eval_prompts is not None:
            sets["second"] = self.d["reference-eval"] / "heldout.jsonl"
        results_path = self.d["eval"] / "results.json"
        ks = sorted({*self.args.k, self.preset.evaluate.k})
        embedding = self.preset.export.resolved_embedding_type()

        def run_evaluation() -> None:
            device, config = self.device, self.preset.evaluate
            results = evaluate.peers_on_sets(base, self.d["qat"], self.d["target"], sets, config, embedding, device, ks)
            if "second" in sets:
                results["second"] = {"prompts": str(self.args.eval_prompts), **results["second"]}
            self.d["eval"].mkdir(parents=True, exist_ok=True)
            atomic_write_json(results_path, results)

        inputs = {"base": self.keys["drafter"], "qat": self.keys["qat"], "reference": self.keys["reference"], "ks": ks}
        if "second" in sets:
            inputs["reference-eval"] = self.keys["reference-eval"]
        self.stage(
            "evaluate", self.d["eval"], run_evaluation, results_path.is_file, inputs, sections=("evaluate", "export")
        )
        return json.loads(results_path.read_text())

    def export(self) -> Path:
        """The Q4_0 GGUF."""
        gguf_path = self.out / "export" / DRAFTER_GGUF
        self.stage(
            "export",
            gguf_path.parent,
            lambda: export.export_gguf(
                self.d["qat"],
                gguf_path,
                "Q4_0",
                qat_state=self.d["qat"] / QAT_STATE_FILE,
                max_bytes=self.preset.export.max_bytes,
            ),
            lambda: gguf_path.is_file() and gguf_path.with_name(gguf_path.name + ".manifest.json").is_file(),
            {"qat": self.keys["qat"]},
            sections=("export",),
        )
        return gguf_path

    def ship(self, gguf_path: Path, lookahead: int | None) -> None:
        """The packed folder, serving with ``lookahead`` candidates (None: serve's default for its backend), and
        selfcheck's verdict on it."""
        folder, cli = self.out / "drafter-folder", specdraft_command()
        pack = [*cli, "pack", "--model", str(gguf_path), "--out", str(folder)]
        pack += [] if lookahead is None else ["--lookahead", str(lookahead)]
        self.stage(
            "pack",
            folder,
            lambda: node_step(pack, folder),
            lambda: (folder / "architecture.json").is_file(),
            {"export": self.keys["export"], **({} if lookahead is None else {"lookahead": lookahead})},
        )
        verdict = self.out / SELFCHECK_VERDICT
        heldout = self.d["reference"] / "heldout.jsonl"
        self.stage(
            "selfcheck",
            verdict.parent,
            lambda: write_output([*cli, "selfcheck", str(folder), "--data", str(heldout), "--no-progress"], verdict),
            verdict.is_file,
            {"pack": self.keys["pack"]},
            sections=("evaluate",),
        )


# --- what to expect, and the report -------------------------------------------------------------------------------


def validate_stage(run: Run, gguf_path: Path, lookahead: int | None) -> None:
    """The drafter served by `specdraft serve` (with ``lookahead`` candidates, as its folder serves; None: serve's
    default) and walked by `specdraft validate` over held-out conversations: τ as the server drafts it, per category,
    and validate's HTML page (``validate/report.html``)."""
    out, heldout = run.out / "validate", run.d["reference"] / "heldout.jsonl"
    settings = {"gpu": cli_gpu(run.device), "lookahead": lookahead, "limit": run.args.walk_conversations}
    settings |= {"log": run.out / "serve.log", "output": run.out / "validate.txt"}
    run.stage(
        "validate",
        out,
        lambda: serve_and_walk(gguf_path, heldout, out, settings),
        lambda: (out / "report.html").is_file(),
        {
            "export": run.keys["export"],
            "conversations": run.args.walk_conversations,
            **({} if lookahead is None else {"lookahead": lookahead}),
        },
        sections=("evaluate",),
    )


def speedup_stage(run: Run, gguf_path: Path, evaluation: dict[str, Any]) -> dict[str, Any]:
    """`specdraft speedup`: step costs measured through llama.cpp here (with serve's prompt-lookup candidates and
    without, the faster kept), τ(k) from the evaluation, the projection per k and the best k; then `specdraft
    generate` at that k on held-out prompts, the measured speed-up beside it."""
    out, heldout = run.out / "speedup", run.d["reference"] / "heldout.jsonl"
    served = run.d["target"] / target.SERVED_GGUF
    asked = {
        "ks": run.args.k,
        "repeats": run.args.repeats,
        "check_prompts": run.args.check_prompts,
        "check_tokens": run.args.check_tokens,
    }
    tau_by_k = evaluation["tau"]["drafter_q4_0_qat"]["tau_by_k"]
    measured = out / "generate.json"
    run.stage(
        "speedup",
        out,
        lambda: speedup_and_check(served, gguf_path, tau_by_k, heldout, out, {"gpu": cli_gpu(run.device), **asked}),
        measured.is_file,
        {"export": run.keys["export"], "target": run.keys["target"], **asked, "lookahead": "default and none"},
        sections=("evaluate",),
    )
    projected = json.loads((out / "projection.json").read_text())
    best = next(row for row in projected["rows"] if row["k"] == projected["bestK"])
    return {"projection": projected, "best": best, "generate": json.loads(measured.read_text())}


def write_report(run: Run, evaluation: dict[str, Any], speed: dict[str, Any], gguf_path: Path) -> dict[str, Any]:
    """``report.json`` and ``report.md``: τ per category beside its peers, what each stage cost, what to expect."""
    from ..labs.run_report import run_markdown

    report = {
        "target": run.args.target,
        "drafter": run.drafter_label,
        "preset": run.preset.name,
        "settings": run.args.settings,
        "evaluation": evaluation,
        "stage_seconds": run.runner.data["stage_seconds"],
        "speedup": speed,
        "gguf": {"path": str(gguf_path), "bytes": gguf_path.stat().st_size, "sha256": sha256_file(gguf_path)},
        "folder": str(run.out / "drafter-folder"),
        "selfcheck": (run.out / SELFCHECK_VERDICT).read_text(),
        "validate": {
            "html": str(run.out / "validate" / "report.html"),
            "summary": json.loads((run.out / "validate" / "summary.json").read_text()),
        },
        "served_target": str(run.d["target"] / target.SERVED_GGUF),
    }
    atomic_write_json(run.out / "report.json", report)
    (run.out / "report.md").write_text(run_markdown(report))
    return report


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    run = Run(args)
    if args.drafter is not None:
        target.check_same_vocabulary(args.target, args.drafter)
    run.out.mkdir(parents=True, exist_ok=True)
    run.make_target()
    # chat prompts need the target's chat template: refused before any drafter is made, not at reference
    check_renderable(load_tokenizer(run.d["target"]), args.target, (args.prompts, args.eval_prompts))
    start = run.make_drafter()
    refuse_over_cap(start, run.preset.export.max_bytes)
    run.make_reference()
    run.distill_stages(start)
    evaluation = run.evaluate(start)
    gguf_path = run.export()
    speed = speedup_stage(run, gguf_path, evaluation)
    lookahead = speed["projection"]["lookahead"]  # the folder serves with the setting measured faster here
    candidates = None if lookahead["isDefault"] else lookahead["candidates"]
    run.ship(gguf_path, candidates)
    validate_stage(run, gguf_path, candidates)
    return write_report(run, evaluation, speed, gguf_path)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="one command from a target model to a packed, checked drafter and what speed-up to expect (resumable)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", required=True, help="the target: a GGUF file, or an HF directory or hub id")
    p.add_argument("--out", required=True, type=Path, help="the run's folder (run the same command again to resume)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--drafter", default=None, help="start from this model (GGUF, HF directory or id)")
    source.add_argument(
        "--init",
        type=drafter.parse_init,
        default=("layers", None),
        help="layers:N (N of the target's layers), layers (the preset's drafter depth of them: the default) or scratch",
    )
    p.add_argument(
        "--extra", action="append", default=[], type=Path, help="--init scratch: more code trees for its corpus"
    )
    p.add_argument(
        "--prose",
        action="append",
        default=[],
        type=Path,
        help="--init scratch: prose folders for its corpus (default: the preset's prose packages)",
    )
    p.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, help="chat prompts JSONL (default: %(default)s)")
    p.add_argument(
        "--eval-prompts",
        type=Path,
        default=None,
        help="a second chat prompts JSONL, evaluated on and never trained on (e.g. prompts the target wrote)",
    )
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS), help="budgets (default: %(default)s)")
    p.add_argument(
        "--k",
        type=lambda v: [int(x) for x in v.split(",")],
        default=list(DEFAULT_KS),
        help="draft lengths to project (default: 1,2,4,8,16)",
    )
    p.add_argument("--check-prompts", type=int, default=8, help="held-out prompts `generate` checks the best k on")
    p.add_argument("--check-tokens", type=int, default=128, help="tokens `generate` makes for each (default: 128)")
    p.add_argument(
        "--walk-conversations",
        type=int,
        default=64,
        help="held-out conversations `validate` walks against the served drafter (default: %(default)s)",
    )
    p.add_argument("--repeats", type=int, default=20, help="`speedup`'s measurements of each cost (default: 20)")
    p.add_argument("--until", choices=STAGES, default=None, help="stop after this stage (run again to go on)")
    add_device_argument(p)
    add_settings_argument(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    args.prompts = check_prompts_file("--prompts", args.prompts)
    if args.eval_prompts is not None:
        args.eval_prompts = check_prompts_file("--eval-prompts", args.eval_prompts)
    try:
        report = run_all(args)
    except StopAfter as stop:
        print(f"run: stopped after {stop.args[0]} (--until); run the same command without it to go on", file=sys.stderr)
        return 0
    speed = report["speedup"]
    summary = {
        "tau": round(report["evaluation"]["tau"]["drafter_q4_0_qat"]["tau"], 3),
        "best_k": speed["projection"]["bestK"],
        "projected_speed_up": round(speed["best"]["speedUp"], 3),
        "measured_speed_up": round(speed["generate"]["speedUp"], 3),
    }
    print(json.dumps(summary))
    print(f"report: {args.out / 'report.md'}")
    return 0
