"""The LoCoMo loader (its quirks) and the systems on a real LoCoMo conversation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memtrace_bench.systems import load_locomo
from memtrace_bench.systems.metrics import load_jsonl
from memtrace_otel.cli import main
from memtrace_otel.errors import DecodeError
from tests.conftest import shared_path


def quirky_sample() -> dict[str, object]:
    return {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I moved to Porto yesterday."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice!", "img_url": ["x"], "blip_caption": "a photo of a bridge"},
            ],
            "session_2_date_time": "2:00 pm on 9 May, 2023",  # no session_2 list
        },
        "qa": [
            {"question": "Where did Ana move?", "answer": "Porto", "evidence": ["D1:1; D1:2"], "category": 4},
            {"question": "How many bridges?", "answer": 3, "evidence": ["D", "D:11:26", "D9:9"], "category": 1},
            {"question": "Trick?", "adversarial_answer": "no", "evidence": ["D1:1"], "category": 5},
        ],
    }  # fmt: skip


def test_loader_survives_the_quirks(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([quirky_sample()]))
    [conv] = load_locomo(path).conversations
    assert [s.index for s in conv.sessions] == [1]
    assert conv.sessions[0].date == "8 May 2023"
    assert conv.turn("D1:2").text == "Nice! [image: a photo of a bridge]"
    first, second = conv.questions
    assert [e.dia_id for e in first.evidence] == ["D1:1", "D1:2"]
    assert (first.category, second.category) == ("single-hop", "multi-hop")
    assert second.gold_answers == ("3",) and second.evidence == ()
    [_, _, adversarial] = load_locomo(path, include_adversarial=True).conversations[0].questions
    assert adversarial.abstention and adversarial.category == "adversarial"


def test_loader_errors_name_the_file_and_field(tmp_path: Path) -> None:
    with pytest.raises(DecodeError, match="not found"):
        load_locomo(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"sample_id": "c", "conversation": {"session_1": "oops"}}]))
    with pytest.raises(DecodeError) as info:
        load_locomo(bad)
    assert info.value.field == "$[0].conversation.session_1" and info.value.path == str(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps([quirky_sample()]))
    with pytest.raises(KeyError, match="conv-9"):
        load_locomo(good, conversations=["conv-9"])


def test_the_real_file() -> None:
    path = shared_path("datasets", "locomo", "locomo10.json")
    workload = load_locomo(path)
    assert len(workload.conversations) == 10
    assert sum(1 for c in workload.conversations for _ in c.turns()) == 5882
    assert sum(len(c.questions) for c in workload.conversations) == 1986 - 446
    conv = workload.conversation("conv-26")
    assert conv.speakers == ("Caroline", "Melanie")
    for question in conv.questions:
        for evidence in question.evidence:
            assert conv.turn(evidence.dia_id) is not None


def test_bench_generate_on_locomo(tmp_path: Path) -> None:
    path = shared_path("datasets", "locomo", "locomo10.json")
    code = main(["bench", "generate", "--dataset", "locomo:conv-26", "--questions", "4",
                 "--systems", "rag,evermemos", "--locomo-path", str(path),
                 "--out", str(tmp_path), "--no-progress"])  # fmt: skip
    assert code == 0
    cases = load_jsonl(tmp_path / "cases.jsonl")
    assert len(cases) == 8
    workload = load_locomo(path, conversations=["conv-26"], max_questions=4)
    expected = {
        q.qid: [f"msg:{{store}}:{e.dia_id}@1" for e in q.evidence]
        for q in workload.conversations[0].questions
    }
    for case in cases:
        qid = case["case_id"].rsplit(":", 1)[1]
        assert case["evidence_refs"] == [r.format(store=case["store_id"]) for r in expected[qid]]
    failed = {c["case_id"] for c in cases if c["verdict"] == "incorrect"}
    assert {lab["case_id"] for lab in load_jsonl(tmp_path / "labels.jsonl")} == failed
