"""Load LoCoMo (``locomo10.json``) as a :class:`Workload`.

LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0) is read from where it lies, never copied.
Categories follow the MemTrace authors' harness: 1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop, 5 adversarial (excluded unless asked for: most have no ``answer``).

The loader survives the file's known quirks: ``session_N_date_time`` keys without a session,
malformed evidence strings (``'D8:6; D9:17'``, ``'D'``, ``'D:11:26'``, space-separated lists),
evidence ids that match no turn (dropped, with a warning), and integer answers (made strings).
Image turns keep their caption: ``text [image: caption]``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memtrace_bench.systems._workload import (
    Conversation,
    Evidence,
    Question,
    Session,
    Turn,
    Workload,
)
from memtrace_otel._internal import data_warning
from memtrace_otel.attribution._tokens import format_date, parse_date
from memtrace_otel.errors import DecodeError

CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
"""LoCoMo category numbers as the MemTrace authors' harness maps them."""

_DIA = re.compile(r"D(\d+):(\d+)")
_SESSION_KEY = re.compile(r"^session_(\d+)$")


def default_locomo_path() -> Path:
    """``../shared/datasets/locomo/locomo10.json`` next to the repository (or ``$MEMTRACE_LOCOMO``)."""
    override = os.environ.get("MEMTRACE_LOCOMO")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[3] / "shared" / "datasets" / "locomo" / "locomo10.json"


def parse_evidence(raw: object) -> list[str]:
    """Dia ids in one evidence entry, however it is written.

    >>> parse_evidence("D8:6; D9:17"), parse_evidence("D"), parse_evidence("D30:05")
    (['D8:6', 'D9:17'], [], ['D30:5'])
    """
    if not isinstance(raw, str):
        return []
    return [f"D{int(s)}:{int(t)}" for s, t in _DIA.findall(raw)]


def load_locomo(
    path: str | os.PathLike[str] | None = None,
    *,
    conversations: Sequence[str] | None = None,
    include_adversarial: bool = False,
    max_questions: int | None = None,
) -> Workload:
    """Read LoCoMo conversations and their questions.

    Args:
        path: the ``locomo10.json`` file; ``None`` uses :func:`default_locomo_path`.
        conversations: sample ids to keep (``conv-26``, ...); ``None`` keeps all ten.
        include_adversarial: keep category 5 (as abstention questions).
        max_questions: keep at most this many questions per conversation (in file order).

    Raises:
        DecodeError: the file is missing, not JSON, or not LoCoMo-shaped (names the field).
        KeyError: a requested conversation is not in the file.
    """
    file = Path(path) if path is not None else default_locomo_path()
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DecodeError("LoCoMo file not found", path=str(file)) from None
    except (OSError, ValueError) as exc:
        raise DecodeError(f"not readable as JSON: {exc}", path=str(file)) from None
    if not isinstance(data, list):
        raise DecodeError("expected a list of samples", path=str(file), field="$")
    wanted = list(conversations) if conversations else None
    by_id: dict[str, Conversation] = {}
    for index, sample in enumerate(data):
        where = f"$[{index}]"
        if not isinstance(sample, dict) or not isinstance(sample.get("sample_id"), str):
            raise DecodeError("sample without a sample_id", path=str(file), field=where)
        sample_id = sample["sample_id"]
        if wanted is not None and sample_id not in wanted:
            continue
        by_id[sample_id] = _conversation(
            sample, str(file), where, include_adversarial, max_questions
        )
    if wanted is not None:
        missing = [w for w in wanted if w not in by_id]
        if missing:
            known = ", ".join(str(s.get("sample_id")) for s in data if isinstance(s, dict))
            raise KeyError(f"LoCoMo has no conversation {', '.join(missing)} (known: {known})")
        chosen = tuple(by_id[w] for w in wanted)
    else:
        chosen = tuple(by_id.values())
    name = "locomo" + (":" + ",".join(wanted) if wanted else "")
    return Workload(name, chosen, None)


def _conversation(
    sample: dict[str, Any], path: str, where: str, adversarial: bool, max_questions: int | None
) -> Conversation:
    conv = sample.get("conversation")
    if not isinstance(conv, dict):
        raise DecodeError("missing conversation", path=path, field=f"{where}.conversation")
    speakers = tuple(str(conv.get(k, "")) for k in ("speaker_a", "speaker_b") if conv.get(k))
    numbers = sorted(int(m[1]) for k in conv if (m := _SESSION_KEY.match(k)))
    sessions: list[Session] = []
    for number in numbers:
        turns_raw = conv[f"session_{number}"]
        if not isinstance(turns_raw, list):
            raise DecodeError(
                "session is not a list", path=path, field=f"{where}.conversation.session_{number}"
            )
        stamp = str(conv.get(f"session_{number}_date_time", ""))
        day = parse_date(stamp)
        date = format_date(day) if day else stamp
        turns = []
        for t_index, turn in enumerate(turns_raw):
            field = f"{where}.conversation.session_{number}[{t_index}]"
            if not isinstance(turn, dict) or not isinstance(turn.get("dia_id"), str):
                raise DecodeError("turn without a dia_id", path=path, field=field)
            ids = parse_evidence(turn["dia_id"])
            dia = ids[0] if ids else turn["dia_id"]
            text = str(turn.get("text", ""))
            if turn.get("blip_caption"):
                text = f"{text} [image: {turn['blip_caption']}]"
            turns.append(Turn(dia, str(turn.get("speaker", "")), text, number, date))
        sessions.append(Session(number, date, tuple(turns)))
    known = {t.dia_id: t for s in sessions for t in s.turns}
    questions: list[Question] = []
    for q_index, qa in enumerate(sample.get("qa") or []):
        field = f"{where}.qa[{q_index}]"
        if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
            raise DecodeError("question entry without a question", path=path, field=field)
        category = CATEGORY_NAMES.get(qa.get("category"), "unknown")  # type: ignore[arg-type]
        abstention = category == "adversarial"
        if abstention and not adversarial:
            continue
        answer = qa.get("answer", qa.get("adversarial_answer"))
        if answer is None:
            continue
        evidence: list[Evidence] = []
        for raw in qa.get("evidence") or []:
            for dia in parse_evidence(raw):
                turn = known.get(dia)
                if turn is None:
                    data_warning(
                        "locomo.evidence",
                        "memtrace-otel: %s: %s: evidence %r matches no turn; dropped",
                        path,
                        field,
                        raw,
                    )
                    continue
                if all(e.dia_id != dia for e in evidence):
                    evidence.append(Evidence(dia, (), f"{turn.speaker}: {turn.text}"))
        gold = ("Not mentioned in the conversation",) if abstention else (str(answer),)
        questions.append(
            Question(f"q{q_index + 1}", qa["question"], gold, category, tuple(evidence), abstention)
        )
        if max_questions is not None and len(questions) >= max_questions:
            break
    return Conversation(str(sample["sample_id"]), speakers, tuple(sessions), tuple(questions))
