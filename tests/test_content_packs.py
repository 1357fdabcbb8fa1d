"""Packed content stores (issue 31, ``MEMTRACE_CONTENT_PACK``): each batch's objects of a memory
store go to one pack object, found through the store's manifest (pack, offset, size), instead of
one object each. Everything the per-object layout guarantees holds: the same verdicts as capture
on, no text in the spans, verified objects, erase removing exactly what only the erased store
refers to, and stores written both ways stay readable.

Real parts: the OTel SDK, the OTLP JSON Lines exporter, fsspec's local and memory filesystems,
the batch job and ``memtrace content erase``.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import pytest

from memtrace_otel.attribution import EvidenceMethod
from memtrace_otel.cli import main
from memtrace_otel.instrumentation import CaptureConfig
from memtrace_otel.job import run_batch
from memtrace_otel.semconv import Category
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import ContentResolver, erase_store
from tests._pipeline import write_workload
from tests.test_content_reference import (
    _captured_texts,
    _flush,
    _substrings,
    assert_keyed_verdicts,
    old_then_new,
)

KEY = "k" * 32


def _packed(url: str, **options: object) -> CaptureConfig:
    return CaptureConfig(mode="REFERENCE", content_url=url, content_pack=True, **options)  # type: ignore[arg-type]


def _manifest(root: Path, store: str) -> list[dict[str, object]]:
    return [
        json.loads(line)
        for part in sorted((root / "manifests" / store).glob("*.jsonl"))
        for line in part.read_text().splitlines()
    ]


def test_packed_store_gives_the_same_verdicts_no_text_in_spans_and_no_object_files(
    tmp_path: Path,
) -> None:
    expected, texts = _captured_texts(tmp_path)
    url = (tmp_path / "content").as_uri()
    capture = _packed(url, digest_key=KEY)
    folder = tmp_path / "ref"
    folder.mkdir()
    traces, cases = write_workload(folder, capture=capture)
    _flush(capture)
    root = tmp_path / "content"
    assert not (root / "objects").exists()
    packs = [p for p in (root / "packs").rglob("*.pack")]
    assert packs
    raw = traces.read_text(encoding="utf-8")
    assert sorted(p for p in _substrings(texts) if p in raw) == []
    assert_keyed_verdicts(traces, cases, url, expected)


def test_the_environment_switches_packing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(E.ENV_MEMTRACE_CONTENT_PACK, "true")
    capture = CaptureConfig(mode="REFERENCE", content_url=f"memory://p-{uuid.uuid4().hex}")
    assert capture.content_pack is True
    writer = capture.content_writer
    assert writer is not None and writer.pack


def test_a_tampered_pack_is_counted_and_its_object_not_used(tmp_path: Path) -> None:
    url = (tmp_path / "content").as_uri()
    capture = _packed(url)
    folder = tmp_path / "ref"
    folder.mkdir()
    traces, cases = write_workload(folder, capture=capture, faults=("update",))
    _flush(capture)
    root = tmp_path / "content"
    for entry in _manifest(root, "user-update"):  # the culprit's output, rewritten in its pack
        pack, offset, size = root / str(entry["pack"]), int(entry["offset"]), int(entry["size"])  # type: ignore[call-overload]
        data = pack.read_bytes()
        if data[offset : offset + size] == b"Ana lives abroad":
            pack.write_bytes(data[:offset] + b"Ana lives Porto!" + data[offset + size :])
    verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    assert summary.content["mismatched"] == 1
    (verdict,) = verdicts
    assert verdict.error_type in ("UpdateError", None)


def test_erase_of_a_packed_store_removes_its_packs_and_only_its_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = (tmp_path / "content").as_uri()
    capture = _packed(url)
    folder = tmp_path / "ref"
    folder.mkdir()
    traces, cases = write_workload(folder, capture=capture, faults=("update", "deletion"))
    _flush(capture)
    root = tmp_path / "content"
    update = {str(e["object"]) for e in _manifest(root, "user-update")}
    deletion = {str(e["object"]) for e in _manifest(root, "user-deletion")}
    only_update, shared = update - deletion, update & deletion
    assert only_update and shared
    update_packs = set((root / "packs" / "user-update").glob("*.pack"))
    deletion_packs = set((root / "packs" / "user-deletion").glob("*.pack"))
    assert update_packs and deletion_packs
    code = main(["content", "erase", "--store", "user-update", "--content", url])
    assert code == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["deleted"] == len(only_update) and counts["kept_shared"] == len(shared)
    assert not any(p.exists() for p in update_packs)
    assert all(p.exists() for p in deletion_packs)
    # Every object the other store refers to still resolves, verified, from its own packs.
    resolver = ContentResolver()
    for name in deletion:
        assert resolver._read(url, name) is not None, name
    assert resolver.stats.missing_count == 0
    verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    by_case = {v.case_id: v for v in verdicts}
    assert by_case["case-update"].error_type is None and "erased" in by_case["case-update"].reason
    assert by_case["case-deletion"].error_type == "DeletionError"
    assert summary.content["erased_stores"].keys() == {"user-update"}


def test_erase_older_than_takes_whole_packs_and_keeps_newer_ones() -> None:
    url = f"memory://packs-{uuid.uuid4().hex}"
    capture = _packed(url)
    old, new, between = old_then_new(capture)
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    assert len(fs.find(f"{root}/packs")) == 2
    result = erase_store(url, "user-ana", older_than=0.001, now_ns=between + 1_000_000)
    assert (result.deleted, result.kept_shared, result.tombstone) == (1, 0, None)
    assert len(fs.find(f"{root}/packs")) == 1
    resolver = ContentResolver()
    assert resolver._fetch(str(new), "user-ana") == "a newer memory of Ana"
    assert resolver._fetch(str(old), "user-ana") is None
    full = erase_store(url, "user-ana")
    assert full.deleted == 1 and full.tombstone is not None
    assert fs.find(f"{root}/packs") == []


def test_a_store_written_per_object_then_packed_reads_both() -> None:
    url = f"memory://mixed-{uuid.uuid4().hex}"
    loose = CaptureConfig(mode="REFERENCE", content_url=url)
    packed = _packed(url)
    first, _ = loose.record("written as an object", Category.MEMORY, "user-ana")
    second, _ = packed.record("written in a pack", Category.MEMORY, "user-ana")
    _flush(loose)
    _flush(packed)
    resolver = ContentResolver()
    assert resolver._fetch(str(first), "user-ana") == "written as an object"
    assert resolver._fetch(str(second), "user-ana") == "written in a pack"
    result = erase_store(url, "user-ana")
    assert result.deleted == 2 and result.missing == 0
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    assert fs.find(f"{root}/objects") == [] and fs.find(f"{root}/packs") == []
