"""``memtrace export`` on files: OTLP JSON Lines out, a summary and progress on stderr."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from memtrace_otel._progress import Progress
from memtrace_otel.cli import main
from memtrace_otel.cli.export import show_progress
from memtrace_otel.sources import SourceStats, open_source


def _line(*span_numbers: int) -> str:
    spans = [
        {
            "traceId": f"{1:032x}",
            "spanId": f"{n:016x}",
            "name": f"op{n}",
            "startTimeUnixNano": str(n),
        }
        for n in span_numbers
    ]
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n"


def test_export_merges_files_and_reports_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.jsonl").write_text(_line(1, 2) + "{broken\n")
    (inputs / "b.jsonl").write_text(_line(2, 3))
    out = tmp_path / "out"
    assert main(["export", str(inputs), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "wrote 3 spans" in err
    assert "1 skipped (invalid_json: 1)" in err
    assert "1 exact duplicate spans dropped" in err
    assert f"{inputs / 'a.jsonl'}:2: invalid JSON" in err
    records = list(open_source(str(out / "traces.jsonl"), strict=True).records())
    assert [r.name for r in records] == ["op1", "op2", "op3"]
    assert not (out / "traces.jsonl.partial").exists()


def test_strict_export_stops_with_a_typed_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_line(1) + "{broken\n")
    assert main(["export", str(bad), "--out", str(tmp_path / "out"), "--strict"]) == 2
    assert f"{bad}:2" in capsys.readouterr().err
    assert not (tmp_path / "out" / "traces.jsonl").exists()


def test_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "http://localhost:16686", "--out", str(tmp_path)]) == 2
    assert "jaeger+http://" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", str(tmp_path), "--out", str(tmp_path), "--header", "no-colon"])


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_export_progress_uses_the_one_bar() -> None:
    stats = SourceStats(records=1500, traces_fetched=3, traces_total=4, files=0, skipped=2)
    plain = io.StringIO()
    progress = Progress(plain, "exporting", unit="span", every=0)
    show_progress(progress)(stats)
    progress.close()
    lines = plain.getvalue().splitlines()
    assert lines[0].startswith("exporting: 1,500 spans in ")  # a line per update in a log
    assert lines[0].endswith(", 3/4 traces, 2 skipped")
    assert lines[-1].startswith("exporting: done: 1,500 spans")
    assert "\r" not in plain.getvalue()
    tty = _Tty()
    bar = Progress(tty, "exporting", unit="span")
    show_progress(bar)(stats)
    bar.close()
    assert "exporting" in tty.getvalue() and "3/4 traces, 2 skipped" in tty.getvalue()  # tqdm
    silent = Progress(None, "exporting", unit="span")
    show_progress(silent)(stats)
    silent.close()
    assert silent.count == 1500
