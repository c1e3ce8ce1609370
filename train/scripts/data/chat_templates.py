"""What make_chat_kinds.py's prompts say: one builder per kind of chat request, each filling templates from local
text (chat_sources.py) or from its own word lists, and the assistant turns a multi-turn prompt's earlier exchange
needs (built from the same source, so that they answer it: a man page's option, a function's own source, a problem's
computed answer).

A builder takes a seeded ``random.Random`` and one split's :class:`Pools` and returns a :class:`Draft`: the user
turn, where it came from, the key its split is decided by (``None``: the source's file already decided it) and, when
the builder can write one, an assistant reply.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from chat_sources import Function, ManPage, Paragraph, Topic


@dataclass
class Pools:
    """One split's share of the sources."""

    man: list[ManPage] = field(default_factory=list)
    man_tasks: list[tuple[ManPage, str]] = field(default_factory=list)  # pages whose NAME line is a task
    options: list[tuple[ManPage, str, str]] = field(default_factory=list)  # (page, flag, what it does)
    option_tasks: list[tuple[ManPage, str, str]] = field(default_factory=list)  # (page, flag, task)
    paragraphs: list[Paragraph] = field(default_factory=list)
    runs: list[list[Paragraph]] = field(default_factory=list)  # consecutive paragraphs of one file, ≥ 600 characters
    topics: list[Topic] = field(default_factory=list)
    python: list[Function] = field(default_factory=list)
    python_tasks: list[tuple[Function, str]] = field(default_factory=list)  # functions whose summary is a task
    code: list[Function] = field(default_factory=list)  # every language


@dataclass(frozen=True)
class Draft:
    content: str  # the user turn
    source: str  # e.g. "man:cp", "python:shutil.py:copytree", "math:speed", "email"
    key: str | None  # what decides a source-free draft's split (its filled template); None: the source file did
    reply: str | None = None  # an assistant turn that answers it, where the builder can write one


LANGUAGES = ("Python",) * 5 + ("JavaScript", "JavaScript", "TypeScript", "Go", "Rust", "C", "C++", "Java", "Bash")
HUMAN_LANGUAGES = ("French", "Spanish", "German", "Italian", "Portuguese", "Dutch", "Polish", "Russian", "Chinese",
                   "Japanese", "Korean", "Turkish", "Swedish", "Greek")  # fmt: skip
NAMES = ("Alice", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kira", "Liam", "Maya",
         "Noah", "Olga", "Priya", "Quinn", "Rosa", "Sam", "Tariq", "Uma", "Victor", "Wen", "Ximena", "Yusuf", "Zoe",
         "Mr. Patel", "Ms. Novak", "Dr. Okafor", "Aunt Lucy")  # fmt: skip


# Verbs that open man pages' NAME lines, their options' descriptions and docstrings' first sentences: a text that
# opens with one reads as a task ("copy files and directories"), one that does not is a noun phrase ("OpenSSH
# authentication agent") that a "How do I ...?" template would garble.
VERBS = frozenset(
    """
    acquire add administer affect append apply archive arrange assert avoid bind build call cancel change check clean
    clear close collect communicate compare compile compress compute concatenate configure connect control convert copy
    count create debug decode decompress delete detect determine disable discard display do download dump edit enable
    encode encrypt ensure enter escape exclude execute exit extract fail feed fetch fill filter find flush follow force
    format generate get group guess handle ignore include increase indicate initialize insert install invoke iterate
    keep kill limit list load log look make manage manipulate mark match merge modify move normalize omit open operate
    output override parse perform pop preserve print process produce profile prompt provide push put query read
    receive record register release remove rename replace report request resolve retrieve return reverse run save
    schedule search select send separate set show skip sort specify split start stop store strip suppress switch take
    test toggle translate treat turn update use verify view wait walk warn write
""".split()
)


def task(text: str) -> str | None:
    """``text`` as an imperative task, first letter lowered ("Returns the path" → "return the path"), or None when
    it does not open with a known verb."""
    first, _, rest = text.partition(" ")
    word = first.lower()
    for stem in (word, word[:-1] if word.endswith("s") else "", word[:-2] if word.endswith("es") else ""):
        if stem in VERBS:
            return f"{stem} {rest}".rstrip(". ")
    return None


def lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[1:2].islower() or len(text) < 2 else text


def styled(rng: random.Random, text: str) -> str:
    """How people type into a chat box: most as written, some all lower case without the final mark, some with a
    greeting or a thanks."""
    roll = rng.random()
    if roll < 0.12:
        text = text[0].lower() + text[1:].rstrip("?.!") if "\n" not in text else text
    elif roll < 0.2:
        text = rng.choice(("Hi! ", "Hey, ", "Hello. ", "Quick question: ", "Please help: ")) + text
    elif roll < 0.27:
        text = text + rng.choice((" Thanks!", " Thank you.", " Thanks in advance.", " Keep it short.", " Be concise."))
    return text


def fenced(function: Function) -> str:
    return f"```{function.language.lower()}\n{function.bare}\n```"


# ---------------------------------------------------------------------------------------------------------------------
# ask: questions, explanations, how-to


def ask_question(rng: random.Random, pools: Pools) -> Draft:
    roll = rng.random()
    if roll < 0.45 and pools.options:
        page, flag, what = rng.choice(pools.options)
        todo = task(what)
        templates = ["What does the `{flag}` option of `{cmd}` do?", "what does {cmd} {flag} do",
                     "In `{cmd}`, what is `{flag}` for?",
                     "I saw `{cmd} {flag}` in a script. What does it mean?"]  # fmt: skip
        if todo:
            templates += ["Is there a way to make `{cmd}` {todo}?", "Which `{cmd}` option should I use to {todo}?"]
        reply = (f"`{flag}` tells `{page.command}` to {todo}." if todo else f"`{flag}`: {what}.") + (
            f" For example:\n\n```sh\n{page.command} {flag}\n```"
        )
        content = rng.choice(templates).format(flag=flag, cmd=page.command, todo=todo)
        return Draft(content, f"man:{page.command}", None, reply)
    if roll < 0.75 and pools.man:
        page = rng.choice(pools.man)
        todo = task(page.description)
        templates = ["What is `{cmd}` used for?", "What's {cmd}?", "What does the {cmd} command do?",
                     "Is `{cmd}` installed by default on Linux, and what does it do?"]  # fmt: skip
        if todo:
            templates.append("Which command would I use to {todo}?")
        reply = (
            f"`{page.command}` is a command-line tool to {todo}." if todo else f"`{page.command}`: {page.description}."
        )
        return Draft(rng.choice(templates).format(cmd=page.command, todo=todo), f"man:{page.command}", None, reply)
    function = rng.choice(pools.python)
    module = function.origin.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    template = rng.choice((
        "What does `{module}.{name}` do in Python?", "In Python's `{module}` module, what does `{name}` return?",
        "When should I use `{name}` from `{module}`?", "What are the arguments of `{module}.{signature}`?",
    ))  # fmt: skip
    content = template.format(module=module, name=function.name, signature=function.signature)
    return Draft(content, f"python:{function.origin}:{function.name}", None, f"`{function.name}`: {function.summary}")


def ask_explain(rng: random.Random, pools: Pools) -> Draft:
    roll = rng.random()
    if roll < 0.5 and pools.topics:
        topic = rng.choice(pools.topics)
        template = rng.choice((
            "Explain {t} in simple terms.", "Can you explain what \"{t}\" means?", "ELI5: {t}",
            "I'm new to this. What is meant by {t}, with an example?", "Give me a short explanation of {t}.",
            "Explain {t} to someone who has never used a terminal.",
        ))  # fmt: skip
        return Draft(template.format(t=lower_first(topic.text)), f"doc:{topic.origin}", None)
    if roll < 0.75 and len(pools.man) > 1:
        a, b = rng.sample(pools.man, 2)
        template = rng.choice((
            "Explain the difference between `{a}` and `{b}`.", "What is the difference between {a} and {b}?",
            "Can you explain how `{a}` works under the hood?", "Explain how I would use `{a}` together with `{b}`.",
        ))  # fmt: skip
        return Draft(template.format(a=a.command, b=b.command), f"man:{a.command}+{b.command}", None)
    paragraph = rng.choice(pools.paragraphs)
    sentence = re.split(r"(?<=[.!?])\s", paragraph.text)[0]
    template = rng.choice((
        'Explain what this means: "{s}"', 'I read this in the docs and don\'t get it:\n\n> {s}\n\nCan you explain?',
        'Can you explain this sentence in plain English? "{s}"',
    ))  # fmt: skip
    return Draft(template.format(s=sentence), f"doc:{paragraph.origin}", None, None)


