"""Quantization-aware training that is bit-exact with the GGUF file export writes.

ggml stores a 2-D weight as rows of its *last* torch dimension (an ``nn.Linear`` weight ``[out, in]`` becomes ggml
``ne = [in, out]``), so every block of 32 runs along ``in``. Q4_0 per block (``quantize_row_q4_0_ref`` in ggml-quants.c
and ``gguf.quants.Q4_0``, both reproduced here operation by operation in fp32):

    max = the signed value of largest magnitude (the first one on ties)
    d   = max / -8                  fp32; stored as fp16
    id  = 1 / d  (0 if d == 0)      from the fp32 d, not the fp16 one
    q   = min(15, trunc(x * id + 8.5))   x * id rounded to fp32 first, then + 8.5 rounded again (no FMA)
    x'  = (q - 8) * fp16(d)

Q8_0 (token embedding and output head in a Q4_0 file, unless its ``embedding_type`` is Q4_0) is ``d = amax / 127``,
``q = roundf(x * (1 / d))``, ``x' = q * fp16(d)``.

Keep the fake quantization in eager mode: under torch.compile the multiply and add may fuse into one rounding (FMA),
and ``bf16`` autocast rounds the fake-quantized weights again inside the matmul (the GGUF still holds the exact
blocks; the forward is then a close approximation of them).

Which tensor gets which type is decided in one place, :func:`gguf_storage_type`, used by both :func:`prepare_qat` and
``export.export_gguf``: whatever the GGUF stores quantized, training fake-quantizes the same way, so the PyTorch model
under QAT computes with exactly the weights the GGUF holds.

    from specdraft_train.training.quant import prepare_qat
    qat = prepare_qat(model, clip_search=True)       # forward now uses the GGUF's weights
    for batch in batches:
        with qat.held():                             # each weight quantized once for the step
            loss_of(model, batch).backward()
        optimizer.step()                             # the optimizer holds the latent weights (model.parameters())
    with qat.unwrapped():                            # plain modules, latent fp32 weights under their HF names
        model.save_pretrained(ckpt_dir)
    qat.save(ckpt_dir / "qat_state.safetensors")     # per-block clip factors + fingerprints for export
    # python -m specdraft_train export --checkpoint ckpt_dir --out d.gguf --type Q4_0 \
    #     --qat-state ckpt_dir/qat_state.safetensors
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType
from torch import Tensor, nn

from ..config import DEFAULT_EMBEDDING_TYPE, resolve_embedding_type

QK = 32  # block size of both Q4_0 and Q8_0 (QK4_0 == QK8_0 == 32 in ggml)
OUT_TYPES = ("F32", "F16", "Q8_0", "Q4_0")
QAT_STATE_FORMAT = "specdraft-qat/1"
QUANTIZERS_MODULE = "specdraft_qat"  # where a model under QAT holds its quantizers (clip factors in its state_dict)
# Clip factors tried per block by the clipping search, largest first so that ties keep the plain (max-derived) scale.
# Below ~0.6 the clamped outliers cost more than the finer grid gains on every weight shape we tried.
CLIP_CANDIDATES = tuple(1.0 - 0.025 * k for k in range(17))  # 1.000 … 0.600
# Hugging Face names (suffixes) of the tensors that hold the vocabulary: by default kept at Q8_0 in a Q4_0 file, as
# llama-quantize keeps the output head above Q4_0 (it uses Q6_K, which gguf-py cannot quantize; Q8_0 is the nearest).
VOCAB_TENSOR_SUFFIXES = ("embed_tokens.weight", "lm_head.weight")


# --------------------------------------------------------------------------------------------------------------------
# Which type each tensor is stored as


def gguf_storage_type(
    hf_name: str, shape: tuple[int, ...], out_type: str, embedding_type: str = DEFAULT_EMBEDDING_TYPE
) -> GGMLQuantizationType:
    """The ggml type export writes for the checkpoint tensor ``hf_name`` of ``shape`` in a file of ``out_type``.

    1-D tensors (norms) are always F32. Quantized types need the row (last dim) to be a multiple of 32; a tensor
    whose row is not falls back to F16, as convert_hf_to_gguf.py does. In a Q4_0 file the token embedding and an
    untied output head are ``embedding_type`` (``config.EMBEDDING_TYPES``); other files store them as the rest.
    """
    if out_type not in OUT_TYPES:
        raise ValueError(f"Unknown GGUF type {out_type!r}: expected one of {', '.join(OUT_TYPES)}.")
    embedding_type = resolve_embedding_type(embedding_type)
    if len(shape) < 2 or out_type == "F32":
        return GGMLQuantizationType.F32
    if out_type == "F16":
        return GGMLQuantizationType.F16
    if shape[-1] % QK != 0:
        return GGMLQuantizationType.F16
    if out_type == "Q8_0":
        return GGMLQuantizationType.Q8_0
    if hf_name.endswith(VOCAB_TENSOR_SUFFIXES):
        return GGMLQuantizationType[embedding_type]
    return GGMLQuantizationType.Q4_0


# --------------------------------------------------------------------------------------------------------------------
# Bit-exact block quantizers (no autograd)


def _blocks(w: Tensor) -> Tensor:
    if w.shape[-1] % QK != 0:
        raise ValueError(f"Row length {w.shape[-1]} is not a multiple of the block size {QK}.")
    return w.detach().to(torch.float32).reshape(-1, QK)  # (n_blocks, 32)


def q4_0_quantize_blocks(w: Tensor, clip: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Q4_0 blocks of ``w`` as ggml computes them: ``(d, q)``, d fp32 ``(n_blocks, 1)`` before its fp16 rounding,
    q uint8 ``(n_blocks, 32)`` in 0..15.

    ``clip`` (``(n_blocks,)`` or ``(n_blocks, 1)``, values ≤ 1) scales each block's d after ``max / -8``; with it the
    result is what a clipping search chose, which plain ggml quantization cannot reproduce (export writes these blocks).
    """
    blocks = _blocks(w)  # (n_blocks, 32)
    imax = blocks.abs().argmax(dim=-1, keepdim=True)  # torch and numpy both return the first index on ties
    vmax = torch.gather(blocks, -1, imax)  # (n_blocks, 1)
    d = vmax / -8
    if clip is not None:
        d = d * clip.to(device=d.device, dtype=torch.float32).reshape(-1, 1)
    inv_d = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
    # Two separate ops, each rounded to fp32, as in ggml's reference and gguf-py; a fused multiply-add (torch.compile,
    # addcmul) would round once and move some values across a .5 boundary.
    scaled = blocks * inv_d
    q = torch.trunc(scaled + 8.5).clamp_(0, 15).to(torch.uint8)
    return d, q


