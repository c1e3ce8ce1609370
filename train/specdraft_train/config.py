"""Configuration of every stage: the two lab presets (`micro` for CPU CI, `lab` for one H200) and the real job's
(`qwen3-chat`: a Qwen3-1.7B drafter distilled from Qwen3-8B on chat prompts, Q4_0, ≤ 10^9 bytes packed).

Each stage reads its section of a :class:`LabPreset`; the stage CLIs take ``--preset`` for the defaults and a few flags
to override them, and say which preset and budget they run under before they start (:func:`announce`). Print one:

    python -c "from specdraft_train.config import PRESETS; print(PRESETS['qwen3-chat'])"
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
    # torch.compile each decoder layer (models.compile_decoder_layers), at minutes of compilation in a run's first
    # steps: off until train/scripts/gpu/probe_training.py measures what it gains at the real shape.
    compile: bool = False
    # Right-padded rows only (packed rows never pad): steps of exactly batch_size rows, cut from runs of N steps' rows
    # sorted by width and then shuffled (transformers' group_by_length; examples.epoch_order). 0: random order.
    group_by_length: int = 0
    # QAT runs as a short second distillation from the distilled drafter (`distill --qat --init <distilled>`).
    qat_epochs: int = 1
    qat_lr: float = 2e-4  # the weights are already good; QAT only has to move them onto the Q4_0 grid

    def schedule(self, qat: bool) -> tuple[int, float]:
        """A run's epochs and peak learning rate: QAT's under ``qat``, else distillation's."""
        return (self.qat_epochs, self.qat_lr) if qat else (self.epochs, self.lr)

    def with_schedule(self, qat: bool, epochs: int | None = None, lr: float | None = None) -> DistillConfig:
        """A copy whose schedule (:meth:`schedule`) under ``qat`` has the given epochs and learning rate (None: the
        preset's): the fields a run's --epochs and --lr set."""
        fields = ("qat_epochs", "qat_lr") if qat else ("epochs", "lr")
        return override(self, **dict(zip(fields, (epochs, lr))))


ACTIVATION_CHECKPOINTING = ("auto", "on", "off")


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


MICRO = LabPreset(
    name="micro",
    # The lab's design at CPU scale: ~0.7 MB of small stdlib files and ~0.6 MB of git's documentation (git-doc), large
    # held-out/dev shares so that every one of the 12 categories finds its candidates on distinct files.
    corpus=CorpusConfig(
        max_file_bytes=24_000, heldout_per_mille=150, dev_per_mille=100, max_code_bytes=700_000, max_prose_bytes=600_000
    ),
    # Small softmax: most CPU time would otherwise go to the LM head. Prose twice as in the lab (exercises the repeat).
    tokenizer=TokenizerConfig(vocab_size=1024, prose_repeats=2),
    target=ModelConfig(
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=384,
        max_position_embeddings=512,
    ),
    # The drafter is far weaker than the target (and pretrained for fewer steps), so distilling the target's habits
    # into it helps visibly: CI asserts τ(distilled, Q4_0 QAT) > τ(base, Q4_0 PTQ).
    drafter=ModelConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        intermediate_size=192,
        max_position_embeddings=512,
    ),
    pretrain_target=PretrainConfig(
        seq_len=128,
        batch_size=16,
        max_steps=200,
        lr=3e-3,
        warmup_steps=20,
        ckpt_every=100,
        eval_batches=4,
    ),
    pretrain_drafter=PretrainConfig(
        seq_len=128,
        batch_size=16,
        max_steps=120,
        lr=3e-3,
        warmup_steps=10,
        ckpt_every=60,
        eval_batches=4,
        seed=1,
    ),
    # Long = 64 = half the 128-token pretraining window, as 512 is half the lab's 1,024; 64 + 48 fits that window.
    reference=ReferenceConfig(
        prompt_lengths=(16, 32, 64),
        max_new_tokens=48,
        min_continuation_tokens=32,
        train_prompts=384,
        heldout_per_category=6,
        dev_per_category=3,
        batch_size=64,
        shard_prompts=128,
    ),
    distill=DistillConfig(
        epochs=3,
        batch_size=16,
        lr=2e-3,
        warmup_steps=5,
        ckpt_every=40,
        qat_epochs=1,
        qat_lr=1e-3,
        replay_seq_len=64,
        replay_batch_size=4,
    ),
    evaluate=EvalConfig(),
    prose_packages=("git-doc",),
)

