"""The manual API: one context manager and one decorator per op kind.

>>> from opentelemetry.sdk.trace import TracerProvider
>>> mt = MemTracer(tracer_provider=TracerProvider(), system="demo", store_id="user-1")
>>> msg = mt.variable("msg:1", "My sister Ana lives in Porto.", category="message")
>>> with mt.extract("demo.fact_extraction", inputs=[msg]) as op:
...     fact = op.output(mt.variable("fact:ana", "Ana lives in Porto", category="memory"))
>>> fact.ref, fact.traceparent is not None
('fact:ana@1', True)
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Concatenate, Final, ParamSpec, TypedDict, TypeVar, Unpack

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TracerProvider,
)
from opentelemetry.util.types import AttributeValue

from memtrace_otel._internal import data_warning, internal_error
from memtrace_otel.instrumentation._capture import (
    CaptureConfig,
    event_attributes,
    exception_attributes,
)
from memtrace_otel.instrumentation._feedback import note_answer
from memtrace_otel.instrumentation._registry import (
    WriterRegistry,
    format_traceparent,
    parse_traceparent,
)
from memtrace_otel.instrumentation._suppress import is_suppressed_in
from memtrace_otel.instrumentation._variables import Variable
from memtrace_otel.semconv import (
    DEFAULT_STAGE_BY_KIND,
    GEN_AI_OPERATION_BY_KIND,
    Category,
    JudgeVerdict,
    OpKind,
    Role,
    Stage,
    is_ref,
)
from memtrace_otel.semconv import attributes as A

P = ParamSpec("P")
Q = ParamSpec("Q")
R = TypeVar("R")
T = TypeVar("T")

_DEFAULT_REGISTRY = WriterRegistry()
_current_op: ContextVar[Op | None] = ContextVar("memtrace_current_op", default=None)
_RECORD_ID_KINDS = frozenset([OpKind.CREATE, OpKind.UPDATE, OpKind.DELETE])
_INPUT, _OUTPUT = Role.INPUT.value, Role.OUTPUT.value
_MAX_STATIC = 1024
"""Distinct (kind, name, stage, system, store, operation) combinations whose attributes are cached."""
_REF = A.MEMTRACE_VARIABLE_REF
_ONE_INPUT = (str, Variable)  # a tuple: ``str | Variable`` builds a new union on every op

InputLike = Variable | str
"""An op input: a :class:`Variable`, or the ref string of a variable a traced op wrote."""


class OpOptions(TypedDict, total=False):
    """The keyword arguments of the op decorators (:meth:`MemTracer.trace_op` and the per-kind
    ``trace_<kind>``): those of :meth:`MemTracer.op` but ``span``."""

    inputs: Iterable[InputLike]
    stage: Stage | str | None
    case_id: str | None
    prompt: InputLike | None
    store_id: str | None
    system: str | None
    attributes: Mapping[str, AttributeValue] | None
    gen_ai_operation: str | None


class SpanOpOptions(OpOptions, total=False):
    """The keyword arguments of :meth:`MemTracer.op` and the per-kind factories (``ingest`` ...)."""

    span: Span | None


def current_op() -> Op | None:
    """The op whose block (or decorated function) is running, if any."""
    return _current_op.get()


class Op:
    """One memory operation: a span while its ``with`` block (or decorated call) runs.

    Use the factories on :class:`MemTracer` (``mt.extract(...)``, ``mt.retrieve(...)``, ...)
    rather than constructing it. Inside the block, :meth:`output` records what the op wrote.
    The user's exceptions are recorded on the span and propagate unchanged; failures of our
    own code are logged once and the op degrades to untraced.
    """

    __slots__ = (
        "_adopted",
        "_attributes",
        "_case_id",
        "_ctx_token",
        "_end_time",
        "_ended",
        "_gen_ai_operation",
        "_inputs",
        "_inputs_changed",
        "_kind",
        "_mt",
        "_name",
        "_op_token",
        "_outputs",
        "_pending_inputs",
        "_prompt",
        "_span",
        "_stage",
        "_store_id",
        "_system",
        "_traceparent",
    )

    def __init__(
        self,
        mt: MemTracer,
        kind: OpKind,
        name: str,
        inputs: Iterable[InputLike],
        stage: Stage | None,
        case_id: str | None,
        prompt: InputLike | None,
        store_id: str | None,
        system: str | None,
        attributes: Mapping[str, AttributeValue] | None,
        gen_ai_operation: str | None,
        adopted: Span | None = None,
    ) -> None:
        self._mt = mt
        self._adopted = adopted
        self._kind = kind
        self._name = name
        self._pending_inputs = inputs
        self._stage = stage
        self._case_id = case_id
        self._prompt = prompt
        self._store_id = store_id
        self._system = system
        self._attributes = attributes
        self._gen_ai_operation = gen_ai_operation
        self._span: Span | None = None
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._inputs_changed = False
        self._ended = False
        self._end_time: int | None = None
        self._traceparent: str | None = None
        self._ctx_token: object | None = None
        self._op_token: Token[Op | None] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Op:
        try:
            self._start()
        except Exception:
            self._abandon()  # first: in loud mode internal_error re-raises
            internal_error("op.start")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        try:
            if span is not None and not self._ended:
                self._finish(span, exc)
        except Exception:
            internal_error("op.end")
        finally:
            self._ended = True
            if span is not None and self._adopted is None:
                try:
                    span.end(end_time=self._end_time)
                except Exception:
                    internal_error("op.end")
            self._detach()
        # Returning None lets the user's exception propagate unchanged.

    async def __aenter__(self) -> Op:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def _start(self) -> None:
        parent = otel_context.get_current()  # read once: also the new span's parent context
        if is_suppressed_in(parent):
            return
        mt = self._mt
        links: list[tuple[str, SpanContext]] = []
        external: list[Variable] = []
        inputs = self._inputs
        if self._prompt is not None:
            self._add_input(self._prompt, inputs, links, external)
        for item in self._pending_inputs:
            self._add_input(item, inputs, links, external)
        span_name, static = mt._static_attributes(
            self._kind,
            self._name,
            self._stage,
            self._system or mt.system,
            self._store_id or mt.store_id,
            self._gen_ai_operation,
        )
        attributes: dict[str, AttributeValue] = {**static, A.MEMTRACE_OP_INPUTS: inputs}
        if self._case_id:
            attributes[A.MEMTRACE_CASE_ID] = self._case_id
        if self._prompt is not None and inputs:
            attributes[A.MEMTRACE_PROMPT_REF] = inputs[0]
        if self._attributes:
            attributes.update(self._attributes)
        pseudonym = mt.capture._pseudonymizer
        if pseudonym is not None:  # identifiers as they leave (the store id is, in `static`)
            store = self._store_id or mt.store_id
            known = pseudonym.known
            if inputs:
                attributes[A.MEMTRACE_OP_INPUTS] = (
                    [known(inputs[0]) or pseudonym(inputs[0], store)]
                    if len(inputs) == 1  # most ops: no comprehension (a frame, on Python 3.11)
                    else [known(r) or pseudonym(r, store) for r in inputs]
                )
                if A.MEMTRACE_PROMPT_REF in attributes:
                    attributes[A.MEMTRACE_PROMPT_REF] = pseudonym(inputs[0], store)
            if self._case_id:
                attributes[A.MEMTRACE_CASE_ID] = pseudonym(self._case_id, store)
            if self._attributes:
                _pseudonymise(attributes, mt.capture, store)
            if links:
                links = (
                    [(known(links[0][0]) or pseudonym(links[0][0], store), links[0][1])]
                    if len(links) == 1
                    else [(known(ref) or pseudonym(ref, store), writer) for ref, writer in links]
                )
        span = self._adopted
        if span is not None:
            # Enrich a span someone else started (and will end): ours are its attributes,
            # links and events; it already is the current span.
            span.set_attributes(attributes)
            for ref, writer in links:
                span.add_link(writer, {_REF: ref})
            self._span = span
        else:
            span = mt._otel_tracer.start_span(
                span_name,
                parent,
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                links=[Link(writer, {_REF: ref}) for ref, writer in links] if links else None,
            )
            self._span = span
            self._ctx_token = otel_context.attach(trace.set_span_in_context(span, parent))
        if self._case_id and self._kind is OpKind.GENERATE:
            note_answer(self._case_id, span.get_span_context())
        self._op_token = _current_op.set(self)
        if external:
            _input_events(span, mt.capture, external, self._store_id or mt.store_id)

    def _add_input(
        self,
        item: InputLike,
        inputs: list[str],
        links: list[tuple[str, SpanContext]],
        external: list[Variable],
    ) -> None:
        """Append ``item``'s ref to ``inputs``, and ``(ref, writer)`` to ``links`` or the
        variable to ``external`` (recorded as an input event) when no writer is known."""
        registry = self._mt.registry
        if isinstance(item, Variable):
            ref = item.ref
            writer = registry.lookup(ref) or parse_traceparent(item.traceparent)
            if writer is None:
                external.append(item)
        elif isinstance(item, str) and ((writer := registry.lookup(item)) or is_ref(item)):
            # A ref the registry knows was written by a traced op: it is well formed.
            ref = item
        else:
            data_warning(
                "op.input.invalid",
                "memtrace-otel: ignoring op input %r: expected a Variable or an '<id>@<version>' ref",
                item,
            )
            return
        inputs.append(ref)
        if writer is not None:
            # A (ref, writer) pair, not a Link: a span added after the start only needs the two,
            # and nothing is kept once the span is exported (a cache of Links, one per ref read,
            # kept thousands of objects alive for the app's full garbage collections).
            links.append((ref, writer))

    def _finish(self, span: Span, exc: BaseException | None) -> None:
        final: dict[str, AttributeValue] = {A.MEMTRACE_OP_OUTPUTS: self._outputs}
        if self._inputs_changed:
            final[A.MEMTRACE_OP_INPUTS] = self._inputs
        if self._kind in _RECORD_ID_KINDS and len(self._outputs) == 1:
            final[A.GEN_AI_MEMORY_RECORD_ID] = self._outputs[0].rpartition("@")[0]
        pseudonym = self._mt.capture._pseudonymizer
        if pseudonym is not None:
            store = self._store_id or self._mt.store_id
            if self._outputs:
                known = pseudonym.known
                outputs = self._outputs
                final[A.MEMTRACE_OP_OUTPUTS] = (
                    [known(outputs[0]) or pseudonym(outputs[0], store)]
                    if len(outputs) == 1
                    else [known(r) or pseudonym(r, store) for r in outputs]
                )
            if self._inputs_changed and self._inputs:
                final[A.MEMTRACE_OP_INPUTS] = [pseudonym(r, store) for r in self._inputs]
            record = final.get(A.GEN_AI_MEMORY_RECORD_ID)
            if isinstance(record, str):
                final[A.GEN_AI_MEMORY_RECORD_ID] = pseudonym(record, store)
        span.set_attributes(final)
        if exc is not None and self._adopted is None:  # an adopted span's owner records it
            self._record_error(span, exc)

    def _record_error(self, span: Span, exc: BaseException) -> None:
        attrs, description = exception_attributes(self._mt.capture, exc)
        span.add_event(A.EXCEPTION_EVENT, attrs)
        span.set_status(Status(StatusCode.ERROR, description))

    def record_error(self, exc: BaseException) -> None:
        """Mark the op failed with ``exc`` without raising it (its message follows capture)."""
        span = self._span
        if span is None or self._ended or not span.is_recording():
            return
        try:
            self._record_error(span, exc)
        except Exception:
            internal_error("op.record_error")

    def _detach(self) -> None:
        if self._op_token is not None:
            # Not contextlib.suppress: this runs once per op and try/except costs nothing.
            try:  # noqa: SIM105
                _current_op.reset(self._op_token)
            except ValueError:
                pass  # exited in another context than entered (e.g. a different task)
            self._op_token = None
        if self._ctx_token is not None:
            otel_context.detach(self._ctx_token)  # type: ignore[arg-type]
            self._ctx_token = None

    def _abandon(self) -> None:
        span, self._span = self._span, None
        self._detach()
        if span is not None and self._adopted is None:
            try:
                span.end()
            except Exception:
                internal_error("op.start")

    def hold(self) -> None:
        """End the op's block now but not its span: leave its context (the caller's later spans
        are not its children) and take this moment as its end time. The span stays open, its
        kind, outputs and attributes can still change, until ``__exit__`` ends it at that time.

        For a step whose role shows only after it returned (an LLM call whose output a memory
        write then stores is an extraction, not an answer). Not for adopted spans (their owner
        ends them): then it does nothing.
        """
        if self._span is None or self._ended or self._adopted is not None:
            return
        try:
            self._end_time = time.time_ns()
            self._detach()
        except Exception:
            internal_error("op.hold")

    def reclassify(self, kind: OpKind, name: str | None = None) -> None:
        """Record the op as one of another kind (and name), before it ends: its span name,
        ``memtrace.op.kind``, ``memtrace.op.name`` and default stage follow."""
        span = self._span
        if span is None or self._ended:
            return
        try:
            self._kind = kind
            if name:
                self._name = name
            mt = self._mt
            span_name, static = mt._static_attributes(
                kind,
                self._name,
                self._stage,
                self._system or mt.system,
                self._store_id or mt.store_id,
                self._gen_ai_operation,
            )
            span.set_attributes(
                {
                    key: static[key]
                    for key in (A.MEMTRACE_OP_KIND, A.MEMTRACE_OP_NAME, A.MEMTRACE_STAGE)
                }
            )
            if self._adopted is None:
                if self._attributes and A.GEN_AI_OPERATION_NAME in self._attributes:
                    # A GenAI call (``chat``): not named after a store operation.
                    span_name = f"{A.OP_SPAN_NAME_PREFIX}{kind.value} {self._name}"
                span.update_name(span_name)
        except Exception:
            internal_error("op.reclassify")

    @property
    def kind(self) -> OpKind:
        """The op's kind (as recorded so far)."""
        return self._kind

    # -- recording -------------------------------------------------------------------------
    @property
    def span(self) -> Span:
        """The underlying span (a non-recording span when the op is untraced)."""
        return self._span if self._span is not None else trace.INVALID_SPAN

    @property
    def is_traced(self) -> bool:
        """Whether this op records a span (false when suppressed or degraded)."""
        return self._span is not None

    @property
    def max_value_length(self) -> int:
        """The most characters of a value this op's capture setting lets leave the process."""
        return self._mt.capture.max_value_length  # type: ignore[return-value]

    @property
    def inputs(self) -> tuple[str, ...]:
        """Refs of the inputs recorded so far."""
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        """Refs of the outputs recorded so far."""
        return tuple(self._outputs)

    def output(self, var: Variable) -> Variable:
        """Record that this op wrote ``var``; returns it with its writer's ``traceparent``.

        Untraced, or after the op ended, ``var`` comes back unchanged.
        """
        span = self._span
        if span is None:
            return var
        if self._ended:
            data_warning(
                "op.output.closed",
                "memtrace-otel: output %s recorded after its op %r ended; ignored",
                getattr(var, "ref", var),
                self._name,
            )
            return var
        try:
            ref = var.ref
            self._outputs.append(ref)
            ctx = span.get_span_context()
            self._mt.registry.record(ref, ctx)
            if span.is_recording():
                span.add_event(
                    A.MEMTRACE_VARIABLE_EVENT,
                    event_attributes(
                        self._mt.capture,
                        var,
                        ref,
                        _OUTPUT,
                        self._store_id or self._mt.store_id,
                        kind=self._kind,
                        answer=bool(self._case_id),
                    ),
                )
            traceparent = self._traceparent
            if traceparent is None:
                traceparent = self._traceparent = format_traceparent(ctx)
            return var.with_traceparent(traceparent)
        except Exception:
            internal_error("op.output")
            return var

    def input(self, item: InputLike) -> None:
        """Record one more input after the op started (e.g. a record read mid-way)."""
        self.add_inputs((item,))

    def add_inputs(self, items: Iterable[InputLike]) -> None:
        """Record more inputs after the op started, in one pass (e.g. the hits of a search)."""
        span = self._span
        if span is None or self._ended:
            return
        try:
            links: list[tuple[str, SpanContext]] = []
            external: list[Variable] = []
            inputs = self._inputs
            for item in items:
                self._add_input(item, inputs, links, external)
            self._inputs_changed = True
            capture = self._mt.capture
            for ref, writer in links:
                span.add_link(
                    writer, {_REF: capture.pseudonym(ref, self._store_id or self._mt.store_id)}
                )
            if external:
                _input_events(span, self._mt.capture, external, self._store_id or self._mt.store_id)
        except Exception:
            internal_error("op.input")

    def add_records(
        self,
        records: Iterable[tuple[str, Any, str | None]],
        category: Category = Category.MEMORY,
    ) -> None:
        """Record the records a read returned as inputs, in one pass: ``(ref, value,
        traceparent)`` triples, ``traceparent`` being their writer's as the record's metadata
        carries it (or ``None``).

        What :meth:`add_inputs` does with one :class:`Variable` per record, without making
        them: a record whose writer is known (the registry or its ``traceparent``) becomes a
        link; one without is recorded as an input event with its value, like any input no
        traced op wrote. A malformed ref is skipped with one warning.
        """
        span = self._span
        if span is None or self._ended:
            return
        try:
            lookup = self._mt.registry.lookup
            inputs = self._inputs
            add_link = span.add_link
            pseudonym = self._mt.capture._pseudonymizer
            store = self._store_id or self._mt.store_id
            unwritten: list[Variable] = []
            for ref, value, traceparent in records:
                writer = lookup(ref)
                if writer is None:
                    if not is_ref(ref):
                        data_warning(
                            "op.record.invalid",
                            "memtrace-otel: ignoring record %r: expected an '<id>@<version>' ref",
                            ref,
                        )
                        continue
                    writer = parse_traceparent(traceparent) if traceparent else None
                    if writer is None:
                        unwritten.append(Variable.from_ref(ref, value, category=category))
                inputs.append(ref)
                if writer is not None:
                    add_link(
                        writer,
                        {
                            _REF: ref
                            if pseudonym is None
                            else pseudonym.known(ref) or pseudonym(ref, store)
                        },
                    )
            self._inputs_changed = True
            if unwritten:
                _input_events(
                    span, self._mt.capture, unwritten, self._store_id or self._mt.store_id
                )
        except Exception:
            internal_error("op.input")

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        """Set one more span attribute (e.g. ``gen_ai.usage.input_tokens``)."""
        if self._span is not None and not self._ended:
            if key in _IDENTIFIER_KEYS and self._mt.capture._pseudonymizer is not None:
                one = {key: value}
                _pseudonymise(one, self._mt.capture, self._store_id or self._mt.store_id)
                self._span.set_attribute(key, one[key])
            else:
                self._span.set_attribute(key, value)
            if key == A.MEMTRACE_CASE_ID and isinstance(value, str):
                self._case_id = value  # a question-serving op: its answer is what the user saw

    def set_verdict(self, verdict: JudgeVerdict | str | bool) -> None:
        """On a ``judge`` op: whether the answer was right (``memtrace.judge.verdict``)."""
        if isinstance(verdict, bool):
            verdict = JudgeVerdict.CORRECT if verdict else JudgeVerdict.INCORRECT
        try:
            value = JudgeVerdict(verdict)
        except ValueError:
            data_warning("op.verdict", "memtrace-otel: ignoring unknown judge verdict %r", verdict)
            return
        self.set_attribute(A.MEMTRACE_JUDGE_VERDICT, value.value)

    @property
    def traceparent(self) -> str | None:
        """This op's span context as a W3C ``traceparent`` (``None`` when untraced)."""
        if self._span is None:
            return None
        if self._traceparent is None:
            self._traceparent = format_traceparent(self._span.get_span_context())
        return self._traceparent


