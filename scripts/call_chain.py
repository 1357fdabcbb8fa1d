"""Count the files the call chain from ``memtrace attribute`` to the deciding rule crosses.

    PYTHONPATH=. .venv/bin/python scripts/call_chain.py TRACES CASES [memtrace attribute options]

Runs ``memtrace attribute`` in this process on the first failed case of CASES (a cases file),
with a ``sys.setprofile`` hook. At the first construction of the method's finding (an instance of
a class of ``memtrace_otel.attribution`` whose name holds ``Finding``; failing that, the first
call of ``blame``) it reads the stack: every Python frame from ``memtrace_otel.cli.main`` to the
function that decided. Prints the chain and ``calls`` (frames - 1), ``distinct_files`` and
``file_crossings`` (consecutive frames in different files).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import tempfile
from types import FrameType
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _first_failed(cases: str) -> str:
    with open(cases, encoding="utf-8") as handle:
        for line in handle:
            if line.strip() and json.loads(line).get("verdict") != "correct":
                return line
    raise SystemExit(f"{cases}: no failed case")


def main(argv: list[str]) -> int:
    traces, cases, *extra = argv
    folder = tempfile.mkdtemp()
    one = os.path.join(folder, "case.jsonl")
    line = _first_failed(cases)
    with open(one, "w", encoding="utf-8") as handle:
        handle.write(line)
    found: list[list[tuple[str, str]]] = []

    def chain_from(frame: FrameType | None) -> list[tuple[str, str]]:
        out = []
        while frame is not None:
            out.append((os.path.relpath(frame.f_code.co_filename, REPO), frame.f_code.co_name))
            frame = frame.f_back
        return out[::-1]

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or found:
            return
        owner = type(frame.f_locals.get("self")) if frame.f_code.co_name == "__init__" else None
        if owner is not None and "Finding" in owner.__name__:
            if owner.__module__.startswith("memtrace_otel.attribution"):
                found.append(chain_from(frame.f_back))
        elif frame.f_code.co_name == "blame" and frame.f_code.co_filename.endswith("_base.py"):
            found.append(chain_from(frame.f_back))

    from memtrace_otel.cli import main as cli

    out = os.path.join(folder, "verdicts.jsonl")
    sys.setprofile(hook)
    try:
        status = cli(["attribute", traces, "--cases", one, "--out", out, "--quiet", *extra])
    finally:
        sys.setprofile(None)
    if not found:
        raise SystemExit("no deciding rule was reached")
    chain = found[0]
    start = next(
        i for i, (p, f) in enumerate(chain) if p.endswith("cli/__init__.py") and f == "main"
    )
    chain = chain[start:]
    for path, name in chain:
        print(f"  {path}:{name}")
    files = [path for path, _ in chain]
    print(
        json.dumps(
            {
                "exit": status,
                "case": json.loads(line)["case_id"],
                "calls": len(chain) - 1,
                "distinct_files": len(dict.fromkeys(files)),
                "file_crossings": sum(a != b for a, b in itertools.pairwise(files)),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
