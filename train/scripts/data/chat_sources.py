"""Local text that chat prompts are built over (make_chat_kinds.py): man pages, documentation prose and headings,
Python functions from the standard library, JavaScript functions from node_modules, shell scripts from /usr/bin.

Every item carries the sha256 of the file it came from: the prompt builder splits by that hash, so no source file
feeds two splits. Files are read in sorted path order and each reader stops at its limit, so the same files give the
same items.

    sources = read_sources(Roots.default(repo))   # Sources(man=[...], paragraphs=[...], ...)
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ManPage:
    command: str
    description: str  # the NAME line's, e.g. "copy files and directories"
    options: tuple[tuple[str, str], ...]  # (flag, what it does), e.g. ("-r", "copy directories recursively")
    key: str  # sha256 of the file


@dataclass(frozen=True)
class Paragraph:
    text: str  # one prose paragraph, reflowed to one line
    origin: str  # file path relative to its root, e.g. "git-doc/git-add.txt"
    index: int  # its position among the file's prose paragraphs: consecutive ones make a longer text
    key: str


@dataclass(frozen=True)
class Topic:
    text: str  # a heading or glossary term, e.g. "Rebasing a branch"
    origin: str
    key: str


@dataclass(frozen=True)
class Function:
    language: str  # "Python" | "JavaScript" | "Bash"
    name: str
    source: str  # dedented
    summary: str  # the docstring's first sentence (Python); "" elsewhere
    bare: str  # the source without its docstring (Python); the source elsewhere
    signature: str  # "name(a, b=1)" (Python); "" elsewhere
    origin: str
    key: str


@dataclass
class Sources:
    man: list[ManPage] = field(default_factory=list)
    paragraphs: list[Paragraph] = field(default_factory=list)
    topics: list[Topic] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in ("man", "paragraphs", "topics", "functions")}


@dataclass(frozen=True)
class Roots:
    man: tuple[Path, ...]
    docs: tuple[Path, ...]
    python: tuple[Path, ...]
    javascript: tuple[Path, ...]
    shell: tuple[Path, ...]

    @staticmethod
    def default(repo: Path) -> Roots:
        import os  # noqa: PLC0415  (os.py sits in the standard library: where its sources are)

        return Roots(
            man=(Path("/usr/share/man/man1"), Path("/usr/share/man/man8")),
            docs=(Path("/usr/share/doc"), repo / "train/.cache/prose"),
            python=(Path(os.__file__).parent,),
            javascript=(repo / "node_modules",),
            shell=(Path("/usr/bin"),),
        )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_bytes(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
        return gzip.decompress(data) if path.suffix == ".gz" else data
    except (OSError, EOFError, gzip.BadGzipFile):
        return None


def decode(data: bytes | None) -> str | None:
    if data is None or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def files_under(roots: tuple[Path, ...], pattern: re.Pattern[str], skip: tuple[str, ...] = ()) -> Iterator[Path]:
    """Files whose name matches, under each root in sorted order (symlinks skipped: they repeat files)."""
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or not path.is_file() or not pattern.search(path.name):
                continue
            if any(part in skip for part in path.parts):
                continue
            yield path


# ---------------------------------------------------------------------------------------------------------------------
# man pages

ROFF_ESCAPES = [
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # font changes \fB \fR \f(CW \f[B]
    (re.compile(r"\\\(aq|\\\(cq"), "'"),
    (re.compile(r"\\\((lq|rq|dq)"), '"'),
    (re.compile(r"\\\((em|en)"), "-"),
    (re.compile(r"\\[-(]"), "-"),
    (re.compile(r"\\[&/,|^%:]"), ""),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\\*\(?[A-Za-z]{1,2}"), ""),  # string registers
    (re.compile(r'\\".*'), ""),  # comments
    (re.compile(r"\\ "), " "),
]


def unroff(line: str) -> str:
    for pattern, replacement in ROFF_ESCAPES:
        line = pattern.sub(replacement, line)
    return line.replace('"', "") if line.startswith(".") else line


MAN_PER_FAMILY = 60  # man pages of one family (git-*, gcloud_*: 16k pages on one machine) so that no tool dominates


def parse_man(text: str, key: str) -> ManPage | None:
    """The NAME line's command and description and the options of .TP blocks; None without a NAME line."""
    lines = text.splitlines()
    name_at = next((i for i, line in enumerate(lines) if re.match(r'\.S[Hh]\s+"?NAME"?\s*$', line)), None)
    if name_at is None:
        return None
    name_parts = []
    for line in lines[name_at + 1 : name_at + 8]:
        if re.match(r"\.S[Hh]\b", line):
            break
        if m := re.match(r"\.(B|Nm)\s+(.*)", line):
            name_parts.append(unroff(m.group(2)))
        elif line.startswith(".Nd "):
            name_parts.append("- " + unroff(line[4:]))
        elif not line.startswith("."):
            name_parts.append(unroff(line))
    name_line = " ".join(" ".join(name_parts).split())
    match = re.match(r"([\w.+-]+(?: [a-z][\w.+-]*)?)(?:\s*,\s*[\w.+-]+)*\s+-+\s+(.{8,120}?)\s*$", name_line)
    if not match:
        return None
    options = []
    for i, line in enumerate(lines[:-2]):
        if line.strip() != ".TP" or lines[i + 1].startswith("."):
            continue
        flag = unroff(lines[i + 1]).split(",")[0].split("=")[0].split("[")[0].strip()
        body = []
        for next_line in lines[i + 2 : i + 6]:
            if next_line.startswith("."):
                break
            body.append(unroff(next_line).strip())
        what = " ".join(body).strip()
        if re.fullmatch(r"--?[\w-]+", flag) and 12 <= len(what) <= 160 and what[0].isalpha():
            options.append((flag, what.rstrip(".")))
    return ManPage(match.group(1), match.group(2).rstrip("."), tuple(options), key)


