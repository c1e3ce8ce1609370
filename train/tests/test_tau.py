"""The fast τ walk (one packed forward per conversation) against a real greedy-drafting walk; the n-gram peer against
a brute-force search."""

from __future__ import annotations

import random

import pytest
import torch

from specdraft_train.config import ModelConfig
from specdraft_train.modeling.models import new_model, qwen3_config
from specdraft_train.modeling.tau import (
    Conversation,
    category_order,
    gap_closed,
    model_tau,
    ngram_tau,
    ngram_walk_steps,
    repeated_ngram_share,
    repeated_ngram_share_by_category,
    summarize,
    token_batches,
    walk_steps,
)

K = 16


def test_walk_steps_follows_the_validator_rules():
    assert walk_steps([True] * 40, K) == 3  # 16 + 1, 16 + 1, then the last 6 in one step
    assert walk_steps([False] * 5, K) == 5  # every step advances by the target's own token
    # accepted 2 (pos 0 → 3), then pos 3 rejects (→ 4), then 1 left: one step
    assert walk_steps([True, True, False, False, True], K) == 3
    assert walk_steps([True] * 4, 2) == 2  # k caps the accepted run


def test_perfect_drafter_reaches_k_plus_one():
    c = Conversation("a", "x", [1, 2], list(range(3, 3 + 17 * 4)))
    result = summarize([(c, walk_steps([True] * 68, K), 68)])
    assert result.tau == 17.0 and result.top1 == 1.0


def test_top1_agreement_and_macro_tau_by_category():
    long_easy = Conversation("a", "easy", [1], list(range(2, 2 + 34)))  # 34 tokens, all agreed: 2 steps, τ 17
    short_hard = [Conversation(f"h{i}", "hard", [1], [5, 6]) for i in range(2)]  # 2 tokens, none agreed: τ 1
    result = summarize(
        [(long_easy, walk_steps([True] * 34, K), 34)] + [(c, walk_steps([False, False], K), 0) for c in short_hard]
    )
    assert result.tau == (34 + 4) / (2 + 4)
    assert result.macro_tau == (17 + 1) / 2  # each category once, however many tokens it has
    assert result.top1 == 34 / 38
    assert result.by_category["easy"]["top1"] == 1.0 and result.by_category["hard"]["top1"] == 0.0
    assert result.to_dict()["macro_tau"] == result.macro_tau and result.to_dict()["top1"] == result.top1
    # A drafter without per-position predictions (the n-gram peer) has no top-1 agreement.
    peer = summarize([(long_easy, 3, None)])
    assert peer.top1 is None and "top1" not in peer.by_category["easy"]


def _tiny_model(seed: int) -> torch.nn.Module:
    config = qwen3_config(
        ModelConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            intermediate_size=128,
            max_position_embeddings=256,
        ),
        vocab_size=48,
        eos_token_id=0,
        pad_token_id=0,
    )
    model = new_model(config, seed)
    with torch.no_grad():  # larger weights: sharper, less tie-prone argmaxes than the 0.02-std init
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(8)
    return model.eval()


@torch.no_grad()
def _slow_walk_steps(model: torch.nn.Module, prompt: list[int], continuation: list[int], k: int) -> int:
    """The validator's walk with real greedy drafts: k tokens generated one at a time after P + C[:pos]."""
    pos, steps = 0, 0
    while pos < len(continuation):
        context = prompt + continuation[:pos]
        draft = []
        for _ in range(k):
            logits = model(input_ids=torch.tensor([context + draft])).logits
            draft.append(int(logits[0, -1].argmax()))
        accepted = 0
        cap = min(k, len(continuation) - pos)
        while accepted < cap and draft[accepted] == continuation[pos + accepted]:
            accepted += 1
        pos = min(pos + accepted + 1, len(continuation))
        steps += 1
    return steps


@torch.no_grad()
def _slow_agreement(model: torch.nn.Module, prompt: list[int], continuation: list[int]) -> int:
    """Positions j where the model's greedy next token after P + C[:j] is C[j], one forward per position."""
    return sum(
        int(model(input_ids=torch.tensor([prompt + continuation[:j]])).logits[0, -1].argmax()) == token
        for j, token in enumerate(continuation)
    )


@torch.no_grad()
@pytest.mark.parametrize("q4", [False, True], ids=["as-trained", "q4_0"])
def test_fast_tau_equals_real_greedy_drafting(q4: bool):
    """One packed teacher-forced pass per conversation, several conversations a forward (batch_tokens 80 packs two
    or three), against drafts generated token by token — as trained, and with the weights a Q4_0 GGUF holds (QAT's fake
    quantization, which evaluate --q4 scores through)."""
    model = _tiny_model(0)
    if q4:
        from specdraft_train.training.quant import prepare_qat

        prepare_qat(model, embedding_type="Q4_0")
    rng = random.Random(0)
    conversations = []
    for i in range(6):
        prompt = [rng.randrange(1, 48) for _ in range(rng.randrange(3, 12))]
        # The model's own greedy continuation with some tokens replaced: long accepted runs and rejections both occur.
        tokens = list(prompt)
        for _ in range(30):
            next_token = int(model(input_ids=torch.tensor([tokens])).logits[0, -1].argmax())
            if rng.random() < 0.15:
                next_token = (next_token + 1 + rng.randrange(46)) % 48
            tokens.append(next_token)
        conversations.append(Conversation(str(i), "c", prompt, tokens[len(prompt) :]))
    assert len(token_batches([len(c.prompt_tokens) + 29 for c in conversations], 80)) in (2, 3)
    fast = model_tau(model, conversations, k=6, device=torch.device("cpu"), batch_tokens=80)
    slow_steps = sum(_slow_walk_steps(model, c.prompt_tokens, c.continuation_tokens, 6) for c in conversations)
    assert fast.steps == slow_steps
    histogram = fast.to_dict()["accepted_lengths"]  # where the walks stopped, as the lab report reads it
    assert len(histogram["all"]) == 7 and sum(histogram["all"]) == slow_steps and histogram["c"] == histogram["all"]
    assert histogram["all"][0] > 0 and sum(histogram["all"][2:]) > 0  # misses and accepted runs both counted
    agreed = sum(_slow_agreement(model, c.prompt_tokens, c.continuation_tokens) for c in conversations)
    assert fast.top1 == agreed / fast.tokens and 0 < fast.top1 < 1
    assert 1.5 < fast.tau < 7  # both long runs and rejections happened: the comparison meant something


