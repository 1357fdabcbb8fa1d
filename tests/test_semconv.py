"""The contract's names: one module, no clashes, nobody else spells them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memtrace_otel.semconv import (
    ERROR_TYPE_BY_KIND,
    ErrorType,
    OpKind,
    Ref,
    attributes,
    env,
    parse_ref,
)
from tests.conftest import REPO, shared_path


def test_no_attribute_name_is_both_a_leaf_and_a_prefix_of_another() -> None:
    names = set(attributes.ALL_ATTRIBUTE_NAMES)
    clashes = [(a, b) for a in names for b in names if b.startswith(a + ".")]
    assert clashes == []


def test_every_memtrace_name_in_the_shared_contract_is_a_constant() -> None:
    contract = shared_path("spec", "semconv.md").read_text()
    import re

    spelled = set(re.findall(r"`(memtrace\.[a-z_.]+)`", contract))
    spelled = {s.rstrip(".") for s in spelled if not s.endswith(".*")}
    missing = spelled - set(attributes.ALL_ATTRIBUTE_NAMES) - set(attributes.SPAN_AND_EVENT_NAMES)
    assert missing == set()


def test_no_other_module_spells_a_memtrace_literal() -> None:
    offenders = []
    for path in (REPO / "memtrace_otel").rglob("*.py"):
        if path.parent.name == "semconv":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("memtrace.")
                and id(node) not in docstrings
            ):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}")
    assert offenders == []


def test_every_blamable_kind_maps_to_one_of_the_five_labels() -> None:
    assert set(ERROR_TYPE_BY_KIND) == set(OpKind)
    assert {v for v in ERROR_TYPE_BY_KIND.values() if v} == set(ErrorType)
    assert ERROR_TYPE_BY_KIND[OpKind.INGEST] is None and ERROR_TYPE_BY_KIND[OpKind.JUDGE] is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("a@1", Ref("a", 1)), ("U1:D1:3@12", Ref("U1:D1:3", 12)), ("x@y.com@2", Ref("x@y.com", 2))],
)
def test_refs_split_at_the_last_at(text: str, expected: Ref) -> None:
    assert parse_ref(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize("bad", ["a", "@1", "a@", "a@0", "a@-1", "a@1.5", "a@١"])
def test_invalid_refs_raise(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid variable ref"):
        parse_ref(bad)


def test_semconv_doc_names_every_constant() -> None:
    doc = (REPO / "docs" / "semantic-conventions.md").read_text()
    names = [*attributes.ALL_ATTRIBUTE_NAMES, *attributes.METRIC_NAMES]
    missing = [name for name in names if f"`{name}`" not in doc]
    assert missing == []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


STAGES = [
    "semconv",
    "instrumentation",
    "instrumentors",
    "export",
    "sources",
    "graph",
    "processing",
    "attribution",
    "job",
    "reporting",
    "cli",
]
"""The product's stages in the order data travels; each imports only from earlier ones.

