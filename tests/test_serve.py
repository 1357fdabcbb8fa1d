"""``memtrace serve``: the report as a local web app, where people review verdicts.

The end-to-end test uses a real Jaeger v2 on loopback (tests/_backends.py) and Debian's Chromium
through Playwright's client (as tests/test_browser.py): the app's spans and the verdict spans are
in Jaeger, a person clicks "confirm" in the served page, the review span lands in Jaeger parented
to the verdict span, and after "reload" the page and ``memtrace attribute`` show the precision.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.cli import build_parser, main
from memtrace_otel.cli.serve import prepare
from tests._backends import JaegerServer, wait_until
from tests._pipeline import write_workload
from tests.test_browser import FRAME, Page, browser  # noqa: F401  (fixture)


def _start(argv: list[str]) -> Iterator[tuple[str, Any]]:
    args = build_parser().parse_args(["serve", *argv, "--port", "0"])
    app, server = prepare(args)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", app
    finally:
        server.shutdown()
        server.server_close()
        app.close()


def _post(url: str, body: dict[str, Any], token: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["X-Memtrace-Token"] = token
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_serve_binds_beyond_loopback_only_with_a_token(tmp_path: Path) -> None:
    traces, _ = write_workload(tmp_path)
    assert main(["serve", str(traces), "--host", "0.0.0.0", "--port", "0"]) == 2


def test_writes_need_the_token_and_files_stay_inside_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces, cases = write_workload(tmp_path)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # never reached
    started = _start([str(traces), "--cases", str(cases)])
    base, app = next(started)
    try:
        page = urllib.request.urlopen(f"{base}/", timeout=10).read().decode()
        assert app.token in page  # on loopback the page carries it
        assert "connect-src 'self'" in page
        review = {"case_id": "case-retrieval", "label": "confirmed"}
        assert _post(f"{base}/api/review", review, None)[0] == 403
        assert _post(f"{base}/api/review", review, "wrong")[0] == 403
        # No verdict span in these files: the review is refused and says how to send one.
        status, answer = _post(f"{base}/api/review", review, app.token)
        assert status == 409 and "--write-back" in answer["error"]
        bad = {"case_id": "case-retrieval", "label": "maybe"}
        assert _post(f"{base}/api/review", bad, app.token)[0] == 400
        for path in ("/../../etc/passwd", "/%2e%2e/x", "/cases/../../x"):
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(f"{base}{path}", timeout=10)
            assert caught.value.code == 404
    finally:
        started.close()


def _spans(jaeger: JaegerServer, trace_id: str) -> list[dict[str, Any]]:
    doc = jaeger.get_trace_v3(trace_id) or {}
    return [
        span
        for rs in doc.get("result", {}).get("resourceSpans", [])
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]


def test_a_review_in_chromium_reaches_jaeger_under_the_verdict_and_counts_in_precision(
    browser: Any,  # noqa: F811
    jaeger: JaegerServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    traces, cases = write_workload(tmp_path)
    for line in traces.read_text().splitlines():  # the app's spans, as the app sent them
        request = urllib.request.Request(
            f"{jaeger.otlp_http_url}/v1/traces",
            data=line.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_http_url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    out = tmp_path / "verdicts.jsonl"
    args = ["attribute", str(traces), "--cases", str(cases), "--out", str(out), "--quiet"]
    assert main([*args, "--write-back"]) == 0
    verdict = next(
        json.loads(line)
        for line in out.read_text().splitlines()
        if json.loads(line)["case_id"] == "case-retrieval"
    )

    def verdict_span() -> dict[str, Any] | None:
        return next(
            (s for s in _spans(jaeger, verdict["trace_id"]) if s["name"] == "memtrace.attribution"),
            None,
        )

    wait_until(verdict_span, timeout=30, interval=0.5, what="the verdict span in Jaeger")
    # The workload's spans carry no service name of their own: find Jaeger's name for them.
    services = json.loads(
        urllib.request.urlopen(f"{jaeger.query_url}/api/services", timeout=10).read()
    )["data"]
    app_service = next(s for s in services if s.startswith("unknown_service"))
    source = f"jaeger+{jaeger.query_url}?service={app_service}&lookback=1h"
    started = _start([source, "--cases", str(cases)])
    base, _ = next(started)
    page = Page(browser)
    try:
        page.page.goto(f"{base}/")
        page.page.wait_for_selector("html[data-ready='true']", state="attached")
        key = page.open_case("case-retrieval")
        assert key
        assert page.page.locator("#review button").count() == 3, page.page.locator(
            "#review"
        ).inner_text()
        page.page.locator("#review button[data-review='confirmed']").click()
        page.page.wait_for_selector("html[data-review='sent']", state="attached")
        assert "review sent" in page.page.locator("#review-status").inner_text()

        # The review span is in the verdict's trace, its parent the verdict span.
        target = verdict_span()
        assert target is not None

        def review() -> dict[str, Any] | None:
            return next(
                (s for s in _spans(jaeger, verdict["trace_id"]) if s["name"] == "memtrace.review"),
                None,
            )

        found = wait_until(review, timeout=30, interval=0.5, what="the review span in Jaeger")
        assert found["parentSpanId"] == target["spanId"]
        [event] = found["events"]
        attrs = {a["key"]: a["value"].get("stringValue") for a in event["attributes"]}
        assert event["name"] == "gen_ai.evaluation.result"
        assert attrs["gen_ai.evaluation.name"] == "memtrace.review"
        assert attrs["gen_ai.evaluation.score.label"] == "confirmed"

        # Reload: the page reads the review back and shows the measured precision.
        page.page.locator("#reload").click()
        page.page.wait_for_selector(
            "[data-stat='review_precision']", state="attached", timeout=60_000
        )
        page.page.locator("#back").click()  # the reload kept the case open
        card = page.page.locator("[data-stat='review_precision']").inner_text()
        assert "100.0%" in card and "1 reviews" in card
        page.shot("serve-reviewed")
        assert page.errors == []
    finally:
        page.close()
        started.close()
    time.sleep(0.1)
    capsys.readouterr()
    assert main(["attribute", source, "--cases", str(cases), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "verdict precision from people's reviews: 1/1 confirmed = 100.0%" in err
