"""The target scoring text it did not write: one teacher-forced forward per sequence gives, at every position of a
continuation, the target's greedy token and its top-k log-probabilities (fp32 log_softmax of the fp32 logits, as
the reference engines store them). The `onpolicy` stage scores the drafter's own continuations with it:

    scored = score_continuations(target, prompts, continuations, device, top_k=20)
    scored[0].labels        # (L,) int: the target's argmax after P + D[:j]
    scored[0].topk_ids      # (L, K) int32; .topk_logprobs (L, K) float16

Sequences are packed into forwards of at most ``batch_tokens`` tokens (packing.py: positions restarting, attention
inside each sequence), and only continuation positions go through the head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..config import EvalConfig
from ..modeling.models import autocast_context, final_hidden_states, output_weight
from ..modeling.packing import layout, packed_attention_within, to_device
from ..modeling.tau import HEAD_CHUNK_ROWS, token_batches


@dataclass(frozen=True)
class Scored:
    """The target on one continuation D of a prompt P, position j conditioned on P + D[:j]."""

    labels: np.ndarray  # (L,) int64: the target's greedy token
    topk_ids: np.ndarray  # (L, K) int32
    topk_logprobs: np.ndarray  # (L, K) float16


@torch.no_grad()
def score_continuations(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[int]],
    device: torch.device,
    top_k: int,
    batch_tokens: int = EvalConfig.batch_tokens,
) -> list[Scored]:
    """The target's greedy token and top-k log-probs at every position of each continuation (module docstring)."""
    if len(prompts) != len(continuations):
        raise ValueError(f"{len(prompts)} prompts for {len(continuations)} continuations")
    if any(len(c) == 0 for c in continuations) or any(len(p) == 0 for p in prompts):
        raise ValueError("scoring needs a non-empty prompt and continuation in every row")
    was_training = model.training
    model.eval()
    # The last continuation token is never an input: nothing after it is scored.
    sequences = [list(p) + list(c)[:-1] for p, c in zip(prompts, continuations)]
    results: list[Scored | None] = [None] * len(sequences)
    with packed_attention_within(model), autocast_context(device):
        for batch in token_batches([len(s) for s in sequences], batch_tokens):
            inputs, starts = layout([sequences[i] for i in batch], packed=True)
            index = np.concatenate(
                [start + len(prompts[i]) - 1 + np.arange(len(continuations[i])) for start, i in zip(starts, batch)]
            )  # (N,): the prediction for D[j] sits at p − 1 + j
            hidden = final_hidden_states(model, to_device(inputs, device)).flatten(0, 1)  # (T, H)
            scored = hidden[torch.from_numpy(index).to(device)]  # (N, H)
            weight = output_weight(model)  # (V, H)
            labels, ids, logprobs = [], [], []
            for start in range(0, len(scored), HEAD_CHUNK_ROWS):
                logits = F.linear(scored[start : start + HEAD_CHUNK_ROWS], weight).float()  # (n, V)
                values, indices = torch.log_softmax(logits, dim=-1).topk(top_k, dim=-1)  # (n, K) each
                labels.append(logits.argmax(dim=-1).cpu())
                ids.append(indices.to(torch.int32).cpu())
                logprobs.append(values.cpu())
            lengths = [len(continuations[i]) for i in batch]
            pieces = zip(
                torch.cat(labels).split(lengths), torch.cat(ids).split(lengths), torch.cat(logprobs).split(lengths)
            )
            for i, (label, topk_id, topk_logprob) in zip(batch, pieces):
                results[i] = Scored(
                    label.numpy().astype(np.int64), topk_id.numpy(), topk_logprob.numpy().astype(np.float16)
                )
    model.train(was_training)
    return results  # type: ignore[return-value]
