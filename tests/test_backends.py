"""The real backends: the project's Collector validates every shipped config, and spans made by the
OpenTelemetry SDK travel SDK -> Collector (``otelcol.yaml``: tail sampling, files) -> Jaeger v2.

Needs the binaries from ``make backends``; without them these tests skip with one line naming what
to install (under ``CI=true`` they fail instead). See ``tests/_backends.py``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, Span, SpanContext, Tracer

from memtrace_otel.semconv import Category, JudgeVerdict, OpKind, Role, Stage
from memtrace_otel.semconv import attributes as A
from tests._backends import (
    BUILD_SCRIPT,
    CONFIG_DIR,
    REPO,
    CollectorServer,
    JaegerServer,
    bin_cache,
    find_binary,
    otelcol_components,
    otelcol_validate,
    require_binary,
    start_collector,
)

# The fixtures `jaeger`, `collector`, `jaeger_bin` and `otelcol_bin`.

# The component type each module of builder-config.yaml provides (checked against the binary's own
# `components` listing for every module it was built with).
MODULE_TYPES = {
    "otlpreceiver": "otlp",
    "batchprocessor": "batch",
    "memorylimiterprocessor": "memory_limiter",
    "tailsamplingprocessor": "tail_sampling",
    "transformprocessor": "transform",
    "otlpexporter": "otlp_grpc",
    "fileexporter": "file",
    "loadbalancingexporter": "load_balancing",
    "healthcheckextension": "health_check",
}
KINDS = ("receivers", "processors", "exporters", "extensions")

# Each config (or overlay) as the Collector is started with it: overlays merge in order.
CONFIG_SETS = {
    "otelcol": ["otelcol.yaml"],
    "gateway": ["gateway.yaml"],
    "otelcol+redaction": ["otelcol.yaml", "otelcol-redaction.yaml"],
}


def _manifest_modules() -> dict[str, str]:
    """``{module path: version}`` of every component module in builder-config.yaml."""
    manifest = yaml.safe_load((CONFIG_DIR / "builder-config.yaml").read_text())
    modules = {}
    for kind in (*KINDS, "providers"):
        for entry in manifest.get(kind) or []:
            path, version = entry["gomod"].split()
            modules[path] = version
    return modules


def _used_types(files: list[str]) -> set[str]:
    """Component types (``otlp_grpc`` for ``otlp_grpc/jaeger``) the config files use."""
    used: set[str] = set()
    for name in files:
        config = yaml.safe_load((CONFIG_DIR / name).read_text())
        for kind in KINDS:
            used.update(key.split("/")[0] for key in config.get(kind) or {})
    return used


def _built_types(binary: Path) -> dict[str, str]:
    """``{type: module path}`` of the components compiled into the binary."""
    listing = yaml.safe_load(otelcol_components(binary))
    return {
        item["name"]: item["module"].split()[0]
        for kind in KINDS
        for item in listing.get(kind) or []
    }


def _blocked_reason(missing: set[str]) -> str:
    """The build script's record of why components are missing from the binary."""
    notes = "; ".join(
        line
        for path in sorted(bin_cache().glob("otelcol-*/BLOCKED"))
        for line in path.read_text().splitlines()
        if line.startswith("blocked:")
    )
    return f"blocked: {sorted(missing)} not in the built Collector ({notes or 'see build log'})"


