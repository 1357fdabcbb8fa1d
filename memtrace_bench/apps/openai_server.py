"""A scripted OpenAI-compatible HTTP server on 127.0.0.1: the model of the tests and of the app suite.

It answers ``POST /v1/chat/completions`` and ``POST /v1/embeddings``. Replies come from a
script: a queue of :class:`Reply` objects consumed in order (a status code and a body; a body
may be a chat content string, wrapped into a completion, or raw bytes for malformed HTTP
bodies), and, when the queue is empty, from ``responder(kind, request_json)`` which returns the
chat content string (or a ``Reply``). Embeddings come from ``embedder(texts)`` when given (else
8-dimensional bags of words). Every request is recorded in ``requests``.

    with ScriptedOpenAI(responder=lambda kind, body: '{"facts": []}') as server:
        os.environ["OPENAI_BASE_URL"] = server.base_url
        server.script(Reply(500, {"error": {"message": "boom"}}))   # then the responder

``closed_port()`` gives a port with nothing listening (connection refused).
"""

from __future__ import annotations

import ast
import json
import re
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Embedder",
    "Reply",
    "ScriptedOpenAI",
    "chat_completion",
    "closed_port",
    "embedding_reply",
    "prompt_text",
    "sse_reply",
]


@dataclass
class Reply:
    """One scripted HTTP reply: ``body`` is a chat content string (wrapped into a completion),
    a dict (sent as JSON as is) or bytes (sent raw)."""

    status: int = 200
    body: str | dict[str, Any] | bytes = ""
    headers: dict[str, str] = field(default_factory=dict)


def chat_completion(content: str, model: str = "scripted-model") -> dict[str, Any]:
    """A minimal ``chat.completion`` object holding ``content``."""
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def embedding_reply(vectors: list[list[float]], model: str = "scripted-embed") -> dict[str, Any]:
    """A minimal embeddings list object."""
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }


def prompt_text(body: dict[str, Any]) -> str:
    """Every message content of a chat request, joined by newlines."""
    parts: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


def sse_reply(content: str, model: str = "scripted-model") -> Reply:
    """A streamed chat completion of ``content`` (one chunk per word, then usage, then DONE)."""
    pieces = re.findall(r"\S+\s*", content) or [""]
    events = []
    for i, piece in enumerate(pieces):
        delta: dict[str, Any] = {"content": piece, **({"role": "assistant"} if i == 0 else {})}
        events.append(
            {
                "id": "chatcmpl-scripted",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            }
        )
    events.append({**events[-1], "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events.append(
        {
            **events[-1],
            "choices": [],
            "usage": {
                "prompt_tokens": 7,
                "completion_tokens": len(pieces),
                "total_tokens": 7 + len(pieces),
            },
        }
    )
    data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return Reply(200, data + b"data: [DONE]\n\n", {"Content-Type": "text/event-stream"})


def bag_of_words(texts: list[str]) -> list[list[float]]:
    """The default embedder: 8-dimensional bags of words."""
    vectors = []
    for text in texts:
        vec = [0.0] * 8
        for word in str(text).lower().split():
            vec[sum(map(ord, word)) % 8] += 1.0
        vectors.append(vec)
    return vectors


Responder = Callable[[str, dict[str, Any]], "str | Reply"]
Embedder = Callable[[list[str]], list[list[float]]]


class ScriptedOpenAI:
    """The server; use as a context manager (starts and stops a thread)."""

    def __init__(
        self, responder: Responder | None = None, embedder: Embedder | None = None
    ) -> None:
        self.responder = responder
        self.embedder = embedder or bag_of_words
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                if self.path.endswith("/chat/completions"):
                    kind = "chat"
                elif self.path.endswith("/embeddings"):
                    kind = "embeddings"
                else:
                    self._send(Reply(404, {"error": {"message": f"no route {self.path}"}}))
                    return
                with outer._lock:
                    outer.requests.append((kind, body))
                    reply = outer._queue.popleft() if outer._queue else None
                if reply is None:
                    reply = outer._answer(kind, body)
                self._send(reply, kind)

            def _send(self, reply: Reply, kind: str = "chat") -> None:
                if isinstance(reply.body, bytes):
                    payload = reply.body
                elif isinstance(reply.body, dict):
                    payload = json.dumps(reply.body).encode()
                else:
                    payload = json.dumps(chat_completion(reply.body)).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _answer(self, kind: str, body: dict[str, Any]) -> Reply:
        if kind == "embeddings":
            inputs = body.get("input")
            texts = [inputs] if isinstance(inputs, str) else [str(t) for t in inputs or []]
            return Reply(200, embedding_reply(self.embedder(texts)))
        if self.responder is None:
            return Reply(200, "")
        out = self.responder(kind, body)
        return out if isinstance(out, Reply) else Reply(200, out)

    def script(self, *replies: Reply) -> None:
        """Queue replies, served before the responder is asked."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def chat_prompts(self) -> list[str]:
        """The user prompts of every chat request so far."""
        return [body["messages"][-1]["content"] for kind, body in self.requests if kind == "chat"]

    def __enter__(self) -> ScriptedOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def prompt_section(text: str, start: str, end: str | None = None) -> str:
    """What follows the *last* ``start`` (prompts quote their own headings first), up to ``end``."""
    at = text.rfind(start)
    if at < 0:
        return ""
    rest = text[at + len(start) :]
    if end is not None and end in rest:
        rest = rest[: rest.find(end)]
    return rest


def mem0_update_prompt(text: str) -> tuple[list[dict[str, str]], list[str]]:
    """What mem0 1.x's update-decision prompt shows the model: the old memories (``id``, ``text``)
    and the new facts between its triple backticks (``[]`` when the block does not parse).

    >>> mem0_update_prompt("[{'id': '0', 'text': 'a'}] facts are mentioned in the triple backticks ```['b']```")
    ([{'id': '0', 'text': 'a'}], ['b'])
    """
    old = [
        {"id": i, "text": t}
        for i, t in re.findall(r"'id': '(\d+)', 'text': '((?:[^'\\]|\\.)*)'", text)
    ]
    block = re.search(r"facts are mentioned in the triple backticks.*?```(.*?)```", text, re.DOTALL)
    try:
        new_facts = [str(f) for f in ast.literal_eval(block.group(1).strip())] if block else []
    except (ValueError, SyntaxError):
        new_facts = []
    return old, new_facts


def closed_port() -> int:
    """A local port with nothing listening (connecting to it is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
