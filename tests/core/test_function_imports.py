"""Imports of the package's own modules sit at module level, below the command line's one lazy
boundary (`slackswap.commands.lazy`): at most `MOST` remain inside functions, each with a
comment saying why (an optional dependency, the Ctrl-C handler first).

Run as a script to list them: ``python tests/core/test_function_imports.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "slackswap"
MOST = 10


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _own(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "slackswap"
    return any(a.name.split(".")[0] == "slackswap" for a in node.names)


def _visit(
    node: ast.AST, in_function: bool, lines: list[str], name: str, found: list[tuple[str, int, str]]
) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _type_checking(child):
            orelse = ast.Module(body=child.orelse, type_ignores=[])  # an else still runs
            _visit(orelse, in_function, lines, name, found)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom) and in_function and _own(child):
            same = lines[child.lineno - 1].partition("#")[2].strip()
            above = lines[child.lineno - 2].strip() if child.lineno > 1 else ""
            why = same or (above[1:].strip() if above.startswith("#") else "")
            found.append((name, child.lineno, why))
        inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        _visit(child, inside, lines, name, found)


def function_imports(src: Path = SRC) -> list[tuple[str, int, str]]:
    """(file, line, the comment that says why or "") of every import of a slackswap module
    inside a function, outside ``if TYPE_CHECKING:`` blocks."""
    found: list[tuple[str, int, str]] = []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        _visit(ast.parse(text), False, text.splitlines(), str(path.relative_to(src.parent)), found)
    return found


def test_few_function_level_imports_each_saying_why() -> None:
    found = function_imports()
    listing = "\n".join(f"{f}:{n}: {why or '(no comment)'}" for f, n, why in found)
    assert len(found) <= MOST, f"{len(found)} function-level imports of own modules:\n{listing}"
    assert all(why for _, _, why in found), f"each says why in a comment:\n{listing}"


def test_the_count_sees_an_import_in_a_function(tmp_path: Path) -> None:
    # The oracle: a hand-made tree with one import of each kind.
    pkg = tmp_path / "slackswap"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from slackswap import errors\n"
        "if TYPE_CHECKING:\n"
        "    from slackswap.plan import Plan\n"
        "def f():\n"
        "    if TYPE_CHECKING:\n"
        "        from slackswap.plan import Budget\n"
        "    # lazy: an optional dependency\n"
        "    from slackswap.instance import Instance\n"
        "    import json\n"
        "    class C:\n"
        "        def g(self):\n"
        "            import slackswap.models  # why\n"
    )
    assert function_imports(pkg) == [
        ("slackswap/m.py", 9, "lazy: an optional dependency"),
        ("slackswap/m.py", 13, "why"),
    ]


if __name__ == "__main__":
    for file, line, why in function_imports():
        print(f"{file}:{line}: {why or '(no comment)'}")
