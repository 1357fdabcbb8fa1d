"""Our traces -> MemTraceBench files written by the real ``smartcomment`` recorder.

MemTraceBench's graphs come from zjunlp's MemBase harness, which records each memory system with
``smartcomment``. :func:`export_memtracebench` does the same for a run of our reference systems
(a ``memtrace bench generate`` directory): it turns each memory store's spans into a *plan*,
i.e. the recorder calls MemBase's instrumented systems make, in the order the run made them,
and has ``smartcomment`` 0.1.2 (Python 3.12, ``scripts/smartcomment_env.sh``) execute it through
:mod:`memtrace_bench.memtracebench._smartcomment_recorder`. Our labels become ``data.annotations``. The
result is a second recording of the same run, so attribution on the imported file must agree
with attribution on our own spans (the fidelity test).

What the plan asks of the recorder, as MemBase does it:

- one construction session per conversation session, then one search session (every question's
  query variable and retrieval ops) and one evaluation session (context, answer, judge);
- messages, prompts, queries and gold answers are plain variables, not ops;
- per-question outputs are named by content (``prediction:str:<sha1>``,
  ``judge_score:float:<sha1>``, ``retrieved:list:<sha1>``, ``context:str:<sha1>``), so identical
  values are one node shared by the questions that produced them;
- LLM steps (ops reading a prompt) chain a raw and a cleaned response inside the op;
- an op that tombstones a unit links it to the shared ``delete_marker`` node instead of writing a
  version; structured units updated in place are ``comment_mutation`` versions;
- op names are the harness's where the harness's name means the same op kind, otherwise ours
  with a category of that kind; every op carries ``memtrace_span_id`` in its metadata.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtrace_bench.systems.metrics import load_jsonl
from memtrace_otel.errors import DecodeError
from memtrace_otel.semconv import Category, OpKind, SpanRecord, Stage
from memtrace_otel.semconv import attributes as attr
from memtrace_otel.sources._memtracebench import OP_KIND_BY_CATEGORY, OP_KIND_BY_NAME, op_kind
from memtrace_otel.sources._source import FileSource

RECORDER = Path(__file__).with_name("_smartcomment_recorder.py")
"""The script the Python 3.12 environment runs."""

ENV_SMARTCOMMENT_PYTHON = "MEMTRACE_SMARTCOMMENT_PYTHON"
"""Environment variable naming the interpreter that has ``smartcomment`` installed."""

SMARTCOMMENT_PIN = "0.1.2"

HARNESS_NAME_BY_SUFFIX: Mapping[str, str] = {
    "memory_update": "memory_system.memory_update",
    "retrieve": "memory_system.retrieve",
    "add": "memory_system.add",
    "fact_extraction": "memory_system.extract_facts",
    "update_decision": "memory_system.update_memory_decision",
    "search": "memory_system.search_vector_store",
    "boundary_detection": "evermemos.boundary_detection",
    "memcell_extraction": "memory_system.extract_memory",
    "memcell_store": "memory_system.finalize_memory_unit",
    "hybrid_retrieval": "memory_system.hybrid_retrieval",
    "multi_query_retrieval": "memory_system.agentic_round2_bundle",
    "final_rerank": "memory_system.agentic_final_rerank",
    "answer": "question-answering",
}
"""Our op name's last part -> the harness's op name (used only when the kinds agree)."""

_CATEGORY_BY_KIND: dict[str, str] = {}
for _category, _kind in OP_KIND_BY_CATEGORY.items():
    _CATEGORY_BY_KIND.setdefault(str(_kind), _category)

_NODE_CATEGORY: Mapping[str, str] = {
    Category.MESSAGE.value: "message",
    Category.MEMORY.value: "memory_entry",
    Category.PROMPT.value: "prompt",
    Category.CANDIDATES.value: "retrieval",
    Category.CONTEXT.value: "context",
}
"""Our variable category -> the node category the harness gives such variables."""

_JUDGE_ROLE: Mapping[str, str] = {
    Category.QUERY.value: "question",
    Category.GOLD.value: "golden_answers",
    Category.PREDICTION.value: "prediction",
}

_SEARCH_STAGES = frozenset({Stage.RETRIEVAL.value})
_EVALUATION_STAGES = frozenset({Stage.RESPONSE.value, Stage.EVALUATION.value})


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`export_memtracebench` wrote."""

    files: tuple[Path, ...]
    operations: int
    annotations: int
    annotations_skipped: int


