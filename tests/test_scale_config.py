"""The example Collector config that pre-splits exports by memory store (docs/scale.md) holds
together, checked statically: it is not in the shipped distribution (``groupbyattrs`` is not in
``builder-config.yaml``, and adding it would force a cold Collector build), so no Collector here
can load it. A split written the way it says is read back in ``tests/test_scale.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from memtrace_otel.semconv import attributes as A

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "collector_config" / "examples" / "split-by-store.yaml"
MANIFEST = REPO / "collector_config" / "builder-config.yaml"

# The contrib components the example uses (type -> module), and where each lives.
NEEDED = {
    "otlp": "receiver/otlpreceiver",
    "memory_limiter": "processor/memorylimiterprocessor",
    "groupbyattrs": "processor/groupbyattrsprocessor",
    "transform": "processor/transformprocessor",
    "batch": "processor/batchprocessor",
    "file": "exporter/fileexporter",
}


def _config() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    return data


def _type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def test_every_pipeline_component_is_defined_and_every_defined_one_used() -> None:
    config = _config()
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for pipeline in config["service"]["pipelines"].values():
        for kind in used:
            used[kind].update(pipeline.get(kind, []))
    for kind, ids in used.items():
        assert ids == set(config[kind]), kind
        assert {_type(i) for i in ids} <= set(NEEDED), kind


def test_the_header_names_every_module_a_build_needs_beyond_the_manifest() -> None:
    manifest = MANIFEST.read_text()
    text = CONFIG.read_text()
    config = _config()
    types = {_type(i) for kind in ("receivers", "processors", "exporters") for i in config[kind]}
    missing = {t for t in types if NEEDED[t] not in manifest}
    assert missing == {"groupbyattrs"}  # the one processor the distribution lacks
    for t in missing:
        assert NEEDED[t] in text  # the header says which module to build in


def test_spans_keep_their_store_id_and_each_resource_gets_its_file() -> None:
    config = _config()
    store = A.GEN_AI_MEMORY_STORE_ID
    (grouping,) = [v for k, v in config["processors"].items() if _type(k) == "groupbyattrs"]
    assert grouping["keys"] == [store]
    (transform,) = [v for k, v in config["processors"].items() if _type(k) == "transform"]
    by_context = {s["context"]: s["statements"] for s in transform["trace_statements"]}
    # groupbyattrs moves the store id off the spans; memtrace reads it on each span.
    (restore,) = by_context["span"]
    assert restore.startswith(f'set(attributes["{store}"], resource.attributes["{store}"])')
    assert f'where resource.attributes["{store}"] != nil' in restore
    (exporter,) = [v for k, v in config["exporters"].items() if _type(k) == "file"]
    segment = exporter["group_by"]["resource_attribute"]
    routed, unrouted = by_context["resource"]
    assert routed.startswith(
        f'set(attributes["{segment}"], Concat(["store-", attributes["{store}"]]'
    )
    assert routed.endswith(f'where attributes["{store}"] != nil')
    # The file exporter drops resources without the attribute: storeless spans get a file too.
    assert (
        unrouted == f'set(attributes["{segment}"], "unrouted") where attributes["{store}"] == nil'
    )
    # The order in the pipeline: group, then restore and route, before the exporter batches.
    (pipeline,) = config["service"]["pipelines"].values()
    names = [_type(p) for p in pipeline["processors"]]
    assert names.index("groupbyattrs") < names.index("transform") < names.index("batch")


def test_file_exporter_writes_one_json_lines_file_per_segment() -> None:
    (exporter,) = [v for k, v in _config()["exporters"].items() if _type(k) == "file"]
    assert exporter["group_by"]["enabled"] is True
    assert exporter["path"].count("*") == 1 and exporter["path"].endswith(".jsonl")
    assert exporter.get("format", "json") == "json" and "compression" not in exporter
    assert exporter["append"] is True  # an evicted file is reopened, not truncated
    assert not re.search(r"(^|/)\.[^./]", exporter["path"])  # memtrace skips hidden files
