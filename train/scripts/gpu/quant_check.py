"""GPU check: fake quantization on CUDA computes the very blocks the CPU does (training fake-quantizes on the GPU,
export quantizes on the CPU and refuses a fingerprint mismatch). Prints PASS or FAIL (exit 0 or 1); seconds.

From the repository root on the GPU machine (PYTHONPATH holding train/ and train/tests/):

    python3 train/scripts/gpu/quant_check.py
"""

from __future__ import annotations

import sys

import torch
from gguf import GGMLQuantizationType as T
from test_quant import hard_weights

from specdraft_train.training.quant import fake_quant, search_clip


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_quant_check: FAIL: no CUDA device", file=sys.stderr)
        return 1
    w = hard_weights(3)
    clip = search_clip(w)
    checks = {
        "clip search": torch.equal(search_clip(w.cuda()).cpu(), clip),
        "Q4_0": torch.equal(fake_quant(w.cuda(), T.Q4_0).cpu(), fake_quant(w, T.Q4_0)),
        "Q8_0": torch.equal(fake_quant(w.cuda(), T.Q8_0).cpu(), fake_quant(w, T.Q8_0)),
        "Q4_0 clipped": torch.equal(fake_quant(w.cuda(), T.Q4_0, clip.cuda()).cpu(), fake_quant(w, T.Q4_0, clip)),
    }
    for name, ok in checks.items():
        print(f"gpu_quant_check: {name}: {'bit-identical' if ok else 'DIFFERS'}")
    print("PASS" if all(checks.values()) else "FAIL")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
