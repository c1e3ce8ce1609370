"""The first N decoder layers of a GGUF as a model of its own: a drafter with the target's vocabulary for free (its
tensors copied as stored, the rest of the file as it was but the layer count), to exercise speculative decoding
before a trained drafter exists. Untrained for its new depth, so a poor drafter: acceptance well below 1.

    train/.venv/bin/python bench/models/truncate_gguf.py --model SmolLM2-135M-Instruct.Q4_1.gguf --layers 6 \\
        --out /tmp/smollm2-6-layers.gguf
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import gguf


def truncate(model: Path, layers: int, out: Path) -> int:
    """Writes ``out`` with the first ``layers`` blocks of ``model``; returns the tensors kept."""
    reader = gguf.GGUFReader(model)
    arch = reader.fields["general.architecture"].contents()
    count_key = f"{arch}.block_count"
    if layers < 1 or layers >= reader.fields[count_key].contents():
        raise ValueError(f"--layers {layers}: the model has {reader.fields[count_key].contents()} blocks")
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(out, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the writer's own header fields
        value = layers if name == count_key else field.contents()
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, value_type, sub_type=sub_type)
    kept = 0
    for tensor in reader.tensors:
        block = re.match(r"blk\.(\d+)\.", tensor.name)
        if block and int(block.group(1)) >= layers:
            continue
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
        kept += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return kept


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="GGUF to cut")
    ap.add_argument("--layers", type=int, required=True, help="decoder blocks to keep, from the first")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    try:
        kept = truncate(args.model, args.layers, args.out)
    except (ValueError, OSError) as error:
        print(f"truncate_gguf: {error}", file=sys.stderr)
        return 2
    print(f"truncate_gguf: {kept} tensors, {args.layers} blocks into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
