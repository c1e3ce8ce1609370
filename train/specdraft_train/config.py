"""Configuration of every stage, and the two lab presets (`micro` for CPU CI, `lab` for one H200).

Each stage reads its section of a :class:`LabPreset`; the stage CLIs take ``--preset`` for the defaults and a few flags
to override them. Print a preset with:

    python -c "from specdraft_train.config import PRESETS; print(PRESETS['micro'])"
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CorpusConfig:
    min_file_bytes: int = 200  # smaller files are mostly empty __init__.py / one-line shims
    max_file_bytes: int = 200_000  # larger ones are generated tables (unicode data, encodings) that teach little
    heldout_per_mille: int = 20  # 2 %: ~35 stdlib files; prompts take several windows per held-out file
    dev_per_mille: int = 20  # same size as held-out: dev τ picks the best distillation epoch
    max_total_bytes: int = 0  # 0 = every file; micro takes a hash-ordered subset so CPU CI stays in budget


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int = 16_384  # NOTES: 16k gives 3.65 bytes/token on Python source; issue caps it at 32k
    min_frequency: int = 2  # merges seen once are noise from one file
    max_train_bytes: int = 0  # 0 = the whole train split; BPE statistics settle long before 64 MB of source


@dataclass(frozen=True)
class ModelConfig:
    """A Qwen3 architecture (transformers `Qwen3Config`); vocab_size comes from the tokenizer."""

    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2  # GQA like real Qwen3; also halves KV cache in the served drafter
    head_dim: int = 64
    intermediate_size: int = 768  # 3x hidden, multiple of 32 so every weight row is Q4_0 blockable
    max_position_embeddings: int = 1024  # prompt (≤192) + continuation (≤256) with room; pretraining seq_len ≤ this
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
    prompt_lengths: tuple[int, ...] = (64, 96, 128, 192)  # NOTES' held-out buckets; also the categories
    max_new_tokens: int = 256  # continuation cap
    top_k: int = 20  # target log-probs kept per continuation position for distillation
    train_prompts: int = 8192  # KD continuations (NOTES: 4,096 gave +16 %; more data, more gain)
    train_windows_per_doc: int = 8  # besides the opening, windows from inside train files: more varied prompts
    dev_prompts: int = 96
    heldout_prompts: int = 160  # NOTES' held-out size
    eval_windows_per_doc: int = 4  # held-out/dev: the opening plus this many inner windows per file at most
    batch_size: int = 128
    shard_prompts: int = 1024  # prompts per resumable shard
    seed: int = 0
    engine: str = "static"  # generation.py's static-cache, CUDA-graph engine; "hf" = HF generate, ≥ 10× slower on GPU


@dataclass(frozen=True)
class DistillConfig:
    epochs: int = 3
    batch_size: int = 64
    lr: float = 5e-4  # starts from a trained base: lower than pretraining to keep what it knows
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.0  # short fine-tune; decay would only pull toward zero
    grad_clip: float = 1.0
    kl_weight: float = 1.0  # KL(target top-k renormalized || drafter)
    ce_weight: float = 0.5  # cross-entropy on the target's greedy token: what τ actually scores
    eval_k: int = 16  # draft length for dev τ
    ckpt_every: int = 100
    time_budget_s: float = 0.0
    seed: int = 0
    # QAT runs as a short second distillation from the distilled drafter (`distill --qat --init <distilled>`).
    qat_epochs: int = 1
    qat_lr: float = 2e-4  # the weights are already good; QAT only has to move them onto the Q4_0 grid


@dataclass(frozen=True)
class EvalConfig:
    k: int = 16  # the validator's draft length
    ngram_max: int = 3  # prompt-lookup peer: longest suffix n-gram tried first
    batch_size: int = 32


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
    evaluate: EvalConfig = field(default_factory=EvalConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


MICRO = LabPreset(
    name="micro",
    # ~1.2 MB of small stdlib files: big enough for a tokenizer and a target with habits, small enough for 2 CPU cores.
    corpus=CorpusConfig(max_file_bytes=24_000, heldout_per_mille=100, dev_per_mille=60, max_total_bytes=1_200_000),
    tokenizer=TokenizerConfig(vocab_size=1024),  # small softmax: most CPU time would otherwise go to the LM head
    target=ModelConfig(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        intermediate_size=384, max_position_embeddings=512,
    ),
    # The drafter is far weaker than the target (and pretrained for fewer steps), so distilling the target's habits
    # into it helps visibly: CI asserts τ(distilled, Q4_0 QAT) > τ(base, Q4_0 PTQ).
    drafter=ModelConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        intermediate_size=192, max_position_embeddings=512,
    ),
    pretrain_target=PretrainConfig(
        seq_len=128, batch_size=16, max_steps=200, lr=3e-3, warmup_steps=20, ckpt_every=100, eval_batches=4,
    ),
    pretrain_drafter=PretrainConfig(
        seq_len=128, batch_size=16, max_steps=120, lr=3e-3, warmup_steps=10, ckpt_every=60, eval_batches=4, seed=1,
    ),
    reference=ReferenceConfig(
        prompt_lengths=(32, 48, 64), max_new_tokens=48, train_prompts=384, train_windows_per_doc=4,
        dev_prompts=24, heldout_prompts=48, eval_windows_per_doc=3, batch_size=64, shard_prompts=128,
    ),
    distill=DistillConfig(epochs=3, batch_size=16, lr=2e-3, warmup_steps=5, ckpt_every=40, qat_epochs=1, qat_lr=1e-3),
    evaluate=EvalConfig(),
)

LAB = LabPreset(
    name="lab",
    # The whole stdlib (plus any --extra DIRs the coordinator passes, e.g. site-packages) on one H200.
    # The machine's site-packages alone is far more source than 4 minutes of pretraining reads (NOTES: 300 MB ≈ 82M
    # tokens); a hash-ordered 400 MB subset keeps corpus and tokenization under a minute.
    corpus=CorpusConfig(max_total_bytes=400_000_000),
    tokenizer=TokenizerConfig(vocab_size=16_384, max_train_bytes=64_000_000),
    # ~57M parameters: NOTES' 33.6M target gave τ(base) ≈ 7.9 because its greedy text repeats itself; a bigger,
    # longer-trained target writes less repetitive continuations, which is the harder and more telling lab.
    target=ModelConfig(
        hidden_size=640, num_hidden_layers=10, num_attention_heads=10, num_key_value_heads=2, head_dim=64,
        intermediate_size=1792, max_position_embeddings=1024,
    ),
    # ~7.4M parameters (4.2M of them the tied embedding), NOTES' base size.
    drafter=ModelConfig(
        hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        intermediate_size=768, max_position_embeddings=1024,
    ),
    # NOTES: 33.6M at 483k tok/s, 95M at 244k tok/s → ~57M at ~350k tok/s; 2,400 steps × 32k tokens ≈ 225 s.
    pretrain_target=PretrainConfig(
        seq_len=512, batch_size=64, max_steps=2400, lr=1.5e-3, warmup_steps=100, ckpt_every=400, time_budget_s=240,
    ),
    # NOTES: 7.3M at 1.2M tok/s → 60 s is ~2,200 steps of 32k tokens; fewer steps keep the base honest-but-weak.
    pretrain_drafter=PretrainConfig(
        seq_len=512, batch_size=64, max_steps=1600, lr=2e-3, warmup_steps=50, ckpt_every=400, time_budget_s=75,
        seed=1,
    ),
    # 8,192 continuations of ≤256 tokens (NOTES: 4,096 × 128 took ~25 s with HF generate; batch 512 keeps the
    # number of sequential decode steps at 16 × 256). The whole lab must fit ~12 minutes of one H200.
    reference=ReferenceConfig(
        prompt_lengths=(64, 96, 128, 192), max_new_tokens=256, train_prompts=8_192, train_windows_per_doc=8,
        dev_prompts=96, heldout_prompts=160, eval_windows_per_doc=4, batch_size=512, shard_prompts=2048,
    ),
    # A 7.4M drafter on 12k × ~400-token sequences: ~190 steps per epoch at well over 1M tok/s, so epochs are cheap;
    # dev τ keeps the best one, the budget caps the total.
    distill=DistillConfig(
        epochs=8, batch_size=64, lr=1e-3, warmup_steps=30, ckpt_every=200, time_budget_s=150, qat_epochs=1,
        qat_lr=2e-4,
    ),
    evaluate=EvalConfig(),
)

PRESETS: dict[str, LabPreset] = {"micro": MICRO, "lab": LAB}


def get_preset(name: str) -> LabPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: expected one of {', '.join(PRESETS)}")
    return PRESETS[name]


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
        if isinstance(current, tuple):
            value = tuple(value)
        elif isinstance(current, float) and isinstance(value, int):
            value = float(value)
        if type(value) is not type(current):
            raise ValueError(f"--set {setting!r}: {name} is a {type(current).__name__}, got {value!r}")
        preset = dataclasses.replace(preset, **{section: dataclasses.replace(sub, **{field_name: value})})
    return preset
