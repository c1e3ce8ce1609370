"""The presets: every stage's settings for one job, by name (:class:`config.LabPreset`, each section a stage's).

- ``micro``: the lab at CPU scale, for CI; ``lab``: the lab on one H200 (a Qwen3 target and base drafter trained here);
- ``qwen3-chat``: the real job (a Qwen3-1.7B drafter distilled from Qwen3-8B on chat prompts, Q4_0, ≤ 10^9 bytes
  packed);
- ``smollm2-chat``: the real-model lab (SmolLM2-135M-Instruct as the target, a shallow Llama drafter with its
  tokenizer, train/scripts/gpu/real_lab.sh).

The stage CLIs take ``--preset`` for the defaults and a few flags to override them, and say which preset and budget
they run under before they start (config.announce). Print one:

    python -c "from specdraft_train.presets import PRESETS; print(PRESETS['smollm2-chat'])"
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .config import (
    FOLDER_CAP_BYTES,
    SIZE_CAPPED_EMBEDDING_TYPE,
    CorpusConfig,
    DistillConfig,
    EvalConfig,
    ExportConfig,
    LabPreset,
    ModelConfig,
    PretrainConfig,
    ReferenceConfig,
    TokenizerConfig,
)

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
    # Only the depth is read: `run --init layers`'s default, where no --drafter is given. 2 of Qwen3-8B's 36 layers
    # with its untied embedding and head are ~1.6B parameters, the 1.7B's size, under the folder cap at Q4_0.
    drafter=ModelConfig(num_hidden_layers=2),
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

# The real-model lab (train/scripts/gpu/real_lab.sh, docs/lab.md): SmolLM2-135M-Instruct's dequantized weights (the
# `target` stage) as the target, drafters with its tokenizer and architecture (Llama), the job shaped as the user's:
# a general base drafter distilled on the target's greedy chat answers, QAT, an all-Q4_0 GGUF. Sized so that every
# stage fits one H200 in about a quarter of an hour, in three calls of under ten minutes (real_lab.md). The target and
# the prompts are given (data/chat-prompts-*.jsonl.xz keep their own splits), so the lab's target, tokenizer-training
# and prompt-length fields stay defaults that no stage of this lab reads.
SMOLLM2_CHAT = LabPreset(
    name="smollm2-chat",
    # General text for the base drafter's pretraining: the machine's Python (stdlib + site-packages, a hash-ordered
    # 60 MB) and Debian's git-doc (2 MB of prose, 0.7 MB as xz: beside the target's GGUF, the first call of
    # train/scripts/gpu/real_lab.sh has room for no more; python3.11-doc's 3 MB of xz did not fit). 2 % dev for the
    # dev loss; nothing held out is measured.
    corpus=CorpusConfig(heldout_per_mille=20, dev_per_mille=20, max_code_bytes=60_000_000),
    tokenizer=TokenizerConfig(prose_repeats=2),  # read by `pretrain --init`: prose twice in the stream, as the lab
    # The drafter's shape (`drafter --preset`): the target's width (hidden 576, 9 q / 3 kv heads of 64, FFN 1,536) at
    # 2 of its 30 layers, the 49,152 × 576 embedding tied to the head: 35,392,320 parameters, 28,311,552 of them the
    # embedding, ~4× smaller than the target (Qwen3-1.7B : 8B). Shallow because a drafter step on a GPU costs by
    # depth, not by parameters (both models are launch-bound at batch 1).
    drafter=ModelConfig(
        hidden_size=576,
        num_hidden_layers=2,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        intermediate_size=1536,
        max_position_embeddings=8192,
        rope_theta=100_000.0,
    ),
    # The scratch base: 120 s of the H200 on sequences of 1,024 tokens (a chat prompt is ≤ 805 tokens at the 99th
    # percentile, plus its ≤ 256-token answer), 1,500 steps of 32k tokens (49M tokens, about two passes over the
    # ~25M-token stream) if the budget allows them.
    pretrain_drafter=PretrainConfig(
        seq_len=1024,
        batch_size=32,
        max_steps=1500,
        lr=1e-3,
        warmup_steps=100,
        ckpt_every=250,
        time_budget_s=120,
        seed=1,
    ),
    # Greedy answers of ≤ 256 tokens with the top-20 log-probs, for the 15,600 training prompts of
    # data/chat-prompts-templates.jsonl.xz (and its dev and held-out lines, all kept). fp32 weights, the target
    # itself (docs/training.md); a 135M model's decode step is launch-bound, so 2,048 rows a batch (the engine takes
    # fewer where its KV budget holds fewer) and shards of 4,096 prompts (a cut loses at most one).
    reference=ReferenceConfig(
        max_new_tokens=256,
        top_k=20,
        train_prompts=15_600,
        batch_size=2048,
        shard_prompts=4096,
    ),
    # ~5.3M tokens an epoch (15,600 rows of ~140 prompt + ≤ 256 answer tokens), packed, 64 rows' worth a step
    # (~244 steps an epoch). Distilled until the dev plateau, not for a time: the cosine spans 28 epochs, dev macro τ
    # every 100 steps keeps the best, and 10 evaluations without a new one end it (a drafter of the target's layers
    # kept learning for ~17 epochs; docs/lab.md, "What limits τ"). Replay 0.2 of general text (a scratch base's
    # pretraining text, or the `replay` stage's), as the lab measured. QAT: one epoch at a fifth of the rate.
    # real_lab.sh sizes its own run to its calls instead (REAL_LAB_EPOCHS, REAL_LAB_DISTILL_S, REAL_LAB_QAT_S).
    distill=DistillConfig(
        epochs=28,
        batch_size=64,
        lr=5e-4,
        warmup_steps=30,
        ckpt_every=100,
        eval_every=100,
        patience=10,
        replay_weight=0.2,
        qat_epochs=1,
        qat_lr=1e-4,
    ),
    # All-Q4_0, as qwen3-chat: the tied embedding is 80 % of the drafter and, as the output head, the largest matmul
    # of every drafter step; Q4_0 halves the bytes that step reads (15.9 MB instead of 30.1 MB at Q8_0) and the file,
    # at the −0.16 % τ the lab measured for a Q4_0 embedding under QAT (docs/lab.md). QAT trains against it.
    export=ExportConfig(embedding_type="Q4_0"),
    evaluate=EvalConfig(),
    prose_packages=("git-doc",),
)

PRESETS: dict[str, LabPreset] = {"micro": MICRO, "lab": LAB, "qwen3-chat": QWEN3_CHAT, "smollm2-chat": SMOLLM2_CHAT}
LAB_PRESETS = ("micro", "lab")  # the presets `lab` and the tokenizer stage run: the others train no lab models
# The presets whose corpus and pretraining sections are sized: `corpus` and `pretrain` run under them
PRETRAIN_PRESETS = (*LAB_PRESETS, "smollm2-chat")


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
        help=f"defaults for every setting: {' | '.join(names)} (default: {default}; the real path: qwen3-chat; "
        "the real-model lab: smollm2-chat)",
    )


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
