"""Instructions per call, counted by callgrind: overhead figures that machine load does not move.

On a shared 2-core machine the CPU-time ratios of ``bench_instrumentation.py`` move by several
percent between runs (a manual op measured 1.13 to 1.22 against the same payload written by
hand, one build, one hour). Valgrind's callgrind counts the instructions a call executes (``Ir``),
which another job cannot change: the same figure, to a fraction of a percent, run after run. So
this is the before/after figure for the hot paths; the CPU-time benchmarks stay the goal lines.

Each side runs in a process of its own under ``valgrind --tool=callgrind``, instrumentation
switched on (``callgrind_control -i on``) only after the set-up and a warm-up, and instructions
counted only inside ``itertools.starmap``, which makes the calls. Sides:

- the manual op of ``bench_instrumentation.py`` (one input ref with a link, one ~1 KB output),
  capture off and on, against the same payload written by hand with the SDK (its digest computed
  per call, and, printed beside it, computed once outside the loop);
- the digest of one value as ``MEMTRACE_DIGEST_KEY`` would make it: plain ``sha256`` (no key),
  HMAC-SHA256 and keyed BLAKE2b (the one chosen), of a short (~45 B) and a ~1 KB value, each
  through the function the capture uses (``CaptureConfig.value_digest``, ``digest_with``);
- the ``Memory.search`` wrapper of ``bench_wrappers.py`` (mem0ai 2.x, a recorded 20-hit result
  returned by a stand-in for the library), capture off and on, against the recorded result
  returned alone and with its span written by hand with the SDK;
- with ``--reference``: the manual op of ``bench_instrumentation.py --reference`` (a distinct
  ~1 KB value each call, keyed digests, a ``memory://`` store) on the app's thread, capture on,
  on with ``REFERENCE``'s default hook, ``REFERENCE``, and ``REFERENCE`` without pseudonyms (the
  content writer's thread is not counted: callgrind counts the calling thread only); and the
  default hook :func:`redact_secrets` alone on the benchmark's value, on LoCoMo text (turns,
  session summaries and a fact of conversation 0, and of conversation 5, held out: not used
  while tuning the gates) and on mem0's extraction and update prompts.

Caveat: valgrind's virtual CPU has no SHA extensions, so OpenSSL hashes in software there: a
``sha256`` digest weighs several times more in these counts than on hardware that has them.

Run: .venv/bin/python benchmarks/bench_instructions.py   (needs valgrind; prints a note without;
``--digests`` counts the digest sides alone, ``--reference`` the REFERENCE and redaction sides)
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO))
os.environ["MEM0_TELEMETRY"] = "false"

CALLS = {"op": 2000, "search": 100, "digest": 2000, "ref": 2000, "redact": 2000, "prompt": 200}
OP_SIDES = (
    "op-hand-off",
    "op-hoisted-off",
    "op-ours-off",
    "op-hand-on",
    "op-hoisted-on",
    "op-ours-on",
)
SEARCH_SIDES = ("search-plain", "search-hand", "search-ours-off", "search-ours-on")
DIGEST_SIDES = tuple(
    f"digest-{algorithm}-{size}"
    for size in ("short", "1k")
    for algorithm in ("sha256", "hmac", "b2k")
)
REFERENCE_SIDES = ("ref-on", "ref-on+hook", "ref-reference", "ref-ref-no-pseud")
REDACT_TEXTS = (
    "value",
    "locomo-turns",
    "locomo-summary",
    "locomo-fact",
    "held-out-turns",
    "held-out-summary",
    "held-out-fact",
)
PROMPTS = ("mem0-extraction", "mem0-update")
_DIGEST_KEY = b"bench-digest-key-0123456789abcdef"
WARM_UP = 50
_OPEN: list[object] = []


def _sides(side: str) -> Callable[[], None]:
    """Set up one side in this process and return the call to count (after a warm-up)."""
    # Spans wait in the queue (never exported while counting): no export thread joins in.
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(
            _NullExporter(),
            max_queue_size=100_000,
            max_export_batch_size=100_000,
            schedule_delay_millis=3_600_000,
        )
    )
    kind, _, rest_text = side.partition("-")
    rest = rest_text.split("-")
    if kind == "digest":
        return _digest_side(*rest)
    if kind == "ref":
        return _reference_side(provider, rest_text)
    if kind in ("redact", "prompt"):
        from memtrace_otel.instrumentation import redact_secrets

        text = _redaction_texts()[rest_text]

        def redact() -> None:
            redact_secrets(text)

        return redact
    if kind == "op":
        from bench_instrumentation import op_sides

        who, mode = rest
        return op_sides(provider, "NO_CONTENT" if mode == "off" else "SPAN_AND_EVENT")[who]
    from bench_wrappers import canned_calls, search_sides

    from memtrace_otel.instrumentation import CaptureConfig, WriterRegistry

    calls = canned_calls(provider)
    _OPEN.append(calls)  # the server and the store stay up until the process ends after counting
    memory, _, _ = calls.__enter__()
    search, hand, mem0 = search_sides(memory, provider)
    if rest == ["plain"]:
        return search
    if rest == ["hand"]:

        def searched_and_written() -> None:
            search()
            hand()

        return searched_and_written
    mode = "NO_CONTENT" if rest[-1] == "off" else "SPAN_AND_EVENT"
    mem0.instrument(
        tracer_provider=provider, capture=CaptureConfig(mode=mode), registry=WriterRegistry()
    )
    return search


def _reference_side(provider: TracerProvider, name: str) -> Callable[[], None]:
    """One manual op of ``bench_instrumentation.py --reference``'s side ``name`` (its capture),
    a distinct ~1 KB value each call, without the flushes that end its rounds."""
    from bench_instrumentation import reference_op, reference_sides

    capture, _ = reference_sides(provider, "memory://", 1)[name]
    return reference_op(provider, capture, itertools.count())


def _redaction_texts() -> dict[str, str]:
    """The texts the default hook is counted on: the benchmark's ~1 KB value; LoCoMo's
    conversation 0 (its turns joined, its session summaries, its first observed fact: ~1 KB) and
    conversation 5 (held out); mem0's fact extraction and memory update prompts."""
    import json

    from bench_instrumentation import VALUE

    from memtrace_bench.systems._locomo import default_locomo_path

    texts = {"value": VALUE}
    path = default_locomo_path()
    if path.is_file():
        samples = json.loads(path.read_text(encoding="utf-8"))
        for label, index in (("locomo", 0), ("held-out", 5)):
            talk = samples[index]["conversation"]
            sessions = sorted(
                (k for k in talk if k.startswith("session_") and isinstance(talk[k], list)),
                key=lambda k: int(k.split("_")[1]),
            )
            texts[f"{label}-turns"] = " ".join(t["text"] for k in sessions for t in talk[k])[:1024]
            summaries = samples[index]["session_summary"]
            texts[f"{label}-summary"] = " ".join(
                summaries[k] for k in sorted(summaries, key=lambda k: int(k.split("_")[1]))
            )[:1024]
            observed = samples[index]["observation"]
            first = next(iter(observed.values()))
            texts[f"{label}-fact"] = next(iter(first.values()))[0][0]
    try:
        from mem0.configs import prompts

        texts["mem0-extraction"] = prompts.ADDITIVE_EXTRACTION_PROMPT
        texts["mem0-update"] = prompts.DEFAULT_UPDATE_MEMORY_PROMPT
    except ImportError:
        pass
    return texts


