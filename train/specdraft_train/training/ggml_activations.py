"""How llama.cpp's CPU backend rounds a matmul's input against a quantized weight, and a context in which a QAT model
does the same, so that its logits match llama.cpp's to float32 summation order (the parity tests' and an eval aid).

    with ggml_activation_rounding(qat):                                   # every x86 build with AVX: the SIMD rule
        logits = model(input_ids).logits
    with ggml_activation_rounding(qat, functools.partial(round_activations_q8_0, rule=ggml_activation_rule("sse42"))):
        ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from gguf import GGMLQuantizationType
from torch import Tensor, nn

from .quant import QatState, q8_0_activation_terms, roundf

# How ggml's CPU backend quantizes a matmul's activations to Q8_0 against a Q4_0/Q8_0 weight. Every x86 build with AVX
# (node-llama-cpp's prebuilt variants sandybridge … sapphirerapids, zen4) uses the SIMD ``quantize_row_q8_0`` of
# ggml-cpu/arch/x86/quants.c, and the repacked Q4_0 (``ggml_quantize_mat_q8_0_4x8``) and AMX paths call the same rule:
# ``id = 127 / amax``, round half to even (``_mm256_round_ps``), scale ``fp16(amax / 127)``. The variants without AVX
# (x64, sse42) fall back to ``quantize_row_q8_0_ref``: ``id = 1 / d`` and ``roundf`` (half away from zero). The two
# rules differ only for values within an ulp or so of a rounding boundary.
GGML_CPU_VARIANTS_WITHOUT_AVX = frozenset({"x64", "sse42"})


def ggml_activation_rule(cpu_variant: str) -> str:
    """The activation rounding rule of one of ggml's x86 CPU backend variants (``libggml-cpu-<variant>.so``)."""
    return "reference" if cpu_variant in GGML_CPU_VARIANTS_WITHOUT_AVX else "simd"


def round_activations_q8_0(x: Tensor, rule: str = "simd") -> Tensor:
    """``x`` as ggml's CPU matmul sees it against a Q4_0/Q8_0 weight: rows quantized to Q8_0 by ``rule``
    (``quant.ACTIVATION_RULES``; ``simd`` on every x86 build with AVX), then dequantized."""
    scaled, d = q8_0_activation_terms(x, rule)
    q = torch.round(scaled) if rule == "simd" else roundf(scaled)  # torch.round is half to even
    return (q * d.to(torch.float16).to(torch.float32)).reshape(x.shape).to(x.dtype)


@contextlib.contextmanager
def ggml_activation_rounding(
    state: QatState, rounding: Callable[[Tensor], Tensor] = round_activations_q8_0
) -> Iterator[None]:
    """Within the block, every ``nn.Linear`` whose weight the GGUF quantizes rounds its input as ggml's CPU backend
    does, so a QAT model's logits match llama.cpp's to float32 summation order (a check and an eval aid; training
    without it is the usual QAT, since the GPU backends round activations differently or not at all).

    ``rounding`` replaces the rule, e.g. ``functools.partial(round_activations_q8_0, rule="reference")``. Each
    module's input goes through it once per call, so modules that share an input (q/k/v, gate/up) see the same
    tensor object in a row: a stateful ``rounding`` can recognise that, as ggml quantizes each matmul's input alike.
    """
    handles = []
    for target in state.targets.values():
        if target.qtype not in (GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q8_0):
            continue
        for module in target.modules:
            if isinstance(module, nn.Linear):
                handles.append(module.register_forward_pre_hook(lambda _m, args: (rounding(args[0]),)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
