"""Chat prompts written by the target itself: the real-model lab's second prompt set, made by another method than
make_chat_kinds.py's templates, so that a drafter trained on one is checked on prompts it was not built like.

The target (SmolLM2-135M-Instruct, served by llama.cpp's llama-server) writes the user's turn of its own chat format:
its chat template is rendered up to the start of a user turn, a short opener of the category is put there (e.g.
"Can you write a Go function for parsing dates that"), and the target continues the turn until it ends it (sampled:
temperature 0.9, top-p 0.95, top-k 50, a seed per prompt). Asked instead to "write a question a user might ask",
a 135M model answers as the assistant; continuing the user's turn, it writes a user's message. Thirteen categories,
make_chat_kinds.py's; the topics come from this file's own lists (general ones, programming ones for code/*).

A quarter of the prompts open with a system prompt the target also wrote (its system turn continued from "You
are"); a sixth carry an earlier exchange: a first user turn, the target's own greedy answer (≤ 128 tokens), then a
second user turn the target continued from a follow-up opener. A turn is kept when it ended by itself (or filled its
budget, for the kinds that paste code or text), says more than its opener, holds no broken character and no loop
(few distinct words), and is not one already kept.

Splits by hash of the topic (the topics in sha256 order, the first ``--heldout-per-mille`` held out, the next
``--dev-per-mille`` for dev): a topic's prompts of every kind stay in one split. Every answer is appended to
``--cache`` as it comes, so a rerun resumes (the same seeds ask the same requests). Each line: ``{"id", "category",
"split", "form", "source": "target:<topic>", "messages"}``. Sampling on a shared CPU is not bit-reproducible across
machines (llama.cpp's results depend on how decodes are batched): the committed file is the record, this command
makes another of the same kind.

    bash bench/peers/build_llama_server.sh                       # llama-server, ~5 minutes on 2 free cores
    train/.venv/bin/python train/scripts/data/make_target_prompts.py \\
        --model train/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf --out data/chat-prompts-target.jsonl.xz
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from make_chat_kinds import CATEGORIES, SPLITS, count_table, split_key, write_jsonl

from specdraft_train.config import CorpusConfig

GENERAL_TOPICS = """
    cooking pasta; baking bread; gardening in small spaces; houseplants; training a puppy; adopting a cat; budgeting;
    saving for retirement; credit cards; buying a used car; renting an apartment; moving to a new city; job
    interviews; writing a resume; working from home; time management; learning a new language; studying for exams;
    public speaking; running a marathon; yoga for beginners; healthy breakfast ideas; sleep habits; drinking enough
    water; camping; hiking safety; travel to Japan; a weekend in Paris; packing for a long flight; photography;
    learning the guitar; painting with watercolors; knitting; chess openings; board games for families; birthday
    party ideas; wedding planning; raising teenagers; helping kids with homework; climate change; recycling; solar
    panels; electric cars; the solar system; black holes; how vaccines work; the immune system; photosynthesis;
    volcanoes; earthquakes; the water cycle; dinosaurs; ancient Rome; the French Revolution; World War II; the
    printing press; the history of the internet; the stock market; inflation; starting a small business; marketing on
    social media; customer service; negotiating a salary; team meetings; giving feedback; dealing with stress;
    meditation; making friends as an adult; writing a novel; poetry; Shakespeare; classical music; jazz; football;
    basketball rules; the Olympic Games; coffee brewing; tea; wine tasting; vegetarian recipes; food allergies;
    first aid; fixing a leaky faucet; painting a room; organizing a garage; home security; smartphones; choosing a
    laptop; password safety; online privacy; email etiquette; video calls; 3D printing; robots; space travel; the
    moon landing; ocean life; bees; bird watching; the weather; rainy days; winter holidays; summer vacation;
    friendship; a difficult neighbour; a late package; a broken washing machine; a school trip; a museum visit