def test_token_batches_hold_their_budget_widest_first():
    widths = [5, 30, 12, 8, 40, 3]
    batches = token_batches(widths, 40)
    assert sorted(i for batch in batches for i in batch) == list(range(6))  # every conversation once
    assert all(sum(widths[i] for i in batch) <= 40 for batch in batches)
    assert batches == [[4], [1], [2, 3, 0, 5]]  # the widest first, each batch filled until the next would overflow
    assert token_batches([50, 10], 40) == [[0], [1]]  # wider than the budget: alone


def _brute_force_ngram_steps(prompt: list[int], continuation: list[int], k: int, n_max: int) -> int:
    pos, steps = 0, 0
    while pos < len(continuation):
        context = prompt + continuation[:pos]
        draft: list[int] = []
        for n in range(min(n_max, len(context)), 0, -1):
            suffix = context[-n:]
            starts = [s for s in range(len(context) - n) if context[s : s + n] == suffix]
            if starts:
                s = starts[-1]
                draft = context[s + n : s + n + k]
                break
        accepted = 0
        cap = min(k, len(continuation) - pos)
        while accepted < cap and accepted < len(draft) and draft[accepted] == continuation[pos + accepted]:
            accepted += 1
        pos = min(pos + accepted + 1, len(continuation))
        steps += 1
    return steps


def test_ngram_walk_matches_brute_force_search():
    rng = random.Random(1)
    for _ in range(40):
        vocab = rng.choice([3, 5, 20])
        prompt = [rng.randrange(vocab) for _ in range(rng.randrange(1, 30))]
        continuation = [rng.randrange(vocab) for _ in range(rng.randrange(1, 60))]
        for k in (1, 4, 16):
            assert ngram_walk_steps(prompt, continuation, k, 3) == _brute_force_ngram_steps(prompt, continuation, k, 3)


def test_ngram_peer_copies_repeated_text_and_reports_categories():
    block = list(range(10, 30))
    repeated = Conversation("r", "repeat", block, block * 3)
    fresh = Conversation("f", "fresh", [1, 2, 3], list(range(100, 140)))
    result = ngram_tau([repeated, fresh], K)
    assert result.by_category["repeat"]["tau"] > 8
    assert result.by_category["fresh"]["tau"] == 1.0


def test_repeated_4gram_share():
    c = Conversation("a", "x", [1, 2, 3, 4], [1, 2, 3, 4, 9])
    # continuation 4-grams: (2,3,4,1) (3,4,1,2) (4,1,2,3) (1,2,3,4)✓ (2,3,4,9)
    assert repeated_ngram_share([c], 4) == 1 / 5


def test_macro_tau_weighs_every_category_the_same():
    long = Conversation("l", "code/open/64", [1], list(range(2, 2 + 17 * 10)))  # 170 tokens, all accepted: τ 17
    short = Conversation("s", "prose/inner/512", [1], [5, 6, 7, 8])  # 4 tokens, none accepted: τ 1
    result = summarize([(long, walk_steps([True] * 170, K), 170), (short, walk_steps([False] * 4, K), 0)])
    assert result.by_category["code/open/64"]["tau"] == 17.0 and result.by_category["prose/inner/512"]["tau"] == 1.0
    assert result.tau == 174 / 14  # tokens over steps: dominated by the long conversation
    assert result.macro_tau == 9.0 and result.to_dict()["macro_tau"] == 9.0
    assert summarize([]).macro_tau == 0.0


def test_gap_closed_runs_from_the_base_to_the_target():
    assert gap_closed(10.0, 8.0, 16.0) == 0.25
    assert gap_closed(8.0, 8.0, 16.0) == 0.0 and gap_closed(16.0, 8.0, 16.0) == 1.0
    assert gap_closed(7.0, 8.0, 16.0) == -0.125  # worse than the base: negative
    assert gap_closed(9.0, 8.0, 8.0) is None


def test_categories_sort_by_kind_position_and_length_as_numbers():
    names = ["prose/open/64", "code/open/512", "code/open/64", "code/inner/192", "chat", "code/open/192"]
    assert sorted(names, key=category_order) == [
        "chat",
        "code/inner/192",
        "code/open/64",
        "code/open/192",
        "code/open/512",
        "prose/open/64",
    ]
    c = Conversation("a", "code/open/512", [1], [2])
    assert list(summarize([(c, 1, None), (Conversation("b", "code/open/64", [1], [2]), 1, None)]).by_category) == [
        "code/open/64",
        "code/open/512",
    ]


def test_repeated_4gram_share_by_category():
    repeated = Conversation("a", "x", [1, 2, 3, 4], [1, 2, 3, 4, 9])  # 1 of 5 continuation 4-grams seen before
    fresh = Conversation("b", "y", [1, 2, 3, 4], [5, 6, 7, 8])  # none of 4
    assert repeated_ngram_share_by_category([repeated, fresh], 4) == {"x": 1 / 5, "y": 0.0}
    assert repeated_ngram_share([repeated, fresh], 4) == 1 / 9
