"""Write docs/api.md: every package's public names (its ``__all__``), one line each.

    .venv/bin/python scripts/api_doc.py        # rewrite docs/api.md
    .venv/bin/python scripts/api_doc.py --check   # exit 1 if docs/api.md is stale

``tests/test_layout.py`` runs the check, so the page cannot drift from the code.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "api.md"
PACKAGES = [
    "memtrace_otel",
    "memtrace_otel.semconv",
    "memtrace_otel.errors",
    "memtrace_otel.export",
    "memtrace_otel.instrumentation",
    "memtrace_otel.instrumentors",
    "memtrace_otel.graph",
    "memtrace_otel.processing",
    "memtrace_otel.sources",
    "memtrace_otel.attribution",
    "memtrace_otel.job",
    "memtrace_otel.reporting",
    "memtrace_otel.testing",
    "memtrace_bench.systems",
    "memtrace_bench.optimize",
    "memtrace_bench.methods",
    "memtrace_bench.memtracebench",
]


def _summary(value: object) -> str:
    """The first paragraph of an object's own docstring, or what kind of value it is."""
    if inspect.ismodule(value):
        return f"module: {' '.join((value.__doc__ or '').split(chr(10) * 2)[0].split())}"
    if getattr(value, "__module__", None) in ("typing", "collections.abc", "types"):
        return f"type alias `{value!r}`".replace("typing.", "").replace("collections.abc.", "")
    if inspect.isclass(value) and issubclass(value, enum.Enum):
        kind = "enum"
    elif inspect.isclass(value):
        kind = "class"
    elif callable(value):
        kind = "function"
    else:
        # Sets in sorted order: their repr follows string hashing, which changes per process.
        shown = (
            "{" + ", ".join(sorted(map(repr, value))) + "}"
            if isinstance(value, set | frozenset)
            else repr(value)
        )
        return f"constant `{shown if len(shown) <= 60 else shown[:57] + '...'}`"
    doc = inspect.getdoc(value) if kind != "enum" or value.__doc__ else None
    if not doc or (kind == "class" and doc == inspect.getdoc(type(value))):
        return kind
    first = " ".join(doc.split("\n\n")[0].split())
    return f"{kind}: {first}"


def render() -> str:
    lines = [
        "# Public API",
        "",
        "Every name a package exports (its `__all__`), one line each; anything else is private",
        "and may change. Written by `scripts/api_doc.py` (a test checks it is current).",
        "",
    ]
    sys.path.insert(0, str(REPO))
    for name in PACKAGES:
        module = importlib.import_module(name)
        public = list(getattr(module, "__all__", []))
        lines += [f"## `{name}` ({len(public)})", ""]
        for attr in public:
            value = getattr(module, attr)
            lines.append(f"- `{attr}`: {_summary(value)}")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if docs/api.md is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print("docs/api.md is stale: run scripts/api_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