_IDENTIFIER_KEYS: Final = frozenset(
    [
        A.GEN_AI_MEMORY_STORE_ID,
        A.MEMTRACE_CASE_ID,
        A.GEN_AI_MEMORY_RECORD_ID,
        A.MEMTRACE_PROMPT_REF,
        A.MEMTRACE_OP_INPUTS,
        A.MEMTRACE_OP_OUTPUTS,
    ]
)
"""The op attributes holding identifiers (store, case and record ids, refs): what
``CaptureConfig.pseudonymize_ids`` pseudonymises as they leave."""


def _pseudonymise(
    attributes: dict[str, AttributeValue], capture: CaptureConfig, store: str | None
) -> None:
    """Pseudonymise, in place, the identifiers among ``attributes`` (:data:`_IDENTIFIER_KEYS`)."""
    pseudonym = capture._pseudonymizer
    if pseudonym is None:
        return
    for key in _IDENTIFIER_KEYS:
        value = attributes.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            attributes[key] = pseudonym(value, store)
        elif isinstance(value, list | tuple) and value:
            attributes[key] = [pseudonym(v, store) if isinstance(v, str) else v for v in value]


def _input_events(
    span: Span, capture: CaptureConfig, variables: list[Variable], store: str | None
) -> None:
    """One ``memtrace.variable`` input event per variable no traced op wrote (contract 3)."""
    if span.is_recording():
        for var in variables:
            span.add_event(
                A.MEMTRACE_VARIABLE_EVENT, event_attributes(capture, var, var.ref, _INPUT, store)
            )


