"""Auto-instrumentation: Mem0, OpenAI chat completions and LangGraph's memory store.

Enable with no code change: ``opentelemetry-instrument python app.py`` (the instrumentors are
registered as ``opentelemetry_instrumentor`` entry points ``memtrace_mem0``,
``memtrace_openai``, ``memtrace_langgraph``; ``OTEL_TRACES_EXPORTER=memtrace_file`` writes
OTLP JSON Lines to ``MEMTRACE_TRACES_FILE``). Or in code::

    from memtrace_otel.instrumentors.mem0 import Mem0Instrumentor
    Mem0Instrumentor().instrument(tracer_provider=provider)

Importing an instrumentor never imports the library it instruments; patches are applied when the
application imports it. See ``docs/instrumentors.md``.

The helpers below are for applications that want more than the defaults:

>>> template = declare_prompt("prompt:answer", "Answer using only these memories:\\n{memories}")
>>> template.ref
'prompt:answer@1'
>>> from memtrace_otel.instrumentors._common import forget_prompts
>>> forget_prompts()
>>> message_ref("My sister Ana lives in Porto.", store_id="dana").startswith("msg:")
True
"""

from memtrace_otel.instrumentors._common import (
    declare_prompt,
    message_ref,
    using_prompt,
)

__all__ = ["declare_prompt", "message_ref", "using_prompt"]
