"""Re-derive a QAT state's fingerprints for tensors whose blocks training's device computed differently from the CPU.

export refuses a GGUF whose quantized weights differ from the ones training fingerprinted. When training ran on a GPU
with a quantizer that rounded differently there (the first H200 lab: the Q8_0 embedding's scale, see quant.py), the
learned weights are still right but their stored blocks are the CPU's; this writes a copy of the QAT state whose
fingerprints for the named tensors are the CPU's, and prints how many values differ, so the report can say so.

    python scripts/gpu/refingerprint_qat.py CHECKPOINT_DIR OUT_STATE TENSOR [TENSOR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gguf import GGMLQuantizationType
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from specdraft_train.training.quant import QAT_STATE_FORMAT, _fingerprint, fake_quant


def main(checkpoint: Path, out_state: Path, names: list[str]) -> None:
    state_path = checkpoint / "qat_state.safetensors"
    with safe_open(str(state_path), framework="pt") as f:
        metadata = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    assert metadata["format"] == QAT_STATE_FORMAT
    weights = load_file(str(checkpoint / "model.safetensors"))
    types = json.loads(metadata["types"])
    fingerprints = json.loads(metadata["fingerprints"])
    for name in names:
        qtype = GGMLQuantizationType[types[name]]
        clip = tensors.get(f"{name}.clip")
        cpu = fake_quant(weights[name].float(), qtype, clip)
        print(f"{name} ({qtype.name}): fingerprint {fingerprints[name][:12]}… → {_fingerprint(cpu)[:12]}… (CPU blocks)")
        fingerprints[name] = _fingerprint(cpu)
    metadata["fingerprints"] = json.dumps(fingerprints)
    metadata["refingerprinted_on_cpu"] = json.dumps(names)
    save_file(tensors, str(out_state), metadata=metadata)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
