"""How the orchestrators (`lab`, `run`, `ablate`'s variants) run their stages in one folder: each stage once, resumable,
and again only when what it was made from changed.

A stage is skipped when its outputs are complete (its own check: the manifest's hashes) and its **stamp** — the
settings it runs with and the stamps or hashes of its inputs — is the one recorded when it finished. A changed stamp
says which input changed, removes the stage's folder and runs it again; since each stage's stamp holds its inputs'
stamps, everything downstream runs again too, and says so. A stage cut off (SIGINT, SIGKILL, a crash) left no
recorded stamp: the next run runs it again, and the stages that train resume from their own ``resume/`` state.

The state file (``run_state.json`` by default) records each stage's stamp and wall time; only rank 0 writes it, and
under torchrun every rank waits for the stage's end before the next one looks at its outputs.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..formats.artifacts import add_stage_seconds, atomic_write_json
from ..training.loop import DistributedContext

STATE_FILE = "run_state.json"


class StopAfter(Exception):
    """Raised once the stage a runner was asked to stop after is done (``until``): the rest waits for the next run."""


def stamp_key(stamp: dict[str, Any]) -> str:
    """The stamp as one hash (what later stages include as this stage's input)."""
    return hashlib.sha256(json.dumps(stamp, sort_keys=True, default=str).encode()).hexdigest()[:16]


def changed_keys(recorded: dict[str, Any], stamp: dict[str, Any]) -> list[str]:
    """The stamp's entries that differ from the recorded ones (added or removed ones included)."""
    return sorted(key for key in set(recorded) | set(stamp) if recorded.get(key) != stamp.get(key))


class Runner:
    """A folder's stages: ``stage(...)`` runs one unless it is complete and stamped the same; ``data`` is the state
    file's content (``seconds_key``, by default ``stage_seconds``: each stage's wall time; ``stamps``: each finished
    stage's stamp)."""

    def __init__(
        self,
        out: Path,
        name: str,
        ctx: DistributedContext | None = None,
        state_file: str = STATE_FILE,
        log: Callable[[str], None] | None = None,
        until: str | None = None,
        seconds_key: str = "stage_seconds",
    ):
        self.out, self.name, self.until, self.seconds_key = out, name, until, seconds_key
        self.ctx = ctx or DistributedContext(rank=0, world_size=1, device=torch.device("cpu"))
        self.path = out / state_file
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.data.setdefault(seconds_key, {})
        self.data.setdefault("stamps", {})

    def save(self) -> None:
        if self.ctx.is_main:
            atomic_write_json(self.path, self.data)

    def record(self, stage: str, seconds: float, finished: bool) -> None:
        """Add a run's seconds to the stage's earlier interrupted runs; the total counts once the stage finishes."""
        add_stage_seconds(self.data, stage, seconds, finished, self.seconds_key)
        self.save()

    def stage(
        self,
        name: str,
        directory: Path,
        fn: Callable[[], Any],
        complete: Callable[[], bool],
        stamp: dict[str, Any] | None = None,
        every_rank: bool = False,
    ) -> str:
        """Run stage ``name`` into ``directory`` unless it is complete with the same ``stamp``; returns the stamp's
        key (for the stages that take this one's outputs). ``fn`` runs on every rank (``every_rank``: the stages that
        shard their work) or on rank 0 alone."""
        ctx, stamp = self.ctx, stamp or {}
        if stamp and self.path.resolve().is_relative_to(directory.resolve()):
            # a changed stamp removes the stage's folder: never the one that holds every stage (and the state)
            raise ValueError(f"{self.name}: stage {name}'s folder {directory} holds {self.path.name}: give it its own")
        key = stamp_key(stamp)
        recorded = self.data["stamps"].get(name)
        if ctx.broadcast_object(self.decide(name, directory, complete, stamp, recorded) if ctx.is_main else None):
            self.stop_if_until(name)
            return key
        start = time.time()
        try:
            if every_rank or ctx.is_main:
                fn()
            ctx.barrier()
        except BaseException:  # e.g. SIGINT: keep the time spent so the resumed run's total includes it
            self.record(name, time.time() - start, finished=False)
            raise
        if stamp:
            self.data["stamps"][name] = stamp
        self.record(name, time.time() - start, finished=True)
        if ctx.is_main:
            self.log(f"{self.name}: {name} done in {time.time() - start:.1f} s")
        self.stop_if_until(name)
        return key

    def stop_if_until(self, name: str) -> None:
        if name == self.until:
            raise StopAfter(name)

    def decide(
        self,
        name: str,
        directory: Path,
        complete: Callable[[], bool],
        stamp: dict[str, Any],
        recorded: dict[str, Any] | None,
    ) -> bool:
        """Rank 0: whether the stage is done (and says so); otherwise says why it runs, clearing a stale folder."""
        done = complete()
        if done and (not stamp or recorded == stamp):
            self.log(f"{self.name}: {name}: complete in {directory}, skipped")
            return True
        if done and recorded is not None:
            changed = ", ".join(changed_keys(recorded, stamp))
            self.log(f"{self.name}: {name}: {changed} changed since it ran; running it again")
            shutil.rmtree(directory, ignore_errors=True)
            self.data["stamps"].pop(name, None)
            self.save()
        else:
            self.log(f"{self.name}: {name} …")
        return False
