"""The package's shape: no import circles, no private names of other libraries outside the shim,
what importing the host-side API loads, and what the sources package exports."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import networkx as nx
import pytest

import memtrace_otel
import memtrace_otel.export
import memtrace_otel.instrumentation
import memtrace_otel.sources
from tests.conftest import REPO


def _sdk_modules_after(code: str) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_the_host_side_api_needs_only_the_opentelemetry_api() -> None:
    # Contrib's rule: instrumentation depends on the API; SDK pieces are opt-in (memtrace_otel.export).
    code = (
        "import memtrace_otel, memtrace_otel.instrumentation\n"
        "import memtrace_otel.instrumentors.mem0, memtrace_otel.instrumentors.openai\n"
        "import memtrace_otel.instrumentors.langgraph\n"
        "from memtrace_otel import MemTracer, Variable, current_op, suppress_tracing\n"
    )
    assert _sdk_modules_after(code) == []


def test_the_probe_sees_the_sdk_when_it_is_imported() -> None:
    assert "opentelemetry.sdk.trace" in _sdk_modules_after("from memtrace_otel import configure")


def test_a_batch_run_that_writes_nothing_back_starts_without_the_sdk_or_protobuf() -> None:
    # `memtrace attribute FILES --out DIR`'s start-up: the SDK (write-back, reviews), protobuf
    # (OTLP protobuf files) and tqdm (a terminal's bar) are imported by the runs that use them.
    code = (
        "from memtrace_otel.cli import build_parser\n"
        "build_parser(['attribute'])\n"
        "import memtrace_otel.job._executors, memtrace_otel.job._run, memtrace_otel.sources\n"
        "import json, sys\n"
        "heavy = ('opentelemetry.sdk', 'google.protobuf', 'opentelemetry.proto', 'tqdm')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    # ... and the lazily served name is still there
    assert memtrace_otel.sources.decode_otlp_proto.__module__ == "memtrace_otel.sources._otlp_proto"


def test_configure_from_the_package_is_the_export_one_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from memtrace_otel import configure
    assert configure is memtrace_otel.export.configure


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        memtrace_otel.instrumentation.nope  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        memtrace_otel.nope  # noqa: B018


def _sources_exports_unused_outside(texts: list[str]) -> list[str]:
    used = "\n".join(texts)
    return [n for n in memtrace_otel.sources.__all__ if not re.search(rf"\b{n}\b", used)]


def test_the_sources_package_exports_only_what_the_docs_and_the_commands_use() -> None:
    # Its readers: README.md and docs/ (docs/api.md is written from __all__: not a reader), the
    # CLI and the bench wing. The rest of the package imports from the private modules.
    texts = [(REPO / "README.md").read_text()]
    texts += [p.read_text() for p in (REPO / "docs").glob("*.md") if p.name != "api.md"]
    for folder in (REPO / "memtrace_otel" / "cli", REPO / "memtrace_bench"):
        texts += [p.read_text() for p in folder.rglob("*.py")]
    assert _sources_exports_unused_outside(texts) == []
    assert _sources_exports_unused_outside(texts[:1]) != []  # the scan sees a missing reader


# --- import circles ----------------------------------------------------------------------------

PACKAGE = REPO / "memtrace_otel"
SHIM = PACKAGE / "_shim.py"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _import_graph() -> nx.DiGraph:
    """Module -> module it imports (anywhere in the file: functions and TYPE_CHECKING too).

    ``from package import submodule`` is an edge to the submodule only: Python runs the
    package's ``__init__`` first whatever is imported, so that is no circle of ours.
    """
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def test_no_import_circles() -> None:
    graph = _import_graph()
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == []


def test_the_circle_check_sees_a_circle() -> None:
    graph = _import_graph()
    assert graph.has_edge("memtrace_otel.processing._processor", "memtrace_otel.graph._build")
    graph.add_edge("memtrace_otel.graph._build", "memtrace_otel.processing._processor")
    assert any(len(c) > 1 for c in nx.strongly_connected_components(graph))


# --- private names of other libraries ----------------------------------------------------------

# Underscore names that are public API of the standard library (namedtuple's methods).
PUBLIC_UNDERSCORE = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _our_names() -> set[str]:
    """Every name the package (shim aside) defines: functions, classes, attributes, variables,
    arguments, ``__slots__`` entries. An underscore name outside this set is someone else's."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path == SHIM:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
            ):
                names.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
    return names


def _foreign_private_access(source: str, ours: set[str]) -> list[str]:
    """``line: what`` for each private name of another library that ``source`` touches."""

    def private(name: str) -> bool:
        return (
            name.startswith("_")
            and not name.startswith("__")
            and name not in ours
            and name not in PUBLIC_UNDERSCORE
        )

    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and private(node.attr):
            found.append(f"{line}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] != "memtrace_otel":
                parts = [*node.module.split("."), *(a.name for a in node.names)]
                if any(p.startswith("_") and not p.startswith("__") for p in parts):
                    found.append(f"{line}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found.extend(
                f"{line}: import {alias.name}"
                for alias in node.names
                if alias.name.split(".")[0] != "memtrace_otel"
                and any(p.startswith("_") for p in alias.name.split("."))
            )
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and private(node.args[1].value)
        ):
            found.append(f"{line}: {node.func.id}(..., {node.args[1].value!r})")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def test_private_names_of_other_libraries_are_touched_only_in_the_shim() -> None:
    ours = _our_names()
    found = [
        f"{path.relative_to(REPO)}:{hit}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != SHIM
        for hit in _foreign_private_access(path.read_text(), ours)
    ]
    assert found == []


def test_the_private_access_scan_sees_each_kind() -> None:
    source = (
        "import sys\n"
        "from opentelemetry.sdk import _shared_internal\n"
        "frame = sys._getframe(1)\n"
        "x = getattr(processor, '_batch_processor')\n"
        "y = point._replace(x=1)\n"
        "z = G._succ\n"
    )
    assert _foreign_private_access(source, _our_names()) == [
        "2: from opentelemetry.sdk import ...",
        "3: ._getframe",
        "4: getattr(..., '_batch_processor')",
        "6: ._succ",
    ]


def test_the_per_kind_factories_and_decorators_are_typed_like_op(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from memtrace_otel.instrumentation import MemTracer\n"
        "mt = MemTracer(system='rag')\n"
        "mt.retrieve('ok', inputs=['a@1'], case_id='c')\n"
        "mt.retrieve('typo', case='c')\n"
        "mt.trace_update('wrong', stage=3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(sample)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["4", "5"], done.stdout
    assert 'Unexpected keyword argument "case"' in errors[0]
    assert 'Argument "stage" has incompatible type "int"' in errors[1]


def test_docs_api_lists_every_public_name_one_line_each() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "api_doc.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    sections = (REPO / "docs" / "api.md").read_text().split("\n## ")[1:]
    for section in sections:
        names = [line.split("`")[1] for line in section.splitlines() if line.startswith("- `")]
        assert len(names) == len(set(names)) and names, section.splitlines()[0]
    assert len(sections) >= 14
