"""``memtrace feedback``: mark an answer wrong (or right) from a shell or a script.

Sends one ``memtrace.feedback`` span per answer (contract section 5) where ``OTEL_EXPORTER_OTLP_*``
points (or into ``--traces-file``), and prints the feedback span's ``traceparent`` on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from memtrace_otel.errors import DecodeError

DEFAULT_SERVICE = "memtrace-feedback"
_CAPTURE_HINT = (
    "memtrace: note: content capture is off, so the expected answer was not recorded; set "
    "MEMTRACE_CAPTURE_CONTENT=PRODUCTION or SPAN_AND_EVENT (or OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT) "
    "to send it"
)


def register(subparsers: Any) -> None:
    """Add the ``feedback`` subcommand."""
    parser = subparsers.add_parser(
        "feedback",
        help="mark an answer wrong or right (a memtrace.feedback span)",
        description=(
            "Mark an answer wrong (--wrong) or right (--right), by its traceparent (from "
            "memtrace_otel.instrumentation.last_answer() in the app) or its case id, with an "
            "optional expected answer and comment. The span goes to OTEL_EXPORTER_OTLP_ENDPOINT "
            "(protocol from OTEL_EXPORTER_OTLP_PROTOCOL, default http/protobuf), or to "
            "--traces-file. With --from FILE, one feedback per JSON line "
            '({"traceparent"|"case_id", "correct", "expected", "comment"}).'
        ),
    )
    parser.add_argument("--traceparent", help="the answer span's W3C traceparent")
    parser.add_argument("--case-id", help="the answer's case id (memtrace.case.id)")
    verdict = parser.add_mutually_exclusive_group()
    verdict.add_argument(
        "--wrong", action="store_true", help="the answer was wrong (label incorrect, score 0)"
    )
    verdict.add_argument(
        "--right", action="store_true", help="the answer was right (label correct, score 1)"
    )
    verdict.add_argument("--label", help="a label of your own vocabulary")
    parser.add_argument("--score", type=float, help="a score (with or instead of the above)")
    parser.add_argument("--expected", help="the right answer (recorded when capture allows)")
    parser.add_argument("--comment", help="free text (gen_ai.evaluation.explanation)")
    parser.add_argument(
        "--name", default="user_feedback", help="gen_ai.evaluation.name (default: user_feedback)"
    )
    parser.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="JSON Lines of feedback to send ('-' for stdin)",
    )
    parser.add_argument(
        "--traces-file", metavar="FILE", help="append OTLP JSON Lines here instead of sending"
    )
    parser.add_argument(
        "--service-name",
        default=None,
        help="service.name of the feedback spans (default: OTEL_SERVICE_NAME, else "
        "memtrace-feedback)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Send the feedback; exit 0 when every span was exported, 1 when some were not (nothing
    printed: send them again), 2 on a bad argument or line."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from memtrace_otel.cli import EXIT_FAILURES, EXIT_OK, EXIT_USAGE
    from memtrace_otel.export import CountingBatchSpanProcessor, resolve_exporter
    from memtrace_otel.instrumentation import CaptureConfig, send_feedback
    from memtrace_otel.semconv import Category
    from memtrace_otel.semconv import attributes as A

    try:
        capture = CaptureConfig()
        items = _items(args)
        exporter = resolve_exporter(traces_file=args.traces_file)
    except (ValueError, DecodeError) as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    service = args.service_name or os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE
    provider = TracerProvider(resource=Resource.create({A.SERVICE_NAME: service}))
    # The counting processor says, after shutdown, whether every span left the process: a
    # feedback that was never exported must not look sent.
    processor = CountingBatchSpanProcessor(exporter, max_queue_size=max(2048, len(items) + 1))
    provider.add_span_processor(processor)
    sent: list[str] = []
    warned = False
    try:
        for where, item in items:
            try:
                ctx = send_feedback(
                    item.get("traceparent") or None,
                    case_id=item.get("case_id") or None,
                    correct=item.get("correct"),
                    label=item.get("label"),
                    score=item.get("score"),
                    expected=item.get("expected"),
                    comment=item.get("comment"),
                    evaluation_name=item.get("name") or args.name,
                    tracer_provider=provider,
                    capture=capture,
                )
            except (ValueError, TypeError) as exc:
                print(f"memtrace: error: {where}{exc}", file=sys.stderr)
                return EXIT_USAGE
            if (
                item.get("expected") is not None
                and not capture.captures(Category.GOLD)
                and not warned
            ):
                print(_CAPTURE_HINT, file=sys.stderr)
                warned = True
            if ctx is not None:
                sent.append(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}")
    finally:
        provider.shutdown()
    lost = int(processor.stats()["lost_spans"])
    if lost:
        where = args.traces_file or os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
        )
        print(
            f"memtrace: error: {lost} of {len(sent)} feedback spans were not exported"
            + (f" to {where}" if where else "")
            + " (unreachable or refusing endpoint?): nothing is recorded for them; send again",
            file=sys.stderr,
        )
        return EXIT_FAILURES
    for traceparent in sent:
        print(traceparent)
    return EXIT_OK


def _items(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    if args.from_file is None:
        correct = True if args.right else (False if args.wrong else None)
        return [
            (
                "",
                {
                    "traceparent": args.traceparent,
                    "case_id": args.case_id,
                    "correct": correct,
                    "label": args.label,
                    "score": args.score,
                    "expected": args.expected,
                    "comment": args.comment,
                },
            )
        ]
    if args.traceparent or args.case_id:
        raise ValueError("--from reads the answers from the file: drop --traceparent/--case-id")
    handle = sys.stdin if args.from_file == "-" else open(args.from_file, encoding="utf-8")  # noqa: SIM115
    items: list[tuple[str, dict[str, Any]]] = []
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise DecodeError(
                    f"invalid JSON: {exc}", path=args.from_file, line=number
                ) from None
            if not isinstance(obj, dict):
                raise DecodeError("expected a JSON object", path=args.from_file, line=number)
            for key in ("traceparent", "case_id", "label", "expected", "comment", "name"):
                if obj.get(key) is not None and not isinstance(obj[key], str):
                    raise DecodeError(
                        "expected a string", path=args.from_file, line=number, field=key
                    )
            if obj.get("correct") is not None and not isinstance(obj["correct"], bool):
                raise DecodeError(
                    "expected true or false", path=args.from_file, line=number, field="correct"
                )
            items.append((f"{args.from_file}:{number}: ", obj))
    return items