def q4_0_dequantize_blocks(d: Tensor, q: Tensor) -> Tensor:
    """``(q - 8) * fp16(d)`` in fp32, ``(n_blocks, 32)``; the product is exact (11-bit mantissa × 4-bit integer)."""
    return d.to(torch.float16).to(torch.float32) * (q.to(torch.float32) - 8)


def q8_0_quantize_blocks(w: Tensor) -> tuple[Tensor, Tensor]:
    """Q8_0 blocks of ``w`` as ggml computes them: ``(d, q)``, d fp32 ``(n_blocks, 1)``, q int8 ``(n_blocks, 32)``."""
    # ggml's reference quantizer, the one gguf-py reproduces: the "reference" rule of the activation rounding below.
    scaled, d = q8_0_activation_terms(_blocks(w), "reference")
    return d, roundf(scaled).to(torch.int8)


def roundf(x: Tensor) -> Tensor:
    """C's ``roundf`` (half away from zero) exactly as gguf-py's ``np_roundf`` writes it: no ``x + 0.5`` rounding."""
    a = x.abs()
    floored = torch.floor(a)
    return torch.sign(x) * (floored + torch.floor(2 * (a - floored)))


def q8_0_dequantize_blocks(d: Tensor, q: Tensor) -> Tensor:
    return d.to(torch.float16).to(torch.float32) * q.to(torch.float32)


