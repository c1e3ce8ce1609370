"""Reading GGUF files: gguf-py's reader, over a plain view of its memory map.

gguf-py's ``GGUFReader`` hands out a numpy view for every part of every metadata value (a string is two), and its
memory map is ``np.memmap``, a subclass that runs Python code for each view it makes (``__array_finalize__``,
``__getitem__``). A 152k-token vocabulary (Qwen2.5's, Qwen3's) is ~600k views: most of the reader's time. Over a plain
``ndarray`` view of the same map the reader builds the same fields and tensors about 3× faster; the map stays open as
the view's base, read-only.

    reader = GgufReader(path)          # reader.path: the file; reader.fields, reader.tensors as gguf-py's
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gguf
import numpy as np


class GgufReader(gguf.GGUFReader):
    """gguf-py's read-only reader of ``path`` (see the module's docstring), which also keeps the file's ``path``."""

    def __init__(self, path: os.PathLike[str] | str) -> None:
        self.path = Path(path)
        super().__init__(path, "r")

    @property  # type: ignore[override]
    def data(self) -> np.ndarray[Any, Any]:
        return self._data

    @data.setter
    def data(self, value: np.ndarray[Any, Any]) -> None:
        # gguf-py assigns its np.memmap here before it parses anything
        self._data = value.view(np.ndarray) if isinstance(value, np.memmap) else value