def smartcomment_python() -> str:
    """The interpreter with ``smartcomment`` installed.

    ``$MEMTRACE_SMARTCOMMENT_PYTHON``, else the environment ``scripts/smartcomment_env.sh`` (run by
    ``make smartcomment``) creates in ``~/.cache/memtrace-otel``.

    Raises:
        FileNotFoundError: neither exists (the message says how to create it).
    """
    explicit = os.environ.get(ENV_SMARTCOMMENT_PYTHON)
    if explicit:
        return explicit
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    python = cache / "memtrace-otel" / f"venv-smartcomment-{SMARTCOMMENT_PIN}" / "bin" / "python"
    if python.exists():
        return str(python)
    raise FileNotFoundError(
        f"no smartcomment environment at {python}: run `make smartcomment` "
        f"(scripts/smartcomment_env.sh) or set {ENV_SMARTCOMMENT_PYTHON}"
    )


# --- values --------------------------------------------------------------------------------------
def _decode(text: Any) -> Any:
    """Our captured value string -> the Python value the system held."""
    if not isinstance(text, str):
        return "" if text is None else text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict | list) or not isinstance(value, str) else text


@dataclass
class _Var:
    value: Any
    category: str
    deleted: bool = False
    meta: Any = None


def _split(ref: str) -> tuple[str, int]:
    name, _, version = ref.rpartition("@")
    return (name, int(version)) if name and version.isdigit() else (ref, 1)


def _suffix(name: str) -> str:
    return name.rsplit(".", 1)[-1]