def ask_howto(rng: random.Random, pools: Pools) -> Draft:
    if rng.random() < 0.5 and pools.option_tasks:
        page, flag, todo = rng.choice(pools.option_tasks)
        template = rng.choice((
            "How can I {todo} with {cmd}?", "how do i {todo} using {cmd}", "Using `{cmd}`, how do I {todo}?",
            "What's the command to {todo} with `{cmd}`?",
        ))  # fmt: skip
        reply = f"Use the `{flag}` option:\n\n```sh\n{page.command} {flag}\n```\n\nIt makes `{page.command}` {todo}."
        return Draft(template.format(todo=todo, cmd=page.command), f"man:{page.command}", None, reply)
    if rng.random() < 0.15 or not pools.man_tasks:
        page = rng.choice(pools.man)
        template = rng.choice(("How do I use `{cmd}` ({what})?", "What is the basic usage of {cmd}?",
                               "Can you show me how to get started with `{cmd}`?"))  # fmt: skip
        content = template.format(cmd=page.command, what=lower_first(page.description))
        return Draft(content, f"man:{page.command}", None)
    page, todo = rng.choice(pools.man_tasks)
    template = rng.choice((
        "How do I {todo} on Linux?", "how to {todo} from the command line", "What's the best way to {todo} in a "
        "shell script?", "Step by step, how do I {todo}?", "I need to {todo}. Which tool should I use and how?",
        "How would I {todo} on a Debian server?",
    ))  # fmt: skip
    reply = (
        f"You can use `{page.command}`, which is made to {todo}. Run `man {page.command.split()[0]}` for its options."
    )
    return Draft(template.format(todo=todo), f"man:{page.command}", None, reply)


# ---------------------------------------------------------------------------------------------------------------------
# code: write, fix, explain


def code_write(rng: random.Random, pools: Pools) -> Draft:
    language = rng.choice(LANGUAGES)
    if rng.random() < 0.7 and pools.python_tasks:
        function, todo = rng.choice(pools.python_tasks)
        template = rng.choice((
            "Write a {lang} function to {todo}.", "Can you write {lang} code to {todo}?",
            "I need a {lang} function `{name}` that does this: {summary}", "write a {lang} function to {todo}",
            "Implement `{signature}` in {lang}. It should {todo}.", "Show me how to {todo} in {lang}.",
        ))  # fmt: skip
        content = template.format(lang=language, todo=todo, name=function.name, summary=function.summary,
                                  signature=function.signature)  # fmt: skip
        reply = f"Here is one way to do it:\n\n```python\n{function.source}\n```" if language == "Python" else None
        return Draft(content, f"python:{function.origin}:{function.name}", None, reply)
    page, todo = rng.choice(pools.man_tasks)
    template = rng.choice((
        "Write a {lang} script that uses `{cmd}` to {todo}.", "Write a small {lang} program that does what `{cmd}` "
        "does: {todo}.", "Can you write a {lang} wrapper around `{cmd}` that logs every call?",
    ))  # fmt: skip
    return Draft(template.format(lang=language, cmd=page.command, todo=todo), f"man:{page.command}", None)


# Bugs a code/fix prompt's function gets: (pattern, replacement, what the user sees). One that changes the source is
# applied.
BUGS = (
    (r" <= ", " < ", "gives the wrong result at the boundary"),
    (r" < ", " <= ", "goes one step too far"),
    (r" == ", " != ", "returns the opposite of what I expect"),
    (r" != ", " == ", "returns the opposite of what I expect"),
    (r"\band\b", "or", "accepts inputs it should reject"),
    (r" \+ 1\b", "", "is off by one"),
    (r" - 1\b", "", "is off by one"),
    (r"\breturn (?=\w)", "", "always returns None"),
    (r"\bTrue\b", "False", "never takes the branch it should"),
)


