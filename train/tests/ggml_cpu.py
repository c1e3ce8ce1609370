"""llama.cpp's CPU backend variants as the tests meet them: node-llama-cpp's prebuilt x86-64 binaries carry one
``libggml-cpu-<variant>.so`` per instruction-set level (x64, sse42, sandybridge, haswell, skylakex, icelake, zen4,
sapphirerapids, …) and ggml loads the best-scoring one the CPU can run. Tests use this module to list the variants
this CPU runs, to call a variant's own functions (ctypes), and to run node-llama-cpp pinned to one variant through
``scripts/ggml_cpu_variant.c`` (an LD_PRELOAD shim, also behind ``scripts/with-cpu-variant.sh``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GGML_BINS = REPO / "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
SHIM_SOURCE = REPO / "scripts/ggml_cpu_variant.c"
VARIANT_ENV = "SPECDRAFT_GGML_CPU_VARIANT"  # read by the shim


def require_bins() -> Path:
    if not (GGML_BINS / "libggml-base.so").is_file():
        raise AssertionError(f"{GGML_BINS}: node-llama-cpp's linux-x64 binaries are missing; run `npm ci` first")
    return GGML_BINS


@functools.cache
def load_variant(variant: str) -> ctypes.CDLL:
    """A variant's library in this process (as ggml's own loader does when it scores them: safe on any CPU)."""
    return ctypes.CDLL(str(require_bins() / f"libggml-cpu-{variant}.so"))


@functools.cache
def variant_scores() -> dict[str, int]:
    """Every prebuilt variant → ggml's score for this CPU (0: the CPU lacks an instruction set the variant needs)."""
    scores = {}
    for path in sorted(require_bins().glob("libggml-cpu-*.so")):
        variant = path.name.removeprefix("libggml-cpu-").removesuffix(".so")
        score = load_variant(variant).ggml_backend_score
        score.restype = ctypes.c_int
        scores[variant] = score()
    return scores


def runnable_variants() -> list[str]:
    """The variants this CPU can run, best (the one ggml picks by itself) first. Under scripts/with-cpu-variant.sh
    (which pins a variant to stand in for a CPU of another kind) only that variant and those scored below it."""
    scores = variant_scores()
    ceiling = scores.get(os.environ.get(VARIANT_ENV, ""), max(scores.values(), default=0))
    return sorted((v for v, s in scores.items() if 0 < s <= ceiling), key=lambda v: -scores[v])


def variant_of(library_path: str) -> str:
    """``…/libggml-cpu-haswell.so`` → ``haswell``."""
    return Path(library_path).name.removeprefix("libggml-cpu-").removesuffix(".so")


def build_shim(out_dir: Path) -> Path:
    """Compile the variant-pinning shim (the C compiler is already a requirement of the native engine)."""
    shim = out_dir / "ggml_cpu_variant.so"
    subprocess.run(
        [os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM_SOURCE), "-ldl"],
        check=True,
        capture_output=True,
        text=True,
    )
    return shim


def pinned_env(shim: Path, variant: str) -> dict[str, str]:
    """Environment for a node-llama-cpp process whose CPU backend is ``variant`` and nothing else."""
    return {"LD_PRELOAD": str(shim), VARIANT_ENV: variant}