def _digest_side(algorithm: str, size: str) -> Callable[[], None]:
    from memtrace_otel.instrumentation import CaptureConfig
    from memtrace_otel.instrumentation._content import digest_with

    text = "Ana moved to Porto last May, near her sister."
    if size == "1k":
        text = (text + " ") * 22
    if algorithm in ("sha256", "b2k"):
        capture = CaptureConfig(digest_key=_DIGEST_KEY if algorithm == "b2k" else None)
        digest = capture.value_digest

        def capture_digest() -> None:
            digest(text)

        return capture_digest

    def hmac_digest() -> None:
        digest_with("hmac-sha256:", _DIGEST_KEY, text.encode("utf-8", "surrogatepass"))

    return hmac_digest


def _child(side: str) -> None:
    fn = _sides(side)
    for _ in range(WARM_UP):
        fn()
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True)
    list(itertools.starmap(fn, itertools.repeat((), CALLS[side.split("-")[0]])))
    sys.stdout.flush()
    os._exit(0)  # no shutdown work after the count


def _count(side: str) -> float:
    """Instructions per call of one side."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                "--collect-atstart=no",
                "--toggle-collect=starmap_next",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--side",
                side,
            ],
            capture_output=True,
            check=True,
            timeout=1800,
        )
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1]) / CALLS[side.split("-")[0]]
    raise RuntimeError(f"no instruction count for {side}")


def main() -> None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("bench_instructions: valgrind is not installed (apt-get install valgrind)")
        return
    if "--digests" in sys.argv:
        _print_digests({side: _count(side) for side in DIGEST_SIDES})
        return
    if "--reference" in sys.argv:
        _print_reference()
        return
    ir = {side: _count(side) for side in (*OP_SIDES, *SEARCH_SIDES, *DIGEST_SIDES)}
    _print_digests(ir)
    print("bench_instructions: instructions per call (callgrind Ir), one process per side")
    for mode in ("off", "on"):
        hand, ours = ir[f"op-hand-{mode}"], ir[f"op-ours-{mode}"]
        hoisted = ir[f"op-hoisted-{mode}"]
        print(
            f"  manual op, capture {mode:3}: same payload by hand {hand / 1e3:7.1f}k, memtrace op "
            f"{ours / 1e3:7.1f}k, ratio {ours / hand:.3f}, added {(ours - hand) / 1e3:5.1f}k per op "
            f"(by hand with the digest computed once: {hoisted / 1e3:7.1f}k, "
            f"ratio {ours / hoisted:.3f})"
        )
    plain, hand = ir["search-plain"], ir["search-hand"]
    print(
        f"  Memory.search wrapper (20 hits, recorded result): the result alone {plain / 1e3:.1f}k; "
        f"with its span written by hand {hand / 1e3:7.1f}k"
    )
    for mode in ("off", "on"):
        ours = ir[f"search-ours-{mode}"]
        print(
            f"    instrumented, capture {mode:3}: {ours / 1e3:7.1f}k, {ours / hand:.3f}x the span "
            f"by hand, our own code {(ours - hand) / 1e3:6.1f}k per call"
        )


def _print_reference() -> None:
    ir = {side: _count(side) for side in REFERENCE_SIDES}
    on = ir["ref-on"]
    print(
        "bench_instructions: the manual op of bench_instrumentation.py --reference, app thread "
        "(callgrind Ir per op; a distinct ~1 KB value each call, keyed digests, memory:// store)"
    )
    for side, label in zip(
        REFERENCE_SIDES,
        ("capture on", "on + REFERENCE's hook", "REFERENCE", "REFERENCE, no pseudonyms"),
        strict=True,
    ):
        print(f"  {label:25}: {ir[side] / 1e3:7.1f}k, {ir[side] / on:.3f}x capture on")
    texts = _redaction_texts()
    print("bench_instructions: the default hook redact_secrets alone (callgrind Ir per call)")
    for name in (*REDACT_TEXTS, *PROMPTS):
        if name not in texts:
            continue
        kind = "prompt" if name in PROMPTS else "redact"
        count = _count(f"{kind}-{name}")
        held = " (held out)" if name.startswith("held-out") else ""
        print(f"  {name:17} {len(texts[name]):6} chars: {count / 1e3:8.1f}k{held}")


def _print_digests(ir: dict[str, float]) -> None:
    print("bench_instructions: one value's digest (callgrind Ir per call)")
    for size, label in (("short", "~45 B"), ("1k", "~1 KB")):
        plain = ir[f"digest-sha256-{size}"]
        print(
            f"  {label}: sha256 {plain / 1e3:6.1f}k, HMAC-SHA256 {ir[f'digest-hmac-{size}'] / 1e3:6.1f}k, "
            f"keyed BLAKE2b {ir[f'digest-b2k-{size}'] / 1e3:6.1f}k"
        )


class _NullExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--side":
        _child(sys.argv[2])
    else:
        main()
