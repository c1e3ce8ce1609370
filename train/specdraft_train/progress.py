"""Progress of a long step, readable where it lands: a redrawn bar on a terminal, and in a piped log (a CI job's, a GPU
job's captured stderr, `run`'s own log) one line each time another few percent are done — a tqdm bar written to a pipe
puts every redraw into the log as a chunk of its own, hundreds for one stage."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

LOG_STEP_PERCENT = 5  # a log line each time this much more of the total is done


class LogProgress:
    """The part of tqdm's interface the pipeline uses (``update``, ``set_postfix``, ``close``, ``n``), as log lines:
    ``desc: 35% (350/1,000 step) 12 s`` at every LOG_STEP_PERCENT, and once at the end."""

    def __init__(self, total: int | None, desc: str, unit: str, initial: int = 0, file: TextIO | None = None):
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.file = file or sys.stderr
        self.started = time.monotonic()
        self.postfix = ""
        self.reported = -1  # the last multiple of LOG_STEP_PERCENT written
        self.written = None  # n when the last line was written

    def update(self, n: int = 1) -> None:
        self.n += n
        if not self.total:
            return
        step = int(100 * self.n / self.total) // LOG_STEP_PERCENT
        if step > self.reported:
            self.reported = step
            self.line()

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **kwargs: Any) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{key}={value}" for key, value in items.items())

    def write(self, message: str, file: TextIO | None = None) -> None:
        """A message of its own (tqdm.write's form)."""
        print(message, file=file or self.file, flush=True)

    def refresh(self) -> None:
        pass

    def line(self) -> None:
        done = f"{self.n:,}" if not self.total else f"{100 * self.n / self.total:.0f}% ({self.n:,}/{self.total:,}"
        done += f" {self.unit})" if self.total else f" {self.unit}"
        tail = f", {self.postfix}" if self.postfix else ""
        self.written = self.n
        print(f"{self.desc}: {done} {time.monotonic() - self.started:.0f} s{tail}", file=self.file, flush=True)

    def close(self) -> None:
        """The final count, unless the last line already said it."""
        if self.written != self.n:
            self.line()

    def __enter__(self) -> LogProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(
    total: int | None, desc: str, unit: str = "it", initial: int = 0, enabled: bool = True, **tqdm_args: Any
) -> Any:
    """tqdm on a terminal (redrawn at most every second), LogProgress when stderr is not one, nothing when disabled."""
    from tqdm.auto import tqdm

    if not enabled:
        return tqdm(total=total, initial=initial, disable=True)
    if not sys.stderr.isatty():
        return LogProgress(total, desc, unit, initial)
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit=unit,
        dynamic_ncols=True,
        mininterval=1.0,
        file=sys.stderr,
        **tqdm_args,
    )
