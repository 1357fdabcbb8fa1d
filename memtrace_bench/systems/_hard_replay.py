"""Labels of the hard benchmark, by counterfactual replay of the hard pipelines.

For a failed case, the label is the contract's earliest decisive faulty op, made executable:

1. With every op ideal (faults off, the case's needed claims kept), the case must be answered
   right; otherwise its evidence cannot answer it and the case is left out.
2. Walking the ops that could be at fault (ops with an injected fault, and lossy ops: retrieve,
   filter, trim, assemble, generate) in execution order, the culprit ``p`` is the first op such
   that, with it as it ran and every later op ideal, the answer is still wrong: after ``p`` no
   variable flowing toward the answer carries what it needs (a loss a later op could recover,
   such as a buffer reset after the chunk took the content, is passed over).
3. Cross-check with the first pass of the reference replay (``_replay.py``): the earliest op
   whose correction alone, with the later ops as they ran, makes the answer right. When that op
   exists and is not ``p``, two readings of the definition disagree: the case is left out as
   ambiguous, and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtrace_bench.systems._hard import HCase, Mode, OpExec, Run, Scenario, judged
from memtrace_bench.systems._hard_systems import execute
from memtrace_otel.semconv import ERROR_TYPE_BY_KIND


@dataclass(frozen=True)
class HardVerdict:
    """The replay's verdict on one failed case: its culprit op, or why the case is left out."""

    case: HCase
    op: OpExec | None
    method: str
    replays: int
    excluded: str | None = None


def label_hard_case(sc: Scenario, original: Run, case: HCase) -> HardVerdict:
    """Label one failed case of ``original`` (a run of ``sc``) by replay."""
    case_id = f"{sc.store_id}:{case.qid}"
    replays = 0

    def right(mode: Mode) -> bool:
        nonlocal replays
        replays += 1
        run = execute(sc, mode, only=case.qid)
        return judged(run.predictions[case.qid], case)

    if not right(Mode(case, ideal=True)):
        return HardVerdict(case, None, "replay", replays, "unanswerable: every op ideal is wrong")
    log = original.log
    suspects = [op for op in log if op.candidate and op.case_id in (None, case_id)]
    culprit = None
    for op in suspects:
        before = frozenset(o.uid for o in log[: op.seq + 1])
        if not right(Mode(case, ideal=True, before=before)):
            culprit = op
            break
    if culprit is None:
        return HardVerdict(case, None, "replay", replays, "no op loses what the answer needs")
    first_pass = None
    for op in suspects:
        if op.seq > culprit.seq:
            break
        if right(Mode(case, fix=op.uid)):
            first_pass = op
            break
    if first_pass is not None and first_pass is not culprit:
        reason = (
            f"ambiguous: correcting {first_pass.name} ({first_pass.uid}) alone rescues the answer, "
            f"but content survived it until {culprit.name} ({culprit.uid})"
        )
        return HardVerdict(case, None, "replay", replays, reason)
    method = "replay" if first_pass is culprit else "replay+ideal-downstream"
    if ERROR_TYPE_BY_KIND.get(culprit.kind) is None:
        return HardVerdict(case, None, method, replays, f"culprit {culprit.name} is never blamed")
    return HardVerdict(case, culprit, method, replays)
