"""llama.cpp's own speculative decoding with our drafters: `llama-server -m TARGET -md DRAFTER`, as a real client
of a drafter GGUF, beside the target alone.

For each prompt of a held-out file (the validator's format: ``prompt_tokens`` are the chat-rendered token ids; or chat
lines, ``messages``, which the target's server renders with the model's own template and tokenizer), the target
continues greedily for ``--n-predict`` tokens through ``POST /completion`` on three servers started here: the
target alone, the target with each ``--drafter NAME=GGUF`` (``--spec-type draft-simple --spec-draft-n-max K``). The
servers take turns prompt by prompt (one request at a time: the load of a shared machine falls on all of them alike).
Per drafter: acceptance = Σ ``timings.draft_n_accepted`` ÷ Σ ``timings.draft_n``, accepted tokens per draft, tokens/s
of generation (Σ ``predicted_n`` ÷ Σ ``predicted_ms``) against the target alone's, and whether every continuation is
the target alone's, token for token (where not: the prompt and the first differing position). Also the share of the
target alone's tokens equal to the file's own continuations (the reference engine's; informative: another engine).

Writes ``OUT/summary.json`` and ``OUT/summary.md`` (default OUT: bench/results/<date>-cpu-llama-server/) and each
server's log as ``OUT/<name>.log``. Build llama-server first: ``bash bench/peers/build_llama_server.sh``.

    python3 bench/llama_server_spec.py --target T.gguf --drafter base=B.gguf --drafter distilled=D.gguf \\
        --prompts heldout.jsonl [--limit 24] [--n-predict 128] [--draft-max 16] [--threads 1] [--out DIR]

Stdlib only (any Python 3.9+).
"""

from __future__ import annotations

import argparse
import datetime
import json
import lzma
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ALONE = "target-alone"
DEFAULT_BINARY = Path("build/llama-server/bin/llama-server")


def read_prompts(path: Path, limit: int | None) -> list[dict]:
    """The file's conversations, the first ``limit``: the validator's format (``prompt_tokens``, and
    ``continuation_tokens`` if there) or chat lines (``messages``, rendered later by the target's own template)."""
    rows = []
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            tokens, messages = row.get("prompt_tokens"), row.get("messages")
            if not (isinstance(tokens, list) and tokens) and not (isinstance(messages, list) and messages):
                raise ValueError(f"{path}:{line_no}: neither prompt_tokens nor messages")
            rows.append(
                {
                    "id": str(row.get("id", line_no)),
                    "category": str(row.get("category", "all")),
                    "prompt_tokens": [int(t) for t in tokens] if tokens else None,
                    "messages": messages,
                    "continuation_tokens": [int(t) for t in row.get("continuation_tokens", [])],
                }
            )
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise ValueError(f"{path}: no prompts")
    return rows


def free_port() -> int:
    """A port nobody listens on now (a server left over from a killed run would otherwise answer /health)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """One llama-server process on 127.0.0.1:port, one slot, until stopped."""

    def __init__(self, binary: Path, name: str, target: Path, drafter: Path | None, port: int, args: argparse.Namespace,
                 log: Path):  # fmt: skip
        self.name, self.url = name, f"http://127.0.0.1:{port}"
        command = [str(binary), "-m", str(target), "--host", "127.0.0.1", "--port", str(port), "-np", "1",
                   "-c", str(args.context), "-t", str(args.threads), "--no-webui", "--seed", "0"]  # fmt: skip
        if drafter is not None:
            command += ["-md", str(drafter), "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.draft_max),
                        "-td", str(args.threads)]  # fmt: skip
        self.command = command
        self.log = open(log, "w")  # noqa: SIM115  (closed in stop())
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 300) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name}: llama-server exited {self.process.returncode} (see its log)")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                time.sleep(0.5)
        raise RuntimeError(f"{self.name}: no /health in {timeout_s:.0f} s")

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{self.url}{path}",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.load(response)

    def render(self, messages: list[dict]) -> list[int]:
        """Chat messages as the model's own template renders them before its answer, as token ids."""
        text = self.post("/apply-template", {"messages": messages})["prompt"]
        return self.post("/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"]

    def complete(self, prompt: list[int], n_predict: int) -> dict:
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "top_k": 1, "return_tokens": True,
                "cache_prompt": False, "seed": 0}  # fmt: skip
        start = time.time()
        answer = self.post("/completion", body)
        answer["wall_s"] = time.time() - start
        return answer

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def summarize(prompts: list[dict], answers: dict[str, list[dict]], drafters: list[str]) -> dict:
    """Per server: tokens, tokens/s, wall time; per drafter also acceptance and whether its outputs are the target's."""
    alone_tokens = [a["tokens"] for a in answers[ALONE]]
    result: dict = {}
    for name, rows in answers.items():
        predicted = sum(a["timings"]["predicted_n"] for a in rows)
        predicted_ms = sum(a["timings"]["predicted_ms"] for a in rows)
        entry = {"tokens": predicted, "tokens_per_s": 1000 * predicted / predicted_ms if predicted_ms else None,
                 "wall_s": sum(a["wall_s"] for a in rows)}  # fmt: skip
        if name != ALONE:
            drafted = sum(a["timings"].get("draft_n", 0) for a in rows)
            accepted = sum(a["timings"].get("draft_n_accepted", 0) for a in rows)
            differing = [{"id": p["id"], "category": p["category"], "position": first_difference(a["tokens"], t)}
                         for p, a, t in zip(prompts, rows, alone_tokens) if a["tokens"] != t]  # fmt: skip
            entry |= {"draft_tokens": drafted, "accepted_tokens": accepted,
                      "acceptance": accepted / drafted if drafted else None,
                      "identical_to_target": len(rows) - len(differing), "differing": differing}  # fmt: skip
        result[name] = entry
    alone = result[ALONE]["tokens_per_s"]
    for name in drafters:
        speed = result[name]["tokens_per_s"]
        result[name]["speed_up"] = speed / alone if speed and alone else None
    matched = total = 0
    for p, tokens in zip(prompts, alone_tokens):
        reference = p["continuation_tokens"][: len(tokens)]
        total += len(reference)
        matched += sum(x == y for x, y in zip(tokens, reference))
    result[ALONE]["equal_to_file_continuations"] = matched / total if total else None
    return result


