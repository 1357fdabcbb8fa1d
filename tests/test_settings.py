"""Settings: a bad environment variable is logged once and replaced by its default (as the OTel
SDK does with ``OTEL_BSP_EXPORT_TIMEOUT=-1``); a bad argument in code still raises."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from memtrace_otel import _internal
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry
from memtrace_otel.instrumentation._capture import DEFAULT_MAX_VALUE_LENGTH
from memtrace_otel.instrumentation._registry import DEFAULT_REGISTRY_SIZE
from memtrace_otel.processing import EvolutionGraphProcessor
from memtrace_otel.processing._processor import (
    DEFAULT_FOLD_INTERVAL,
    DEFAULT_MAX_BUFFER,
    DEFAULT_MAX_OPS,
)
from memtrace_otel.semconv import CaptureMode
from memtrace_otel.semconv import env as E
from memtrace_otel.sources._source import FileSource
from tests.conftest import REPO

CAPTURE_VARIABLES = (
    E.ENV_CAPTURE_MESSAGE_CONTENT,
    E.ENV_MEMTRACE_CAPTURE_CONTENT,
    E.ENV_MEMTRACE_MAX_VALUE_LENGTH,
)


@pytest.fixture
def warnings_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> pytest.LogCaptureFixture:
    """caplog at WARNING, with the once-per-process memory of logged problems emptied."""
    monkeypatch.setattr(_internal, "_seen", set())
    for name in CAPTURE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.WARNING, logger="memtrace_otel")
    return caplog


def _warnings_about(caplog: pytest.LogCaptureFixture, variable: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and variable in r.getMessage()
    ]


def test_a_bad_registry_size_does_not_break_import_memtrace_otel() -> None:
    # The default registry is built at import: a typo must not stop the app from starting.
    script = (
        "import memtrace_otel\n"
        "from memtrace_otel.instrumentation import WriterRegistry\n"
        "from memtrace_otel.instrumentation._tracer import _DEFAULT_REGISTRY\n"
        "WriterRegistry()\n"  # a second resolution of the same bad value logs nothing more
        "print(_DEFAULT_REGISTRY.max_entries)\n"
    )
    env = {**os.environ, E.ENV_MEMTRACE_REGISTRY_SIZE: "abc", "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(DEFAULT_REGISTRY_SIZE)]
    lines = [line for line in result.stderr.splitlines() if E.ENV_MEMTRACE_REGISTRY_SIZE in line]
    assert len(lines) == 1 and "'abc'" in lines[0] and str(DEFAULT_REGISTRY_SIZE) in lines[0]


def test_a_bad_registry_size_is_logged_once_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch, warnings_log: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(E.ENV_MEMTRACE_REGISTRY_SIZE, "abc")
    sizes = [WriterRegistry().max_entries for _ in range(3)]
    assert sizes == [DEFAULT_REGISTRY_SIZE] * 3
    (message,) = _warnings_about(warnings_log, E.ENV_MEMTRACE_REGISTRY_SIZE)
    assert "'abc'" in message and "positive integer" in message
    monkeypatch.setenv(E.ENV_MEMTRACE_REGISTRY_SIZE, "12")  # a good value is still read
    assert WriterRegistry().max_entries == 12


@pytest.mark.parametrize(
    ("variable", "text", "expected"),
    [
        (
            E.ENV_CAPTURE_MESSAGE_CONTENT,
            "SPAN_AND_EVENTS",
            {"mode": CaptureMode.NO_CONTENT, "memory_mode": CaptureMode.NO_CONTENT},
        ),
        (
            E.ENV_MEMTRACE_CAPTURE_CONTENT,
            "PRODUCTON",  # the memory categories then follow the upstream variable
            {"mode": CaptureMode.SPAN_ONLY, "memory_mode": CaptureMode.SPAN_ONLY},
        ),
        (E.ENV_MEMTRACE_MAX_VALUE_LENGTH, "-1", {"max_value_length": DEFAULT_MAX_VALUE_LENGTH}),
        (E.ENV_MEMTRACE_MAX_VALUE_LENGTH, "4k", {"max_value_length": DEFAULT_MAX_VALUE_LENGTH}),
    ],
)
def test_a_bad_capture_variable_is_logged_once_at_memtracer_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch,
    warnings_log: pytest.LogCaptureFixture,
    variable: str,
    text: str,
    expected: dict[str, object],
) -> None:
    if variable == E.ENV_MEMTRACE_CAPTURE_CONTENT:
        monkeypatch.setenv(E.ENV_CAPTURE_MESSAGE_CONTENT, "SPAN_ONLY")
    monkeypatch.setenv(variable, text)
    tracers = [MemTracer(system="s") for _ in range(3)]
    for mt in tracers:
        assert {key: getattr(mt.capture, key) for key in expected} == expected
    (message,) = _warnings_about(warnings_log, variable)
    assert repr(text) in message and "using the default" in message
    assert not mt.capture.production


def test_a_bad_argument_still_raises_whatever_the_environment(
    monkeypatch: pytest.MonkeyPatch, warnings_log: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(E.ENV_MEMTRACE_REGISTRY_SIZE, "50")
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_VALUE_LENGTH, "50")
    with pytest.raises(ValueError, match="invalid max_entries 'abc'"):
        WriterRegistry("abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid max_entries 0"):
        WriterRegistry(0)
    with pytest.raises(ValueError, match="invalid max_value_length -1"):
        CaptureConfig(max_value_length=-1)
    with pytest.raises(ValueError, match="invalid capture mode 'maybe'"):
        CaptureConfig(mode="maybe")
    with pytest.raises(ValueError, match="invalid memory_mode 'most'"):
        CaptureConfig(memory_mode="most")
    with pytest.raises(ValueError, match="invalid max_ops 0"):
        EvolutionGraphProcessor(max_ops=0)
    assert warnings_log.records == []


@pytest.mark.parametrize(
    ("variable", "text", "attribute", "default"),
    [
        (E.ENV_MEMTRACE_PROCESSOR_MAX_BUFFER, "many", "max_buffer", DEFAULT_MAX_BUFFER),
        (E.ENV_MEMTRACE_PROCESSOR_MAX_OPS, "0", "max_ops", DEFAULT_MAX_OPS),
        (E.ENV_MEMTRACE_PROCESSOR_FOLD_INTERVAL, "soon", "fold_interval", DEFAULT_FOLD_INTERVAL),
    ],
)
def test_a_bad_processor_variable_is_logged_once_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch,
    warnings_log: pytest.LogCaptureFixture,
    variable: str,
    text: str,
    attribute: str,
    default: float,
) -> None:
    monkeypatch.setenv(variable, text)
    # fold_interval=0 starts no thread, unless the interval is the setting under test.
    interval = None if attribute == "fold_interval" else 0
    processors = [EvolutionGraphProcessor(fold_interval=interval) for _ in range(2)]
    try:
        assert [getattr(p, attribute) for p in processors] == [default, default]
    finally:
        for p in processors:
            p.shutdown()
    (message,) = _warnings_about(warnings_log, variable)
    assert repr(text) in message


def test_the_batch_job_s_caps_still_stop_on_a_bad_variable(
    monkeypatch: pytest.MonkeyPatch, warnings_log: pytest.LogCaptureFixture
) -> None:
    # Offline, before any work: a clear error beats a silently different cap.
    monkeypatch.setenv(E.ENV_MEMTRACE_MAX_LINE_BYTES, "64M")
    with pytest.raises(ValueError, match="invalid MEMTRACE_MAX_LINE_BYTES '64M'"):
        FileSource("x")
    assert warnings_log.records == []
