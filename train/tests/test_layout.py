"""The training package's layout (docs/architecture.md, Training): stages talk through files and shared modules, never
by importing one another, and every module and function reads in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "specdraft_train"
STAGES = {"corpus", "tokenizer", "pretrain", "reference", "distill", "evaluate", "export"}
ORCHESTRATORS = {"lab", "ablate"}  # they run the stages, so they import them (but not each other)
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 120


def package_imports(module: Path) -> set[str]:
    """The package's modules that ``module`` imports, at its top or inside a function (``from .x import``)."""
    imported = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            imported |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
    return imported


def test_no_stage_imports_another_stage_and_shared_modules_import_none():
    modules = {path.stem: path for path in PACKAGE.glob("*.py") if path.stem not in ("__init__", "__main__")}
    assert STAGES | ORCHESTRATORS <= set(modules)  # the lists above name real modules
    sideways = {}
    for name, path in modules.items():
        forbidden = ORCHESTRATORS if name in ORCHESTRATORS else STAGES | ORCHESTRATORS
        if found := package_imports(path) & (forbidden - {name}):
            sideways[name] = sorted(found)
    assert not sideways, f"imports between stages (move what they share into a shared module): {sideways}"


def test_modules_and_functions_read_in_one_sitting():
    too_long = []
    for path in sorted(PACKAGE.glob("*.py")):
        source = path.read_text()
        if (lines := len(source.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{path.name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.name}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, too_long
