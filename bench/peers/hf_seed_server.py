"""Seed-style peer for the serving benchmark: HF transformers Qwen3 in bf16 behind specdraft's /draft protocol.

It does what a first PyTorch drafter server does: batch the /draft requests that are waiting into one greedy `generate`
of n tokens, recomputing every prefix from scratch (no KV reuse across requests). It exists to be measured against,
through the same HTTP client as `specdraft serve` (bench/serveBench.ts).

    python bench/peers/hf_seed_server.py --shape qwen3-1.7b --port 8001            # random weights, timing only
    python bench/peers/hf_seed_server.py --model path/to/hf_checkpoint --port 8001
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from qwen3_shapes import SHAPES  # noqa: E402  (bench/models/: one table of the real models' shapes)


@dataclass
class Pending:
    tokens: list[int]
    n: int
    done: threading.Event = field(default_factory=threading.Event)
    draft: list[int] | None = None
    error: str | None = None


class Batcher:
    """One thread owns the model; requests that arrive while it works form the next batch."""

    def __init__(self, model: Qwen3ForCausalLM, device: torch.device, max_batch: int) -> None:
        self.model, self.device, self.max_batch = model, device, max_batch
        self.inbox: queue.Queue[Pending] = queue.Queue()
        threading.Thread(target=self._loop, daemon=True).start()

    def submit(self, item: Pending) -> None:
        self.inbox.put(item)
        item.done.wait()

    def _loop(self) -> None:
        while True:
            batch = [self.inbox.get()]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.inbox.get_nowait())
                except queue.Empty:
                    break
            try:
                drafts = self._generate([p.tokens for p in batch], max(p.n for p in batch))
                for p, d in zip(batch, drafts):
                    p.draft = d[: p.n]
            except Exception as e:  # noqa: BLE001 — report to every waiting request, keep serving
                for p in batch:
                    p.error = str(e)
            for p in batch:
                p.done.set()

    @torch.inference_mode()
    def _generate(self, prompts: list[list[int]], n: int) -> list[list[int]]:
        width = max(len(p) for p in prompts)
        input_ids = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, T), left-padded
        attention_mask = torch.zeros_like(input_ids)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention_mask[i, width - len(p) :] = 1
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
        return out[:, width:].tolist()  # (B, n)


def make_handler(batcher: Batcher, vocab_size: int, default_n: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet: the benchmark client measures
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {"status": "ok"})
            elif self.path == "/info":
                self._send(200, {"model": "hf-seed-peer", "vocab_size": vocab_size, "engine": "transformers"})
            else:
                self._send(404, {"error": {"code": "not_found", "message": self.path}})

        def do_POST(self) -> None:
            if self.path != "/draft":
                self._send(404, {"error": {"code": "not_found", "message": self.path}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                tokens = [int(t) for t in body["tokens"]]
                n = int(body.get("n", default_n))
            except Exception as e:  # noqa: BLE001
                self._send(400, {"error": {"code": "bad_request", "message": str(e)}})
                return
            item = Pending(tokens, n)
            batcher.submit(item)
            if item.error is not None:
                self._send(500, {"error": {"code": "generate_failed", "message": item.error}})
            else:
                self._send(200, {"draft": item.draft})

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="HF checkpoint dir (default: random weights of --shape)")
    ap.add_argument("--shape", default="qwen3-1.7b", choices=["qwen3-1.7b"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--draft-len", type=int, default=16)
    ap.add_argument("--max-batch", type=int, default=64)
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    started = time.time()
    if args.model:
        model = Qwen3ForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
    else:
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(Qwen3Config(**SHAPES["qwen3-1.7b"])).to(torch.bfloat16)
    model = model.to(device).eval()
    batcher = Batcher(model, device, args.max_batch)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(batcher, model.config.vocab_size, args.draft_len))
    print(f"hf-seed peer ready on http://{args.host}:{args.port} ({device}, {time.time() - started:.1f} s)", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