def _per_kind(
    op: Callable[Concatenate[MemTracer, OpKind, P], Op],
    trace_op: Callable[Concatenate[MemTracer, OpKind, Q], T],
    kind: OpKind,
    doc: str,
) -> tuple[Callable[Concatenate[MemTracer, P], Op], Callable[Concatenate[MemTracer, Q], T]]:
    """One row of :class:`MemTracer`'s per-kind table: ``mt.<kind>(name, **options)``, which is
    :meth:`MemTracer.op` with the kind fixed, and ``mt.trace_<kind>(name, **options)``, which is
    :meth:`MemTracer.trace_op` with it.

    The type checker reads both signatures from ``op`` and ``trace_op`` (their ``kind`` taken
    out). At run time the context manager spells out ``op``'s keywords and calls the op maker
    directly, re-packing nothing, since it runs once per op (a test checks the two signatures
    agree); the decorator runs once per decorated function and just forwards.
    """

    def make(
        self: MemTracer,
        name: str,
        *,
        inputs: Iterable[InputLike] = (),
        stage: Stage | str | None = None,
        case_id: str | None = None,
        prompt: InputLike | None = None,
        store_id: str | None = None,
        system: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        gen_ai_operation: str | None = None,
        span: Span | None = None,
    ) -> Op:
        return self._new_op(
            kind,
            name,
            inputs,
            stage,
            case_id,
            prompt,
            store_id,
            system,
            attributes,
            gen_ai_operation,
            span,
        )

    forward: Callable[..., Any] = trace_op  # typed by the return annotation below

    def decorator(self: MemTracer, name: str, **options: Any) -> Any:
        return forward(self, kind, name, **options)

    for made, name, text in (
        (make, kind.value, doc),
        (decorator, f"trace_{kind.value}", f"Decorator form of :meth:`{kind.value}`."),
    ):
        made.__name__ = name
        made.__qualname__ = f"MemTracer.{name}"
        made.__doc__ = text
    return make, decorator  # type: ignore[return-value]