def misspell(rng: random.Random, source: str) -> tuple[str, str] | None:
    """A variable's later use misspelled: a NameError or ReferenceError, named the way the runtime names it."""
    names = sorted(set(re.findall(r"^\s+([a-z_][a-z0-9_]{2,})\s*=[^=]", source, re.MULTILINE)))
    if not names:
        return None
    name = rng.choice(names)
    uses = [m.start() for m in re.finditer(rf"\b{name}\b", source)]
    if len(uses) < 2:
        return None
    at = uses[-1]
    typo = name[:-1] if len(name) > 3 else name + name[-1]
    return source[:at] + typo + source[at + len(name) :], f"NameError: name '{typo}' is not defined"


def code_fix(rng: random.Random, pools: Pools) -> Draft:
    candidates = pools.python + [f for f in pools.code if f.language == "JavaScript"]
    for _ in range(20):
        function = rng.choice(candidates)
        options = [b for b in BUGS if re.search(b[0], function.bare)]
        typo = misspell(rng, function.bare) if function.language == "Python" and rng.random() < 0.25 else None
        if typo is not None:
            broken, symptom = typo[0], f"fails with `{typo[1]}`"
        elif options:
            pattern, replacement, symptom = rng.choice(options)
            spots = list(re.finditer(pattern, function.bare))
            spot = rng.choice(spots)
            broken = function.bare[: spot.start()] + replacement + function.bare[spot.end() :]
        else:
            continue
        if function.language == "JavaScript":
            symptom = symptom.replace("None", "undefined")
        block = f"```{function.language.lower()}\n{broken}\n```"
        todo = task(function.summary) if function.summary else None
        intent = f" It should {todo}." if todo else ""
        template = rng.choice((
            "This function {symptom}. Can you fix it?{intent}\n\n{code}", "Why does this {lang} code not work? It "
            "{symptom}.\n\n{code}", "{code}\n\nfix this pls, it {symptom}", "There's a bug somewhere in here.{intent} "
            "Find it and explain the fix.\n\n{code}", "Can you debug this? It {symptom}.{intent}\n\n{code}",
        ))  # fmt: skip
        content = template.format(symptom=symptom, intent=intent, code=block, lang=function.language)
        reply = f"The bug is in this line; here is the corrected function:\n\n{fenced(function)}"
        return Draft(content, f"{function.language.lower()}:{function.origin}:{function.name}", None, reply)
    raise ValueError("code/fix: no function in this split takes a bug")


def code_explain(rng: random.Random, pools: Pools) -> Draft:
    function = rng.choice(pools.code)
    template = rng.choice((
        "What does this code do?\n\n{code}", "Explain this {lang} function line by line:\n\n{code}",
        "{code}\n\nCan you walk me through this?", "What is the time complexity of this function?\n\n{code}",
        "I found this in a codebase. What is it for, and is there anything risky in it?\n\n{code}",
        "Add comments to this {lang} code explaining each step:\n\n{code}",
    ))  # fmt: skip
    todo = task(function.summary) if function.summary else None
    reply = f"This function is meant to {todo}." if todo else None
    content = template.format(code=fenced(function), lang=function.language)
    return Draft(content, f"{function.language.lower()}:{function.origin}:{function.name}", None, reply)


# ---------------------------------------------------------------------------------------------------------------------
# write: emails, stories, poems (source-free but for a poem's topic: each filled template is its own split key)

RECIPIENTS = ("my manager", "my landlord", "a client", "my team", "my professor", "a recruiter", "my neighbour",
              "the school principal", "customer support", "a job candidate", "my coworker", "the hiring manager",
              "a supplier", "my bank", "the city council", "an old friend", "my child's teacher", "a new employee",
              "the IT department", "a conference organizer", "my doctor's office", "a hotel",
              "our investors")  # fmt: skip