LAB = LabPreset(
    name="lab",
    # Code: the GPU machine's stdlib plus the --extra DIRs the coordinator passes (site-packages), a hash-ordered
    # 120 MB; prose: all of linux-doc-6.1, python3.11-doc and git-doc (~42 MB), seen twice in pretraining. The
    # calibration with 120 MB code + 28 MB kernel docs gave τ(base) 6.37 (bench/results/2026-11-30-h200-lab);
    # more prose and 512-token prompts aim lower. 120 MB is ~8,000 code files and the prose ~5,900: 4 % held out (and
    # 4 % dev) gives each of the 12 categories its first-round candidates on mostly distinct files (the calibration
    # held out 1 in 25 prose files).
    corpus=CorpusConfig(heldout_per_mille=40, dev_per_mille=40, max_code_bytes=120_000_000),
    tokenizer=TokenizerConfig(vocab_size=16_384, max_train_bytes=64_000_000, prose_repeats=2),
    # 88M parameters: the calibration's target, held-out loss 3.08 after 240 s (bench/results/2026-11-30-h200-lab).
    target=ModelConfig(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=64,
        intermediate_size=2048,
        max_position_embeddings=1024,
    ),
    # ~7.3M parameters (4.2M of them the tied embedding), the calibration's base drafter.
    drafter=ModelConfig(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=768,
        max_position_embeddings=1024,
    ),
    # Sequences of the whole 1,024-token context: a 512-token prompt plus its ≤256-token continuation sits at
    # positions a 512-token window never trains. Calibrated 248k tok/s at seq 512; 1,700 steps × 32k tokens ≈ 56M
    # tokens ≈ 240 s (the budget stops it if seq 1024 is slower), under one pass over the ~67M-token stream.
    pretrain_target=PretrainConfig(
        seq_len=1024,
        batch_size=32,
        max_steps=1700,
        lr=1.5e-3,
        warmup_steps=100,
        ckpt_every=400,
        time_budget_s=240,
    ),
    # 1,000 steps of 32k tokens (33M tokens, 28 s at 1.1M tok/s). On the H200 (2026-12-01, same target and
    # reference data) τ(base Q4_0 PTQ) was 6.77 after 1,500 steps, above the 4-6.5 regime of a real 1.7B drafter for
    # an 8B target; 1.88 after 450 (a base that has barely learned); 5.92 after 1,000 (bench/results/
    # 2026-12-01-h200-lab-v2). The base is honestly pretrained, on less text than its target.
    pretrain_drafter=PretrainConfig(
        seq_len=1024,
        batch_size=32,
        max_steps=1000,
        lr=2e-3,
        warmup_steps=50,
        ckpt_every=250,
        time_budget_s=30,
        seed=1,
    ),
    # Continuations of exactly 128 tokens (those that stop earlier are not kept for held-out/dev): the 2026-12-01 H200
    # smoke run with ≤256 saw 91 % of continuation 4-grams repeat earlier text (greedy small-model text loops the
    # longer it runs) and τ(base Q4_0 PTQ) 8.65; the calibration with 128 tokens had 70-80 % and τ(base) 6.37.
    # 65,536 KD continuations (~8.1M tokens, 4× the old lab's) at the static engine's 72-121k tok/s: ~110 s with the
    # eval sets (12 categories × (32 held-out + 24 dev), 1.5× oversampled). 32,768 (4.06M tokens) were seen 6.7 times
    # in a 150 s distillation whose dev τ still rose at the end (2026-12-01): a longer one needs more unique text.
    # Batches of 1,024 rows (the engine's per-step floor is kernel launches, so rows are the lever).
    reference=ReferenceConfig(
        prompt_lengths=(64, 192, 512),
        max_new_tokens=128,
        min_continuation_tokens=128,
        train_prompts=65_536,
        heldout_per_category=32,
        dev_per_category=24,
        batch_size=1024,
        shard_prompts=4096,
    ),
    # A 7.3M drafter on 64k × ≤640-token sequences: 1,024 steps per epoch at ~23 steps/s (2026-12-01: 3,448 steps in
    # 150 s), so 330 s is ~7.5 of the 8 epochs the cosine schedule spans, ending near its floor; the whole preset stays
    # under 15 minutes of one H200. Dev macro τ every 200 steps keeps the best checkpoint, 10 evaluations without a new
    # best count as a plateau. Replay 0.2 (LM loss on the base's pretraining text): distilling on the target's
    # continuations alone may erase what the base knew about text unlike them, which data/unseen-texts.jsonl checks;
    # on the micro lab it also scored above plain KL (8.88 vs 8.60, docs/lab.md).
    distill=DistillConfig(
        epochs=8,
        batch_size=64,
        lr=1e-3,
        warmup_steps=30,
        ckpt_every=200,
        time_budget_s=330,
        qat_epochs=1,
        qat_lr=2e-4,
        eval_every=200,
        patience=10,
        replay_weight=0.2,
    ),
    evaluate=EvalConfig(),
    prose_packages=("linux-doc-6.1", "python3.11-doc", "git-doc"),
)

