"""A small JSON-over-HTTP client on the standard library, for the live backends.

Timeouts, retries with exponential backoff on 429 and 5xx (honouring ``Retry-After``), bearer or
basic auth, extra headers and TLS options. Response bodies are read a chunk at a time up to
``max_response_bytes``: a larger body (announced or streamed) raises :class:`BackendError`
instead of filling memory. We use ``urllib`` rather than adding an HTTP
dependency: the query APIs are plain GETs returning JSON, and the batch job makes few, large
requests, so connection pooling would not pay for a new core dependency.

Redirects (urllib follows up to 10) keep the credentials only while they stay on the same
origin (scheme, host and port): a redirect elsewhere is followed without ``Authorization``,
``Cookie`` or the extra headers of :class:`HttpOptions`, and a redirect to any scheme but
http(s) (``ftp://``, ``file://``) is refused with :class:`BackendError`.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from memtrace_otel import __version__
from memtrace_otel._internal import backoff_delay
from memtrace_otel.errors import BackendError
from memtrace_otel.semconv import env as E
from memtrace_otel.sources._limits import DEFAULT_MAX_RESPONSE_BYTES, resolve_cap

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses worth retrying: rate limits and server-side failures."""
_BODY_CHUNK = 256 * 1024
"""Bytes read at a time from a response body."""
_ERROR_BODY_BYTES = 64 * 1024
"""How much of an error response we read (only its message is shown)."""


@dataclass(frozen=True)
class HttpOptions:
    """How to talk to a backend.

    Args:
        timeout: seconds any one network operation may wait (connect, or one read).
        total_timeout: seconds one request may take in all, from its start to the body's end:
            a backend that trickles its body (each read within ``timeout``) is cut off at the
            first read past it with a :class:`~memtrace_otel.errors.BackendError`, not retried.
        retries: extra attempts after a 429, a 5xx, a timeout or a refused connection.
        backoff: seconds before the first retry; doubled each time (with jitter), capped at
            ``max_backoff``. A ``Retry-After`` header (seconds) wins when it is larger.
        max_backoff: the longest wait between attempts.
        token: a bearer token (``Authorization: Bearer ...``).
        username: basic-auth user (with ``password``); also taken from ``user:pass@`` in the URL.
        password: basic-auth password.
        headers: extra request headers (e.g. ``X-Scope-OrgID`` for a multi-tenant Tempo); left
            out of ``repr``, as they may carry API keys.
        verify: check the server's TLS certificate.
        ca_file: a PEM bundle of CAs to trust instead of the system's.
        client_cert: a PEM client certificate (mutual TLS), with ``client_key`` if separate.
        client_key: the client certificate's key.
        max_response_bytes: the largest response body read; a larger one raises
            :class:`~memtrace_otel.errors.BackendError` after reading at most this much (plus
            one 256 KiB chunk). ``None``: the ``MEMTRACE_MAX_RESPONSE_BYTES`` environment
            variable, else 256 MiB; resolved when the options are built.

    Raises:
        ValueError: a negative number, both a token and a user, or a response cap (argument
            or environment variable) that is not a positive integer.
    """

    timeout: float = 30.0
    total_timeout: float = 300.0
    retries: int = 4
    backoff: float = 0.5
    max_backoff: float = 30.0
    token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold keys
    verify: bool = True
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    max_response_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.total_timeout <= 0:
            raise ValueError(f"timeouts must be > 0, got {self.timeout}, {self.total_timeout}")
        if self.retries < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("retries, backoff and max_backoff must be >= 0")
        if self.token and self.username:
            raise ValueError("give a bearer token or a basic-auth user, not both")
        cap = resolve_cap(
            "max_response_bytes",
            self.max_response_bytes,
            E.ENV_MEMTRACE_MAX_RESPONSE_BYTES,
            DEFAULT_MAX_RESPONSE_BYTES,
        )
        object.__setattr__(self, "max_response_bytes", cap)  # frozen: set once, resolved

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context these options describe."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


@dataclass(frozen=True)
class Response:
    """A finished request: status and body (parsed JSON when the body is JSON, else ``None``)."""

    status: int
    body: Any
    text: str


_DEFAULT_PORTS = {"http": 80, "https": 443}
_CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})


