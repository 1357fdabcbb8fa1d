"""Record a run plan with zjunlp's ``smartcomment`` the way the MemTraceBench harness does.

Run by the Python 3.12 environment of ``scripts/smartcomment_env.sh`` (smartcomment needs
Python >= 3.12), never imported by this package: it imports nothing from memtrace_otel. The plan
(written by :mod:`memtrace_bench.memtracebench._export`) lists one graph per memory store:
sessions of steps, each step a variable or an operation, plus the annotations. The script drives
the real recorder API as MemBase's instrumented systems do:

- plain variables (messages, queries, gold answers) through ``comment_variable``, the query with
  ``class_name="query"`` and its evidence in the metadata, sessions without a name;
- simple ops through ``comment_op`` (one edge per input x output);
- LLM steps through ``comment_op_scope`` with a chain of ``comment_variable`` + ``comment_link``
  inside the op (inputs -> raw response -> cleaned response -> outputs);
- in-place updates of structured units through ``comment_mutation(reuse_op=True)`` inside the
  op's scope (the version edge's category is the mutation's, not the op's);
- deletions through a ``comment_link`` from the unit to one shared ``delete_marker`` node;
- judges through a ``comment_fn``-decorated function (the op is stamped before its body runs), the
  judge response and score content-addressed (``judge_score:float:<sha1>``), so identical
  replies and scores are one node shared by every question that produced them.

Usage: ``python _smartcomment_recorder.py PLAN.json OUT_DIR``; writes ``OUT_DIR/<file>`` per
graph (the smartcomment export plus ``data.annotations``) and prints a JSON summary.
"""

# This file runs under another interpreter with smartcomment installed; the project's own
# type checker and environment never load it.
# mypy: ignore-errors

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

from smartcomment import (
    IdentityRegistry,
    comment_fn,
    comment_graph,
    comment_link,
    comment_mutation,
    comment_op,
    comment_op_scope,
    comment_session,
    comment_variable,
    current_graph,
    current_op,
)

DELETE_MARKER = "delete_marker"
_JSON4 = partial(json.dumps, ensure_ascii=False, indent=4, sort_keys=True)


def _fixed(name):
    return lambda _value: name


def _options(spec):
    """``comment_variable`` options of a variable spec (value, name, class, category, ...)."""
    opts = {"category": spec.get("category") or "variable"}
    if spec.get("name"):
        opts["id_strategy"] = _fixed(spec["name"])
    if spec.get("class_name"):
        opts["class_name"] = spec["class_name"]
    if spec.get("comment"):
        opts["comment"] = spec["comment"]
    if spec.get("metadata"):
        opts["metadata"] = spec["metadata"]
    if spec.get("encode") == "json":
        opts["encoding_fn"] = _JSON4
        opts["decoding_fn"] = json.loads
    return opts


