"""The specdraft CLI as the orchestrators call it: which command line runs it (the built one in this checkout, or
``SPECDRAFT``), the environment its steps get, a step whose output is its result, and a served drafter's health."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def specdraft_command() -> list[str]:
    """How to run the specdraft CLI: ``SPECDRAFT`` (a command line) if set, else the built one in this checkout."""
    if os.environ.get("SPECDRAFT"):
        return shlex.split(os.environ["SPECDRAFT"])
    built = REPO / "dist" / "cli" / "main.js"
    if not built.is_file():
        raise ValueError(f"{built}: the specdraft CLI is not built; run `npm ci` in {REPO} first")
    return ["node", str(built)]


def cli_env() -> dict[str, str]:
    """The environment of a specdraft CLI step: ``SPECDRAFT`` set to this run's CLI, so that a packed folder's
    serve.sh, which selfcheck starts, runs the same specdraft wherever the folder lies."""
    return {**os.environ, "SPECDRAFT": shlex.join(specdraft_command())}


def node_step(command: list[str], out: Path) -> None:
    """A specdraft CLI step; a failure removes what it half wrote and names the command."""
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=cli_env())
    if result.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise ValueError(f"{shlex.join(command)} exited {result.returncode}: {result.stderr.strip()[-2000:]}")


def write_output(command: list[str], out: Path) -> None:
    """A specdraft CLI step whose standard output is the result, kept in ``out`` once it succeeded."""
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=cli_env())
    if result.returncode != 0:
        raise ValueError(f"{shlex.join(command)} exited {result.returncode}: {(result.stdout + result.stderr)[-2000:]}")
    out.write_text(result.stdout)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_healthy(url: str, server: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until ``url`` answers 200; a server that exits or stays unhealthy past ``timeout_s`` is an error."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise ValueError(f"specdraft serve exited ({server.returncode}) before {url} answered 200")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise ValueError(f"{url}: no 200 within {timeout_s:.0f} s")