The manual API does not import ``export`` (a test checks that importing the API loads no SDK
module); instrumentors are built on the manual API. ``sources`` (wire formats in, span records
and evaluations out) comes before ``graph`` (the one builder: span records in, networkx out, and
the one query layer over it, whose cases carry their evaluations); ``graph`` comes before
``processing`` because the live processor folds with that builder. ``attribution`` is the method
(one case, one graph, one verdict); ``job`` the batch run around it (load, find failed cases,
attribute, record, write back, score). The bench wing (``memtrace_bench``) sits on top of all of
them.
"""
RANK = {name: i for i, name in enumerate(STAGES)}
FOUNDATION = {"_internal", "_settings", "_shim", "_version", "_openai", "_progress", "errors"}
"""Top-level modules every stage may use (logging policy, the settings resolver, SDK shims, typed
errors); they import no stage but ``semconv``."""
TOOLS = {"testing"}
"""The pytest plugin: built on the product, imported by nothing in it."""
BENCH = "memtrace_bench"


def _package_modules(path: Path) -> set[str]:
    """Every ``memtrace_otel``/``memtrace_bench`` module the file imports, statically or lazily."""
    return {m for m in _imports(path) if m.split(".")[0] in ("memtrace_otel", BENCH)}


def _stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "memtrace_otel" and len(parts) > 1 else None


def test_every_product_module_belongs_to_a_stage_or_the_foundation() -> None:
    root = REPO / "memtrace_otel"
    known = set(STAGES) | FOUNDATION | TOOLS | {"__init__", "py"}
    strays = sorted(
        p.name for p in root.iterdir() if p.stem not in known and (p.is_dir() or p.suffix == ".py")
    )
    assert strays in ([], ["__pycache__"])


def test_each_stage_imports_only_from_earlier_ones() -> None:
    violations = []
    for stage in STAGES:
        for path in (REPO / "memtrace_otel" / stage).rglob("*.py"):
            for module in _package_modules(path):
                target = _stage_of(module)
                if target not in RANK:
                    continue
                if RANK[target] > RANK[stage]:
                    violations.append(f"{path.relative_to(REPO)} imports {module}")
    assert violations == []


def test_the_foundation_imports_no_stage_but_the_contract() -> None:
    violations = [
        f"{path.name} imports {module}"
        for path in (REPO / "memtrace_otel").glob("*.py")
        if path.stem in FOUNDATION
        for module in _package_modules(path)
        if _stage_of(module) not in (None, "semconv", *FOUNDATION)
    ]
    assert violations == []


def test_no_product_module_imports_the_bench_wing() -> None:
    """Never: the product stands alone; the bench wing reaches the CLI only by entry point."""
    offenders = [
        f"{path.relative_to(REPO)} imports {module}"
        for path in (REPO / "memtrace_otel").rglob("*.py")
        for module in _package_modules(path)
        if module.split(".")[0] == BENCH
    ]
    spelled = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in (REPO / "memtrace_otel").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and any(
            isinstance(a, ast.Constant) and isinstance(a.value, str) and BENCH in a.value
            for a in node.args
        )
    ]
    assert offenders == [] and spelled == []


def test_no_module_imports_the_pytest_plugin() -> None:
    offenders = [
        f"{path.relative_to(REPO)} imports {module}"
        for root in ("memtrace_otel", BENCH)
        for path in (REPO / root).rglob("*.py")
        if "testing" not in path.parts
        for module in _package_modules(path)
        if _stage_of(module) in TOOLS
    ]
    assert offenders == []


def test_the_bench_wing_reaches_the_cli_through_an_entry_point() -> None:
    from importlib.metadata import entry_points

    from memtrace_otel.cli import EXTENSION_GROUP, build_parser

    points = {p.name: p.value for p in entry_points(group=EXTENSION_GROUP)}
    assert points.get("bench") == "memtrace_bench.cli"
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"demo", "bench", "optimize", "attribute"} <= set(commands)
    from memtrace_otel.attribution import method_names

    assert "replay" in method_names()


def test_all_attribute_names_collects_every_constant_of_the_module() -> None:
    tree = ast.parse((REPO / "memtrace_otel" / "semconv" / "attributes.py").read_text())
    defined = {
        node.target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    expected = {
        value
        for key, value in defined.items()
        if not key.startswith("METRIC_")
        and value not in attributes.SPAN_AND_EVENT_NAMES
        and key not in ("OP_SPAN_NAME_PREFIX", "METADATA_TRACEPARENT", "METADATA_VERSION")
    }
    assert expected == set(attributes.ALL_ATTRIBUTE_NAMES)


def test_environment_variable_names_live_in_one_module_apart_from_the_wire_names() -> None:
    wire = [key for key in vars(attributes) if key.startswith("ENV_")]
    names = {key: value for key, value in vars(env).items() if key.startswith("ENV_")}
    assert wire == []
    assert names and all(isinstance(value, str) and value.isupper() for value in names.values())
    assert len(set(names.values())) == len(names)  # no variable spelled twice
    assert not set(names.values()) & set(attributes.ALL_ATTRIBUTE_NAMES)
    # No other module of the package spells an ENV_ constant of its own.
    for path in (REPO / "memtrace_otel").rglob("*.py"):
        if path.name == "env.py" and path.parent.name == "semconv":
            continue
        tree = ast.parse(path.read_text())
        own = [
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name) and target.id.lstrip("_").startswith("ENV_")
        ]
        assert own == [], (path, own)


@pytest.mark.parametrize(
    "text",
    [
        "a@1",
        "a@0",
        "a",
        "@1",
        "a@",
        "a@00",
        "a@01",
        "a@²",
        "a@-1",
        "a@1.0",
        "x@y@3",
        "a@ 1",
        "a@1 ",
        "a@१",
        "a@10",
        7,
        None,
    ],
)
def test_is_ref_agrees_with_parse_ref(text: object) -> None:
    from memtrace_otel.semconv import is_ref, parse_ref

    try:
        parse_ref(text)  # type: ignore[arg-type]
        parsed = True
    except ValueError:
        parsed = False
    assert is_ref(text) is parsed