def pack_q4_0(d: Tensor, q: Tensor) -> np.ndarray:
    """Q4_0 bytes ``(n_blocks, 18)``: fp16 d, then byte j = q[j] | q[j + 16] << 4 (ggml's ``block_q4_0``)."""
    d16 = d.detach().cpu().to(torch.float16).numpy().view(np.uint8).reshape(-1, 2)  # (n_blocks, 2)
    qn = q.detach().cpu().numpy().reshape(-1, 2, QK // 2)  # (n_blocks, 2, 16)
    qs = qn[:, 0, :] | (qn[:, 1, :] << np.uint8(4))  # (n_blocks, 16)
    return np.concatenate([d16, qs], axis=-1)


# --------------------------------------------------------------------------------------------------------------------
# Fake quantization with straight-through gradients


class _StraightThrough(torch.autograd.Function):
    """Forward returns the quantized values exactly; backward passes the gradient where ``in_range`` holds.

    (``w + (fq - w).detach()`` would not do: ``w + (fq - w)`` is not always ``fq`` in floating point.)
    """

    @staticmethod
    def forward(ctx, w: Tensor, fq: Tensor, in_range: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(in_range if in_range is not None else torch.empty(0))
        ctx.has_mask = in_range is not None
        return fq

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        (in_range,) = ctx.saved_tensors
        if ctx.has_mask:
            grad = grad * in_range.to(grad.dtype)
        return grad, None, None


def quantized_values(
    w: Tensor, qtype: GGMLQuantizationType, clip: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """``w`` as a GGUF tensor of ``qtype`` holds it (same shape and dtype; F32: ``w`` itself), and where the
    straight-through gradient passes: ``None`` (everywhere) or a bool mask of ``w``'s shape. No autograd.

    Q4_0: blocks of 32 along the last dim; with ``clip``, weights a factor < 1 cuts off (``|x| > 8·|d|``) get no
    gradient. Q8_0 scales by the absmax and F16 only rounds: nothing clips.
    """
    if qtype == GGMLQuantizationType.Q4_0:
        d, q = q4_0_quantize_blocks(w, clip)
        fq = q4_0_dequantize_blocks(d, q).reshape(w.shape).to(w.dtype)
        if clip is None:
            return fq, None
        blocks = w.detach().to(torch.float32).reshape(-1, QK)  # (n_blocks, 32)
        return fq, (blocks.abs() <= 8 * d.abs()).reshape(w.shape)
    if qtype == GGMLQuantizationType.Q8_0:
        d, q = q8_0_quantize_blocks(w)
        return q8_0_dequantize_blocks(d, q).reshape(w.shape).to(w.dtype), None
    if qtype == GGMLQuantizationType.F16:
        return w.detach().to(torch.float16).to(w.dtype), None
    if qtype == GGMLQuantizationType.F32:
        return w.detach(), None
    raise ValueError(f"No fake quantization for {qtype.name}.")


def fake_quant(w: Tensor, qtype: GGMLQuantizationType, clip: Tensor | None = None) -> Tensor:
    """``w`` as a GGUF tensor of ``qtype`` holds it, with the straight-through gradient of :func:`quantized_values`
    (F32: ``w`` unchanged)."""
    if qtype == GGMLQuantizationType.F32:
        return w
    return _StraightThrough.apply(w, *quantized_values(w, qtype, clip))


# --------------------------------------------------------------------------------------------------------------------
# Clipping search


def search_clip(w: Tensor, candidates: tuple[float, ...] = CLIP_CANDIDATES) -> Tensor:
    """Per block of 32, the factor on d (from ``candidates``) that minimizes the block's squared error; ``(n_blocks,)``.

    Candidates are tried largest first and a later one must be strictly better, so a tie keeps the larger factor.
    """
    blocks = _blocks(w)  # (n_blocks, 32)
    n_blocks = blocks.shape[0]
    best_err = torch.full((n_blocks,), float("inf"), device=blocks.device)
    best = torch.ones(n_blocks, device=blocks.device)
    for factor in candidates:
        clip = torch.full((n_blocks,), factor, device=blocks.device)
        d, q = q4_0_quantize_blocks(blocks, clip)
        err = (q4_0_dequantize_blocks(d, q) - blocks).square().sum(dim=-1)  # (n_blocks,)
        better = err < best_err
        best_err = torch.where(better, err, best_err)
        best = torch.where(better, clip, best)
    return best


# --------------------------------------------------------------------------------------------------------------------
# Model-level QAT


class FakeQuantize(nn.Module):
    """What a module's weight reads as under QAT: the GGUF's stored weight of ``qtype``.

    ``clip`` (Q4_0 with clipping search only) holds each block's factor on d, ``(n_blocks,)``. Outside
    :meth:`QatState.held` every read of the weight quantizes it; inside, a read returns what :meth:`hold` quantized on
    entering, so a step's forward runs no quantization of its own (nor, under torch.compile, a graph break).
    """

    def __init__(self, qtype: GGMLQuantizationType, clip: Tensor | None = None):
        super().__init__()
        self.qtype = qtype
        self.register_buffer("clip", clip, persistent=True)
        # Plain attributes, not buffers: DDP broadcasts buffers every forward, and these are as large as the weight.
        # Allocated once and rewritten in place, so a compiled layer sees the same tensors every step.
        self.holding = False
        self.held: Tensor | None = None  # the weight as the GGUF stores it
        self.held_in_range: Tensor | None = None  # where its straight-through gradient passes (None: everywhere)

    def forward(self, w: Tensor) -> Tensor:
        if self.holding:
            return _StraightThrough.apply(w, self.held, self.held_in_range)
        return self._quantize(w)

    # Eager under torch.compile too (distill's compiled layers): a fused multiply-add would move values across a
    # rounding boundary (q4_0_quantize_blocks). A compiled layer runs around it, in pieces; QatState.held avoids that.
    @torch.compiler.disable
    def _quantize(self, w: Tensor) -> Tensor:
        return fake_quant(w, self.qtype, self.clip)

    @torch.no_grad()
    def hold(self, w: Tensor) -> None:
        """Quantize ``w`` now (eagerly, exactly) for the reads until :meth:`release`."""
        fq, in_range = quantized_values(w, self.qtype, self.clip)
        if self.held is None or self.held.shape != fq.shape or self.held.device != fq.device:
            self.held, self.held_in_range = fq, in_range
        else:
            self.held.copy_(fq)
            if in_range is not None and self.held_in_range is not None:
                self.held_in_range.copy_(in_range)
            else:
                self.held_in_range = in_range
        self.holding = True

    def release(self) -> None:
        self.holding = False


# A module under QAT gets a subclass of its class whose ``weight`` reads through its FakeQuantize; the trainable
# latent weight stays the module's registered Parameter under its own name (state_dict, the optimizer, DDP see it).
# One subclass per class, shared by every module of it: torch's parametrize makes a class per module, and dynamo
# guards a compiled layer on its submodules' classes, so each decoder layer compiled a graph of its own (past
# dynamo's recompile limit, the layers then ran eager).
_QUANTIZER_ATTRIBUTE = "_specdraft_quantizer"
_QUANTIZED_CLASSES: dict[type, type] = {}


def _read_quantized(module: nn.Module) -> Tensor:
    return getattr(module, _QUANTIZER_ATTRIBUTE)(module._parameters["weight"])


def _quantized_class(base: type) -> type:
    if base not in _QUANTIZED_CLASSES:
        # No setter: nn.Module.__setattr__ handles ``module.weight = Parameter`` (a new latent weight) itself.
        _QUANTIZED_CLASSES[base] = type(f"Quantized{base.__name__}", (base,), {"weight": property(_read_quantized)})
    return _QUANTIZED_CLASSES[base]


@contextlib.contextmanager
def held_weights(model: nn.Module) -> Iterator[None]:
    """Within the block every weight of ``model`` under QAT (:func:`prepare_qat`) is quantized once, on entering,
    eagerly and exactly, and every read returns those values; gradients reach the latent weights as without.

    Outside it each read quantizes (a tied embedding twice, a recomputed layer once more), and under torch.compile
    each read breaks the compiled layer into pieces around the eager quantization: inside, a compiled layer under
    QAT is one graph, as in plain distillation. Training runs each step (forward and backward) inside it; a check
    that runs many forwards on the same weights can too. Costs one weight-sized copy (and, with clipping, a mask)
    kept between blocks. Weights changed inside the block (an optimizer step) are not seen by reads inside it.
    """
    quantizers: dict[int, tuple[FakeQuantize, Tensor]] = {}
    for module in model.modules():
        quantizer = getattr(module, _QUANTIZER_ATTRIBUTE, None)
        if quantizer is not None:  # tied modules: one quantizer, one latent weight
            quantizers[id(quantizer)] = (quantizer, module._parameters["weight"])
    for quantizer, latent in quantizers.values():
        quantizer.hold(latent)
    try:
        yield
    finally:
        for quantizer, _ in quantizers.values():
            quantizer.release()


@dataclass
class QatTarget:
    """One weight under QAT: its checkpoint name, the modules sharing it (two when embeddings are tied), its type."""

    hf_name: str
    modules: list[nn.Module]
    qtype: GGMLQuantizationType
    quantizer: FakeQuantize


@dataclass
class QatState:
    """What :func:`prepare_qat` did to a model; export reads its :meth:`save` file to write the learned blocks."""

    model: nn.Module
    out_type: str
    clip_search: bool
    embedding_type: str = DEFAULT_EMBEDDING_TYPE  # the vocabulary tensors' type in a Q4_0 file (config.EMBEDDING_TYPES)
    targets: dict[str, QatTarget] = field(default_factory=dict)
    _attached: bool = True

    def latent_weight(self, hf_name: str) -> Tensor:
        """The trainable fp32 weight behind ``hf_name`` (what the checkpoint stores)."""
        return self.targets[hf_name].modules[0]._parameters["weight"]

    def quantized_weight(self, hf_name: str) -> Tensor:
        """The weight as the GGUF will hold it, dequantized to fp32."""
        target = self.targets[hf_name]
        with torch.no_grad():
            return quantized_values(self.latent_weight(hf_name), target.qtype, target.quantizer.clip)[0]

    def held(self) -> contextlib.AbstractContextManager[None]:
        """One training step (forward and backward) inside the block: every weight quantized once, on entering
        (:func:`held_weights`)."""
        return held_weights(self.model)

    def refresh_clip(self) -> None:
        """Re-run the clipping search on the current weights (call now and then while training with clip_search)."""
        if not self.clip_search:
            return
        with torch.no_grad():
            for name, target in self.targets.items():
                if target.qtype == GGMLQuantizationType.Q4_0:
                    target.quantizer.clip.copy_(search_clip(self.latent_weight(name)))

    def _detach(self) -> None:
        for target in self.targets.values():
            for module in target.modules:
                module.__class__ = module.__class__.__bases__[0]
                delattr(module, _QUANTIZER_ATTRIBUTE)
        del self.model._modules[QUANTIZERS_MODULE]
        self._attached = False

    def _attach(self) -> None:
        for target in self.targets.values():
            for module in target.modules:
                # Tied modules share one Parameter and one quantizer: one quantized tensor, as in the GGUF.
                module.__class__ = _quantized_class(type(module))
                object.__setattr__(module, _QUANTIZER_ATTRIBUTE, target.quantizer)  # not a submodule of its module
        # The quantizers' clip factors go into the model's state_dict (a resumed run keeps them), under one name that
        # unwrapped() removes, so a saved checkpoint has the HF names alone.
        quantizers = {name.replace(".", "/"): target.quantizer for name, target in self.targets.items()}
        self.model.add_module(QUANTIZERS_MODULE, nn.ModuleDict(quantizers))
        self._attached = True

    def remove(self) -> None:
        """End QAT: weights become plain latent fp32 Parameters again (the same objects the optimizer holds)."""
        if self._attached:
            self._detach()

    @contextlib.contextmanager
    def unwrapped(self) -> Iterator[nn.Module]:
        """Within the block the model has its plain latent weights under their HF names, e.g. for save_pretrained."""
        was_attached = self._attached
        if was_attached:
            self._detach()
        try:
            yield self.model
        finally:
            if was_attached:
                self._attach()

    def fingerprints(self) -> dict[str, str]:
        """sha256 of each target's quantized fp32 values: export recomputes them and refuses a mismatch."""
        return {name: _fingerprint(self.quantized_weight(name)) for name in self.targets}

    def save(self, path: str | Path) -> Path:
        """Write the per-block clip factors and fingerprints (safetensors, atomically) for ``export --qat-state``."""
        from safetensors.torch import save_file

        from ..formats.artifacts import AtomicFile

        tensors = {
            f"{name}.clip": target.quantizer.clip.detach().to("cpu", torch.float32).contiguous()
            for name, target in self.targets.items()
            if target.quantizer.clip is not None
        }
        metadata = {
            "format": QAT_STATE_FORMAT,
            "out_type": self.out_type,
            "embedding_type": self.embedding_type,
            "clip_search": json.dumps(self.clip_search),
            "types": json.dumps({name: t.qtype.name for name, t in self.targets.items()}),
            "fingerprints": json.dumps(self.fingerprints()),
        }
        path = Path(path)
        with AtomicFile(path) as tmp:
            save_file(tensors, str(tmp), metadata=metadata)
        return path


def _fingerprint(values: Tensor) -> str:
    return hashlib.sha256(values.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()).hexdigest()


def _weight_owners(model: nn.Module) -> dict[str, list[nn.Module]]:
    """Checkpoint name of each weight → the modules holding it (tied weights: every holder, named after the first)."""
    owners: dict[int, tuple[str, list[nn.Module]]] = {}
    for module_name, module in model.named_modules():
        weight = module._parameters.get("weight") if hasattr(module, "_parameters") else None
        if weight is None:
            continue
        name = f"{module_name}.weight"
        if id(weight) in owners:
            owners[id(weight)][1].append(module)
        else:
            owners[id(weight)] = (name, [module])
    return {name: modules for name, modules in owners.values()}


def prepare_qat(
    model: nn.Module, clip_search: bool = False, out_type: str = "Q4_0", embedding_type: str = DEFAULT_EMBEDDING_TYPE
) -> QatState:
    """Make ``model``'s forward use, for every weight, exactly what a GGUF of ``out_type`` stores.

    Q4_0 file: decoder projections (q/k/v/o, gate/up/down) Q4_0; token embedding (and an untied output head)
    ``embedding_type``, Q8_0 or Q4_0 (tied: one quantized tensor serves the lookup and the head, as in the GGUF);
    norms stay F32 and are not touched. ``clip_search`` picks, per Q4_0 block, a factor ≤ 1 on d minimizing the
    block's squared error (refresh it with :meth:`QatState.refresh_clip`); export then writes those blocks.
    """
    embedding_type = resolve_embedding_type(embedding_type)
    state = QatState(model=model, out_type=out_type, clip_search=clip_search, embedding_type=embedding_type)
    for name, modules in _weight_owners(model).items():
        weight = modules[0].weight
        qtype = gguf_storage_type(name, tuple(weight.shape), out_type, embedding_type)
        if qtype == GGMLQuantizationType.F32:
            continue
        clip = None
        if qtype == GGMLQuantizationType.Q4_0:
            clip = search_clip(weight) if clip_search else torch.ones(weight.numel() // QK, device=weight.device)
        state.targets[name] = QatTarget(name, modules, qtype, FakeQuantize(qtype, clip))
    state._attach()
    return state


# The two rules by which ggml rounds values to Q8_0: its SIMD quantizer's and its reference quantizer's (the one
# gguf-py reproduces, the weights' rule). ggml_activations.py says which CPU build rounds a matmul's input by which.
ACTIVATION_RULES = ("simd", "reference")


def q8_0_activation_terms(x: Tensor, rule: str = "simd") -> tuple[Tensor, Tensor]:
    """What ggml rounds when it quantizes ``x``'s rows to Q8_0: ``(scaled, d)``, ``scaled = x * id`` per element
    ``(n_blocks, 32)`` before rounding and the fp32 scale ``d = amax / 127`` ``(n_blocks, 1)`` before its fp16
    rounding."""
    if rule not in ACTIVATION_RULES:
        raise ValueError(f"Unknown activation rounding rule {rule!r}: expected one of {', '.join(ACTIVATION_RULES)}.")
    blocks = x.to(torch.float32).reshape(-1, QK)  # (n_blocks, 32)
    amax = blocks.abs().amax(dim=-1, keepdim=True)  # (n_blocks, 1)
    # A tensor divisor, not the Python scalar 127: on CUDA, PyTorch divides by a CPU scalar as a multiplication by its
    # reciprocal, which rounds differently from ggml's true division. The first H200 lab's QAT embedding (the only
    # Q8_0 tensor) failed export's fingerprint check that way while every Q4_0 tensor (d = max / −8, exact) matched.
    full_127 = torch.full_like(amax, 127.0)
    d = amax / full_127
    if rule == "simd":
        inv_d = torch.where(amax == 0, torch.zeros_like(amax), full_127 / amax)
    else:
        inv_d = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
    return blocks * inv_d, d


@dataclass
class LoadedQatState:
    """A saved QAT state as export reads it."""

    out_type: str
    types: dict[str, str]
    clips: dict[str, Tensor]
    fingerprints: dict[str, str]
    embedding_type: str = DEFAULT_EMBEDDING_TYPE


def load_qat_state(path: str | Path) -> LoadedQatState:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
        if metadata.get("format") != QAT_STATE_FORMAT:
            raise ValueError(
                f"{path}: not a QAT state file (format {metadata.get('format')!r}, expected {QAT_STATE_FORMAT!r})."
            )
        clips = {key.removesuffix(".clip"): f.get_tensor(key) for key in f.keys()}
    return LoadedQatState(
        out_type=metadata["out_type"],
        # states saved before the embedding type was a choice had Q8_0 vocabulary tensors
        embedding_type=metadata.get("embedding_type", DEFAULT_EMBEDDING_TYPE),
        types=json.loads(metadata["types"]),
        clips=clips,
        fingerprints=json.loads(metadata["fingerprints"]),
    )


def load_qat_state_into(qat: QatState, path: str | Path) -> None:
    """Put a saved QAT state's per-block clip factors into a freshly prepared model, then check its fingerprints."""
    saved = load_qat_state(path)
    with torch.no_grad():
        for name, clip in saved.clips.items():
            qat.targets[name].quantizer.clip.copy_(clip)
    if qat.fingerprints() != saved.fingerprints:
        raise ValueError(f"{path}: the model's quantized weights do not match the QAT state's fingerprints")


def verify_fingerprint(name: str, values: Tensor, expected: str) -> None:
    actual = _fingerprint(values)
    if actual != expected:
        raise ValueError(
            f"{name}: quantized weights differ from the ones training saved in its QAT state "
            f"(sha256 {actual[:12]}…, expected {expected[:12]}…): checkpoint and QAT state from different steps, a "
            "checkpoint saved in another dtype than fp32, or training's device computed other blocks than the CPU."
        )