""".split(";")
CODE_TOPICS = """
    reversing a string; checking for palindromes; sorting a list of records; binary search; reading a CSV file;
    writing JSON to a file; parsing dates; counting words in a text; removing duplicates from a list; merging two
    dictionaries; fetching a web page; retrying a failed HTTP request; validating an email address; computing a
    factorial; Fibonacci numbers; prime numbers; matrix multiplication; a linked list; a stack; a queue; a binary
    tree; walking a directory tree; renaming files in bulk; logging; command-line arguments; environment variables;
    unit tests; a simple web server; connecting to a database; SQL queries; caching results; timing a function;
    threads; async functions; regular expressions; string formatting; rounding numbers; random passwords; hashing a
    file; compressing a file; converting temperatures; a to-do list app; a shopping cart total; a countdown timer;
    tic-tac-toe; a calculator; a rate limiter; pagination; sorting by two keys; flattening a nested list; finding the
    maximum; averaging numbers; parsing a URL; a config file; error handling
""".split(";")
CODE_LANGUAGES = ("Python", "Python", "Python", "JavaScript", "TypeScript", "Java", "C", "C++", "Go", "Rust", "Bash")
HUMAN_LANGUAGES = ("French", "Spanish", "German", "Italian", "Portuguese", "Japanese", "Chinese", "Russian")
# Openers of the user's turn, by category; the target continues each. {topic}, {language}, {fence} (the language's
# Markdown fence name) and {human} are filled in.
OPENERS = {
    "ask/question": ("I have a question about {topic}.", "Question about {topic}:", "Something I always wondered "
                     "about {topic}:", "Is it true that {topic}"),
    "ask/explain": ("Can you explain {topic} to me?", "Please explain how {topic} works", "I don't understand "
                    "{topic}.", "Explain {topic} like I'm five:"),
    "ask/howto": ("I need help with {topic}. How do I", "What's the best way to get better at {topic}? I",
                  "Step by step, how do I", "How can I learn about {topic}"),
    "code/write": ("Can you write a {language} function for {topic} that", "Write {language} code for {topic}. It "
                   "should", "I need a {language} script for {topic} that"),
    "code/fix": ("My {language} code for {topic} has a bug. Here it is:\n\n```{fence}\n", "Why doesn't this "
                 "{language} code for {topic} work?\n\n```{fence}\n"),
    "code/explain": ("What does this {language} code for {topic} do?\n\n```{fence}\n", "Can you explain this "
                     "{language} snippet ({topic})?\n\n```{fence}\n"),
    "write/email": ("Can you help me write an email about {topic}? It's for", "Write an email to my", "Draft a "
                    "short email about {topic} to"),
    "write/story": ("Write a short story about {topic}", "Tell me a story about {topic} where", "Can you write a "
                    "bedtime story about {topic}"),
    "write/poem": ("Write a poem about {topic}", "Can you write a haiku about {topic}", "I'd love a short poem about "
                   "{topic} that"),
    "text/rewrite": ("Please rewrite this paragraph about {topic} to make it clearer:\n\n", "Can you make this "
                     "text about {topic} sound more professional?\n\n"),
    "text/summarize": ("Summarize this text about {topic}:\n\n", "Can you give me the main points of this article "
                       "about {topic}?\n\n"),
    "text/translate": ("Translate these sentences about {topic} into {human}:\n\n", "How do I say this in "
                       "{human}?\n\n"),
    "math/word-problem": ("Can you solve this math problem about {topic}?", "Math question about {topic}:",
                          "Here is a word problem about {topic}:"),
}  # fmt: skip
SYSTEM_OPENER = "You are"
FOLLOW_UP_OPENERS = ("Thanks!", "Can you", "What about", "Why", "OK, and", "That's helpful. How")
FORMS = ("single",) * 7 + ("system",) * 3 + ("multi-turn",) * 2  # 7 : 3 : 2
SAMPLING = {"temperature": 0.9, "top_p": 0.95, "top_k": 50}
TURN_TOKENS = 96  # a user's turn; the kinds that paste code or text get more and may fill it
PASTING = {"code/fix": 256, "code/explain": 256, "text/rewrite": 200, "text/summarize": 320, "text/translate": 160}
ANSWER_TOKENS = 128
MIN_ADDED_CHARS = 12  # what the target adds to an opener, at least
REFUSALS = re.compile(r"\b(as an ai|i'm sorry|i am sorry|i cannot|i can't help)\b", re.IGNORECASE)


def topics_for(category: str) -> list[str]:
    return [" ".join(t.split()) for t in (CODE_TOPICS if category.startswith("code/") else GENERAL_TOPICS) if t.strip()]


@dataclass(frozen=True)
class Job:
    id: str
    category: str
    split: str
    form: str
    topic: str
    opener: str  # the start of the user's turn
    follow_up: str  # the start of the second user turn (multi-turn)
    seed: int


MARK = "\u2063MARK\u2063"  # stands for a turn's content while the chat template is rendered


class Client:
    """llama-server: its own chat template (``/apply-template``) and completions (``/completion``), each answer kept
    in a cache file (a rerun asks nothing twice)."""

    def __init__(self, url: str, cache: Path):
        self.url, self.cache = url.rstrip("/"), cache
        self.answers: dict[str, dict] = {}
        if cache.exists():
            for line in cache.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                self.answers[row["key"]] = row["answer"]
        self.generated_tokens = 0
        self.lock = threading.Lock()  # requests run in threads: one append, one counter update at a time
        self.turn_end: str | None = None  # what ends a turn in the model's chat template, e.g. <|im_end|>

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"{self.url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.load(response)

    def turn_prefix(self, messages: list[dict[str, str]], role: str) -> tuple[str, str]:
        """The rendered chat up to the start of a new ``role`` turn, and the text that ends a turn."""
        if self.turn_end is None:
            rendered = self.post("/apply-template", {"messages": [{"role": "user", "content": MARK}]})["prompt"]
            self.turn_end = rendered.partition(MARK)[2].split("\n")[0]
            if not self.turn_end:
                raise ValueError(f"the chat template ends a turn with nothing this script can stop at: {rendered!r}")
        if role == "assistant":  # a last assistant message renders open (a prefill): the generation prompt instead
            return self.post("/apply-template", {"messages": messages})["prompt"], self.turn_end
        rendered = self.post("/apply-template", {"messages": messages + [{"role": role, "content": MARK}]})["prompt"]
        return rendered.partition(MARK)[0], self.turn_end

    def continue_turn(self, messages: list[dict[str, str]], role: str, opener: str, max_tokens: int, seed: int,
                      greedy: bool = False) -> tuple[str, bool]:  # fmt: skip
        """The ``role`` turn after ``messages``, started with ``opener`` and continued by the model; whether the
        model ended it (rather than running out of tokens)."""
        prefix, end = self.turn_prefix(messages, role)
        body = {"prompt": prefix + opener, "n_predict": max_tokens, "seed": seed, "stop": [end], "cache_prompt": True,
                **({"temperature": 0.0} if greedy else SAMPLING)}  # fmt: skip
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        answer = self.answers.get(key)
        if answer is None:
            try:
                full = self.post("/completion", body)
                answer = {"content": full["content"], "ended": not full.get("stopped_limit", False)}
            except urllib.error.HTTPError as error:  # e.g. 500 "output does not match the expected format": not kept
                full, answer = {}, {"content": "", "ended": False, "error": f"HTTP {error.code}"}
            with self.lock:
                self.generated_tokens += full.get("tokens_predicted", 0)
                self.answers[key] = answer
                with open(self.cache, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": key, "answer": answer}, ensure_ascii=False) + "\n")
        return (opener + answer["content"]).strip(), answer["ended"]


FENCES = {"C++": "cpp", "Bash": "bash"}


def topic_splits(topics: list[str], config: CorpusConfig) -> dict[str, list[str]]:
    """Topics by split: in the order of their sha256, the first share held out, the next for dev, the rest train
    (shares per mille as ``split_of``'s, rounded up: every split gets a topic however short the list)."""
    ranked = sorted(topics, key=split_key)
    heldout = -(-len(ranked) * config.heldout_per_mille // 1000)
    dev = -(-len(ranked) * config.dev_per_mille // 1000)
    return {"heldout": ranked[:heldout], "dev": ranked[heldout : heldout + dev], "train": ranked[heldout + dev :]}


def plan(counts: dict[str, int], config: CorpusConfig, seed: int, oversample: int) -> list[Job]:
    """Candidate jobs per category and split, in the order they are tried: ``oversample`` × the count asked, the
    split's topics in turn."""
    jobs = []
    for category in CATEGORIES:
        topics = topics_for(category)
        for split in SPLITS:
            mine = topic_splits(topics, config)[split]
            for i in range(counts[split] * oversample):
                rng = random.Random(f"{seed}/{category}/{split}/{i}")
                topic, language = mine[i % len(mine)], rng.choice(CODE_LANGUAGES)
                opener = rng.choice(OPENERS[category]).format(
                    topic=topic, language=language, fence=FENCES.get(language, language.lower()),
                    human=rng.choice(HUMAN_LANGUAGES),
                )  # fmt: skip
                jobs.append(Job(f"{category}/{split}/{i}", category, split, rng.choice(FORMS), topic, opener,
                                rng.choice(FOLLOW_UP_OPENERS), rng.randrange(1 << 30)))  # fmt: skip
    return jobs


LOOP = re.compile(r"(\w.{1,15}?)\1{7,}", re.DOTALL)  # a short chunk with a letter or digit, 8 times in a row


def degenerate(text: str) -> bool:
    """A broken character (a token that ends mid-UTF-8) or a loop: few distinct words in a long turn, a short chunk
    repeated (e.g. "non_non_non_..." inside one word), or text that compresses to a fifth."""
    words = text.split()
    looping = len(words) > 30 and len(set(words)) < 0.3 * len(words)
    compressible = len(text) > 200 and len(zlib.compress(text.encode())) < 0.2 * len(text)
    return "\ufffd" in text or looping or compressible or LOOP.search(text) is not None


def user_turn(client: Client, job: Job, before: list[dict[str, str]], opener: str, seed: int) -> str | None:
    """A user turn the target continued from ``opener``, or None when it is not kept."""
    budget = PASTING.get(job.category, TURN_TOKENS)
    text, ended = client.continue_turn(before, "user", opener, budget, seed)
    if not ended and job.category not in PASTING:
        return None
    if len(text) < len(opener.strip()) + MIN_ADDED_CHARS or REFUSALS.search(text) or degenerate(text):
        return None
    return text


def run_job(client: Client, job: Job) -> list[dict[str, str]] | None:
    """The messages of one prompt, or None when a turn the target wrote is not kept."""
    messages: list[dict[str, str]] = []
    if job.form == "system":
        system, ended = client.continue_turn([], "system", SYSTEM_OPENER, 48, job.seed + 1)
        if not ended or len(system) < len(SYSTEM_OPENER) + MIN_ADDED_CHARS or degenerate(system):
            return None
        messages.append({"role": "system", "content": system})
    first = user_turn(client, job, messages, job.opener, job.seed)
    if first is None:
        return None
    messages.append({"role": "user", "content": first})
    if job.form == "multi-turn":
        answer, _ = client.continue_turn(messages, "assistant", "", ANSWER_TOKENS, 0, greedy=True)
        if len(answer) < MIN_ADDED_CHARS or degenerate(answer):
            return None
        messages.append({"role": "assistant", "content": answer})
        follow_up = user_turn(client, job, messages, job.follow_up, job.seed + 2)
        if follow_up is None:
            return None
        messages.append({"role": "user", "content": follow_up})
    return messages


def normalized(messages: list[dict[str, str]]) -> str:
    return " ".join(messages[-1]["content"].lower().split())


def make_prompts(client: Client, jobs: list[Job], counts: dict[str, int], workers: int) -> list[dict]:
    """Run candidate jobs in rounds, each (category, split) taking the next ones it still needs, until every count
    is met or the candidates run out; the first acceptable, distinct prompts in candidate order are kept."""
    from tqdm import tqdm  # noqa: PLC0415  (transformers' dependency: in every venv that runs this)

    pending: dict[tuple[str, str], list[Job]] = {}
    for job in jobs:
        pending.setdefault((job.category, job.split), []).append(job)
    kept: dict[tuple[str, str], list[tuple[Job, list[dict[str, str]]]]] = {key: [] for key in pending}
    seen: set[str] = set()
    bar = tqdm(total=sum(counts[s] for _, s in pending), desc="target prompts", unit="prompt")
    with ThreadPoolExecutor(workers) as pool:
        while True:
            batch = []
            for key, queue in pending.items():
                missing = counts[key[1]] - len(kept[key])
                batch += [queue.pop(0) for _ in range(min(missing, len(queue)))]
            if not batch:
                break
            for job, messages in zip(batch, pool.map(lambda j: run_job(client, j), batch)):
                key = (job.category, job.split)
                if messages is None or normalized(messages) in seen or len(kept[key]) >= counts[job.split]:
                    continue
                seen.add(normalized(messages))
                kept[key].append((job, messages))
                bar.update()
    bar.close()
    lines = []
    for (category, split), found in kept.items():
        if len(found) < counts[split]:
            print(f"make_target_prompts: {category} {split}: {len(found)} of {counts[split]} kept", file=sys.stderr)
        for i, (job, messages) in enumerate(found):
            lines.append({"id": f"target/{split}/{category}/{i:05d}", "category": category, "split": split,
                          "form": job.form, "source": f"target:{job.topic}", "messages": messages})  # fmt: skip
    return lines


def free_port() -> int:
    """A port nobody listens on now (a server left over from a killed run would otherwise answer /health)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(binary: Path, model: Path, port: int, slots: int, threads: int, log: Path) -> subprocess.Popen:
    """llama-server on 127.0.0.1:port with ``slots`` parallel sequences (its output into ``log``), once /health
    answers."""
    with open(log, "w") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
             "-c", str(slots * 2048), "-t", str(threads), "--no-webui"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    for _ in range(600):
        if process.poll() is not None:
            raise ValueError(f"llama-server exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return process
        except OSError:
            time.sleep(0.5)
    process.terminate()
    raise ValueError(f"llama-server did not answer /health in 5 minutes (log: {log})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="JSONL to write (.xz: compressed)")
    ap.add_argument("--model", type=Path, help="the target's GGUF: start llama-server on it (else --server)")
    ap.add_argument("--server", default=None, help="a running llama-server's URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--llama-server", type=Path, default=Path("build/llama-server/bin/llama-server"))
    ap.add_argument("--port", type=int, default=0, help="llama-server's port (default: a free one)")
    ap.add_argument("--slots", type=int, default=4, help="parallel requests (llama-server -np; default: 4)")
    ap.add_argument(
        "--threads", type=int, default=1, help="llama-server -t (default: 1; more spin-wait on a busy shared CPU)"
    )
    ap.add_argument("--cache", type=Path, default=None, help="answers so far, to resume (default: OUT's name + .cache)")
    ap.add_argument("--train-per-category", type=int, default=20)
    ap.add_argument("--dev-per-category", type=int, default=8)
    ap.add_argument("--heldout-per-category", type=int, default=32)
    ap.add_argument("--heldout-per-mille", type=int, default=150, help="topics held out (default: 15 %%)")
    ap.add_argument("--dev-per-mille", type=int, default=50, help="topics for dev (default: 5 %%)")
    ap.add_argument("--oversample", type=int, default=3, help="candidates per prompt asked (default: 3)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run stops its servers (finally)
    if (args.model is None) == (args.server is None):
        ap.error("give --model GGUF (llama-server started here) or --server URL, one of them")
    counts = {"train": args.train_per_category, "dev": args.dev_per_category, "heldout": args.heldout_per_category}
    config = CorpusConfig(heldout_per_mille=args.heldout_per_mille, dev_per_mille=args.dev_per_mille)
    server = None
    try:
        jobs = plan(counts, config, args.seed, args.oversample)
        if args.model is not None:
            if not args.llama_server.is_file():
                raise ValueError(f"{args.llama_server}: not found (bash bench/peers/build_llama_server.sh builds it)")
            args.port = args.port or free_port()
            log = Path(f"{args.cache or args.out}.server.log")
            server = start_server(args.llama_server, args.model, args.port, args.slots, args.threads, log)
        client = Client(args.server or f"http://127.0.0.1:{args.port}", args.cache or Path(f"{args.out}.cache"))
        start = time.time()
        lines = make_prompts(client, jobs, counts, args.slots)
        seconds = time.time() - start
    except ValueError as error:
        print(f"make_target_prompts: {error}", file=sys.stderr)
        return 2
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    write_jsonl(args.out, lines)
    print(f"make_target_prompts: {len(lines)} prompts into {args.out} in {seconds:.0f} s "
          f"({client.generated_tokens:,} tokens generated this run, {client.generated_tokens / seconds:.0f} tok/s)\n\n"
          f"{count_table(lines)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