# The real job: Qwen3-8B's greedy continuations of ~250k chat prompts (~200 tokens each, ~50M tokens), one epoch of
# KD into Qwen3-1.7B, one epoch of QAT, an all-Q4_0 GGUF that fits the folder cap with the bundled runtime. Only the
# sections the real path reads are sized (reference, distill, export, evaluate, and corpus's split shares for lines
# without a "split"); the models come from the hub, so the lab's model, tokenizer and pretraining sections stay
# defaults that no real-path stage reads. docs/training.md, "The real-model path", runs every command with it.
QWEN3_CHAT = LabPreset(
    name="qwen3-chat",
    # A given line without a "split" goes by the hash of its messages: 2 % held out (5,000 of 250k, τ by category),
    # 0.4 % dev (1,000): dev τ walks each conversation at ~0.10 s on an H200 (the rehearsal's evaluate), 9 times a run,
    # so dev costs distill and QAT ~0.5 h together; at 1 % it was 1.3 h of the job (real_rehearsal_report.py).
    corpus=CorpusConfig(dev_per_mille=4),
    # The defaults otherwise: continuations of ≤ 256 tokens (~200 on average once answers end at <|im_end|>) with the
    # target's top-20, thinking off (ReferenceConfig.enable_thinking says when to turn it on); corpus prompts (--corpus,
    # the job's ~50k openings and inner windows of code and prose) in the lab's categories and counts, given lines
    # keeping their own "category", all kept.
    reference=ReferenceConfig(
        train_prompts=250_000,  # the job's prompt count; given train lines past it are left out, with a warning
        # Qwen3-8B in bf16 leaves ~122 GB of an H200; the engine's 0.7 of it holds ~770 rows of 500 prompt + 256 new
        # tokens at 144 KiB of KV a token, 1,024 of shorter ones (it takes fewer where it must). Rows are the lever: a
        # decode step reads the 16.4 GB of weights whatever the batch, and its matmuls run fuller with more rows.
        batch_size=1024,
        shard_prompts=4096,  # ~5 batches a shard; a killed run loses at most one shard (~2 min of an H200)
    ),
    # ~250k continuations at 16 rows' worth of tokens a step (packed: chat prompts of ~30 to ~3,000 tokens pad
    # nothing): ~15.6k steps an epoch. lr 1e-5 (AdamW, a 1.7B that already speaks chat: the SFT range; the
    # lab's 1e-3 is for a 7M model), 100 warm-up steps (<1 %). Dev macro τ every 2,000 steps (~8 a epoch) keeps the
    # best checkpoint; 5 evaluations without a new best (~10k steps) is a plateau. The defaults otherwise: no time
    # budget (the epoch is the budget), replay off (the real path has no pretraining text unless --replay-tokens brings
    # it), one epoch of QAT, layers recomputed only where a step would not fit.
    # A resumable state (24 GB for 1.7B + AdamW) every 1,000 steps: a kill loses minutes, saves cost ~5 %.
    distill=DistillConfig(
        epochs=1,
        batch_size=16,
        lr=1e-5,
        warmup_steps=100,
        eval_every=2000,
        patience=5,
        ckpt_every=1000,
        qat_lr=5e-6,  # QAT moves weights onto the Q4_0 grid from the distilled drafter: half the KD rate
    ),
    # All-Q4_0 (the embedding too): Qwen3-1.7B is 974,196,224 B so, 1,129,778,688 B with a Q8_0 embedding, which the
    # folder cap cannot take. QAT trains against the Q4_0 embedding (−0.16 % τ on lab v2, docs/lab.md), export writes
    # it and refuses a file over the cap.
    export=ExportConfig(embedding_type=SIZE_CAPPED_EMBEDDING_TYPE, max_bytes=FOLDER_CAP_BYTES),
    evaluate=EvalConfig(),
)

PRESETS: dict[str, LabPreset] = {"micro": MICRO, "lab": LAB, "qwen3-chat": QWEN3_CHAT}
LAB_PRESETS = ("micro", "lab")  # the presets `lab` and `pretrain` run: the others size no lab models


def get_preset(name: str) -> LabPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: expected one of {', '.join(PRESETS)}")
    return PRESETS[name]


def add_preset_argument(parser: argparse.ArgumentParser, default: str = "lab", choices: Sequence[str] = ()) -> None:
    """``--preset NAME`` for a stage command: the presets it may run under (all by default), named in its help."""
    names = tuple(choices) or tuple(PRESETS)
    parser.add_argument(
        "--preset",
        default=default,
        choices=names,
        help=f"defaults for every setting: {' | '.join(names)} (default: {default}; the real path: qwen3-chat)",
    )


def add_device_argument(parser: argparse.ArgumentParser, default: str = "auto", help: str = "") -> None:
    """``--device NAME`` for a command that computes: ``auto`` (CUDA when present, else the CPU), ``cpu``, ``cuda`` or
    ``cuda:N`` (models.resolve_device)."""
    parser.add_argument("--device", default=default, help=help or f"auto | cpu | cuda (default: {default})")


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


def check_preset(preset: LabPreset) -> None:
    """Refuse a preset whose longest prompt plus continuation runs past the positions pretraining trains."""
    longest = max(preset.reference.prompt_lengths) + preset.reference.max_new_tokens
    for section in ("pretrain_target", "pretrain_drafter"):
        seq_len = getattr(preset, section).seq_len
        if longest > seq_len:
            raise ValueError(
                f"preset {preset.name}: the longest prompt ({max(preset.reference.prompt_lengths)}) plus "
                f"max_new_tokens ({preset.reference.max_new_tokens}) is {longest} tokens, more than "
                f"{section}.seq_len {seq_len}: the models never train those positions"
            )


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