PURPOSES = ("asking for a day off next Friday", "about a late payment", "apologizing for missing the meeting",
            "asking for a raise", "declining an invitation politely", "following up on my job application",
            "requesting a refund for a broken laptop", "introducing myself", "announcing a project delay of two weeks",
            "thanking them for their help last week", "about a noisy party next door", "asking to reschedule our call",
            "reporting a security incident", "proposing a new weekly meeting time", "resigning from my position",
            "asking for feedback on my presentation", "reminding them about an unpaid invoice", "about a leaking roof",
            "confirming the details of our order", "inviting them to a product launch", "asking for a recommendation "
            "letter", "complaining about a delayed delivery", "welcoming them to the team", "about a change in our "
            "prices", "asking for an extension on the deadline")  # fmt: skip
TONES = ("", "", " Keep it formal.", " Make it friendly but professional.", " Keep it under 100 words.",
         " It should sound polite but firm.", " Use a warm tone.", " Make it short and to the point.")  # fmt: skip
CHARACTERS = ("a retired astronaut", "a shy dragon", "a detective who is afraid of the dark", "a robot that wants to "
              "be a chef", "two rival bakers", "a girl who can talk to birds", "a lighthouse keeper", "an old cat",
              "a time traveler stuck in 1850", "a programmer", "a lonely ghost", "a street musician", "a young "
              "witch", "a grumpy wizard", "a lost penguin", "a knight who hates fighting", "a librarian", "twins "
              "separated at birth", "a talking tree", "a small-town mayor", "a fox and a crow", "a nurse on a night "
              "shift")  # fmt: skip
EVENTS = ("finds a mysterious map", "wakes up with no memory", "has to save the village from a flood",
          "discovers a door that wasn't there yesterday", "wins the lottery but can't tell anyone", "gets lost in a "
          "forest", "must deliver a letter before midnight", "meets their future self", "learns a secret about their "
          "family", "builds a machine that grants wishes", "is the last person on Earth", "enters a cooking contest",
          "finds a baby dragon", "loses their voice before a big concert",
          "receives a letter from the moon")  # fmt: skip
STORY_SHAPES = ("", "", " Make it funny.", " Keep it under 300 words.", " It should have a twist ending.",
                " Write it for a five-year-old.", " Set it in space.", " Make it a mystery.", " In the style of a "
                "fairy tale.", " Tell it in the first person.")  # fmt: skip
POEM_FORMS = ("a poem", "a haiku", "a limerick", "a sonnet", "a short rhyming poem", "a free-verse poem",
              "four lines of verse", "a song chorus")  # fmt: skip
POEM_TOPICS = (
    "the ocean at night",
    "autumn leaves",
    "my cat",
    "Monday mornings",
    "the first snow",
    "coffee",
    "friendship",
    "a city in the rain",
    "growing old",
    "the moon",
    "a forgotten toy",
    "summer holidays",
    "learning to code",
    "a broken heart",
    "the stars",
    "a busy train station",
    "my grandmother's kitchen",
    "the sound of rain",
    "a lighthouse",
    "spring flowers",
    "a sleepy dog",
    "the mountains",
    "a long road trip",
    "my first job",
    "the last day of school",
    "a thunderstorm",
    "city lights",
    "an old photograph",
    "homesickness",
    "a garden in June",
    "the desert at noon",
    "a rainy Sunday",
    "falling in love",
    "the end of winter",
    "a library",
    "the night shift",
    "my hometown",
    "a cup of tea",
    "the sea breeze",
    "a paper boat",
    "a kite",
    "fireflies",
    "my best friend",
    "a new baby",
    "a farewell",
    "the wind",
    "the internet",
    "a bug in my code",
    "waiting for the bus",
    "a marathon",
    "the first day of spring",
)


def write_email(rng: random.Random, pools: Pools) -> Draft:
    recipient, purpose, tone = rng.choice(RECIPIENTS), rng.choice(PURPOSES), rng.choice(TONES)
    name = rng.choice(NAMES)
    template = rng.choice((
        "Write an email to {r} {p}.{t}", "Can you draft an email to {r} {p}? My name is {n}.{t}",
        "help me write an email to {r} {p}", "I need to email {r} {p}. Write it for me.{t}",
        "Draft a short message to {r} {p}, signed {n}.{t}",
    ))  # fmt: skip
    content = template.format(r=recipient, p=purpose, t=tone, n=name)
    return Draft(content, "email", content)


