"""No function in clover/ is longer than 80 lines (decorators and docstring included): a long
function is split into named steps, as the engine's ``step()`` reads like a paragraph."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 80
PACKAGE = Path(__file__).parents[1] / "clover"
KNOWN_LONG: set[str] = set()  # "path name" of a function allowed over the limit: none


def test_no_function_in_clover_is_longer_than_80_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - start + 1 > MAX_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent).as_posix()} {node.name}")
    assert sorted(set(long) - KNOWN_LONG) == []