def _origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of ``url``, the default port filled in.

    >>> _origin("http://Jaeger:80/api") == _origin("http://jaeger/other")
    True
    """
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # a port that is not a number: an origin of its own
        port = None
    return scheme, (parts.hostname or "").lower(), port


class _CredentialSafeRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler, minus credentials when the origin changes and minus any
    scheme but http(s) (urllib's own also follows ``ftp://``)."""

    def __init__(self, private_headers: frozenset[str]) -> None:
        self._private = _CREDENTIAL_HEADERS | private_headers

    def http_error_302(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
    ) -> Any:
        location = headers.get("location") or headers.get("uri")
        if location:
            target = urllib.parse.urljoin(req.full_url, location)
            scheme = urllib.parse.urlsplit(target).scheme.lower()
            if scheme not in _DEFAULT_PORTS:
                fp.close()
                raise BackendError(
                    f"refused a redirect (HTTP {code}) to a {scheme}:// URL: only http(s) "
                    "redirects are followed",
                    url=req.full_url,
                    status=code,
                )
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            for name in [n for n in new.headers if n.lower() in self._private]:
                del new.headers[name]
        return new


class HttpClient:
    """GETs JSON from one base URL with the retry and auth policy of :class:`HttpOptions`.

    Args:
        base_url: ``http(s)://host:port[/prefix]``; ``user:pass@`` in it becomes basic auth.
        options: timeouts, retries, auth, TLS.
        sleep: the function that waits between retries (tests pass a fake).
    """

    def __init__(
        self,
        base_url: str,
        options: HttpOptions | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"invalid backend URL {base_url!r}: expected http(s)://host[:port]")
        options = options or HttpOptions()
        if parts.username and not options.username and not options.token:
            options = HttpOptions(
                **{
                    **options.__dict__,
                    "username": urllib.parse.unquote(parts.username),
                    "password": urllib.parse.unquote(parts.password or ""),
                }
            )
        netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        if parts.port:
            netloc += f":{parts.port}"
        # Credentials never appear in the URL we print.
        self.base_url = urllib.parse.urlunsplit(
            (parts.scheme, netloc, parts.path.rstrip("/"), "", "")
        )
        self.options = options
        cap = options.max_response_bytes
        self.max_response_bytes = cap if cap is not None else DEFAULT_MAX_RESPONSE_BYTES
        """The largest response body read (resolved by :class:`HttpOptions`)."""
        self._sleep = sleep
        handlers: list[urllib.request.BaseHandler] = []
        if parts.scheme == "https":
            handlers.append(urllib.request.HTTPSHandler(context=options.ssl_context()))
        # Ignore proxy settings from the environment: backends are addressed directly.
        handlers.append(urllib.request.ProxyHandler({}))
        # The extra headers may carry keys (X-Scope-OrgID, API keys): same origin only.
        handlers.append(
            _CredentialSafeRedirects(frozenset(name.lower() for name in options.headers))
        )
        self._opener = urllib.request.build_opener(*handlers)
        self._headers = {"Accept": "application/json", "User-Agent": f"memtrace-otel/{__version__}"}
        if options.token:
            self._headers["Authorization"] = f"Bearer {options.token}"
        elif options.username:
            pair = f"{options.username}:{options.password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        self._headers.update(options.headers)
        self.requests = 0
        """Requests sent, retries included."""

    def url(self, path: str, params: Mapping[str, str | int | None] | None = None) -> str:
        """The full URL of ``path`` with the non-empty ``params``."""
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        return f"{self.base_url}{path}" + (f"?{query}" if query else "")

    def get(self, path: str, params: Mapping[str, str | int | None] | None = None) -> Response:
        """GET ``path``; retry 429/5xx/network errors; return 2xx and 404, raise on the rest.

        Raises:
            BackendError: a 4xx other than 404 (after a 401/403 the message says so), a body
                larger than ``max_response_bytes``, or a retryable failure that outlasted the
                retries.
        """
        url = self.url(path, params)
        attempt = 0
        while True:
            attempt += 1
            self.requests += 1
            request = urllib.request.Request(url, headers=self._headers, method="GET")
            retry_after: float | None = None
            deadline = time.monotonic() + self.options.total_timeout
            try:
                with self._opener.open(request, timeout=self.options.timeout) as reply:
                    status = reply.status
                    raw = self._read_body(reply, url, deadline)
            except urllib.error.HTTPError as exc:
                status = exc.code
                raw = exc.read(_ERROR_BODY_BYTES) if exc.fp is not None else b""
                retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            except http.client.IncompleteRead as exc:  # the connection closed mid-body
                if attempt > self.options.retries:
                    raise BackendError(_cut_off(exc, attempt), url=url) from None
                self._wait(attempt, None)
                continue
            except (
                urllib.error.URLError,
                TimeoutError,
                ConnectionError,
                OSError,
                http.client.HTTPException,
            ) as exc:
                reason = getattr(exc, "reason", exc)
                if attempt > self.options.retries:
                    raise BackendError(f"cannot reach the backend: {reason}", url=url) from None
                self._wait(attempt, None)
                continue
            text = raw.decode("utf-8", "replace")
            if status in RETRY_STATUSES and attempt <= self.options.retries:
                self._wait(attempt, retry_after)
                continue
            if 200 <= status < 300:
                body = _json_or_none(text)
                if body is None:  # a proxy's HTML page, an empty reply: never "no traces"
                    raise BackendError(
                        f"the response is not JSON ({len(raw)} bytes: {text.strip()[:80]!r})",
                        url=url,
                        status=status,
                    )
                return Response(status, body, text)
            if status == 404:
                return Response(status, _json_or_none(text), text)
            if status in (401, 403):
                raise BackendError(
                    "authentication failed: check the token or user", url=url, status=status
                )
            detail = _error_message(text)
            raise BackendError(
                f"request failed: {detail}" if detail else "request failed", url=url, status=status
            )

    def _read_body(self, reply: Any, url: str, deadline: float) -> bytes:
        """The body of ``reply``, read a chunk at a time, never more than the cap plus a chunk.

        The chunks are joined only once the whole body is in (a growing buffer would hold up
        to twice the cap while it is copied to a larger one); the join costs no more than the
        decoding to text that follows anyway.

        Raises:
            BackendError: the body (as announced by ``Content-Length``, or as read) is larger
                than ``max_response_bytes``, or is still arriving at ``deadline`` (the request's
                ``total_timeout``).
            http.client.IncompleteRead: the connection closed before the body's end (announced
                by ``Content-Length`` or by chunked encoding), with what was read.
        """
        cap = self.max_response_bytes
        length = reply.headers.get("Content-Length") if reply.headers else None
        if length is not None and length.strip().isdigit() and int(length) > cap:
            raise self._too_large(url, f"announces {int(length)} bytes")
        chunks: list[bytes] = []
        size = 0
        # read1: one socket read at a time, so a trickling body meets the deadline check.
        read = getattr(reply, "read1", reply.read)
        while True:
            try:
                chunk = read(_BODY_CHUNK)
            except http.client.IncompleteRead as exc:  # chunked: count what came before
                raise http.client.IncompleteRead(b"".join(chunks), exc.expected) from None
            if not chunk:
                if length is not None and length.strip().isdigit() and size < int(length):
                    # http.client's read1 returns what came before the close as if complete.
                    raise http.client.IncompleteRead(b"".join(chunks), int(length) - size)
                return b"".join(chunks)
            if time.monotonic() > deadline:
                raise BackendError(
                    f"the response body came too slowly: {size + len(chunk)} bytes in more than "
                    f"total_timeout={self.options.total_timeout:g} s; reading stopped",
                    url=url,
                )
            size += len(chunk)
            if size > cap:
                raise self._too_large(url, f"sent more than {cap} bytes")
            chunks.append(chunk)

    def _too_large(self, url: str, what: str) -> BackendError:
        return BackendError(
            f"the response body {what}, over max_response_bytes={self.max_response_bytes} "
            f"({E.ENV_MEMTRACE_MAX_RESPONSE_BYTES}); reading stopped",
            url=url,
        )

    def _wait(self, attempt: int, retry_after: float | None) -> None:
        # Jitter: many workers must not retry in lockstep.
        options = self.options
        self._sleep(
            backoff_delay(
                attempt,
                backoff=options.backoff,
                max_backoff=options.max_backoff,
                retry_after=retry_after,
                jitter=True,
            )
        )


def _cut_off(exc: http.client.IncompleteRead, attempts: int) -> str:
    """The message of a body the backend stopped sending before its end."""
    expected = f", {exc.expected} more announced" if exc.expected is not None else ""
    tries = f", {attempts} attempts" if attempts > 1 else ""
    return (
        f"the response body was cut off: the connection closed before its end "
        f"({len(exc.partial)} bytes read{expected}{tries}); nothing of it was used"
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def _json_or_none(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _error_message(text: str) -> str:
    body = _json_or_none(text)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        errors = body.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            return str(errors[0].get("msg") or errors[0])[:300]
    return text.strip()[:300]