class MemTracer:
    """Creates memory-operation spans that follow the trace contract.

    Args:
        tracer_provider: where spans go; ``None`` uses the global provider.
        system: ``memtrace.system`` of every op (``mem0``, ``rag``, your own name).
        store_id: ``gen_ai.memory.store.id`` of every op unless an op names its own.
        capture: content-capture settings; ``None`` resolves them from the environment.
        registry: the writer registry used for links; ``None`` shares one per process, so ops
            of different tracers in one process link to each other.

    Raises:
        ValueError: a wrong type for any argument.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        system: str | None = None,
        store_id: str | None = None,
        capture: CaptureConfig | None = None,
        registry: WriterRegistry | None = None,
    ) -> None:
        from memtrace_otel._version import __version__

        for label, value in (("system", system), ("store_id", store_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{label} must be a non-empty string, got {value!r}")
        if capture is not None and not isinstance(capture, CaptureConfig):
            raise ValueError(f"capture must be a CaptureConfig, got {type(capture).__name__}")
        if registry is not None and not isinstance(registry, WriterRegistry):
            raise ValueError(f"registry must be a WriterRegistry, got {type(registry).__name__}")
        self.system = system
        self.store_id = store_id
        self.capture = capture if capture is not None else CaptureConfig()
        self.registry = registry if registry is not None else _DEFAULT_REGISTRY
        self._otel_tracer = trace.get_tracer("memtrace_otel", __version__, tracer_provider)
        self._static: dict[tuple[Any, ...], tuple[str, dict[str, AttributeValue]]] = {}

    def _static_attributes(
        self,
        kind: OpKind,
        name: str,
        stage: Stage | None,
        system: str | None,
        store_id: str | None,
        gen_ai_operation: str | None,
    ) -> tuple[str, dict[str, AttributeValue]]:
        """The span name and the attributes an op of this shape always has (cached: most ops
        of an application repeat a few shapes)."""
        key = (kind, name, stage, system, store_id, gen_ai_operation)
        found = self._static.get(key)
        if found is not None:
            return found
        attributes: dict[str, AttributeValue] = {
            A.MEMTRACE_OP_KIND: kind.value,
            A.MEMTRACE_OP_NAME: name,
            A.MEMTRACE_STAGE: (stage or DEFAULT_STAGE_BY_KIND[kind]).value,
        }
        if system:
            attributes[A.MEMTRACE_SYSTEM] = system
        if store_id:
            attributes[A.GEN_AI_MEMORY_STORE_ID] = self.capture.pseudonym(store_id)
        operation = gen_ai_operation or GEN_AI_OPERATION_BY_KIND.get(kind)
        if operation:
            attributes[A.GEN_AI_OPERATION_NAME] = operation
            span_name = operation
        else:
            span_name = f"{A.OP_SPAN_NAME_PREFIX}{kind.value} {name}"
        if len(self._static) >= _MAX_STATIC:
            self._static.clear()  # e.g. a store id per user: the cache stays bounded
        found = self._static[key] = (span_name, attributes)
        return found

    # -- variables -------------------------------------------------------------------------
    def variable(
        self,
        id: str,
        value: Any = None,
        *,
        version: int = 1,
        category: Category | str = Category.OTHER,
        meta: Mapping[str, Any] | None = None,
        traceparent: str | None = None,
    ) -> Variable:
        """A variable ``<id>@<version>`` (version 1 unless given).

        Pass ``traceparent`` when the value was read from a record whose metadata carries its
        writer's span context, so the reading op links to the writer across processes.
        """
        # Variable validates (and converts) the category.
        return Variable(id, version, value, category, meta, False, traceparent)  # type: ignore[arg-type]

    def traceparent_of(self, ref: str) -> str | None:
        """The ``traceparent`` of the op that wrote ``ref`` in this process, if remembered."""
        ctx = self.registry.lookup(ref)
        return format_traceparent(ctx) if ctx is not None else None

    # -- ops -------------------------------------------------------------------------------
    def op(
        self,
        kind: OpKind | str,
        name: str,
        *,
        inputs: Iterable[InputLike] = (),
        stage: Stage | str | None = None,
        case_id: str | None = None,
        prompt: InputLike | None = None,
        store_id: str | None = None,
        system: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        gen_ai_operation: str | None = None,
        span: Span | None = None,
    ) -> Op:
        """An op of any kind, as a context manager (``with`` or ``async with``).

        Args:
            kind: one of the ten op kinds.
            name: the concrete step, e.g. ``mem0.fact_extraction``.
            inputs: variables (or refs of traced variables) the op reads.
            stage: overrides the kind's default stage.
            case_id: the question this op serves (retrieval, response, evaluation ops).
            prompt: the prompt template variable of an LLM-backed op (also an input).
            store_id: overrides the tracer's memory store.
            system: overrides the tracer's system.
            attributes: extra span attributes.
            gen_ai_operation: the upstream ``gen_ai.operation.name`` (e.g. ``upsert_memory``).
            span: an already started, current span to enrich instead of starting one (e.g. the
                chat span of an upstream GenAI instrumentor): the op writes its attributes,
                links and events there, and leaves ending it, its status and any exception to
                its owner.

        Raises:
            ValueError: an unknown kind or stage, or an empty name (checked when the op is made).
        """
        try:
            op_kind = kind if type(kind) is OpKind else OpKind(kind)
        except ValueError:
            allowed = ", ".join(k.value for k in OpKind)
            raise ValueError(f"unknown op kind {kind!r}: expected one of {allowed}") from None
        return self._new_op(
            op_kind,
            name,
            inputs,
            stage,
            case_id,
            prompt,
            store_id,
            system,
            attributes,
            gen_ai_operation,
            span,
        )

    def _new_op(
        self,
        kind: OpKind,
        name: str,
        inputs: Iterable[InputLike],
        stage: Stage | str | None,
        case_id: str | None,
        prompt: InputLike | None,
        store_id: str | None,
        system: str | None,
        attributes: Mapping[str, AttributeValue] | None,
        gen_ai_operation: str | None,
        span: Span | None,
    ) -> Op:
        if not isinstance(name, str) or not name:
            raise ValueError(f"op name must be a non-empty string, got {name!r}")
        op_stage = None
        if stage is not None:
            try:
                op_stage = stage if type(stage) is Stage else Stage(stage)
            except ValueError:
                allowed = ", ".join(s.value for s in Stage)
                raise ValueError(f"unknown stage {stage!r}: expected one of {allowed}") from None
        if isinstance(inputs, _ONE_INPUT):
            inputs = (inputs,)
        return Op(
            self,
            kind,
            name,
            inputs,
            op_stage,
            case_id,
            prompt,
            store_id,
            system,
            attributes,
            gen_ai_operation,
            span,
        )

    # -- decorators ------------------------------------------------------------------------
    def trace_op(
        self, kind: OpKind | str, name: str, **kwargs: Unpack[OpOptions]
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a function or coroutine function as an op.

        Variables among its arguments (also inside lists and tuples) become inputs; a returned
        :class:`Variable`, or list/tuple of them, become outputs. The function may record more
        through :func:`current_op`. The return value is passed back untouched.

        Raises:
            ValueError: an unknown kind or stage, when decorating.
        """
        self.op(kind, name, **kwargs)  # validate now, at decoration time

        # One signature covers both: for a coroutine function R is the awaitable it returns.
        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **call_kwargs: Any) -> Any:
                    op = self._op_for_call(kind, name, kwargs, args, call_kwargs)
                    if op is None:
                        return await fn(*args, **call_kwargs)
                    with op:
                        result = await fn(*args, **call_kwargs)
                        _record_result(op, result)
                    return result

                return async_wrapper  # type: ignore[return-value]

            @functools.wraps(fn)
            def wrapper(*args: Any, **call_kwargs: Any) -> Any:
                op = self._op_for_call(kind, name, kwargs, args, call_kwargs)
                if op is None:
                    return fn(*args, **call_kwargs)
                with op:
                    result = fn(*args, **call_kwargs)
                    _record_result(op, result)
                return result

            return wrapper

        return decorate

    def _op_for_call(
        self,
        kind: OpKind | str,
        name: str,
        op_kwargs: OpOptions,
        args: tuple[Any, ...],
        call_kwargs: dict[str, Any],
    ) -> Op | None:
        try:
            found = [*op_kwargs.get("inputs", ())]
            for value in (*args, *call_kwargs.values()):
                if isinstance(value, Variable):
                    found.append(value)
                elif isinstance(value, list | tuple):
                    found.extend(v for v in value if isinstance(v, Variable))
            options: OpOptions = {**op_kwargs, "inputs": found}
            return self.op(kind, name, **options)
        except Exception:
            internal_error("op.decorator")
            return None

    # -- one context manager and one decorator per op kind ---------------------------------
    # The table: each row makes ``mt.<kind>`` (a context manager, :meth:`op` with the kind fixed)
    # and ``mt.trace_<kind>`` (its decorator form, :meth:`trace_op` with it), both typed from
    # those two. A test checks the rows are the op kinds, one each.
    ingest, trace_ingest = _per_kind(
        op, trace_op, OpKind.INGEST, "A raw input (message, document) enters the memory system."
    )
    extract, trace_extract = _per_kind(
        op,
        trace_op,
        OpKind.EXTRACT,
        "Memory content derived from inputs: fact extraction, chunking, segmentation.",
    )
    create, trace_create = _per_kind(
        op, trace_op, OpKind.CREATE, "A new record written to the store."
    )
    update, trace_update = _per_kind(
        op,
        trace_op,
        OpKind.UPDATE,
        "A record rewritten: merge, overwrite, summarise, trim a window.",
    )
    delete, trace_delete = _per_kind(
        op,
        trace_op,
        OpKind.DELETE,
        "A record removed (its output is a tombstone: ``var.tombstone()``).",
    )
    retrieve, trace_retrieve = _per_kind(
        op, trace_op, OpKind.RETRIEVE, "A query turned into candidate records."
    )
    filter, trace_filter = _per_kind(
        op, trace_op, OpKind.FILTER, "Candidates reranked, thresholded, deduplicated or cut."
    )
    assemble, trace_assemble = _per_kind(
        op, trace_op, OpKind.ASSEMBLE, "The answer prompt or context built from records."
    )
    generate, trace_generate = _per_kind(op, trace_op, OpKind.GENERATE, "The answer produced.")
    judge, trace_judge = _per_kind(
        op,
        trace_op,
        OpKind.JUDGE,
        "The answer scored against the gold answer (use ``op.set_verdict``).",
    )


def _record_result(op: Op, result: Any) -> None:
    try:
        if isinstance(result, Variable):
            op.output(result)
        elif isinstance(result, list | tuple):
            for item in result:
                if isinstance(item, Variable):
                    op.output(item)
    except Exception:
        internal_error("op.result")
