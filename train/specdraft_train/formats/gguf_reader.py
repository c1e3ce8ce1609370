"""Reading GGUF files: gguf-py's reader, over a plain view of its memory map.

gguf-py's ``GGUFReader`` hands out a numpy view for every part of every metadata value (a string is two), and its
memory map is ``np.memmap``, a subclass that runs Python code for each view it makes (``__array_finalize__``,
``__getitem__``). A 152k-token vocabulary (Qwen2.5's, Qwen3's) is ~600k views: most of the reader's time. Over a plain
``ndarray`` view of the same map the reader builds the same fields and tensors about 3× faster; the map stays open as
the view's base, read-only.

    reader = GgufReader(path)          # reader.path: the file; reader.fields, reader.tensors as gguf-py's
    with shared_reader(reader): ...    # transformers' GGUF loader reads the file through `reader`
    with shared_reader(WeightsView(reader)): ...    # and for weights alone, without the tokenizer's fields
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
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


class WeightsView:
    """``reader`` as transformers' weight loading reads it: every field but the tokenizer's. The loader parses every
    field it is given, value by value, before it reads a tensor; a 152k-token vocabulary is ~450k values it would
    parse again only to drop them (the config it also builds needs none of them once the model exists)."""

    def __init__(self, reader: GgufReader) -> None:
        self._reader = reader
        self.fields = {name: f for name, f in reader.fields.items() if not name.startswith("tokenizer.")}

    def __getattr__(self, name: str) -> Any:  # path, tensors, …: the reader's own
        return getattr(self._reader, name)


@contextlib.contextmanager
def quiet(logger: logging.Logger) -> Iterator[None]:
    """``logger`` says only errors within the block."""
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def shared_reader(reader: GgufReader | WeightsView) -> Iterator[None]:
    """Within the block, transformers' GGUF loader reads ``reader``'s file through ``reader``. It opens the file anew
    on every call with gguf-py's own reader, which parses a 152k-token vocabulary's metadata in seconds each time; a
    conversion calls it twice."""
    original, path = gguf.GGUFReader, reader.path.resolve()

    def opened(source: Any, *args: Any, **kwargs: Any) -> gguf.GGUFReader:
        same = not args and not kwargs and Path(source).resolve() == path
        return reader if same else original(source, *args, **kwargs)

    gguf.GGUFReader = opened  # type: ignore[misc,assignment]  # transformers imports it from gguf at each call
    try:
        yield
    finally:
        gguf.GGUFReader = original  # type: ignore[misc]