def markdown(summary: dict) -> str:
    s, config = summary["servers"], summary["config"]
    lines = [
        f"# llama-server speculative decoding — {summary['date']}, {summary['machine']}",
        "",
        (
            f"Target `{config['target']}`; {config['prompts']} prompts of `{config['prompt_file']}`, "
            f"{config['n_predict']} tokens each, greedy; drafts of up to {config['draft_max']} tokens "
            f"(`--spec-type draft-simple`); {config['threads']} threads; servers taking turns prompt by prompt."
        ),
        "",
        "| server | acceptance | accepted / drafted | tokens/s | × target alone | identical to target alone |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in s.items():
        if name == ALONE:
            lines.append(f"| {name} | | | {e['tokens_per_s']:.1f} | 1.00 | |")
            continue
        acceptance = "—" if e["acceptance"] is None else f"{e['acceptance']:.3f}"
        lines.append(
            f"| {name} (`{config['drafters'][name]}`) | {acceptance} | {e['accepted_tokens']:,} / "
            f"{e['draft_tokens']:,} | {e['tokens_per_s']:.1f} | {e['speed_up']:.2f} | {e['identical_to_target']} of "
            f"{config['prompts']} |"
        )
    for name, e in s.items():
        for d in e.get("differing", []):
            lines.append(
                f"\n- {name}: `{d['id']}` ({d['category']}) differs from the target alone at token {d['position']}"
            )
    share = s[ALONE]["equal_to_file_continuations"]
    if share is not None:
        lines.append(f"\nThe target alone's tokens equal the file's continuations at {share:.1%} of positions.")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict:
    prompts = read_prompts(args.prompts, args.limit)
    drafters = dict(spec.split("=", 1) for spec in args.drafter)
    args.out.mkdir(parents=True, exist_ok=True)
    servers = [
        Server(args.llama_server, name, args.target, path, free_port(), args, args.out / f"{name}.log")
        for name, path in [(ALONE, None), *((name, Path(path)) for name, path in drafters.items())]
    ]
    answers: dict[str, list[dict]] = {server.name: [] for server in servers}
    try:
        for server in servers:
            server.wait_ready()
        for prompt in prompts:
            if prompt["prompt_tokens"] is None:
                prompt["prompt_tokens"] = servers[0].render(prompt["messages"])
        for i, prompt in enumerate(prompts):
            for server in servers:
                answers[server.name].append(server.complete(prompt["prompt_tokens"], args.n_predict))
            print(
                f"\rllama_server_spec: {i + 1}/{len(prompts)} prompts",
                end="",
                file=sys.stderr,
                flush=True,
            )
        print(file=sys.stderr)
    finally:
        for server in servers:
            server.stop()
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "config": {
            "target": str(args.target),
            "drafters": drafters,
            "prompt_file": str(args.prompts),
            "prompts": len(prompts),
            "n_predict": args.n_predict,
            "draft_max": args.draft_max,
            "threads": args.threads,
            "context": args.context,
            "commands": {s.name: " ".join(s.command) for s in servers},
        },
        "servers": summarize(prompts, answers, list(drafters)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, required=True, help="the target's GGUF")
    ap.add_argument(
        "--drafter",
        action="append",
        default=[],
        help="NAME=GGUF, a drafter (repeatable)",
    )
    ap.add_argument(
        "--prompts",
        type=Path,
        required=True,
        help="JSONL (.xz ok): prompt_tokens (chat-rendered) or chat messages",
    )
    ap.add_argument("--limit", type=int, default=None, help="the first N prompts (default: all)")
    ap.add_argument(
        "--n-predict",
        type=int,
        default=128,
        help="tokens generated per prompt (default: 128)",
    )
    ap.add_argument(
        "--draft-max",
        type=int,
        default=16,
        help="longest draft (--spec-draft-n-max; default: 16)",
    )
    ap.add_argument(
        "--threads", type=int, default=1, help="threads of each server (default: 1: more spin-wait on a busy CPU)"
    )
    ap.add_argument(
        "--context",
        type=int,
        default=4096,
        help="context of each server (default: 4096)",
    )
    ap.add_argument(
        "--llama-server",
        type=Path,
        default=DEFAULT_BINARY,
        help=f"binary (default: {DEFAULT_BINARY})",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results folder (default: bench/results/<date>-cpu-llama-server)",
    )
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run stops its servers (finally)
    args.out = args.out or Path(f"bench/results/{datetime.date.today().isoformat()}-cpu-llama-server")
    problems = [f"{p}: not found" for p in (args.target, args.prompts, args.llama_server) if not p.is_file()]
    problems += [f"--drafter {d}: expected NAME=GGUF with an existing file" for d in args.drafter
                 if "=" not in d or not Path(d.split("=", 1)[1]).is_file() or d.split("=", 1)[0] == ALONE]  # fmt: skip
    if not args.drafter:
        problems.append("give at least one --drafter NAME=GGUF")
    if problems:
        print("llama_server_spec: " + "; ".join(problems), file=sys.stderr)
        return 2
    try:
        summary = run(args)
    except (ValueError, RuntimeError, urllib.error.URLError) as error:
        print(f"llama_server_spec: {error}", file=sys.stderr)
        return 1
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