def write_story(rng: random.Random, pools: Pools) -> Draft:
    who, event, shape = rng.choice(CHARACTERS), rng.choice(EVENTS), rng.choice(STORY_SHAPES)
    template = rng.choice((
        "Write a short story about {w} who {e}.{s}", "Tell me a story about {w} who {e}.{s}",
        "Can you write a bedtime story about {w} who {e}?{s}", "write a story: {w} {e}.{s}",
        "Write the opening paragraph of a novel about {w} who {e}.{s}",
    ))  # fmt: skip
    content = template.format(w=who, e=event, s=shape)
    return Draft(content, "story", content)


def write_poem(rng: random.Random, pools: Pools) -> Draft:
    form = rng.choice(POEM_FORMS)
    if rng.random() < 0.4 and pools.man:  # a poem about a tool: chat users ask for those too
        page = rng.choice(pools.man)
        topic, source = f"the `{page.command}` command", f"man:{page.command}"
    else:
        topic, source = rng.choice(POEM_TOPICS), "poem"
    template = rng.choice((
        "Write {f} about {t}.", "Can you write {f} about {t}?", "write {f} about {t}", "I'd love {f} about {t}.",
        "Compose {f} about {t} for my friend's birthday card.",
    ))  # fmt: skip
    content = template.format(f=form, t=topic)
    return Draft(content, source, content if source == "poem" else None)


# ---------------------------------------------------------------------------------------------------------------------
# text: rewrite, summarize, translate a given text


def text_rewrite(rng: random.Random, pools: Pools) -> Draft:
    paragraph = rng.choice(pools.paragraphs)
    template = rng.choice((
        "Rewrite this to be more formal:\n\n{x}", "Make this paragraph simpler for a beginner:\n\n{x}",
        "Fix the grammar and make this read better:\n\n{x}", "Rewrite this in a friendlier tone:\n\n{x}",
        "Shorten this to two sentences:\n\n{x}", "Turn this into a bulleted list:\n\n{x}", "Paraphrase this:\n\n{x}",
        "{x}\n\nCan you rewrite the above so a non-technical reader understands it?",
    ))  # fmt: skip
    return Draft(template.format(x=paragraph.text), f"doc:{paragraph.origin}", None, paragraph.text)


def text_summarize(rng: random.Random, pools: Pools) -> Draft:
    run = rng.choice(pools.runs)
    length = rng.choice((600, 1200, 2000, 3000))
    parts, total = [], 0
    for paragraph in run[rng.randrange(len(run)) :] + run:
        if total >= length or paragraph in parts:
            break
        parts.append(paragraph)
        total += len(paragraph.text)
    text = "\n\n".join(p.text for p in sorted(parts, key=lambda p: p.index))
    template = rng.choice((
        "Summarize this in {n} sentences:\n\n{x}", "TL;DR?\n\n{x}", "Give me the key points of this text:\n\n{x}",
        "{x}\n\nSummarize the above for a busy manager.", "Can you summarize this for me?\n\n{x}",
        "What is the main idea of this passage?\n\n{x}",
    ))  # fmt: skip
    reply = " ".join(re.split(r"(?<=[.!?])\s", text)[:2])  # a lead summary: the text's own first sentences
    return Draft(template.format(n=rng.choice(("two", "three", "3", "one")), x=text), f"doc:{run[0].origin}", None,
                 reply)  # fmt: skip


def text_translate(rng: random.Random, pools: Pools) -> Draft:
    short = [p for p in (rng.choice(pools.paragraphs) for _ in range(8)) if len(p.text) <= 700]
    paragraph = short[0] if short else rng.choice(pools.paragraphs)
    language = rng.choice(HUMAN_LANGUAGES)
    template = rng.choice((
        "Translate this into {l}:\n\n{x}", "Can you translate the following to {l}?\n\n{x}",
        "{x}\n\nTranslate to {l}, please.", "translate to {l}: {x}", "How would you say this in {l}?\n\n{x}",
    ))  # fmt: skip
    return Draft(template.format(l=language, x=paragraph.text), f"doc:{paragraph.origin}", None)