def read_man(roots: tuple[Path, ...], limit: int, per_family: int = MAN_PER_FAMILY) -> list[ManPage]:
    pages: list[ManPage] = []
    families: dict[str, int] = {}
    for path in files_under(roots, re.compile(r"\.[18][a-z]*\.gz$")):
        family = re.split(r"[-_.]", path.name)[0]
        if families.get(family, 0) >= per_family:
            continue
        data = read_bytes(path)
        text = decode(data)
        page = parse_man(text, sha256(data)) if text and data else None
        if page is not None:
            pages.append(page)
            families[family] = families.get(family, 0) + 1
            if len(pages) >= limit:
                break
    return pages


# ---------------------------------------------------------------------------------------------------------------------
# documentation prose

DOC_NAME = re.compile(r"^(README[\w.-]*|.+\.(txt|md|rst|adoc))(\.gz)?$", re.IGNORECASE)
DOC_SKIP = ("changelog", "copyright", "NEWS", "THANKS", "AUTHORS", "LICENSE")
HEADING_UNDERLINE = re.compile(r"^([=\-~^*#])\1{2,}\s*$")


def is_prose(paragraph: str) -> bool:
    """Sentences of running text: mostly letters, long lines, no code or table markers."""
    lines = paragraph.splitlines()
    if not 150 <= len(paragraph) <= 1500 or any(re.match(r"\s{4}|\s*[$>|+*#-]\s|\s*[-=+|]{3}", x) for x in lines):
        return False
    if not paragraph[0].isupper() or "::" in paragraph:  # mid-sentence cuts; AsciiDoc definition lists
        return False
    letters = sum(c.isalpha() or c == " " for c in paragraph)
    return letters / len(paragraph) > 0.85 and len(paragraph) / len(lines) > 40 and ". " in paragraph


