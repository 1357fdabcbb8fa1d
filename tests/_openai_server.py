"""The scripted OpenAI-compatible server of the tests: it lives in the bench wing's app suite
(``memtrace_bench.apps.openai_server``), which plants its faults through the same server."""

from memtrace_bench.apps.openai_server import (
    Reply,
    ScriptedOpenAI,
    chat_completion,
    closed_port,
    embedding_reply,
)

__all__ = ["Reply", "ScriptedOpenAI", "chat_completion", "closed_port", "embedding_reply"]
