"""The HTML report in a real browser: Debian's headless Chromium driven by Playwright's client.

Pages are opened from ``file://`` exactly as a person would open them. Screenshots and the
measured times go to ``test-output/browser/`` (and the times to the terminal). Timings are
reported, never asserted: they depend on the machine.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memtrace_otel.cli import main
from tests._pipeline import EXPECTED, write_workload
from tests._reporting import INJECTION, MARKERS, write_big_workload, write_hostile_workload

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT = Path(__file__).resolve().parents[1] / "test-output" / "browser"
# Two animation frames: the page has drawn whatever the last action changed.
FRAME = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
# A click on a node as cytoscape sees it (returns nothing: a collection is costly to serialise).
TAP = "(id) => { window.memtraceReport.cy.getElementById(id).emit('tap'); }"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (the browser tests must run in CI: `make test` installs it)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is missing (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Page:
    """A page plus everything it reported: console errors, uncaught errors, dialogs."""

    def __init__(self, browser: Any) -> None:
        self.page = browser.new_page(viewport={"width": 1500, "height": 1000})
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on(
            "console",
            lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None,
        )

        def dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", dialog)

    def open(self, path: Path) -> float:
        """Load a report page; returns the seconds until it had drawn its summary."""
        started = time.perf_counter()
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_selector("html[data-ready='true']", state="attached")
        self.page.evaluate(FRAME)
        return time.perf_counter() - started

    def open_case(self, case_id: str) -> str:
        """Click a case in the list and wait until its graph is drawn; returns its key."""
        row = self.page.locator("#cases tbody tr", has_text=case_id).first
        key = str(row.get_attribute("data-key"))
        row.click()
        self.page.wait_for_selector(f"html[data-case='{key}']", state="attached")
        self.page.evaluate(FRAME)
        return key

    def js(self, expression: str, arg: Any = None) -> Any:
        return self.page.evaluate(expression, arg)

    def shot(self, name: str) -> Path:
        OUTPUT.mkdir(parents=True, exist_ok=True)
        path = OUTPUT / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def close(self) -> None:
        self.page.close()


def _report(
    folder: Path, traces: Path, cases: Path, *extra: str, labels: Path | None = None
) -> Path:
    report = folder / "report"
    args = ["attribute", str(traces), "--cases", str(cases), "--report", str(report), "--quiet"]
    if labels is not None:
        args += ["--labels", str(labels)]
    assert main([*args, *extra]) in (0, 1)
    return report


def _record(name: str, values: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """Write measured numbers to test-output/browser/timings.json and show them."""
    OUTPUT.mkdir(parents=True, exist_ok=True)
    store = OUTPUT / "timings.json"
    data = json.loads(store.read_text()) if store.exists() else {}
    data[name] = values
    store.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    with capsys.disabled():
        print(f"\n[browser timing] {name}: {json.dumps(values, sort_keys=True)}")


def test_demo_report_summary_list_and_culprit(
    browser: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, cases = write_workload(tmp_path)
    # labels equal to the planted faults: the page shows 100% error-type accuracy
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps({"case_id": f"case-{f}", "error_type": t, "op_name": n}) + "\n"
            for f, (t, n) in EXPECTED.items()
        )
    )
    report = _report(
        tmp_path, traces, cases, "--jaeger-url", "http://localhost:16686", labels=labels
    )
    summary = json.loads((report / "summary.json").read_text())
    page = Page(browser)
    try:
        open_seconds = page.open(report / "index.html")
        # the numbers on the page are summary.json's
        for stat in ("cases", "attributed", "unattributed", "resumed", "records"):
            shown = page.page.locator(f"[data-stat='{stat}'] .value").inner_text()
            assert shown == str(summary[stat]), stat
        assert page.page.locator("[data-stat='failed'] .value").inner_text() == str(
            len(summary["failed"])
        )
        for table, field in (("by_error_type", "by_error_type"), ("by_system", "by_system")):
            shown = {
                row.get_attribute("data-key"): int(row.locator("td").nth(1).inner_text())
                for row in page.page.locator(f"table[data-table='{table}'] tbody tr").all()
            }
            assert shown == summary[field], table
        assert "7 / 7 = 100.0%" in page.page.locator("[data-acc='error_type']").inner_text()
        assert page.page.locator("#cases tbody tr").count() == 7
        assert page.shot("demo-summary").stat().st_size > 0

        # sorting: by error type, then the other way round
        page.page.locator("#cases th[data-sort='error_type']").click()
        types = page.page.locator("#cases tbody tr td:nth-child(5)").all_inner_texts()
        assert types == sorted(types)
        page.page.locator("#cases th[data-sort='error_type']").click()
        assert page.page.locator("#cases tbody tr td:nth-child(5)").all_inner_texts() == sorted(
            types, reverse=True
        )
        # a click on a summary row filters the list to it
        page.page.locator("table[data-table='by_error_type'] tr[data-key='RetrievalError']").click()
        assert page.page.locator("#cases tbody tr").count() == 2
        page.page.locator("#clear-filter").click()
        page.page.fill("#filter", "rerank")
        first = page.page.locator("#cases tbody tr").first.get_attribute("data-case")
        assert first == "case-filter"
        page.page.fill("#filter", "")

        # a failed case: the culprit is marked and its panel shows what it read and wrote
        key = page.open_case("case-retrieval")
        case = json.loads((report / "cases" / f"{key}.js").read_text()[22:-3])
        culprit = next(n for n in case["nodes"] if n["culprit"])
        assert culprit["name"] == "test.search"
        marks = page.js(
            """(id) => { const n = window.memtraceReport.cy.getElementById(id);
                return {culprit: n.hasClass('culprit'), path: n.hasClass('path'),
                        selected: n.selected(), border: n.style('border-color'),
                        width: n.style('border-width'), label: n.style('label')}; }""",
            culprit["id"],
        )
        assert marks["culprit"] and marks["path"] and marks["selected"]
        assert marks["border"] == "rgb(192,57,43)" and marks["width"] == "6px"
        assert marks["label"].startswith("✖ RetrievalError")
        path = page.js("() => window.memtraceReport.cy.nodes('.path').map(n => n.id()).sort()")
        assert path == sorted(n["id"] for n in case["nodes"] if n["path"])
        assert "msg:case-retrieval:1@1" in path
        detail = page.page.locator("#detail")
        assert detail.get_attribute("data-node") == culprit["id"]
        text = detail.inner_text()
        for ref in culprit["inputs"] + culprit["outputs"]:
            assert ref in text
        assert "Where does Ana live?" in text and "Ana lives in Porto" in text  # input values
        assert '"text":"User likes hiking"' in text  # the output: hiking only, no Porto
        assert "RetrievalError" in page.page.locator("#verdict").inner_text()
        jaeger = page.page.locator("#detail a", has_text="Jaeger").get_attribute("href")
        assert (
            jaeger == f"http://localhost:16686/trace/{culprit['trace_id']}?uiFind={culprit['id']}"
        )
        page.shot("demo-case-retrieval")

        # clicking another node shows its value; "next" walks the list
        page.js(TAP, "msg:case-retrieval:1@1")
        assert detail.get_attribute("data-node") == "msg:case-retrieval:1@1"
        assert "My sister Ana moved to Porto last May." in detail.inner_text()
        page.page.locator("#next").click()
        page.page.wait_for_selector(f"html[data-case]:not([data-case='{key}'])", state="attached")
        assert page.page.locator("#case-title").inner_text() != "case case-retrieval"
        page.page.locator("#back").click()
        page.page.wait_for_selector("#overview:not(.hidden)")
        assert page.errors == [] and page.dialogs == []
    finally:
        page.close()
    _record("demo report", {"open_seconds": round(open_seconds, 3)}, capsys)


def test_hostile_memory_is_shown_as_text_and_never_runs(browser: Any, tmp_path: Path) -> None:
    traces, cases = write_hostile_workload(tmp_path)
    report = _report(tmp_path, traces, cases)
    single = tmp_path / "case.html"
    assert main(["graph", str(traces), "--case", "case-" + INJECTION, "-o", str(single)]) == 0
    for name, path in (("hostile-report", report / "index.html"), ("hostile-single", single)):
        page = Page(browser)
        try:
            page.open(path)
            if name == "hostile-report":
                assert INJECTION in page.page.locator("#cases tbody tr").first.inner_text()
                page.open_case("case-")
            else:
                page.page.wait_for_selector("html[data-case]", state="attached")
            assert INJECTION in page.page.locator("#case-title").inner_text()
            page.js(
                TAP,
                "msg:h:1@1",
            )
            value = page.page.locator("#detail pre.value").inner_text()
            assert value == "My sister Ana moved to Porto. " + INJECTION
            assert page.page.locator("#detail img, #verdict img, #cases img").count() == 0
            page.page.wait_for_timeout(200)  # an injected onerror would have fired by now
            assert page.js("() => window.__pwned === undefined")
            assert page.dialogs == [], page.dialogs
            assert page.errors == [], page.errors
            page.shot(name)
        finally:
            page.close()


def test_case_page_leads_with_question_answers_and_hostile_feedback_as_text(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memtrace_otel.instrumentation import AnswerRef

    answers: dict[str, AnswerRef] = {}
    traces, _ = write_workload(tmp_path, judge=False, answers=answers, faults=("response",))
    monkeypatch.setenv("MEMTRACE_CAPTURE_CONTENT", "SPAN_AND_EVENT")
    feedback = tmp_path / "feedback.jsonl"
    sent = main(
        [
            *("feedback", "--traceparent", answers["response"].traceparent, "--wrong"),
            *("--expected", "Porto", "--comment", INJECTION, "--traces-file", str(feedback)),
        ]
    )
    assert sent == 0
    report = tmp_path / "report"
    assert main(["attribute", str(traces), str(feedback), "--report", str(report), "--quiet"]) == 0
    page = Page(browser)
    try:
        page.open(report / "index.html")
        page.open_case("case-response")
        shown = page.page.locator("#verdict").inner_text()
        lines = shown.split("\n")
        # the question, the expected and the given answer, the feedback, then the verdict
        assert lines[0].split("\t") == ["question", "Where does Ana live?"]
        assert lines[1].split("\t") == ["expected", "Porto"]
        assert lines[2].split("\t") == ["answer given", "Lisbon"]
        assert lines[3].startswith("flagged by") and INJECTION in shown
        assert shown.index(INJECTION) < shown.index("ResponseError")  # the verdict comes after
        assert page.page.locator("#verdict img").count() == 0
        page.page.wait_for_timeout(200)
        assert page.js("() => window.__pwned === undefined")
        assert page.dialogs == [] and page.errors == []
        page.shot("feedback-case")
    finally:
        page.close()


def test_template_markers_in_every_field_stay_text(browser: Any, tmp_path: Path) -> None:
    """Issue 23: ``%%SCRIPTS%%`` in a value, the case id or an op name was substituted inside
    the data (a one-case page grew from 550 KB to 30 MB, index.html listed 0 cases)."""
    traces, cases = write_hostile_workload(tmp_path, MARKERS, in_op_names=True)
    report = _report(tmp_path, traces, cases)
    single = tmp_path / "case.html"
    assert main(["graph", str(traces), "--case", "case-" + MARKERS, "-o", str(single)]) == 0
    # the page is the shipped scripts plus the data, not the scripts again inside the data
    assert single.stat().st_size < 2_000_000
    for name, path in (("markers-report", report / "index.html"), ("markers-single", single)):
        page = Page(browser)
        try:
            page.open(path)
            if name == "markers-report":
                rows = page.page.locator("#cases tbody tr")
                assert rows.count() == 1 and MARKERS in rows.first.inner_text()
                page.open_case("case-")
            else:
                page.page.wait_for_selector("html[data-case]", state="attached")
                assert page.js("() => document.title") == "memtrace case case-" + MARKERS
            assert page.page.locator("#case-title").inner_text().endswith("case-" + MARKERS)
            page.page.locator("#expand-all").click()
            page.js(FRAME)
            page.js(TAP, "msg:h:1@1")
            value = page.page.locator("#detail pre.value").inner_text()
            assert value == "My sister Ana moved to Porto. " + MARKERS
            ops = page.js(
                "() => window.memtraceReport.cy.nodes('[type = \"op\"]').map(n => n.id())"
            )
            assert len(ops) == 9  # 2 x (extract, add) + search, rerank, build, answer, judge
            names = []
            for op in ops:
                page.js(TAP, op)
                names.append(page.page.locator("#detail h3").inner_text())
            assert all(n.endswith(" " + MARKERS) for n in names), names
            blocks = page.js(
                "() => document.querySelectorAll('script[type=\"application/json\"]').length"
            )
            assert blocks == (1 if name == "markers-report" else 2)
            assert page.errors == [], page.errors
            page.shot(name)
        finally:
            page.close()


def _frame_ms(page: Page, action: Any) -> float:
    started = time.perf_counter()
    action()
    page.js(FRAME)
    return 1000 * (time.perf_counter() - started)


def _gestures(page: Page, rounds: int) -> dict[str, float]:
    """Median ms until the next drawn frame after a wheel zoom, a drag pan and a node click."""
    box = page.page.locator("#graph").bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    mouse = page.page.mouse
    zoom, pan, click = [], [], []
    for i in range(rounds):
        mouse.move(x, y)
        zoom.append(_frame_ms(page, lambda i=i: mouse.wheel(0, -200 if i % 2 == 0 else 180)))

        def drag() -> None:
            mouse.down()
            mouse.move(x + 90, y + 40, steps=3)
            mouse.up()

        pan.append(_frame_ms(page, drag))
        target = page.js(
            """(i) => { const cy = window.memtraceReport.cy;
                const nodes = cy.nodes('[type != "stage"]');
                const n = nodes[(i * 389) % nodes.length]; cy.center(n);
                const p = n.renderedPosition(); return {id: n.id(), x: p.x, y: p.y}; }""",
            i,
        )
        page.js(FRAME)
        click.append(
            _frame_ms(page, lambda t=target: mouse.click(box["x"] + t["x"], box["y"] + t["y"]))
        )
        assert page.page.locator("#detail").get_attribute("data-node") == target["id"]
    return {
        "zoom_ms": round(statistics.median(zoom)),
        "pan_ms": round(statistics.median(pan)),
        "select_ms": round(statistics.median(click)),
    }


def test_a_2000_node_case_graph_stays_interactive(
    browser: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces, cases = write_big_workload(tmp_path)
    report = _report(tmp_path, traces, cases)
    page = Page(browser)
    try:
        page.open(report / "index.html")
        started = time.perf_counter()
        key = page.open_case("case-big")
        open_case_s = time.perf_counter() - started
        case = json.loads((report / "cases" / f"{key}.js").read_text()[22:-3])
        total = len(case["nodes"])
        assert total >= 2000
        culprit = next(n for n in case["nodes"] if n["culprit"])
        # opened collapsed: the trail, the culprit and the question stay, each stage is one node
        shown = page.js("() => window.memtraceReport.cy.nodes().length")
        assert shown < 60
        assert page.js(
            "(id) => window.memtraceReport.cy.getElementById(id).hasClass('culprit')", culprit["id"]
        )
        assert page.js("() => window.memtraceReport.cy.nodes('.stage-group').length") >= 2
        baseline = _gestures(page, 3)
        page.shot("big-collapsed")

        # everything, drawn at once
        started = time.perf_counter()
        page.page.locator("#expand-all").click()
        page.page.wait_for_selector("html[data-draws='2']", state="attached")
        page.js(FRAME)
        expand_s = time.perf_counter() - started
        assert page.js("() => window.memtraceReport.cy.nodes().length") == total
        assert page.js(
            "(id) => window.memtraceReport.cy.getElementById(id).hasClass('culprit')", culprit["id"]
        )
        timings = page.js("() => Object.assign({}, window.memtraceReport.timings)")
        page.shot("big-expanded")
        full = _gestures(page, 5)
        # collapse again, then a click on a stage's node brings that stage back
        page.page.locator("#collapse-all").click()
        page.page.wait_for_selector("html[data-draws='3']", state="attached")
        page.js(TAP, "stage:construction")
        page.page.wait_for_selector("html[data-draws='4']", state="attached")
        assert (
            page.js("() => window.memtraceReport.cy.getElementById('stage:construction').length")
            == 0
        )
        assert page.errors == []
    finally:
        page.close()
    _record(
        "2000-node case",
        {
            "nodes": total,
            "open_case_collapsed_s": round(open_case_s, 3),
            "expand_all_s": round(expand_s, 3),
            "layout": timings["layout"],
            "layout_ms": round(timings["layoutMs"]),
            "collapsed_view": baseline,
            "full_graph": full,
            "load_average_1min": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
        },
        capsys,
    )


# --- the user's path: the list first, search, the timeline, a legible graph (issue 33) ---------

# Every evidence-path node drawn (and every folded run of versions) as the person sees it: the
# label's size on screen, and whether the node with its label lies inside the graph's box.
LEGIBILITY = """() => {
  const cy = window.memtraceReport.cy;
  const box = document.getElementById('graph');
  const w = box.clientWidth, h = box.clientHeight;
  return cy.nodes('.path, .culprit').map(n => {
    const bb = n.renderedBoundingBox({includeLabels: true});
    return {id: n.id(), type: n.data('type'), label: n.style('label'),
            px: parseFloat(n.style('font-size')) * cy.zoom(),
            inside: bb.x1 >= 0 && bb.y1 >= 0 && bb.x2 <= w && bb.y2 <= h};
  });
}"""
MIN_LABEL_PX = 11


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``memtrace demo``'s report (the four reference systems, seeded faults)."""
    folder = tmp_path_factory.mktemp("demo")
    # In a process of its own, as `make demo` runs it (and away from other tests' captured stderr).
    result = subprocess.run(
        [sys.executable, "-m", "memtrace_otel.cli", "demo", "--out", str(folder)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return folder / "report"


def _case(report: Path, key: str) -> dict[str, Any]:
    text = (report / "cases" / f"{key}.js").read_text()
    data: dict[str, Any] = json.loads(text[len("window.__memtraceCase(") : -3])
    return data


def _assert_path_legible(page: Page, case: dict[str, Any], when: str) -> None:
    drawn = page.js(LEGIBILITY)
    by_id = {d["id"]: d for d in drawn}
    path = [n for n in case["nodes"] if n["path"] or n["culprit"]]
    folded = [d for d in drawn if d["type"] == "chain"]
    # Every path node is drawn itself, or inside a drawn, counted run of versions.
    in_runs = sum(int(d["label"].split(" ", 1)[0]) for d in folded)
    assert len([n for n in path if n["id"] in by_id]) + in_runs == len(path), when
    for item in drawn:
        assert item["label"], (when, item)
        assert item["px"] >= MIN_LABEL_PX, (when, item)
        assert item["inside"], (when, item)
    assert page.js("() => document.documentElement.getAttribute('data-path-list')") == "false"


def test_demo_cases_open_on_a_legible_evidence_path_before_and_after_fit(
    browser: Any, demo: Path
) -> None:
    keys = sorted(p.stem for p in (demo / "cases").glob("*.js"))
    sizes = {key: len(_case(demo, key)["nodes"]) for key in keys}
    largest = max(keys, key=lambda k: sizes[k])
    longest = max(keys, key=lambda k: sum(n["path"] for n in _case(demo, k)["nodes"]))
    assert sizes[largest] > 250
    page = Page(browser)
    try:
        page.open(demo / "index.html")
        for key in dict.fromkeys([largest, longest]):
            case = _case(demo, key)
            page.js(f"() => {{ location.hash = 'case={key}'; }}")
            page.page.wait_for_selector(f"html[data-case='{key}']", state="attached")
            page.js(FRAME)
            # Opened on the path: what lies off it is folded into counted groups.
            shown = page.js("() => window.memtraceReport.cy.nodes().length")
            assert shown < 40 < len(case["nodes"]), (key, shown)
            groups = page.js(
                "() => window.memtraceReport.cy.nodes('.stage-group').map(n => n.style('label'))"
            )
            assert groups and all(" more" in g for g in groups)
            _assert_path_legible(page, case, f"{key} on opening")
            page.shot(f"demo-largest-case-{key}")
            page.page.locator("#fit").click()
            page.js(FRAME)
            _assert_path_legible(page, case, f"{key} after fit")
        assert page.errors == []
    finally:
        page.close()


def test_the_list_leads_with_question_answers_and_searches_them(browser: Any, demo: Path) -> None:
    rows = json.loads(
        re.search(
            r'<script type="application/json" id="memtrace-report">(.*?)</script>',
            (demo / "index.html").read_text(),
            re.S,
        ).group(1)  # type: ignore[union-attr]
    )["cases"]
    page = Page(browser)
    try:
        page.open(demo / "index.html")
        # The list comes before the summary's stat cards, within the first screen.
        list_top = page.js("() => document.getElementById('cases').getBoundingClientRect().top")
        stats_top = page.js("() => document.getElementById('stats').getBoundingClientRect().top")
        assert list_top < 200 < stats_top
        heads = page.page.locator("#cases thead th").all_inner_texts()
        for title in ("question", "answer given", "expected", "verdict", "culprit op", "conf."):
            assert any(h.startswith(title) for h in heads), (title, heads)
        # #case= numbers follow the list as it opens.
        keys = [r.get_attribute("data-key") for r in page.page.locator("#cases tbody tr").all()]
        assert keys == sorted(keys) and keys[0] == "0" * len(keys[0])
        # Search finds a case by a word of its question, of its answer, and by its store.
        target = next(r for r in rows if r["question"] and r["prediction"] != "I don't know.")
        word = max(target["question"].rstrip("?").split(), key=len)
        for text in (word, target["prediction"], target["store"]):
            page.page.fill("#filter", text)
            shown = [
                r.get_attribute("data-case") for r in page.page.locator("#cases tbody tr").all()
            ]
            assert target["case_id"] in shown, text
            assert len(shown) < len(rows), text
        page.page.fill("#filter", "")
        # Reasons name records by their text.
        reasons = page.page.locator("#cases tbody td.reason").all_inner_texts()
        assert sum("“" in r for r in reasons) >= len(reasons) // 2
        page.shot("list-first")
        assert page.errors == []
    finally:
        page.close()


def test_the_store_timeline_shows_writes_reads_and_failed_answers_in_order(
    browser: Any, demo: Path
) -> None:
    page = Page(browser)
    try:
        page.open(demo / "index.html")
        page.page.wait_for_selector("#timeline tbody tr[data-role='failed']", state="attached")
        roles = page.page.locator("#timeline tbody tr").evaluate_all(
            "rows => rows.map(r => r.getAttribute('data-role'))"
        )
        assert {"write", "read", "answer", "failed"} <= set(roles)
        times = page.page.locator("#timeline tbody tr td:first-child").all_inner_texts()
        assert times == sorted(times)
        page.page.locator("#timeline-block").scroll_into_view_if_needed()
        page.shot("timeline")
        failed = page.page.locator("#timeline tbody tr[data-role='failed']").first
        case_id = failed.locator("td").nth(4).inner_text()
        failed.click()
        page.page.wait_for_selector("html[data-case]", state="attached")
        assert page.page.locator("#case-title").inner_text() == f"case {case_id}"
        assert page.errors == []
    finally:
        page.close()
