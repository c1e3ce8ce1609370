"""Configuration of every stage: one dataclass per stage's settings, gathered in a :class:`LabPreset` (the presets
themselves, `micro`, `lab`, `qwen3-chat` and `smollm2-chat`, are in presets.py), and what the stage CLIs share:
``--device``, ``--embedding-type``, the line a stage prints before it starts (:func:`announce`), ``--set`` overrides
(:func:`apply_settings`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Tokens drafted per request, the k of every τ the pipeline measures (dev τ, evaluate, the lab, the prefix loss's
# window): the validator's and the server's default draft length, src/engine/engineDefaults.ts defaultDraftLength
# (a test checks the two agree).
DRAFT_LENGTH = 16


@dataclass(frozen=True)
class CorpusConfig:
    min_file_bytes: int = 200  # smaller files are mostly empty __init__.py / one-line shims / stub pages
    max_file_bytes: int = 200_000  # larger ones are generated tables (unicode data, encodings) and changelogs
    heldout_per_mille: int = 20  # 2 %; the lab holds out 4 %: its categories need ≥ 48 candidates each per kind
    dev_per_mille: int = 20  # same size as held-out: dev τ picks the best distillation epoch
    max_code_bytes: int = 0  # 0 = every file; else a hash-ordered subset of about this many bytes of code
    max_prose_bytes: int = 0  # 0 = every file; the lab keeps all its prose, micro a subset so CPU CI stays in budget

    def max_bytes(self, kind: str) -> int:
        return self.max_prose_bytes if kind == "prose" else self.max_code_bytes


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int = 16_384  # 16k: 3.65 bytes/token on Python source (bench/results/2026-11-30-h200-lab); ≤ 32,768
    min_frequency: int = 2  # merges seen once are noise from one file
    # 0 = the whole train split; else a sample of this many bytes with each kind in its share of the pretraining
    # stream (BPE statistics settle long before 64 MB of text).
    max_train_bytes: int = 0
    prose_repeats: int = 1  # times each prose document appears in the pretraining stream (lab: 2, as calibrated)


@dataclass(frozen=True)
class ModelConfig:
    """A Qwen3 architecture (transformers `Qwen3Config`); vocab_size comes from the tokenizer."""

    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2  # GQA like real Qwen3; also halves KV cache in the served drafter
    head_dim: int = 64
    intermediate_size: int = 768  # 3x hidden, multiple of 32 so every weight row is Q4_0 blockable
    max_position_embeddings: int = 1024  # prompt (≤512) + continuation (≤256) with room; pretraining seq_len ≤ this
    rope_theta: float = 10_000.0  # short contexts only; Qwen3's 1e6 is for 32k+
    tie_word_embeddings: bool = True  # small models spend most parameters on embeddings; tying halves that


@dataclass(frozen=True)
class PretrainConfig:
    seq_len: int = 512
    batch_size: int = 64  # global batch (sequences per optimizer step), split across DDP ranks
    max_steps: int = 1000
    lr: float = 1e-3  # small Qwen3s train stably at 1e-3 with warmup and clipping
    min_lr_ratio: float = 0.1  # cosine decays to lr/10, not to zero: the last steps still learn
    warmup_steps: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    ckpt_every: int = 200  # steps between resumable checkpoints
    time_budget_s: float = 0.0  # 0 = none; else stop (and finish normally) after this many training seconds
    eval_batches: int = 8  # dev-split batches for the reported dev loss
    seed: int = 0


@dataclass(frozen=True)
class ReferenceConfig:
    """Prompts fall into categories ``<kind>/<position>/<length>`` (reference.py): kind code | prose, position open
    (a file's first tokens) | inner (a window at a seeded random start ≥ 1), and one of ``prompt_lengths``."""

    # Short, medium, long (half the lab's 1,024-token context): τ(base) fell from 128- to 384-token prompts in the
    # prose + code calibration (bench/results/2026-11-30-h200-lab).
    prompt_lengths: tuple[int, ...] = (64, 192, 512)
    max_new_tokens: int = 256  # continuation cap; the longest prompt plus this must fit the pretraining seq_len
    # Held-out/dev continuations shorter than this (the target stopped at <|endoftext|>) are dropped, not forced on:
    # a 20-token continuation says little about τ at k = 16.
    min_continuation_tokens: int = 128
    top_k: int = 20  # target log-probs kept per continuation position for distillation
    train_prompts: int = 8192  # KD continuations (4,096 gave +16 %: bench/results/2026-11-30-h200-lab; more, more gain)
    train_prose_share: float = 0.5  # the held-out set has as many prose categories as code ones
    # A file has one opening but many inner windows, and KD on openings alone made inner windows worse (the
    # calibration, bench/results/2026-11-30-h200-lab): inner windows get twice the openings' data.
    train_open_share: float = 1 / 3
    heldout_per_category: int = 32  # as the calibration held out (bench/results/2026-11-30-h200-lab); lab v2: ≥ 24
    dev_per_category: int = 24  # dev τ picks the distillation epoch: smaller than held-out, same categories
    # Candidates generated per kept held-out/dev prompt in the first round (more rounds only for categories whose
    # continuations keep stopping early): each round costs max_new_tokens sequential decode steps.
    eval_oversample: float = 1.5
    batch_size: int = 128
    shard_prompts: int = 1024  # prompts per resumable shard
    seed: int = 0
    engine: str = "static"  # static_engine.py's static-cache, CUDA-graph engine; "hf" = HF generate, ≥ 10× slower
    # Chat prompts are rendered with the template's enable_thinking (Qwen3's default is on). Off: the drafter learns
    # the answers a non-thinking target gives, which greedy decoding suits (Qwen3's card warns that greedy decoding in
    # thinking mode repeats endlessly) and whose 256-token continuations are the answer, not the start of a long
    # <think> block. On when the target will be served thinking: a drafter must learn what it will be asked to draft.
    enable_thinking: bool = False


@dataclass(frozen=True)
class DistillConfig:
    epochs: int = 3
    # Rows a step holds on average: an epoch takes rows ÷ batch_size steps, each with an equal share of the epoch's
    # tokens (batch_tokens 0), so the learning rate and warm-up keep the meaning they had with batches of exactly
    # batch_size rows. The loss is a mean over the step's continuation tokens either way.
    batch_size: int = 64
    # Tokens (prompt + continuation, replay rows aside) a step holds instead: steps = the epoch's tokens ÷ this. 0: the
    # epoch's tokens ÷ (rows ÷ batch_size), i.e. batch_size rows of mean width.
    batch_tokens: int = 0
    lr: float = 5e-4  # starts from a trained base: lower than pretraining to keep what it knows
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.0  # short fine-tune; decay would only pull toward zero
    grad_clip: float = 1.0
    # The per-position loss (distill.py's docstring defines each): kl | ce | tvd | reverse_kl | prefix. kl is what the
    # H200 lab measured (docs/lab.md); the others are for `ablate` to compare.
    loss: str = "kl"
    divergence_weight: float = 1.0  # the distribution term (KL, TVD or reverse KL to the target's top-k); not for ce
    ce_weight: float = 0.5  # cross-entropy on the target's greedy token: what τ actually scores
    eval_k: int = DRAFT_LENGTH  # draft length for dev τ, and the draft window of the prefix loss
    # Steps between dev evaluations (each also saves the resumable state); 0 = at every epoch end. Epochs get long
    # with 10× the reference data, and the best checkpoint may sit mid-epoch.
    eval_every: int = 0
    patience: int = 0  # stop after this many dev evaluations without a new best macro τ; 0 = never stop early
    # Training examples kept: those whose category starts with one of these prefixes (e.g. "code/inner"); () = all.
    categories: tuple[str, ...] = ()
    data_fraction: float = 1.0  # share of the examples kept, by a hash of each id: smaller fractions nest in larger
    # LM loss on the base's own pretraining text mixed into every batch (replay), so that distilling on the target's
    # continuations does not erase what the base knew about text outside them; 0 = off (and off when no text given).
    replay_weight: float = 0.0
    replay_seq_len: int = 256  # ≤ a typical distill row (prompt ≤ 192 + continuation ≤ 256)
    replay_batch_size: int = 16  # sequences per global step: ~4k text tokens beside ~19k continuation tokens (lab)
    ckpt_every: int = 100
    time_budget_s: float = 0.0
    seed: int = 0
    # Under torchrun: FSDP (weights, gradients and AdamW moments sharded over the ranks) instead of DDP (a full copy
    # per GPU). DDP is faster while the drafter's training state fits one GPU: a 1.7B drafter's ~27 GB does on an H200.
    fsdp: bool = False
    # A step's rows packed into one sequence (positions restarting per row, attention inside each: packing.py), so no
    # token is padding; False: right-padded rows (the reference layout, and what the GPU probe compares against).
    packed: bool = True
    # Recompute each decoder layer's activations in the backward pass instead of keeping them (transformers'
    # gradient checkpointing), at ~1/3 more compute: "auto" does where a step would not fit the GPU otherwise, from the
    # memory a token costs, measured by two short steps at the start (distill prints the figures); "on" | "off".
    activation_checkpointing: str = "auto"
    # torch.compile each decoder layer (models.compile_decoder_layers): "auto" on a GPU, where
    # train/scripts/gpu/probe_training.py measured it faster at the 1.7B shape (packed distill 1.61×, QAT 1.15×, less
    # memory: bench/results/2026-12-03-h200-real-rehearsal), off on the CPU (tests trace it there); "on" | "off".
    compile: str = "auto"
    # Right-padded rows only (packed rows never pad): steps of exactly batch_size rows, cut from runs of N steps' rows
    # sorted by width and then shuffled (transformers' group_by_length; examples.epoch_order). 0: random order.
    group_by_length: int = 0
    # Token selection (AdaSPEC): each step trains on this share of its continuation positions, those whose loss
    # exceeds a reference drafter's (`distill --select-reference`, a drafter already distilled from the same start)
    # the most: tokens the drafter can learn and has not; 1 = every position (off).
    select_tokens: float = 1.0
    # QAT runs as a short second distillation from the distilled drafter (`distill --qat --init <distilled>`).
    qat_epochs: int = 1
    qat_lr: float = 2e-4  # the weights are already good; QAT only has to move them onto the Q4_0 grid
    # `run`'s QAT budget in seconds (0: its epochs alone bound it); `distill --qat` takes --time-budget instead
    qat_time_budget_s: float = 0.0

    def schedule(self, qat: bool) -> tuple[int, float]:
        """A run's epochs and peak learning rate: QAT's under ``qat``, else distillation's."""
        return (self.qat_epochs, self.qat_lr) if qat else (self.epochs, self.lr)

    def with_schedule(self, qat: bool, epochs: int | None = None, lr: float | None = None) -> DistillConfig:
        """A copy whose schedule (:meth:`schedule`) under ``qat`` has the given epochs and learning rate (None: the
        preset's): the fields a run's --epochs and --lr set."""
        fields = ("qat_epochs", "qat_lr") if qat else ("epochs", "lr")
        return override(self, **dict(zip(fields, (epochs, lr))))


@dataclass(frozen=True)
class OnPolicyConfig:
    """On-policy data (`onpolicy`): the drafter continues training prompts greedily on its own, the target scores
    those continuations teacher-forced (its greedy token and top-k at every position), and distillation goes on from
    the drafter over the reference data plus these rows. `run` does ``rounds`` of it after `distill`, each from the
    last round's drafter with fresh data; 0 = off."""

    rounds: int = 0
    max_new_tokens: int = 0  # tokens the drafter writes per prompt; 0: the reference's max_new_tokens
    # Share of the reference's training prompts the drafter continues, chosen by a hash of each id (as data_fraction)
    prompt_share: float = 1.0
    batch_size: int = 256  # the drafter's generation batch (the static engine takes fewer where its KV budget holds)
    epochs: int = 2  # a round's distillation epochs over reference + on-policy rows, from the last round's drafter
    lr: float = 2.5e-4  # its peak learning rate: it continues a trained drafter, as QAT does


ACTIVATION_CHECKPOINTING = ("auto", "on", "off")  # DistillConfig.activation_checkpointing's choices
COMPILE = ("auto", "on", "off")  # DistillConfig.compile's and StaticEngineConfig.compile's choices


def check_compile(choice: str) -> None:
    """Refuse a ``compile`` setting that is not one of ``COMPILE``."""
    if choice not in COMPILE:
        raise ValueError(f"compile {choice!r}: expected one of {', '.join(COMPILE)}")


def compile_on(choice: str, device_type: str) -> bool:
    """Whether a ``COMPILE`` choice compiles on a device of this type: "on", or "auto" on a GPU."""
    check_compile(choice)
    return choice == "on" or (choice == "auto" and device_type == "cuda")


# The token embedding's (and an untied output head's) type in a Q4_0 GGUF (quant.gguf_storage_type). Q4_0 halves
# those tensors, at a τ cost `ablate` measures: for Qwen3-1.7B's tied 151,936 × 2,048 embedding 175 MB instead of
# 330 MB, the difference between a 1.13 GB and a 0.97 GB file. llama.cpp handles both alike: get_rows dequantizes the
# lookup exactly, and the output matmul rounds its input to Q8_0 as the others do.
EMBEDDING_TYPES = ("Q8_0", "Q4_0")
DEFAULT_EMBEDDING_TYPE = "Q8_0"  # llama-quantize's habit of keeping the vocabulary above Q4_0 (it uses Q6_K)
SIZE_CAPPED_EMBEDDING_TYPE = "Q4_0"  # the default when a file must fit a size cap: the largest saving there is
# The real job's cap on the packed drafter folder, every byte of it (src/pack/drafterFolder.ts defaultMaxFolderBytes;
# a test checks the two agree). The Q4_0 GGUF must leave room for the bundled runtime (~26 MB).
FOLDER_CAP_BYTES = 1_000_000_000
# Tokens one served sequence holds, prompt + draft: `specdraft serve --context`'s default
# (src/engine/engineDefaults.ts defaultContextSize; a test checks the two agree). The validator's walk asks for k
# tokens after P + C[:L-1] at its last step, so a conversation needs P + L − 1 + k of them.
SERVING_CONTEXT_TOKENS = 4096


def walk_context_tokens(prompt_tokens: int, continuation_tokens: int, k: int) -> int:
    """The largest context + draft the validator's walk asks a server to hold for one conversation."""
    return prompt_tokens + max(continuation_tokens - 1, 0) + k


def serving_context_note(
    stage: str, what: str, items: Sequence[tuple[str, int, int]], k: int, context: int = SERVING_CONTEXT_TOKENS
) -> str | None:
    """The line a stage prints (and returns) when some of ``items`` — (id, prompt tokens, continuation tokens) —
    cannot be walked in the served drafter's context; None when all can."""
    over = [item for item in items if walk_context_tokens(item[1], item[2], k) > context]
    if not over:
        return None
    longest = max(over, key=lambda item: item[1] + item[2])
    line = (
        f"{stage}: {len(over):,} of {len(items):,} {what} cannot be walked in the serving context of {context:,} "
        f"tokens with {k}-token drafts (longest: {longest[0]}, {longest[1]:,} prompt + {longest[2]:,} continuation "
        "tokens): serve with a larger --context, or shorten them"
    )
    print(line, file=sys.stderr)
    return line


def add_embedding_type_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """``--embedding-type Q8_0|Q4_0`` (any case), None when absent, for every command that writes or scores a file."""
    parser.add_argument("--embedding-type", type=str.upper, choices=EMBEDDING_TYPES, default=None, help=help)


def resolve_embedding_type(embedding_type: str | None = None, max_bytes: int = 0) -> str:
    """The vocabulary tensors' type in a Q4_0 file: ``embedding_type`` when given (``q4_0`` or ``Q4_0``), else Q4_0
    under a size cap (``max_bytes`` > 0) and Q8_0 without one."""
    if not embedding_type:
        return SIZE_CAPPED_EMBEDDING_TYPE if max_bytes > 0 else DEFAULT_EMBEDDING_TYPE
    if embedding_type.upper() not in EMBEDDING_TYPES:
        raise ValueError(f"Unknown embedding type {embedding_type!r}: expected one of {', '.join(EMBEDDING_TYPES)}.")
    return embedding_type.upper()


@dataclass(frozen=True)
class ExportConfig:
    """How the drafter is laid out as a GGUF (export.py); QAT and Q4_0 evaluation compute with the same layout."""

    # The token embedding's (and an untied head's) type in the Q4_0 file: Q8_0 | Q4_0 | "" (= Q4_0 when max_bytes is
    # set, else Q8_0). Q4_0 halves the largest tensor of a large-vocabulary drafter (EMBEDDING_TYPES above) at a τ
    # cost that `ablate --variant 'allq4:export.embedding_type=Q4_0'` measures.
    embedding_type: str = ""
    max_bytes: int = 0  # 0 = no cap; else export refuses a larger GGUF (the real job's cap is FOLDER_CAP_BYTES)

    def resolved_embedding_type(self) -> str:
        return resolve_embedding_type(self.embedding_type, self.max_bytes)


@dataclass(frozen=True)
class EvalConfig:
    k: int = DRAFT_LENGTH  # the validator's draft length
    ngram_max: int = 3  # prompt-lookup peer: longest suffix n-gram tried first
    # Tokens of conversations packed into one forward (tau.greedy_matches). Without gradients a forward holds a few
    # layers' activations at a time: a 1.7B drafter's 16k tokens need well under 1 GB beside its weights.
    batch_tokens: int = 16_384


@dataclass(frozen=True)
class LabPreset:
    name: str
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    target: ModelConfig = field(default_factory=ModelConfig)
    drafter: ModelConfig = field(default_factory=ModelConfig)
    pretrain_target: PretrainConfig = field(default_factory=PretrainConfig)
    pretrain_drafter: PretrainConfig = field(default_factory=PretrainConfig)
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    onpolicy: OnPolicyConfig = field(default_factory=OnPolicyConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    evaluate: EvalConfig = field(default_factory=EvalConfig)
    # Debian documentation packages the lab's prose comes from (train/scripts/data/fetch_prose.sh into PROSE_CACHE),
    # used when `lab` is given no --prose.
    prose_packages: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def pretraining(self, role: str) -> tuple[ModelConfig, PretrainConfig]:
        """The model and its pretraining for a `pretrain --role`: target or drafter (the base drafter)."""
        if role not in ("target", "drafter"):
            raise ValueError(f"role {role!r}: expected target or drafter")
        return (self.target, self.pretrain_target) if role == "target" else (self.drafter, self.pretrain_drafter)


def add_device_argument(parser: argparse.ArgumentParser, default: str = "auto", help: str = "") -> None:
    """``--device NAME`` for a command that computes: ``auto`` (CUDA when present, else the CPU), ``cpu``, ``cuda`` or
    ``cuda:N`` (models.resolve_device)."""
    parser.add_argument("--device", default=default, help=help or f"auto | cpu | cuda (default: {default})")


def add_settings_argument(parser: argparse.ArgumentParser) -> None:
    """``--set SECTION.FIELD=VALUE`` (repeatable, into ``args.settings``) for an orchestrator: overrides of the preset
    that :func:`apply_settings` applies."""
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override a preset value, e.g. --set reference.train_prompts=16384 "
        "--set distill.time_budget_s=60 (repeatable; sections as in config.py)",
    )


def _budget_text(value: Any) -> str:
    if isinstance(value, float) and value == int(value) and abs(value) >= 1:
        value = int(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]" if value else "all"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def announce(stage: str, preset: str, settings: dict[str, Any]) -> str:
    """The line a stage prints before it starts: which preset, and the settings that bound its work (budget, steps,
    counts), so a run under the wrong preset is seen at once, not after it. Returns the line (stderr gets it)."""
    line = f"{stage}: preset {preset}: " + ", ".join(f"{k} {_budget_text(v)}" for k, v in settings.items())
    print(line, file=sys.stderr, flush=True)
    return line


def override(config: Any, **changes: Any) -> Any:
    """A copy of a frozen config with the given fields replaced; ``None`` values mean 'keep the preset's'."""
    return dataclasses.replace(config, **{k: v for k, v in changes.items() if v is not None})


def apply_settings(preset: LabPreset, settings: list[str]) -> LabPreset:
    """``["section.field=value", …]`` applied to a preset, e.g. ``reference.train_prompts=16384``.

    Values are JSON (numbers, lists for tuples, quoted strings) or bare strings; unknown names are refused.
    """
    for setting in settings:
        name, sep, raw = setting.partition("=")
        section, dot, field_name = name.strip().partition(".")
        if not sep or not dot:
            raise ValueError(f"--set {setting!r}: expected section.field=value, e.g. reference.train_prompts=16384")
        sub = getattr(preset, section, None)
        if not dataclasses.is_dataclass(sub) or field_name not in {f.name for f in dataclasses.fields(sub)}:
            raise ValueError(f"--set {setting!r}: no setting {name!r} in the preset")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        current = getattr(sub, field_name)
        # The field's declared type, not its value's: a preset may write a float field as 150 (an int).
        declared = typing.get_type_hints(type(sub)).get(field_name)
        expected = declared if declared in (int, float, str, bool) else type(current)
        if isinstance(current, tuple):
            value = (value,) if isinstance(value, str) else tuple(value)  # a bare string is a one-element tuple
        elif expected is float and type(value) is int:
            value = float(value)
        if type(value) is not expected:
            raise ValueError(f"--set {setting!r}: {name} is a {expected.__name__}, got {value!r}")
        preset = dataclasses.replace(preset, **{section: dataclasses.replace(sub, **{field_name: value})})
    return preset