class Recorder:
    def __init__(self):
        self.handles = {}
        self.op_ids = {}

    def variable(self, spec):
        handle = comment_variable(spec["value"], to_runtime=True, **_options(spec))
        self.handles[spec["key"]] = handle
        return handle

    def inputs(self, step):
        return [self.handles[key] for key in step["inputs"] if key in self.handles]

    def op(self, step):
        style = step.get("style", "op")
        if style == "fn":
            return self.judge(step)
        if style == "op" and not step.get("deletes") and not step.get("mutate"):
            outputs = [(spec["value"], _options(spec)) for spec in step["outputs"]]
            op = comment_op(
                inputs=self.inputs(step),
                outputs=outputs,
                op_name=step["op_name"],
                category=step["category"],
                comment=step.get("comment"),
                metadata={"memtrace_span_id": step["span_id"]},
            )
            self.op_ids[step["span_id"]] = op.op_id
            for spec in step["outputs"]:
                self.handles[spec["key"]] = _latest(spec, _options(spec))
            return
        with comment_op_scope(
            op_name=step["op_name"],
            category=step["category"],
            comment=step.get("comment"),
            metadata={"memtrace_span_id": step["span_id"]},
        ) as op:
            self.op_ids[step["span_id"]] = op.op_id
            sources = self.inputs(step)
            for spec in step.get("chain", []):
                link = self.variable(spec)
                for source in sources:
                    comment_link(source=source, target=link)
                sources = [link]
            for spec in step["outputs"]:
                mutate = step.get("mutate", {}).get(spec["key"])
                if mutate is not None:
                    self.mutation(spec, mutate, sources)
                    continue
                target = self.variable(spec)
                for source in sources:
                    comment_link(source=source, target=target)
            for key in step.get("deletes", []):
                comment_link(
                    source=self.handles[key],
                    target=(
                        "DELETED",
                        {
                            "id_strategy": _fixed(DELETE_MARKER),
                            "encoding_fn": str,
                            "category": DELETE_MARKER,
                            "comment": "A deleted memory unit points to this marker.",
                        },
                    ),
                    category="deletion",
                )

    def mutation(self, spec, before_key, sources):
        """The unit's next version as an in-place mutation of its previous value."""
        before = self.handles[before_key]
        target = json.loads(before.raw_value) if spec.get("encode") == "json" else None
        if not isinstance(target, dict | list):
            target = self.variable(spec)
            for source in sources:
                comment_link(source=source, target=target)
            return
        opts = _options(spec)
        others = [s for s in sources if s.full_node_id != before.full_node_id]
        with comment_mutation(
            target=target,
            inputs=others,
            category=opts["category"],
            id_strategy=opts.get("id_strategy"),
            class_name=opts.get("class_name"),
            encoding_fn=opts.get("encoding_fn"),
            decoding_fn=opts.get("decoding_fn"),
            mutation_category="llm_response",
            reuse_op=True,
        ) as scope:
            if isinstance(target, dict):
                target.clear()
                target.update(spec["value"])
            else:
                target[:] = spec["value"]
        self.handles[spec["key"]] = scope.result

    def judge(self, step):
        [score] = step["outputs"]
        response = step.get("chain", [])
        recorder = self

        def llm_judge(question, golden_answers, prediction):
            """Judge whether the prediction answers the question (LLM-as-a-judge)."""
            recorder.op_ids[step["span_id"]] = current_op().op_id
            reply = None
            for spec in response:
                reply = recorder.variable(spec)
                for source in (question, golden_answers, prediction):
                    comment_link(source=source, target=reply)
            kept = recorder.variable(score)
            if reply is not None:
                comment_link(source=reply, target=kept)
            return score["value"]

        traced = comment_fn(
            op_name=step["op_name"],
            category=step["category"],
            op_metadata={"memtrace_span_id": step["span_id"]},
            param_options={"-o": _options(score)},
        )(llm_judge)
        handles = self.inputs(step)
        by_role = {key: handle for key, handle in zip(step["inputs"], handles, strict=False)}
        roles = step["roles"]
        traced(
            by_role[roles["question"]],
            by_role[roles["golden_answers"]],
            by_role[roles["prediction"]],
        )


def _latest(spec, opts):
    """The handle of the variable ``comment_op`` just wrote for ``spec``."""
    value = spec["value"]
    name = IdentityRegistry.resolve(value, override=opts.get("id_strategy"))(value)
    full = f"{opts['class_name']}:{name}" if opts.get("class_name") else name
    return current_graph().get_latest_variable(full)


def record(plan, out_dir):
    info = plan["graph"]
    recorder = Recorder()
    with comment_graph(
        user_id=info["user_id"], project_id=info["project_id"], metadata=info.get("metadata")
    ) as graph:
        for session in plan["sessions"]:
            with comment_session(comment=session.get("comment"), category=session["category"]):
                for step in session["steps"]:
                    if step["kind"] == "var":
                        recorder.variable(step)
                    else:
                        recorder.op(step)
        data = graph.export_graph()
    annotations = []
    skipped = 0
    for note in plan.get("annotations", []):
        query = recorder.handles.get(note["query_key"])
        op_id = recorder.op_ids.get(note["final_span_id"])
        if query is None or op_id is None:
            skipped += 1
            continue
        annotations.append(
            {
                "query_id": query.full_node_id,
                "query": note["query"],
                "golden_answers": note["golden_answers"],
                "prediction": note["prediction"],
                "source_evidence_ids": note["source_evidence_ids"],
                "final_error_type": note["final_error_type"],
                "final_op_id": op_id,
            }
        )
    data["data"]["annotations"] = annotations
    path = Path(out_dir) / info["file"]
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2, default=str))
    return {
        "file": str(path),
        "operations": len(data["data"]["operations"]),
        "annotations": len(annotations),
        "annotations_skipped": skipped,
    }


def main(argv):
    plans = json.loads(Path(argv[1]).read_text())
    out = Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    summary = [record(plan, out) for plan in plans]
    json.dump(summary, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