# --- Finding the binaries ----------------------------------------------------------------------


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_binary_skips_or_fails_under_ci(
    ci: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTRACE_BIN_CACHE", str(tmp_path))  # an empty cache
    monkeypatch.delenv("MEMTRACE_JAEGER_BIN", raising=False)
    monkeypatch.setenv("CI", ci)
    outcome = pytest.fail.Exception if ci == "true" else pytest.skip.Exception
    with pytest.raises(outcome, match=r"Jaeger v2 binary not found: run `make backends`"):
        require_binary("MEMTRACE_JAEGER_BIN", "Jaeger v2")


def test_binary_is_found_through_the_build_scripts_selection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = tmp_path / "jaeger"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    (tmp_path / "selected.env").write_text(f"MEMTRACE_JAEGER_BIN={binary}\nMEMTRACE_OTELCOL_BIN=\n")
    monkeypatch.setenv("MEMTRACE_BIN_CACHE", str(tmp_path))
    monkeypatch.delenv("MEMTRACE_JAEGER_BIN", raising=False)
    monkeypatch.delenv("MEMTRACE_OTELCOL_BIN", raising=False)
    assert require_binary("MEMTRACE_JAEGER_BIN", "Jaeger v2") == binary
    assert find_binary("MEMTRACE_OTELCOL_BIN") is None


# --- Configs and the builder manifest ----------------------------------------------------------


def test_manifest_lists_exactly_the_components_the_configs_use() -> None:
    every_config = sorted({name for files in CONFIG_SETS.values() for name in files})
    # Every YAML file in the folder is covered by CONFIG_SETS (a new config must be validated too).
    shipped = {p.name for p in CONFIG_DIR.glob("*.yaml")} - {"builder-config.yaml"}
    assert shipped == set(every_config)

    manifest_types = {
        MODULE_TYPES[path.rsplit("/", 1)[1]]
        for path in _manifest_modules()
        if not path.rsplit("/", 1)[1].endswith("provider")
    }
    assert manifest_types == _used_types(every_config)


def test_built_collector_matches_the_manifest(otelcol_bin: Path) -> None:
    built = _built_types(otelcol_bin)
    manifest = _manifest_modules()
    for type_name, module in built.items():
        # The binary has nothing the manifest does not name, and our type table is right.
        assert module in manifest, module
        assert MODULE_TYPES[module.rsplit("/", 1)[1]] == type_name
    missing = {
        MODULE_TYPES[path.rsplit("/", 1)[1]] for path in manifest if not path.endswith("provider")
    } - set(built)
    if missing:
        pytest.skip(_blocked_reason(missing))


@pytest.mark.parametrize("name", sorted(CONFIG_SETS))
def test_collector_validates_config(otelcol_bin: Path, name: str) -> None:
    files = CONFIG_SETS[name]
    missing = _used_types(files) - set(_built_types(otelcol_bin))
    if missing:
        pytest.skip(_blocked_reason(missing))
    done = otelcol_validate(otelcol_bin, [CONFIG_DIR / f for f in files])
    assert done.returncode == 0, done.stderr


def test_jaeger_validates_the_compose_config(jaeger_bin: Path) -> None:
    done = subprocess.run(
        [str(jaeger_bin), "validate", "--config", str(REPO / "deploy" / "jaeger.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_validate_rejects_a_broken_config(otelcol_bin: Path, tmp_path: Path) -> None:
    # `validate` decodes every component's settings strictly: a misspelt key fails. (It does NOT
    # check tail-sampling policy *types*; those fail only at start, which the end-to-end tests do.)
    text = (CONFIG_DIR / "otelcol.yaml").read_text()
    assert "    decision_wait:" in text
    broken = tmp_path / "otelcol.yaml"
    broken.write_text(text.replace("    decision_wait:", "    decision_wiat:", 1))
    done = otelcol_validate(otelcol_bin, [broken])
    assert done.returncode != 0
    assert "decision_wiat" in done.stderr


def test_build_script_finds_cached_binaries_without_rebuilding(
    otelcol_bin: Path, jaeger_bin: Path
) -> None:
    # A warm run prints the cached paths and leaves them untouched.
    if shutil.which("go") is None:
        pytest.skip("Go not installed: the build script cannot run here")

    before = (otelcol_bin.stat().st_mtime_ns, jaeger_bin.stat().st_mtime_ns)
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    printed = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert Path(printed["otelcol"]).is_file() and Path(printed["jaeger"]).is_file()
    assert (otelcol_bin.stat().st_mtime_ns, jaeger_bin.stat().st_mtime_ns) == before


# --- End to end: SDK -> Collector -> files + Jaeger --------------------------------------------


def _hex_span(span: Span) -> str:
    return format(span.get_span_context().span_id, "016x")


def _hex_trace(span: Span) -> str:
    return format(span.get_span_context().trace_id, "032x")


def _digest(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()


def _op_attributes(
    kind: OpKind, name: str, stage: Stage, inputs: list[str], outputs: list[str], **extra: Any
) -> dict[str, Any]:
    return {
        A.MEMTRACE_OP_KIND: kind.value,
        A.MEMTRACE_OP_NAME: name,
        A.MEMTRACE_STAGE: stage.value,
        A.MEMTRACE_OP_INPUTS: inputs,
        A.MEMTRACE_OP_OUTPUTS: outputs,
        A.MEMTRACE_SYSTEM: "rag",
        A.GEN_AI_MEMORY_STORE_ID: "store-e2e",
        **extra,
    }


def _variable_event(span: Span, ref: str, category: Category, value: str) -> None:
    span.add_event(
        A.MEMTRACE_VARIABLE_EVENT,
        {
            A.MEMTRACE_VARIABLE_REF: ref,
            A.MEMTRACE_VARIABLE_ROLE: Role.OUTPUT.value,
            A.MEMTRACE_VARIABLE_CATEGORY: category.value,
            A.MEMTRACE_VARIABLE_DIGEST: _digest(value),
            A.MEMTRACE_VARIABLE_VALUE: value,
        },
    )


class _Provider:
    """An SDK TracerProvider exporting over real OTLP; flushed and shut down by close()."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.provider = TracerProvider(resource=Resource.create({A.SERVICE_NAME: "memtrace-e2e"}))
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer: Tracer = self.provider.get_tracer("tests.test_backends")

    def close(self) -> None:
        assert self.provider.force_flush(30_000), "the SDK could not export to the Collector"
        self.provider.shutdown()


@pytest.fixture(scope="module")
def sent(collector: CollectorServer) -> Iterator[dict[str, Any]]:
    """Four traces sent once per module: a memory write (over OTLP/HTTP), a failed query linking
    to it, a correct query, and a verdict span linking to the culprit op (over OTLP/gRPC)."""
    http = _Provider(HttpSpanExporter(endpoint=f"{collector.otlp_http_url}/v1/traces"))
    grpc = _Provider(GrpcSpanExporter(endpoint=collector.otlp_grpc_endpoint, insecure=True))
    ids: dict[str, Any] = {}

    # A correct answer, sent first: with a 0 % baseline share, tail sampling must drop it.
    with (
        grpc.tracer.start_as_current_span("answer question") as root,
        grpc.tracer.start_as_current_span(
            f"{A.OP_SPAN_NAME_PREFIX}{OpKind.JUDGE.value} rag.judge",
            attributes=_op_attributes(
                OpKind.JUDGE,
                "rag.judge",
                Stage.EVALUATION,
                ["pred-9@1", "gold-9@1"],
                ["score-9@1"],
                **{
                    A.MEMTRACE_CASE_ID: "case-9",
                    A.MEMTRACE_JUDGE_VERDICT: JudgeVerdict.CORRECT.value,
                },
            ),
        ),
    ):
        pass
    ids["dropped_trace"] = _hex_trace(root)

    # Construction: the memory record is written (its own trace, exported over OTLP/HTTP).
    with http.tracer.start_as_current_span(
        "create_memory",
        attributes=_op_attributes(
            OpKind.CREATE,
            "rag.index",
            Stage.CONSTRUCTION,
            ["msg-1@1"],
            ["mem-1@1"],
            **{A.GEN_AI_OPERATION_NAME: "create_memory"},
        ),
    ) as create:
        _variable_event(create, "mem-1@1", Category.MEMORY, "Ana lives in Porto")
    ids["create_span"], ids["create_trace"] = _hex_span(create), _hex_trace(create)
    http.close()

    # A failed query: retrieval reads mem-1@1 and links to the span that wrote it.
    writer = create.get_span_context()
    with grpc.tracer.start_as_current_span("answer question") as query_root:
        with grpc.tracer.start_as_current_span(
            "search_memory",
            attributes=_op_attributes(
                OpKind.RETRIEVE,
                "rag.search",
                Stage.RETRIEVAL,
                ["q-1@1", "mem-1@1"],
                ["cands-1@1"],
                **{A.MEMTRACE_CASE_ID: "case-1", A.GEN_AI_OPERATION_NAME: "search_memory"},
            ),
            links=[Link(writer, {A.MEMTRACE_VARIABLE_REF: "mem-1@1"})],
        ) as retrieve:
            _variable_event(retrieve, "cands-1@1", Category.CANDIDATES, '["mem-1@1"]')
        with grpc.tracer.start_as_current_span(
            f"{A.OP_SPAN_NAME_PREFIX}{OpKind.JUDGE.value} rag.judge",
            attributes=_op_attributes(
                OpKind.JUDGE,
                "rag.judge",
                Stage.EVALUATION,
                ["pred-1@1", "gold-1@1"],
                ["score-1@1"],
                **{
                    A.MEMTRACE_CASE_ID: "case-1",
                    A.MEMTRACE_JUDGE_VERDICT: JudgeVerdict.INCORRECT.value,
                },
            ),
        ) as judge:
            pass
    ids["query_trace"] = _hex_trace(query_root)
    ids["query_spans"] = {_hex_span(query_root), _hex_span(retrieve), _hex_span(judge)}
    ids["retrieve_span"] = _hex_span(retrieve)

    # The verdict written back: a new trace, linked to the culprit op.
    culprit: SpanContext = retrieve.get_span_context()
    with grpc.tracer.start_as_current_span(
        A.MEMTRACE_ATTRIBUTION_SPAN,
        attributes={
            A.MEMTRACE_ATTRIBUTION_CASE_ID: "case-1",
            A.MEMTRACE_ATTRIBUTION_ERROR_TYPE: "RetrievalError",
            A.MEMTRACE_ATTRIBUTION_OP_ID: ids["retrieve_span"],
            A.MEMTRACE_ATTRIBUTION_OP_NAME: "rag.search",
            A.GEN_AI_EVALUATION_EXPLANATION: "the record was stored but not retrieved",
        },
        links=[Link(culprit)],
    ) as verdict:
        pass
    ids["verdict_span"], ids["verdict_trace"] = _hex_span(verdict), _hex_trace(verdict)
    grpc.close()
    yield ids


def _attr(attributes: list[dict[str, Any]], key: str) -> Any:
    """The value of ``key`` in an OTLP/JSON attribute list (``AnyValue`` unwrapped one level)."""
    for item in attributes:
        if item["key"] == key:
            return _any(item["value"])
    raise KeyError(key)


def _any(value: Mapping[str, Any]) -> Any:
    if "arrayValue" in value:
        return [_any(v) for v in value["arrayValue"].get("values", [])]
    ((_, scalar),) = value.items()
    return scalar


def _check_otlp_spans(spans: list[dict[str, Any]], sent: Mapping[str, Any]) -> None:
    """The OTLP/JSON spans (from the file or from api_v3) carry what the SDK sent."""
    by_id = {span["spanId"]: span for span in spans}
    retrieve = by_id[sent["retrieve_span"]]
    assert _attr(retrieve["attributes"], A.MEMTRACE_OP_INPUTS) == ["q-1@1", "mem-1@1"]
    assert _attr(retrieve["attributes"], A.MEMTRACE_STAGE) == Stage.RETRIEVAL.value
    [link] = retrieve["links"]
    assert (link["traceId"], link["spanId"]) == (sent["create_trace"], sent["create_span"])
    assert _attr(link["attributes"], A.MEMTRACE_VARIABLE_REF) == "mem-1@1"
    [event] = by_id[sent["create_span"]]["events"]
    assert event["name"] == A.MEMTRACE_VARIABLE_EVENT
    assert _attr(event["attributes"], A.MEMTRACE_VARIABLE_VALUE) == "Ana lives in Porto"
    [verdict_link] = by_id[sent["verdict_span"]]["links"]
    assert verdict_link["spanId"] == sent["retrieve_span"]


def test_collector_writes_kept_traces_to_json_lines(
    collector: CollectorServer, sent: dict[str, Any]
) -> None:
    wanted = {
        sent["create_span"],
        sent["retrieve_span"],
        sent["verdict_span"],
        *sent["query_spans"],
    }
    spans = collector.wait_for_file_spans(wanted)
    _check_otlp_spans(spans, sent)
    # Tail sampling: the correct-answer trace matched no keep policy and the share is 0 %.
    assert sent["dropped_trace"] not in {span["traceId"] for span in spans}
    # Every line is one OTLP/JSON export request.
    assert all(set(line) == {"resourceSpans"} for line in collector.read_lines())


def test_jaeger_api_v3_returns_the_spans_with_links(
    jaeger: JaegerServer, sent: dict[str, Any]
) -> None:
    spans = []
    for trace, count in [("create_trace", 1), ("query_trace", 3), ("verdict_trace", 1)]:
        body = jaeger.wait_for_trace_v3(sent[trace], span_count=count)
        spans += [
            span
            for rs in body["result"]["resourceSpans"]
            for ss in rs["scopeSpans"]
            for span in ss["spans"]
        ]
    _check_otlp_spans(spans, sent)
    assert jaeger.get_trace_v3(sent["dropped_trace"]) is None


def test_jaeger_v1_api_shows_links_as_references(
    jaeger: JaegerServer, sent: dict[str, Any]
) -> None:
    jaeger.wait_for_trace_v3(sent["verdict_trace"])
    jaeger.wait_for_trace_v3(sent["query_trace"], span_count=3)
    body = jaeger.get_trace_v1(sent["query_trace"])
    assert body is not None
    [trace] = body["data"]
    retrieve = next(s for s in trace["spans"] if s["spanID"] == sent["retrieve_span"])
    follows = [r for r in retrieve["references"] if r["refType"] == "FOLLOWS_FROM"]
    assert [(r["traceID"], r["spanID"]) for r in follows] == [
        (sent["create_trace"], sent["create_span"])
    ]
    tags = {tag["key"]: tag for tag in retrieve["tags"]}
    # v1 has no array tag type: Jaeger writes the array as compact JSON text in a string tag.
    assert tags[A.MEMTRACE_OP_INPUTS]["type"] == "string"
    assert tags[A.MEMTRACE_OP_INPUTS]["value"] == '["q-1@1","mem-1@1"]'

    # The verdict span is found with a reference to the culprit op.
    verdict_body = jaeger.get_trace_v1(sent["verdict_trace"])
    assert verdict_body is not None
    [verdict] = verdict_body["data"][0]["spans"]
    assert verdict["operationName"] == A.MEMTRACE_ATTRIBUTION_SPAN
    assert [(r["refType"], r["spanID"]) for r in verdict["references"]] == [
        ("FOLLOWS_FROM", sent["retrieve_span"])
    ]


def test_large_memory_payload_passes_the_receive_limits(
    collector: CollectorServer, jaeger: JaegerServer
) -> None:
    # 6 MiB in one span: over the 4 MiB gRPC default that otelcol.yaml and Jaeger raise to 64 MiB.
    value = "x" * (6 * 1024 * 1024)
    grpc = _Provider(GrpcSpanExporter(endpoint=collector.otlp_grpc_endpoint, insecure=True))
    with grpc.tracer.start_as_current_span(
        "create_memory",
        attributes=_op_attributes(
            OpKind.CREATE, "rag.index", Stage.CONSTRUCTION, ["doc-7@1"], ["mem-7@1"]
        ),
    ) as span:
        _variable_event(span, "mem-7@1", Category.MEMORY, value)
    grpc.close()
    span_id = _hex_span(span)
    spans = collector.wait_for_file_spans({span_id})
    [written] = [s for s in spans if s["spanId"] == span_id]
    assert len(_attr(written["events"][0]["attributes"], A.MEMTRACE_VARIABLE_VALUE)) == len(value)
    body = jaeger.wait_for_trace_v3(_hex_trace(span))
    [stored] = body["result"]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert len(_attr(stored["events"][0]["attributes"], A.MEMTRACE_VARIABLE_VALUE)) == len(value)


def test_redaction_overlay_keeps_values_in_the_files_only(
    otelcol_bin: Path, jaeger: JaegerServer, tmp_path: Path
) -> None:
    server = start_collector(
        otelcol_bin,
        tmp_path,
        jaeger_endpoint=jaeger.otlp_grpc_endpoint,
        configs=[CONFIG_DIR / "otelcol.yaml", CONFIG_DIR / "otelcol-redaction.yaml"],
    )
    try:
        grpc = _Provider(GrpcSpanExporter(endpoint=server.otlp_grpc_endpoint, insecure=True))
        with grpc.tracer.start_as_current_span(
            "create_memory",
            attributes=_op_attributes(
                OpKind.CREATE, "rag.index", Stage.CONSTRUCTION, ["msg-5@1"], ["mem-5@1"]
            ),
        ) as span:
            _variable_event(span, "mem-5@1", Category.MEMORY, "Bo's PIN is 1234")
        grpc.close()
        [written] = [
            s
            for s in server.wait_for_file_spans({_hex_span(span)})
            if s["spanId"] == _hex_span(span)
        ]
        body = jaeger.wait_for_trace_v3(_hex_trace(span))
    finally:
        server.process.stop()
    [stored] = body["result"]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    file_event, viewer_event = written["events"][0]["attributes"], stored["events"][0]["attributes"]
    assert _attr(file_event, A.MEMTRACE_VARIABLE_VALUE) == "Bo's PIN is 1234"
    with pytest.raises(KeyError):
        _attr(viewer_event, A.MEMTRACE_VARIABLE_VALUE)
    # The ref and digest stay, so the viewers still show the memory graph.
    assert _attr(viewer_event, A.MEMTRACE_VARIABLE_DIGEST) == _digest("Bo's PIN is 1234")
    assert _attr(viewer_event, A.MEMTRACE_VARIABLE_REF) == "mem-5@1"
