"""RunOptions: the batch job's one options value, checked when it is made."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.attribution import get_method
from memtrace_otel.job import RunOptions, run_batch
from memtrace_otel.job._executors import run_scaled
from tests._pipeline import write_workload


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"executor": "locl[2]"}, ValueError),
        ({"executor": "local[0]"}, ValueError),
        ({"memory_bound": "lots"}, ValueError),
        ({"memory_bound": 0}, ValueError),
        ({"retries": -1}, ValueError),
        ({"partitions": 0}, ValueError),
        ({"views": {}}, ValueError),
        ({"rule": "incorrect"}, TypeError),
        ({"out": 3}, TypeError),
        ({"cases_file": 3}, TypeError),
        ({"on_verdict": "print"}, TypeError),
        ({"source_options": ["max_traces"]}, TypeError),
        ({"cases": "cases.jsonl"}, TypeError),  # not a field
    ],
)
def test_a_bad_option_raises_where_the_options_are_made(
    fields: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        RunOptions(**fields)


@pytest.mark.parametrize("fields", [{"executor": "locl"}, {"retries": -1}, {"nope": 1}])
def test_run_batch_checks_its_options_before_reading_any_source(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    missing = str(tmp_path / "no-such-traces.jsonl")
    with pytest.raises((ValueError, TypeError)) as caught:
        run_batch([missing], get_method("evidence"), **fields)
    assert "no-such-traces" not in str(caught.value)  # refused before the sources were opened
    with pytest.raises((ValueError, TypeError)):
        run_batch([missing], get_method("evidence"), RunOptions(), **fields)


def test_options_are_frozen_and_keep_their_own_copy_of_source_options() -> None:
    given = {"max_traces": 5}
    options = RunOptions(source_options=given)
    given["max_traces"] = 6
    assert options.source_options == {"max_traces": 5}
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.strict = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        options.source_options["max_traces"] = 7  # type: ignore[index]


def test_one_options_value_gives_the_verdicts_keywords_give(tmp_path: Path) -> None:
    traces, cases = write_workload(tmp_path)
    method = get_method("evidence")
    by_keywords, _ = run_batch([str(traces)], method, cases_file=str(cases))
    options = RunOptions(cases_file=str(cases))
    by_value, _ = run_batch([str(traces)], method, options)
    scaled, _ = run_batch([str(traces)], method, options, executor="inline")
    spilled, _ = run_scaled([str(traces)], method, options, memory_bound="64M")
    assert by_keywords and by_value == by_keywords == scaled == spilled
    with pytest.raises(ValueError, match="executor or a memory bound"):
        run_scaled([str(traces)], method, options)