def headings(text: str) -> Iterator[str]:
    """Section titles: Markdown ``# Title`` and underlined titles (reStructuredText, AsciiDoc)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        title = None
        if m := re.match(r"#{1,4}\s+(.+?)\s*#*\s*$", line):
            title = m.group(1)
        elif i + 1 < len(lines) and HEADING_UNDERLINE.match(lines[i + 1]) and len(lines[i + 1]) >= len(line) > 0:
            title = line.strip()
        if (
            title
            and 2 <= len(title.split()) <= 7
            and re.fullmatch(r"[A-Z][\w ,'()/-]+", title)
            and not title.isupper()  # man-page section names: SEE ALSO, DESCRIPTION
            and not re.search(r"copyright|license|\(c\)|^see also$", title, re.IGNORECASE)
        ):
            yield title


def read_docs(roots: tuple[Path, ...], limit_files: int) -> tuple[list[Paragraph], list[Topic]]:
    paragraphs: list[Paragraph] = []
    topics: list[Topic] = []
    seen: set[str] = set()
    files = 0
    for root in roots:
        for path in files_under((root,), DOC_NAME):
            if any(s.lower() in path.name.lower() for s in DOC_SKIP) or files >= limit_files:
                continue
            data = read_bytes(path)
            text = decode(data)
            if not text or not data or len(text) < 500 or (key := sha256(data)) in seen:
                continue
            seen.add(key)
            files += 1
            origin = str(path.relative_to(root))
            prose = [p for p in re.split(r"\n\s*\n", text) if is_prose(p.strip())]
            paragraphs += [Paragraph(" ".join(p.split()), origin, i, key) for i, p in enumerate(prose)]
            topics += [Topic(t, origin, key) for t in dict.fromkeys(headings(text))]
    return paragraphs, topics


# ---------------------------------------------------------------------------------------------------------------------
# code

PYTHON_SKIP = ("test", "tests", "idle_test", "site-packages", "dist-packages", "lib2to3", "__pycache__")


def python_functions(text: str, origin: str, key: str) -> Iterator[Function]:
    """Public functions and methods of 6–40 lines with a docstring whose first sentence says what they do."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or node.decorator_list:
            continue
        doc = ast.get_docstring(node)
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if not doc or not 6 <= length <= 40:
            continue
        summary = " ".join(doc.split("\n\n")[0].split())
        if not re.fullmatch(r"[A-Z][a-z]+ [^.:]{15,140}\.", summary):
            continue
        source = ast.get_source_segment(text, node)
        if source is None:
            continue
        source = textwrap.dedent(" " * node.col_offset + source)
        lines = source.splitlines()
        doc_node = node.body[0]  # the docstring's statement: its lines, counted from the def line
        bare = (
            lines[: doc_node.lineno - node.lineno] + lines[(doc_node.end_lineno or doc_node.lineno) - node.lineno + 1 :]
        )
        signature = f"{node.name}({ast.unparse(node.args)})"
        yield Function("Python", node.name, source, summary, "\n".join(bare), signature, origin, key)


JS_FUNCTION = re.compile(r"^(?:export\s+)?(?:async\s+)?function\s+([A-Za-z_$][\w$]*)\s*\([^)]*\)\s*\{", re.MULTILINE)


def javascript_functions(text: str, origin: str, key: str) -> Iterator[Function]:
    """Top-level ``function name(...) {...}`` declarations of 6–40 lines (braces counted; strings are rare enough in
    the bodies kept that a brace inside one only drops that function)."""
    for match in JS_FUNCTION.finditer(text):
        depth, end = 0, None
        for i in range(match.end() - 1, min(len(text), match.end() + 4000)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                end = i + 1
                break
        if end is None:
            continue
        source = text[match.start() : end]
        if 6 <= source.count("\n") + 1 <= 40 and max(map(len, source.splitlines())) <= 120:
            yield Function("JavaScript", match.group(1), source, "", source, "", origin, key)


def shell_snippets(text: str, origin: str, key: str) -> Iterator[Function]:
    """One window of 8–30 lines of a shell script, starting at a function or at its first command."""
    lines = text.splitlines()
    if not lines or not re.match(r"#!\s*/(usr/)?bin/(env\s+)?(ba)?sh\b", lines[0]) or len(lines) < 12:
        return
    function_at = next((i for i, x in enumerate(lines) if re.match(r"\s*\w+\s*\(\)\s*\{?\s*$", x)), None)
    first_command = next((i for i, x in enumerate(lines) if x.strip() and not x.lstrip().startswith("#")), 1)
    start = first_command if function_at is None else function_at
    window = lines[start : start + 30]
    if len(window) >= 8 and max(map(len, window)) <= 120:
        snippet = "\n".join(window).strip("\n")
        yield Function("Bash", Path(origin).name, snippet, "", snippet, "", origin, key)


def read_code(roots: Roots, limit_files: int) -> list[Function]:
    found: list[Function] = []
    readers = (
        (roots.python, re.compile(r"\.py$"), PYTHON_SKIP, python_functions),
        (roots.javascript, re.compile(r"^[\w.-]+(?<!\.min)\.js$"), ("test", "tests", "dist", "umd"),
         javascript_functions),
        (roots.shell, re.compile(r"^[\w.-]+$"), (), shell_snippets),
    )  # fmt: skip
    for root_list, pattern, skip, reader in readers:
        files = 0
        for root in root_list:
            for path in files_under((root,), pattern, skip):
                if files >= limit_files or path.stat().st_size > 200_000:
                    continue
                data = read_bytes(path)
                text = decode(data)
                if text and data:
                    files += 1
                    found += reader(text, str(path.relative_to(root)), sha256(data))
    return found


def read_sources(roots: Roots, man_limit: int = 6000, doc_files: int = 3000, code_files: int = 3000) -> Sources:
    paragraphs, topics = read_docs(roots.docs, doc_files)
    return Sources(read_man(roots.man, man_limit), paragraphs, topics, read_code(roots, code_files))