# --- plan ----------------------------------------------------------------------------------------
class _Planner:
    """The plan of one memory store's graph."""

    def __init__(
        self,
        system: str,
        store: str,
        records: Sequence[SpanRecord],
        cases: Mapping[str, Mapping[str, Any]],
        labels: Sequence[Mapping[str, Any]],
        variables: Mapping[str, _Var],
    ) -> None:
        self.system = system
        self.store = store
        self.records = sorted(records, key=lambda r: (r.start_time_unix_nano, r.span_id))
        self.cases = cases
        self.labels = labels
        self.vars = variables
        self.known: set[str] = set()
        self.query_of_case: dict[str, str] = {}
        self.gold_of_case: dict[str, str] = {}

    # variables
    def spec(self, ref: str, session: str) -> dict[str, Any]:
        var = self.vars.get(ref) or _Var("", "other")
        name, _ = _split(ref)
        per_question = session != "memory_construction"
        value = var.value
        spec: dict[str, Any] = {"key": ref, "value": value}
        if isinstance(var.meta, dict) and var.meta:
            spec["metadata"] = dict(var.meta)
        if isinstance(value, dict | list):
            spec["encode"] = "json"
        category = var.category
        if category == Category.QUERY:
            case_id = name.split(":", 1)[1] if name.startswith("query:") else name
            spec.update(class_name="query", name=case_id, category="message & query")
            evidence = self.cases.get(case_id, {}).get("evidence_refs") or []
            spec["metadata"] = {
                **spec.get("metadata", {}),
                "evidence": [_split(e)[0] for e in evidence],
            }
        elif category == Category.PREDICTION:
            spec.update(class_name="prediction", category="llm_response")
        elif category == Category.GOLD:
            spec.update(class_name="golden_answers", category="golden_answers")
        elif category == Category.SCORE:
            spec.update(class_name="judge_score", category="variable")
        elif category == Category.CANDIDATES and per_question:
            spec.update(class_name="retrieved", category="retrieval")
        elif category == Category.CONTEXT and per_question:
            spec.update(class_name="context", category="context")
        else:
            spec.update(
                name=name,
                category=_NODE_CATEGORY.get(category, "variable"),
            )
        return spec

    def ensure(self, refs: Iterable[str], session: str, steps: list[dict[str, Any]]) -> None:
        for ref in refs:
            if ref in self.known or self.vars.get(ref, _Var("", "")).deleted:
                continue
            self.known.add(ref)
            steps.append({"kind": "var", **self.spec(ref, session)})

    # ops
    def op_step(
        self, record: SpanRecord, session: str, steps: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        a = record.attributes
        kind = str(a.get(attr.MEMTRACE_OP_KIND) or "other")
        name = str(a.get(attr.MEMTRACE_OP_NAME) or record.name)
        inputs = [str(r) for r in a.get(attr.MEMTRACE_OP_INPUTS) or ()]  # type: ignore[union-attr]
        outputs = [str(r) for r in a.get(attr.MEMTRACE_OP_OUTPUTS) or ()]  # type: ignore[union-attr]
        case_id = a.get(attr.MEMTRACE_CASE_ID)
        if kind == OpKind.INGEST and not inputs:
            # Messages, prompts and questions are plain variables in the harness.
            for ref in outputs:
                if self.vars.get(ref, _Var("", "")).category == Category.QUERY:
                    self.query_of_case[str(case_id or _split(ref)[0].split(":", 1)[-1])] = ref
                    if session == "memory_construction":
                        continue  # recorded in the search session, where the harness asks it
                self.ensure([ref], session, steps)
            return None
        if kind == OpKind.JUDGE and isinstance(case_id, str):
            query = self.query_of_case.get(case_id)
            if query is not None and query not in inputs:
                inputs = [query, *inputs]
        self.ensure(inputs, session, steps)
        harness = HARNESS_NAME_BY_SUFFIX.get(_suffix(name))
        if kind == OpKind.JUDGE:
            op_name, category = "llm-judge", "evaluation"
        elif harness is not None and op_kind(harness, None) == kind:
            op_name, category = harness, "operation"
        else:
            op_name, category = name, _CATEGORY_BY_KIND.get(kind, "operation")
        step: dict[str, Any] = {
            "kind": "op",
            "span_id": record.span_id,
            "op_name": op_name,
            "category": category,
            "inputs": [r for r in inputs if r in self.known],
            "outputs": [],
        }
        deletes = []
        mutate = {}
        input_by_name = {_split(r)[0]: r for r in inputs}
        for ref in outputs:
            var = self.vars.get(ref, _Var("", "other"))
            before = input_by_name.get(_split(ref)[0])
            if var.deleted and before is not None:
                deletes.append(before)
                continue
            self.known.add(ref)
            step["outputs"].append(self.spec(ref, session))
            if before is not None:
                mutate[ref] = before
        if deletes:
            step["deletes"] = deletes
        if mutate:
            step["mutate"] = mutate
        if kind == OpKind.JUDGE:
            roles: dict[str, str | None] = {
                "question": None,
                "golden_answers": None,
                "prediction": None,
            }
            for ref in inputs:
                category = self.vars.get(ref, _Var("", "other")).category
                role = _JUDGE_ROLE.get(category)
                if role:
                    roles[role] = ref
            if all(roles.values()) and len(step["outputs"]) == 1:
                score = step["outputs"][0]["value"]
                verdict = "CORRECT" if _positive(score) else "WRONG"
                step.update(
                    style="fn",
                    roles=roles,
                    chain=[
                        {
                            "key": f"{record.span_id}:judge_response",
                            "value": verdict,
                            "class_name": "judge_response",
                            "category": "llm_response",
                        }
                    ],
                )
        elif any(self.vars.get(r, _Var("", "")).category == Category.PROMPT for r in inputs):
            text = json.dumps([o["value"] for o in step["outputs"]], ensure_ascii=False, indent=4)
            stem = _suffix(op_name).replace("-", "_")
            step.update(
                style="scope",
                chain=[
                    {
                        "key": f"{record.span_id}:raw",
                        "value": f"```json\n{text}\n```",
                        "class_name": f"raw_{stem}_response",
                        "category": "llm_response",
                    },
                    {
                        "key": f"{record.span_id}:cleaned",
                        "value": text,
                        "class_name": f"{stem}_response_with_code_block_removing",
                        "category": "llm_response",
                    },
                ],
            )
        elif deletes or mutate:
            step["style"] = "scope"
        return step

    def plan(self) -> dict[str, Any]:
        construction: list[dict[str, Any]] = []
        search: list[dict[str, Any]] = []
        evaluation: list[dict[str, Any]] = []
        current_trace = None
        for record in self.records:
            a = record.attributes
            stage = str(a.get(attr.MEMTRACE_STAGE) or "")
            case_id = a.get(attr.MEMTRACE_CASE_ID)
            if stage in _SEARCH_STAGES or (case_id is not None and stage not in _EVALUATION_STAGES):
                session, steps = "memory_search", search
            elif stage in _EVALUATION_STAGES:
                session, steps = "memory_evaluation", evaluation
            else:
                if record.trace_id != current_trace or not construction:
                    current_trace = record.trace_id
                    construction.append(
                        {
                            "category": "memory_construction",
                            "comment": f"conversation session {len(construction) + 1}",
                            "steps": [],
                        }
                    )
                session, steps = "memory_construction", construction[-1]["steps"]
            if session == "memory_search" and isinstance(case_id, str):
                query = self.query_of_case.get(case_id)
                if query is not None:
                    self.ensure([query], session, steps)
            step = self.op_step(record, session, steps)
            if step is not None:
                steps.append(step)
        sessions = [s for s in construction if s["steps"]]
        if search:
            sessions.append({"category": "memory_search", "comment": "search", "steps": search})
        if evaluation:
            sessions.append(
                {"category": "memory_evaluation", "comment": "evaluation", "steps": evaluation}
            )
        return {
            "graph": {
                "user_id": self.store,
                "project_id": self.system,
                "metadata": {"layer_type": self.system, "recorded_from": "memtrace-otel"},
                "file": re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.system}_{self.store}") + ".json",
            },
            "sessions": sessions,
            "annotations": self.annotations(),
        }

    def annotations(self) -> list[dict[str, Any]]:
        notes = []
        for label in self.labels:
            if not label.get("error_type") or not label.get("op_id"):
                continue
            case_id = str(label.get("case_id"))
            case = self.cases.get(case_id, {})
            query = self.query_of_case.get(case_id)
            if query is None:
                continue
            notes.append(
                {
                    "query_key": query,
                    "query": case.get("question", ""),
                    "golden_answers": list(case.get("gold_answers") or []),
                    "prediction": case.get("prediction") or "",
                    "source_evidence_ids": list(case.get("evidence_refs") or []),
                    "final_error_type": label["error_type"],
                    "final_span_id": label["op_id"],
                }
            )
        return notes


