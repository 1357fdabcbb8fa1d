"""No function in ``memtrace_otel/attribution/`` is over 120 lines (issue 35).

A long function is where rules lose their names: the evidence method's verdict was one function
of 136 lines with 8 exits before its rules were named (``attribution/_rules.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

MAX_LINES = 120
ATTRIBUTION = REPO / "memtrace_otel" / "attribution"

# Functions allowed over the limit while a change that edits them is in flight (issue 35): empty
# now. An entry that is no longer over the limit fails the test, so the list cannot go stale.
ALLOWED: set[tuple[str, str]] = set()


def _long_functions(root: Path) -> dict[tuple[str, str], int]:
    """``(file relative to root, function name) -> lines`` of every function over the limit."""
    found: dict[tuple[str, str], int] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > MAX_LINES:
                    found[(path.relative_to(root).as_posix(), node.name)] = lines
    return found


def test_no_attribution_function_is_over_120_lines() -> None:
    long = _long_functions(ATTRIBUTION)
    over = {key: n for key, n in long.items() if key not in ALLOWED}
    assert not over, f"functions over {MAX_LINES} lines (split them): {over}"


def test_the_allow_list_names_only_functions_still_over_the_limit() -> None:
    long = _long_functions(ATTRIBUTION)
    assert not ALLOWED - set(long), f"no longer over the limit, remove: {ALLOWED - set(long)}"


def test_the_measure_counts_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert _long_functions(tmp_path) == {("m.py", "long"): MAX_LINES + 1}
