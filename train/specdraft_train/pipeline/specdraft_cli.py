"""The specdraft CLI as the orchestrators call it: which command line runs it (the built one in this checkout, or
``SPECDRAFT``), the environment its steps get, a step whose output is its result, a served drafter's health, and the
steps on an exported drafter: what speed-up to expect (`speedup`, checked by `generate`) and τ as served (`serve`
walked by `validate`)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

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


def cli_gpu(device: Any) -> str:
    """The specdraft CLI's --gpu for a run on ``device`` (a torch.device): the CPU where training ran on it, else
    wherever llama.cpp finds a GPU."""
    return "cpu" if device.type == "cpu" else "auto"


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
    out.parent.mkdir(parents=True, exist_ok=True)
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


def speedup_and_check(
    served_target: Path, drafter: Path, tau_by_k: dict[str, float], heldout: Path, out: Path, settings: dict[str, Any]
) -> None:
    """`specdraft speedup` on this machine (into ``out``: tau.json, projection.json, speedup.txt), the drafts timed
    along the ``heldout`` conversations with serve's prompt-lookup candidates and without; then `specdraft generate` at
    the best k, with the setting kept, on held-out prompts (generate.json, generate.txt). ``settings``: gpu, repeats,
    check_prompts, check_tokens."""
    cli, gpu = specdraft_command(), settings["gpu"]
    out.mkdir(parents=True, exist_ok=True)
    tau_file, projection = out / "tau.json", out / "projection.json"
    tau_file.write_text(json.dumps({"tau_by_k": tau_by_k}))
    ks = ",".join(str(k) for k in sorted(int(k) for k in tau_by_k))
    command = [*cli, "speedup", "--target", str(served_target), "--draft-model", str(drafter), "--tau", str(tau_file)]
    command += ["--k", ks, "--gpu", gpu, "--repeats", str(settings["repeats"]), "--no-progress"]
    command += ["--data", str(heldout), "--compare-lookahead"]  # timed on the text they will draft for
    write_output([*command, "--json", str(projection)], out / "speedup.txt")
    projected = json.loads(projection.read_text())
    check = [*cli, "generate", "--target", str(served_target), "--draft-model", str(drafter), "--data", str(heldout)]
    check += ["--limit", str(settings["check_prompts"]), "--max-tokens", str(settings["check_tokens"])]
    check += ["--draft-len", str(projected["bestK"]), "--gpu", gpu, "--no-progress"]
    check += ["--out", str(out / "generate.json")]
    if not projected["lookahead"]["isDefault"]:
        check += ["--draft-lookahead", str(projected["lookahead"]["candidates"])]
    write_output(check, out / "generate.txt")


def serve_and_walk(drafter: Path, heldout: Path, out: Path, settings: dict[str, Any]) -> None:
    """``drafter`` served by `specdraft serve` on a free port (``settings``: gpu, lookahead — None for serve's default
    — and its log file) and walked by `specdraft validate` over ``limit`` held-out conversations: the HTML page and
    summary into ``out``, the printed summary into ``settings["output"]``."""
    cli, port = specdraft_command(), free_port()
    serve = [*cli, "serve", "--model", str(drafter), "--port", str(port), "--gpu", settings["gpu"]]
    serve += [] if settings["lookahead"] is None else ["--lookahead", str(settings["lookahead"])]
    with Path(settings["log"]).open("wb") as log:
        server = subprocess.Popen(serve, cwd=REPO, env=cli_env(), stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(f"http://127.0.0.1:{port}/health", server, 300)
            walk = [*cli, "validate", "--server", f"drafter=http://127.0.0.1:{port}", "--data", str(heldout)]
            walk += ["--limit", str(settings["limit"]), "--report", str(out), "--no-progress"]
            write_output(walk, Path(settings["output"]))
        finally:
            server.terminate()
            server.wait(60)