def _positive(score: Any) -> bool:
    if isinstance(score, bool | int | float):
        return float(score) > 0
    return str(score).strip().upper() in ("CORRECT", "1", "1.0", "TRUE")


def build_plans(
    records: Iterable[SpanRecord],
    cases: Iterable[Mapping[str, Any]],
    labels: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """One recorder plan per memory store (``gen_ai.memory.store.id``) of the run."""
    by_store: dict[tuple[str, str], list[SpanRecord]] = {}
    variables: dict[str, _Var] = {}
    for record in records:
        for event in record.events:
            if event.name != attr.MEMTRACE_VARIABLE_EVENT:
                continue
            ref = event.attributes.get(attr.MEMTRACE_VARIABLE_REF)
            if isinstance(ref, str) and ref not in variables:
                variables[ref] = _Var(
                    _decode(event.attributes.get(attr.MEMTRACE_VARIABLE_VALUE)),
                    str(event.attributes.get(attr.MEMTRACE_VARIABLE_CATEGORY) or "other"),
                    event.attributes.get(attr.MEMTRACE_VARIABLE_DELETED) is True,
                    _decode(event.attributes.get(attr.MEMTRACE_VARIABLE_META)),
                )
        store = record.attributes.get(attr.GEN_AI_MEMORY_STORE_ID)
        system = record.attributes.get(attr.MEMTRACE_SYSTEM)
        if isinstance(store, str) and isinstance(system, str):
            by_store.setdefault((system, store), []).append(record)
    case_rows = {str(c.get("case_id")): c for c in cases}
    label_rows = list(labels)
    plans = []
    for (system, store), group in by_store.items():
        mine = [
            r
            for r in label_rows
            if case_rows.get(str(r.get("case_id")), {}).get("store_id") == store
        ]
        plan = _Planner(system, store, group, case_rows, mine, variables).plan()
        # A store of shared prompts only (no op) is not a graph of its own: its prompts are the
        # plain variables of the graphs that read them.
        if any(step["kind"] == "op" for s in plan["sessions"] for step in s["steps"]):
            plans.append(plan)
    return plans


def export_memtracebench(
    bench_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    python: str | None = None,
    timeout: float = 1800.0,
) -> ExportSummary:
    """Record a ``memtrace bench generate`` directory with ``smartcomment`` into ``out_dir``.

    Writes one MemTraceBench file per memory store (``<system>_<store>.json``), annotated with
    the directory's labels.

    Raises:
        FileNotFoundError: no smartcomment environment (see :func:`smartcomment_python`).
        DecodeError: a bad input file, or the recorder failed (its stderr is in the message).
    """
    folder = Path(bench_dir)
    records = list(FileSource(str(folder / "traces.jsonl"), strict=True).records())
    plans = build_plans(
        records, load_jsonl(folder / "cases.jsonl"), load_jsonl(folder / "labels.jsonl")
    )
    return record_plans(plans, out_dir, python=python, timeout=timeout)


def record_plans(
    plans: Sequence[Mapping[str, Any]],
    out_dir: str | os.PathLike[str],
    *,
    python: str | None = None,
    timeout: float = 1800.0,
) -> ExportSummary:
    """Run the recorder on ``plans`` (see :func:`build_plans`) in the smartcomment environment."""
    interpreter = python or smartcomment_python()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.json"
        plan_path.write_text(json.dumps(list(plans), ensure_ascii=False))
        run = subprocess.run(
            [interpreter, str(RECORDER), str(plan_path), str(out)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "LOGURU_LEVEL": "WARNING"},
        )
    if run.returncode != 0:
        raise DecodeError(
            f"the smartcomment recorder failed (exit {run.returncode}): {run.stderr.strip()[-2000:]}",
            path=str(RECORDER),
        )
    rows = json.loads(run.stdout)
    return ExportSummary(
        files=tuple(Path(r["file"]) for r in rows),
        operations=sum(r["operations"] for r in rows),
        annotations=sum(r["annotations"] for r in rows),
        annotations_skipped=sum(r["annotations_skipped"] for r in rows),
    )


__all__ = [
    "ENV_SMARTCOMMENT_PYTHON",
    "HARNESS_NAME_BY_SUFFIX",
    "OP_KIND_BY_NAME",
    "ExportSummary",
    "build_plans",
    "export_memtracebench",
    "record_plans",
    "smartcomment_python",
]
