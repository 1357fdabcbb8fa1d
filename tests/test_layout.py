"""The package's shape: what importing the host-side API loads, and where moved names went."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

import memtrace_otel
import memtrace_otel.export
import memtrace_otel.instrumentation


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


@pytest.mark.parametrize(
    "name",
    [
        "DEFAULT_TRACES_FILE",
        "CountingBatchSpanProcessor",
        "OtlpJsonLinesExporter",
        "configure",
        "dumps_request",
        "encode_request",
        "resolve_exporter",
        "span_to_record",
    ],
)
def test_names_moved_to_export_still_import_from_instrumentation_with_a_warning(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"memtrace_otel\.export\.{name}"):
        old = getattr(memtrace_otel.instrumentation, name)
    assert old is getattr(memtrace_otel.export, name)


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


@pytest.mark.parametrize(
    "name", ["READ", "VERSION", "WRITE", "add_records", "build_graph", "new_graph", "remove_ops"]
)
def test_the_builder_names_still_import_from_processing_with_a_warning(name: str) -> None:
    import memtrace_otel.graph
    import memtrace_otel.processing

    with pytest.warns(DeprecationWarning, match=rf"memtrace_otel\.graph\.{name}"):
        old = getattr(memtrace_otel.processing, name)
    assert old is getattr(memtrace_otel.graph, name)
