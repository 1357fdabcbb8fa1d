"""REFERENCE capture end to end on an S3 API on loopback: moto's server mode, driven by s3fs.

Real parts: moto's S3 server on 127.0.0.1 (its own HTTP server, a real S3 wire protocol), s3fs
through fsspec, the OTel SDK, the OTLP JSON Lines exporter, the batch job and the CLI. Skipped
when s3fs or moto[server] is not installed (both are in the dev extra).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memtrace_otel.cli import main
from memtrace_otel.instrumentation import CaptureConfig
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E
from tests._pipeline import EXPECTED, write_workload

KEY = "s3-test-digest-key-0123456789"


@pytest.fixture
def s3_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    import uuid

    import fsspec

    bucket = f"memtrace-content-{uuid.uuid4().hex[:12]}"  # moto's backend outlives its server
    fsspec.filesystem("s3", skip_instance_cache=True).mkdir(bucket)
    try:
        yield f"s3://{bucket}/prod"
    finally:
        server.stop()
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize("pack", [False, True], ids=["objects", "packed"])
def test_reference_over_s3_attributes_erases_and_keeps_text_out_of_the_spans(
    tmp_path: Path,
    s3_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    pack: bool,
) -> None:
    capture = CaptureConfig(mode="REFERENCE", content_url=s3_url, digest_key=KEY, content_pack=pack)
    traces, cases = write_workload(tmp_path, capture=capture)
    writer = capture.content_writer
    assert writer is not None and writer.flush(30_000) and writer.dropped == 0
    import fsspec

    s3 = fsspec.filesystem("s3", skip_instance_cache=True)
    bucket = s3_url.removeprefix("s3://")
    assert (
        bool(s3.find(f"{bucket}/packs")) is pack and bool(s3.find(f"{bucket}/objects")) is not pack
    )
    raw = traces.read_text(encoding="utf-8")
    assert "Porto" not in raw and "hiking" not in raw
    assert A.MEMTRACE_VARIABLE_VALUE_REF in raw and s3_url in raw

    monkeypatch.setenv(E.ENV_MEMTRACE_DIGEST_KEY, KEY)
    out = tmp_path / "verdicts.jsonl"
    code = main(
        [
            "attribute",
            str(traces),
            "--cases",
            str(cases),
            "--content",
            s3_url,
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0
    verdicts = {
        v["case_id"]: (v["error_type"], v["op_name"])
        for v in map(json.loads, out.read_text().splitlines())
    }
    assert {k: v for k, v in verdicts.items() if v[0]} == {
        f"case-{f}": v for f, v in EXPECTED.items()
    }
    capsys.readouterr()

    code = main(["content", "erase", "--store", "user-update", "--content", s3_url])
    assert code == 0
    counts = json.loads(capsys.readouterr().out)
    # "Ana lives abroad" (the value and the candidates, context and prediction around it) is the
    # update store's alone; the facts every store stored are shared and stay.
    assert counts["deleted"] >= 1 and counts["kept_shared"] >= 1
    out.unlink()
    main(
        [
            "attribute",
            str(traces),
            "--cases",
            str(cases),
            "--content",
            s3_url,
            "--out",
            str(out),
            "--quiet",
        ]
    )
    after = {v["case_id"]: v for v in map(json.loads, out.read_text().splitlines())}
    assert after["case-update"]["error_type"] is None and "erased" in after["case-update"]["reason"]
    assert after["case-deletion"]["error_type"] == "DeletionError"
