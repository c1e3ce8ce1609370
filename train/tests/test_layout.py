"""The training package's layout (docs/architecture.md, Training): its rooms and which may import which, checked over
every module; commands talk through files, never by importing one another; every module and function reads in one
sitting."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "specdraft_train"
# The rooms a room's modules may import besides their own, lowest first (docs/architecture.md says the same in prose).
MAY_IMPORT = {
    "settings": set(),  # config.py, presets.py: every stage's settings and the named presets
    "formats": {"settings"},
    "modeling": {"settings", "formats"},
    "training": {"settings", "formats", "modeling"},
    "engine": {"settings", "formats", "modeling", "training"},
    "labs": {"settings", "formats", "modeling"},
    "commands": {"settings", "formats", "modeling", "training", "engine", "labs"},
    "pipeline": {"settings", "formats", "modeling", "training", "engine", "labs", "commands"},  # the orchestrators
    "cli": {"settings", "formats", "commands", "pipeline"},  # __main__, the front door
}
# Rooms whose modules may not import one another: each command stands alone, and no orchestrator runs another.
NO_SIDEWAYS = {"commands", "pipeline"}
# What the orchestrators share, in their room but no orchestrator (no CLI stage): how each runs its stages, and how
# they call the specdraft CLI.
ROOM_MACHINERY = {("pipeline", "runner"), ("pipeline", "specdraft_cli")}
TOP_LEVEL = {
    "__init__": "settings",
    "config": "settings",
    "presets": "settings",
    "progress": "settings",  # how a long step reports, in a terminal or a log
    "__main__": "cli",
}
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 120


def modules() -> dict[tuple[str, ...], Path]:
    """Every module of the package by its dotted name's parts below ``specdraft_train`` (a room's
    ``__init__`` as the room itself)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found[parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts] = path
    return found


def room_of(parts: tuple[str, ...]) -> str:
    """A module's room: the folder it lives in, or for a top-level module the one TOP_LEVEL names."""
    if len(parts) == 1 and parts[0] in TOP_LEVEL:
        return TOP_LEVEL[parts[0]]
    assert parts[0] in MAY_IMPORT, f"{'.'.join(parts)}: in no room (a folder named in MAY_IMPORT, or TOP_LEVEL)"
    return parts[0]


def package_imports(parts: tuple[str, ...], path: Path) -> set[tuple[str, ...]]:
    """The package's modules (or names in them) that a module imports, at its top or inside a function, relative
    (``from ..formats.artifacts import``, ``from . import vocabulary``) or absolute (``specdraft_train.x``)."""
    package = list(parts if path.name == "__init__.py" else parts[:-1])
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            imported |= {tuple(base) if node.module else tuple(base + [alias.name]) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "specdraft_train":
            imported.add(tuple(node.module.split(".")[1:]))
        elif isinstance(node, ast.Import):
            imported |= {tuple(a.name.split(".")[1:]) for a in node.names if a.name.startswith("specdraft_train.")}
    return {target for target in imported if target}


def test_rooms_import_only_the_rooms_below_them():
    known = modules()
    assert {room_of(parts) for parts in known} == set(MAY_IMPORT)  # every room named has modules, and no other
    wrong = {}
    for parts, path in known.items():
        room = room_of(parts)
        for target in package_imports(parts, path):
            # `from ..commands import distill` names a module, `from ..config import X` a name in one
            target_module = target if target in known else target[:-1]
            assert target_module in known, f"{'.'.join(parts)} imports {'.'.join(target)}, not in the package"
            target_room = room_of(target_module)
            if target_room == room:
                allowed = room not in NO_SIDEWAYS or target_module == parts or target_module in ROOM_MACHINERY
            else:
                allowed = target_room in MAY_IMPORT[room]
            if not allowed:
                wrong.setdefault(".".join(parts), []).append(".".join(target_module))
    assert not wrong, f"imports the rooms' rule forbids (move what they share into the room below both): {wrong}"


def test_the_rooms_rule_has_no_cycle():
    try:
        tuple(TopologicalSorter(MAY_IMPORT).static_order())
    except CycleError as error:
        raise AssertionError(f"rooms that may import each other: {error.args[1]}") from None


def test_commands_and_orchestrators_are_the_cli_stages():
    """What the CLI runs is exactly the commands and the orchestrators, so the tree tells which module is one."""
    main = ast.parse((PACKAGE / "__main__.py").read_text())
    stages = next(
        ast.literal_eval(node.value)
        for node in main.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "STAGE_MODULES"
    )
    rooms = {
        ".".join(parts)
        for parts in modules()
        if parts[0] in NO_SIDEWAYS and len(parts) == 2 and parts not in ROOM_MACHINERY
    }
    assert set(stages) == rooms
    for stage in stages:
        tree = ast.parse((PACKAGE / f"{stage.replace('.', '/')}.py").read_text())
        assert any(isinstance(node, ast.FunctionDef) and node.name == "add_parser" for node in tree.body), stage


def test_modules_and_functions_read_in_one_sitting():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE)
        source = path.read_text()
        if (lines := len(source.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, too_long
