"""Content by reference (contract v0.3 section 6): keyed digests and the content store writer.

``REFERENCE`` capture writes every value :meth:`CaptureConfig.record
<memtrace_otel.instrumentation.CaptureConfig.record>` lets leave to a content store (any fsspec
URL) instead of into a span; the span carries the object's URL. Layout of a store::

    objects/sha256/<hex>              unkeyed: named by the sha256 of the bytes stored
    objects/b2k/<key id>/<hex>        keyed (MEMTRACE_DIGEST_KEY): keyed BLAKE2b of the bytes
    manifests/<store>/<part>.jsonl    per memory store: {"object": name, "time": ns} lines
    packs/<store>/<part>.pack         packed (MEMTRACE_CONTENT_PACK): one batch's objects of one
                                      store, end to end; its manifest lines add "pack", "offset"
                                      and "size", and no objects/ file is written
    tombstones/<store>.json           written by ``memtrace content erase``
    pseudonyms/<key id>/<hex>         a pseudonymised identifier's original text (:class:`Pseudonymizer`)

An object's name is the digest of its bytes (after redaction), so a reader verifies every
object it fetches against its own name. Manifests are written in parts (one per batch of
writes) because object stores cannot append; ``memtrace content erase`` reads them to decide
which objects only the erased store refers to.

Writes go through a bounded queue to one daemon thread: :meth:`ContentWriter.put` never blocks
and never raises; a full queue or a failed write drops the object, counted and reported as the
``memtrace.content.dropped`` metric. :meth:`ContentWriter.shutdown` (also run at exit) flushes
within its budget.

Keyed BLAKE2b, not HMAC-SHA256: one C call per digest (``hashlib.blake2b(key=...)``) against
HMAC's two hash passes; ``benchmarks/bench_instructions.py`` prints both (docs/semantic-conventions.md).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import itertools
import logging
import os
import re
import threading
import time
import urllib.parse
import weakref
from collections import deque
from collections.abc import Iterable
from typing import Any, Final

from memtrace_otel._internal import internal_error, on_fork_in_child, reinit_after_fork
from memtrace_otel.semconv import DIGEST_BLAKE2B_KEYED, DIGEST_HMAC_SHA256, DIGEST_SHA256
from memtrace_otel.semconv.attributes import METRIC_CONTENT_DROPPED, METRIC_OTEL_COMPONENT_NAME

_log = logging.getLogger("memtrace_otel")

OBJECTS: Final = "objects"
MANIFESTS: Final = "manifests"
PACKS: Final = "packs"
TOMBSTONES: Final = "tombstones"
PSEUDONYMS: Final = "pseudonyms"
PSEUDONYM_PREFIX: Final = "pii-"
NO_STORE_KEY: Final = "_"
"""The manifest folder of values written by ops that name no memory store."""
MIN_KEY_BYTES: Final = 16
"""Shortest ``MEMTRACE_DIGEST_KEY`` accepted (a short key can be guessed, defeating the point)."""
DEFAULT_MAX_QUEUE_SIZE: Final = 4096
DEFAULT_SHUTDOWN_MILLIS: Final = 5000.0
_BATCH: Final = 256
_INTERVAL: Final = 0.25
"""Seconds between the writer thread's looks at a queue shorter than a batch."""
_REMEMBERED: Final = 1 << 16  # object names (and store/name pairs) remembered as written


def key_id(key: bytes) -> str:
    """A short public id of a digest key (8 hex): tells a rotated key apart, reveals nothing.

    >>> key_id(b"0123456789abcdef")
    'f0ccd733'
    """
    return hashlib.blake2b(key, digest_size=4, person=b"memtrace-kid").hexdigest()


def parse_key(value: str | bytes, *, source: str = "digest key") -> bytes:
    """The key bytes of ``MEMTRACE_DIGEST_KEY`` (its UTF-8 bytes).

    Raises:
        ValueError: shorter than :data:`MIN_KEY_BYTES` bytes.
    """
    key = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(
            f"invalid {source}: {len(key)} bytes; a digest key needs at least {MIN_KEY_BYTES} "
            "(e.g. the output of `openssl rand -hex 32`)"
        )
    return key


class Digester:
    """Digest of bytes: ``sha256:<hex>`` without a key, ``b2k:<key id>:<hex>`` (keyed BLAKE2b,
    32 bytes) with one.

    >>> Digester(None)(b"abc")[:15]
    'sha256:ba7816bf'
    >>> Digester(b"0123456789abcdef")(b"abc")[:16]
    'b2k:f0ccd733:66b'
    """

    __slots__ = ("_folder", "key", "key_id", "prefix")

    def __init__(self, key: bytes | None) -> None:
        self.key = key
        self.key_id = key_id(key) if key else None
        self.prefix = DIGEST_SHA256 if not key else f"{DIGEST_BLAKE2B_KEYED}{self.key_id}:"
        self._folder = object_name(self.prefix + "00").removesuffix("00")

    def name(self, digest: str) -> str:
        """:func:`object_name` of a digest this digester made (no parsing: the hot path's).

        >>> d = Digester(b"0123456789abcdef")
        >>> d.name(d(b"abc")) == object_name(d(b"abc"))
        True
        """
        return self._folder + digest[len(self.prefix) :]

    def __call__(self, data: bytes) -> str:
        key = self.key
        if key is None:
            return DIGEST_SHA256 + hashlib.sha256(data).hexdigest()
        return self.prefix + hashlib.blake2b(data, key=key, digest_size=32).hexdigest()


def digest_with(algorithm: str, key: bytes, data: bytes) -> str:
    """A keyed digest of ``data`` by ``algorithm`` (``b2k:`` or ``hmac-sha256:``), for readers
    checking either kind (and for the benchmark comparing them)."""
    kid = key_id(key)
    if algorithm == DIGEST_HMAC_SHA256:
        import hmac

        return f"{DIGEST_HMAC_SHA256}{kid}:{hmac.digest(key, data, 'sha256').hex()}"
    if algorithm == DIGEST_BLAKE2B_KEYED:
        return f"{DIGEST_BLAKE2B_KEYED}{kid}:{hashlib.blake2b(data, key=key, digest_size=32).hexdigest()}"
    raise ValueError(f"unknown keyed digest {algorithm!r}")


def split_digest(value: str) -> tuple[str, str | None, str] | None:
    """``(prefix, key id, hex)`` of a digest string, ``None`` if it is none we know.

    >>> split_digest("b2k:5d8c4f3c:00ff")
    ('b2k:', '5d8c4f3c', '00ff')
    >>> split_digest("sha256:00ff")
    ('sha256:', None, '00ff')
    """
    if value.startswith(DIGEST_SHA256):
        hexpart = value[len(DIGEST_SHA256) :]
        return (DIGEST_SHA256, None, hexpart) if _is_hex(hexpart) else None
    for prefix in (DIGEST_BLAKE2B_KEYED, DIGEST_HMAC_SHA256):
        if value.startswith(prefix):
            kid, sep, hexpart = value[len(prefix) :].partition(":")
            if sep and _is_hex(kid) and _is_hex(hexpart):
                return prefix, kid, hexpart
    return None


def _is_hex(text: str) -> bool:
    return _HEX.fullmatch(text) is not None  # one C call (a reader checks every reference)


_HEX: Final = re.compile("[0-9a-f]+")


def object_name(digest: str) -> str:
    """The object name of a digest: ``objects/<algorithm>/[<key id>/]<hex>``.

    >>> object_name("b2k:5d8c4f3c:00ff")
    'objects/b2k/5d8c4f3c/00ff'
    >>> object_name("sha256:00ff")
    'objects/sha256/00ff'
    """
    parts = split_digest(digest)
    if parts is None:
        raise ValueError(f"not a digest: {digest!r}")
    prefix, kid, hexpart = parts
    algorithm = prefix.rstrip(":")
    return f"{OBJECTS}/{algorithm}/{kid}/{hexpart}" if kid else f"{OBJECTS}/{algorithm}/{hexpart}"


def digest_of_name(ref: str) -> tuple[str, str] | None:
    """``(object name, digest)`` from an object's URL or name (its trailing ``objects/...``).

    >>> digest_of_name("file:///srv/content/objects/b2k/5d8c4f3c/00ff")
    ('objects/b2k/5d8c4f3c/00ff', 'b2k:5d8c4f3c:00ff')
    >>> digest_of_name("s3://bucket/objects/sha256/00ff")
    ('objects/sha256/00ff', 'sha256:00ff')
    """
    parts = ref.rstrip("/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] != OBJECTS:
            continue
        tail = parts[i + 1 :]
        if len(tail) == 2:
            digest = f"{tail[0]}:{tail[1]}"
        elif len(tail) == 3:
            digest = f"{tail[0]}:{tail[1]}:{tail[2]}"
        else:
            return None
        if split_digest(digest) is None:
            return None
        return "/".join(parts[i:]), digest
    return None


@functools.lru_cache(maxsize=4096)
def store_key(store: str | None) -> str:
    """The folder name of a memory store's manifests and tombstone (URL-quoted; ``_`` for none).

    >>> store_key("ana@example.com"), store_key(None)
    ('ana%40example.com', '_')
    """
    return urllib.parse.quote(store, safe="") if store else NO_STORE_KEY


# What in an identifier looks like personal data: an e-mail address, or a phone number (9 to 15
# digits, an optional "+", not touching letters or digits). UUIDs are matched first and kept, so
# their 12-digit last group is never taken for a phone number; a pseudonym is kept as it is.
_PII_IN_ID = re.compile(
    r"(?P<pii>pii-[0-9a-f]{8}-[0-9a-f]{20})"  # a pseudonym already: kept (idempotent)
    r"|(?P<uuid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"|(?P<email>[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}\b)"  # ends at its top-level domain
    r"|(?P<phone>(?<![0-9A-Za-z])\+?\d{9,15}(?![0-9A-Za-z]))"
)


_KEPT: Final = frozenset(["pii", "uuid"])
_PHONE_DIGITS: Final = 9
"""The fewest digits :data:`_PII_IN_ID` takes for a phone number."""


def looks_personal(identifier: str) -> bool:
    """Whether an identifier holds an e-mail address or a phone number.

    >>> looks_personal("ana@example.com"), looks_personal("+351912345678"), looks_personal("user-1")
    (True, True, False)
    >>> looks_personal("mem0:550e8400-e29b-41d4-a716-446655440000@1")
    False
    """
    return any(m.lastgroup not in _KEPT for m in _PII_IN_ID.finditer(identifier))


class Pseudonymizer:
    """Keyed pseudonyms of the personal parts of identifiers (store, case and record ids, refs).

    Each e-mail address or phone number inside an identifier becomes ``pii-<key id>-<hex>``
    (20 hex of a keyed BLAKE2b under its own personalisation), the rest stays: ``msg:ana@x.org:3@1``
    becomes ``msg:pii-<key id>-<hex>:3@1``, still a ref. The same text always gets the same
    pseudonym, so the graph joins; without the key no one can confirm a guess. With a content
    writer, each pseudonym's original text is written once to ``pseudonyms/<key id>/<hex>``, listed
    in the manifest of the store it came with (so erasing the store erases the mapping); an
    identifier that comes with no store (feedback's case id) writes none.

    >>> p = Pseudonymizer(b"0123456789abcdef")
    >>> p("ana@example.com") == p("ana@example.com") != "ana@example.com", p("user-1")
    (True, 'user-1')
    >>> p("msg:ana@example.com:3@1").startswith("msg:pii-f0ccd733-")
    True
    """

    __slots__ = ("_key", "_seen", "_writer", "key_id", "known")

    def __init__(self, key: bytes, writer: ContentWriter | None = None) -> None:
        self._key = key
        self.key_id = key_id(key)
        self._writer = writer
        self._seen: dict[str, str] = {}
        self.known = self._seen.get
        """The pseudonym of an identifier seen before, else ``None``: ``known(i) or p(i, store)``
        in hot loops skips a Python call for the identifiers that repeat (most of them)."""

    def __call__(self, identifier: str, store: str | None = None) -> str:
        """``identifier`` with its personal parts pseudonymised; ``store``: the memory store it
        came with (raw), in whose manifest (under the store's own pseudonym) the mapping is listed."""
        seen = self._seen
        out = seen.get(identifier)
        if out is not None:  # seen before: its mapping is written (listed by the first store)
            return out
        record, at, version = identifier.rpartition("@")
        if (
            at
            and record
            and version.isdigit()
            and len(version) < _PHONE_DIGITS
            and version.isascii()
        ):
            # A ref "<id>@<version>": its id, cached, and the version (each write of a record
            # is a new version: a cache of whole refs would miss every time). The same text as
            # the whole ref's: no match spans the "@" (an e-mail's domain needs letters, a phone
            # number 9 digits, and every pattern's edge treats "@" as the end of the text).
            out = seen.get(record)
            if out is None:
                out = self._pseudonymise(record, store)
                if len(seen) >= _REMEMBERED:
                    seen.clear()
                seen[record] = out
            out = f"{out}@{version}" if out is not record else identifier
        else:
            out = self._pseudonymise(identifier, store)
        if len(seen) >= _REMEMBERED:
            seen.clear()
        seen[identifier] = out
        return out

    def _pseudonymise(self, identifier: str, store: str | None) -> str:
        if "@" not in identifier and not any(c.isdigit() for c in identifier):
            return identifier
        owner = self.plain(store) if store else None
        return _PII_IN_ID.sub(lambda m: self._token(m, owner), identifier)

    def plain(self, identifier: str) -> str:
        """``identifier`` pseudonymised, writing nothing (readers, ``memtrace content erase``)."""
        if "@" not in identifier and not any(c.isdigit() for c in identifier):
            return identifier
        return _PII_IN_ID.sub(
            lambda m: m.group() if m.lastgroup in _KEPT else self.token(m.group()), identifier
        )

    def token(self, text: str) -> str:
        """The pseudonym of one personal text."""
        hexpart = hashlib.blake2b(
            text.encode("utf-8", "surrogatepass"),
            key=self._key,
            digest_size=10,
            person=b"memtrace-pii",
        ).hexdigest()
        return f"{PSEUDONYM_PREFIX}{self.key_id}-{hexpart}"

    def _token(self, match: re.Match[str], owner: str | None) -> str:
        text = match.group()
        if match.lastgroup in _KEPT:
            return text
        token = self.token(text)
        writer = self._writer
        if writer is not None and owner is not None:  # storeless (feedback): no listing to erase by
            hexpart = token.rpartition("-")[2]
            writer.put(f"{PSEUDONYMS}/{self.key_id}/{hexpart}", text.encode("utf-8"), owner)
        return token


def open_store(url: str) -> tuple[Any, str]:
    """``(filesystem, root path)`` of a content store URL, through fsspec.

    Raises:
        ValueError: fsspec is not installed, or the URL's protocol is unknown to it.
    """
    try:
        import fsspec
    except ImportError:
        raise ValueError(
            "a content store needs fsspec: pip install 'memtrace-otel[content]'"
        ) from None
    try:
        fs, root = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"content store {url!r}: {exc}") from None
    return fs, str(root).rstrip("/")


class ContentWriter:
    """Writes objects to one content store from a daemon thread; never blocks or raises.

    Args:
        url: the store, any fsspec URL (``file:///srv/content``, ``s3://bucket/prefix``, ...).
        max_queue_size: objects waiting at most; more are dropped and counted.
        meter_provider: where ``memtrace.content.dropped`` is reported (else the global one).
        pack: write each batch's objects of a memory store as one pack object (``packs/``), found
            through the store's manifest, instead of one object each: one write (one PUT on an
            object store) per batch and store.

    Raises:
        ValueError: fsspec is missing or the URL's protocol is unknown (at construction).
    """

    _instances = 0

    def __init__(
        self,
        url: str,
        *,
        max_queue_size: int = DEFAULT_MAX_QUEUE_SIZE,
        meter_provider: Any = None,
        pack: bool = False,
    ) -> None:
        if max_queue_size < 1:
            raise ValueError(f"max_queue_size must be >= 1, got {max_queue_size}")
        self.url = url.rstrip("/")
        self.pack = pack
        self._fs, self._root = open_store(self.url)
        self._direct = _direct_writer(self._fs, self._root)
        self._max = max_queue_size
        self._queue: deque[tuple[str, bytes, str | None, int]] = deque()
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._busy = 0
        self._written: dict[str, None] = {}
        self._listed: dict[tuple[str | None, str], None] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._failed_once = False
        self.dropped = 0
        """Objects not written: the queue was full, or the store refused or could not be reached."""
        self.written = 0
        """Objects written (or found already written by this process)."""
        self._seq = 0
        ContentWriter._instances += 1
        self._component = f"memtrace_otel.content_writer/{ContentWriter._instances - 1}"
        try:
            self._register_metric(meter_provider)
        except Exception:
            internal_error("content.metric")
        _register_exit(self)
        reinit_after_fork(self)

    def ref(self, name: str) -> str:
        """The URL of object ``name`` in this store (what ``memtrace.variable.value_ref`` holds)."""
        return f"{self.url}/{name}"

    def put(self, name: str, data: bytes, store: str | None) -> None:
        """Queue one object for writing; drops (counted) when the queue is full or stopped.

        The app's thread only appends: the writer thread wakes when a batch is waiting (else on
        its timer, every :data:`_INTERVAL` seconds) and does the rest, the store's folder name
        and the manifest included."""
        if (self.pack or name in self._written) and (store, name) in self._listed:
            return  # written and listed for this store already: nothing to do
        queue = self._queue
        if self._stopped or len(queue) >= self._max:
            self._drop(1, "its queue is full" if not self._stopped else "it is shut down")
            return
        queue.append((name, data, store, time.time_ns()))
        if self._thread is None:
            self._start()
        elif len(queue) >= _BATCH and not self._wake.is_set():
            self._wake.set()  # once: a woken writer drains the whole queue, later puts included

    def _drop(self, count: int, why: str) -> None:
        self.dropped += count
        if not self._failed_once:
            self._failed_once = True
            _log.warning(
                "memtrace-otel: content store %s: an object was not written because %s; spans "
                "keep their references, the batch job abstains where it needs the missing "
                "values. Drops are counted in the %s metric.",
                self.url,
                why,
                METRIC_CONTENT_DROPPED,
            )

    def _start(self) -> None:
        with self._idle:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._run, name="memtrace-content-writer", daemon=True)
            self._thread = thread
        thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(_INTERVAL)
            self._wake.clear()
            if not self._queue:
                if self._stopped:
                    return
                continue
            self._drain()

    def _drain(self) -> None:
        while self._queue:
            batch: list[tuple[str, bytes, str | None, int]] = []
            with self._idle:
                while self._queue and len(batch) < _BATCH:
                    batch.append(self._queue.popleft())
                self._busy += len(batch)
            try:
                self._write(batch)
            except Exception:
                internal_error("content.write")
            finally:
                with self._idle:
                    self._busy -= len(batch)
                    self._idle.notify_all()

    def _write(self, batch: list[tuple[str, bytes, str | None, int]]) -> None:
        if self.pack:
            self._write_packs(batch)
            return
        prefix = self._root + "/"
        written, listed_already = self._written, self._listed
        fresh: dict[str, bytes] = {}
        for name, data, _, _ in batch:
            if name not in written:
                fresh[prefix + name] = data
        failed = self._store_objects(fresh) if fresh else _NO_PATHS
        # Per store: the (store, name) keys to remember once listed, and the manifest lines.
        listed: dict[str | None, tuple[list[tuple[str | None, str]], list[str]]] = {}
        done = 0
        for name, _data, store, when in batch:
            if name not in written:
                if failed and prefix + name in failed:
                    continue
                written[name] = None
            done += 1
            key = (store, name)
            if key not in listed_already:
                entries = listed.get(store)
                if entries is None:
                    entries = listed[store] = ([], [])
                entries[0].append(key)
                # Object names are [a-z0-9/] (object_name): formatted, no JSON escaping to do.
                entries[1].append(f'{{"object":"{name}","time":{when}}}\n')
        self.written += done
        _trim(written)
        for store, (keys, lines) in listed.items():
            self._seq += 1
            folder = store_key(store)
            part = f"{prefix}{MANIFESTS}/{folder}/{time.time_ns()}-{os.getpid()}-{self._seq}.jsonl"
            try:
                self._put_one(part, "".join(lines).encode("utf-8"))
            except Exception as exc:
                # The objects exist but no manifest names them: erase cannot find them.
                self._drop(len(keys), f"its manifest could not be written ({exc})")
                continue
            listed_already.update(dict.fromkeys(keys))
        _trim(listed_already)

    def _write_packs(self, batch: list[tuple[str, bytes, str | None, int]]) -> None:
        """Each store's new objects of ``batch`` as one pack, then the manifest parts naming
        them (pack, offset, size); a store's pack holds every object it refers to (another
        store's copy may be erased with it), so erasing a store deletes its packs whole."""
        prefix = self._root + "/"
        listed_already = self._listed
        stores: dict[str | None, tuple[list[tuple[str | None, str]], list[bytes], list[str]]] = {}
        taken: set[tuple[str | None, str]] = set()
        for name, data, store, when in batch:
            key = (store, name)
            if key in listed_already or key in taken:
                continue  # listed before, or twice in one batch
            taken.add(key)
            entry = stores.get(store)
            if entry is None:
                entry = stores[store] = ([], [], [])
            entry[0].append(key)
            entry[1].append(data)
            entry[2].append(f'"object":"{name}","time":{when}')
        packs: dict[str, bytes] = {}
        manifests: dict[str, tuple[str, list[tuple[str | None, str]]]] = {}
        pid = os.getpid()
        for store, (keys, chunks, heads) in stores.items():
            self._seq += 1
            folder = store_key(store)
            part = f"{time.time_ns()}-{pid}-{self._seq}"
            pack = f"{PACKS}/{folder}/{part}.pack"
            lines = []
            offset = 0
            for head, data in zip(heads, chunks, strict=True):
                size = len(data)
                lines.append(f'{{{head},"pack":"{pack}","offset":{offset},"size":{size}}}\n')
                offset += size
            packs[prefix + pack] = b"".join(chunks)
            manifest = f"{prefix}{MANIFESTS}/{folder}/{part}.jsonl"
            manifests[manifest] = ("".join(lines), keys)
        failed = self._store_objects(packs) if packs else _NO_PATHS
        written = 0
        for (manifest, (body, keys)), pack_path in zip(manifests.items(), packs, strict=True):
            if failed and pack_path in failed:
                self._drop(len(keys) - 1, "its pack could not be written")  # 1 counted already
                continue
            try:
                self._put_one(manifest, body.encode("utf-8"))
            except Exception as exc:
                # The pack exists but no manifest names it: no reader can find its objects.
                self._drop(len(keys), f"its manifest could not be written ({exc})")
                continue
            written += len(keys)
            listed_already.update(dict.fromkeys(keys))
        self.written += written
        _trim(listed_already)

    def _store_objects(self, objects: dict[str, bytes]) -> set[str]:
        """Write ``objects`` (path: bytes) with the store's cheapest call; the paths that failed.

        A local or in-memory store is written object by object without fsspec's per-file
        machinery (:func:`_direct_writer`); any other filesystem gets one ``fs.pipe`` call (s3fs,
        gcsfs and adlfs upload its objects concurrently), object by object if that fails."""
        direct = self._direct
        if direct is None:
            try:
                self._fs.pipe(objects)
            except Exception:
                return self._one_by_one(objects)
            return _NO_PATHS
        failed: set[str] = set()
        for path, data in objects.items():
            try:
                direct(path, data)
            except Exception as exc:  # any filesystem's error: counted, never raised
                self._drop(1, f"the write failed ({type(exc).__name__}: {exc})")
                failed.add(path)
        return failed

    def _put_one(self, path: str, data: bytes) -> None:
        direct = self._direct
        if direct is not None:
            direct(path, data)
        else:
            self._pipe(path, data)

    def _one_by_one(self, objects: dict[str, bytes]) -> set[str]:
        """Write ``objects`` one at a time (after a batch failed); the paths that failed."""
        failed: set[str] = set()
        for path, data in objects.items():
            try:
                self._pipe(path, data)
            except Exception as exc:  # any filesystem's error: counted, never raised
                self._drop(1, f"the write failed ({type(exc).__name__}: {exc})")
                failed.add(path)
        return failed

    def _pipe(self, path: str, data: bytes) -> None:
        try:
            self._fs.pipe_file(path, data)
        except FileNotFoundError:  # a local or mounted store: its folders are made on demand
            self._fs.makedirs(path.rpartition("/")[0], exist_ok=True)
            self._fs.pipe_file(path, data)

    def flush(self, timeout_millis: float = DEFAULT_SHUTDOWN_MILLIS) -> bool:
        """Wait until every queued object is written; ``False`` when the budget ran out."""
        if self._thread is None:
            return not self._queue
        deadline = time.monotonic() + timeout_millis / 1000
        self._wake.set()
        with self._idle:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.05))
                self._wake.set()
        return True

    def shutdown(self, timeout_millis: float = DEFAULT_SHUTDOWN_MILLIS) -> None:
        """Flush within the budget, stop the thread; what is left is counted as dropped."""
        if self._stopped:
            return
        done = self.flush(timeout_millis)
        self._stopped = True
        self._wake.set()
        if not done:
            left = len(self._queue)
            self._queue.clear()
            self._drop(left, f"shutdown's {timeout_millis:.0f} ms budget ran out")
        if self.dropped:
            _log.warning(
                "memtrace-otel: content store %s: %d object(s) dropped in this process",
                self.url,
                self.dropped,
            )

    def _reinit_after_fork(self) -> None:
        self._queue = deque()
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._busy = 0
        self._thread = None

    def _register_metric(self, meter_provider: Any) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation, get_meter_provider

        from memtrace_otel._version import __version__

        attributes = {METRIC_OTEL_COMPONENT_NAME: self._component}
        ref = weakref.ref(self)

        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            writer = ref()
            return [Observation(writer.dropped if writer is not None else 0, attributes)]

        meter = (meter_provider or get_meter_provider()).get_meter(
            "memtrace_otel", __version__, attributes=attributes
        )
        meter.create_observable_counter(
            METRIC_CONTENT_DROPPED,
            callbacks=[observe],
            unit="{object}",
            description="Content objects REFERENCE capture could not write to its content store.",
        )


_NO_PATHS: Final[set[str]] = set()
_FLAGS: Final = (
    os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
)
_FOLDERS: Final = 4096
"""Folders a local store's writer remembers as made (objects share one; manifests one a store)."""


class _LocalObjects:
    """Writes an object to a local (or mounted) store: ``os.open``/``os.write``/``os.close``, its
    folder made once (remembered), where fsspec's ``pipe_file`` opens a file object through
    several layers for each. Raises what the OS raises (the writer counts it as a drop)."""

    __slots__ = ("_folders",)

    def __init__(self) -> None:
        self._folders: set[str] = set()

    def __call__(self, path: str, data: bytes) -> None:
        folder = path.rpartition("/")[0]
        folders = self._folders
        if folder not in folders:
            os.makedirs(folder, exist_ok=True)
            if len(folders) >= _FOLDERS:
                folders.clear()
            folders.add(folder)
        try:
            fd = os.open(path, _FLAGS, 0o666)
        except FileNotFoundError:  # its folder was removed since: made again
            os.makedirs(folder, exist_ok=True)
            fd = os.open(path, _FLAGS, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def _direct_writer(fs: Any, root: str) -> Any:
    """A cheaper way than ``fs.pipe_file`` to write one object, for the filesystems whose
    semantics it keeps: fsspec's local filesystem (:class:`_LocalObjects`) and its in-memory one
    (the same ``MemoryFile`` commit its ``pipe_file`` ends in, without the parent checks, made
    once here: the root must not be a file). ``None`` for any other filesystem."""
    try:
        from fsspec.implementations.local import LocalFileSystem
        from fsspec.implementations.memory import MemoryFile, MemoryFileSystem
    except ImportError:  # pragma: no cover - an fsspec without them
        return None
    kind = type(fs)
    if kind is LocalFileSystem:
        return _LocalObjects()
    if kind is MemoryFileSystem:
        try:
            if root and fs.isfile(root):
                return None  # every write must fail, as pipe_file's parent check makes it
        except Exception:
            return None

        import io
        from datetime import UTC, datetime

        store = fs.store
        utc = UTC
        new, bytes_io = MemoryFile.__new__, io.BytesIO.__init__

        def commit(path: str, data: bytes) -> None:
            # What MemoryFile(fs, path, data).commit() leaves in the store (its BytesIO of the
            # data, fs, path, created, modified), with one clock read where it makes three.
            file = new(MemoryFile)
            bytes_io(file, data)
            file.fs, file.path = fs, path
            file.created = file.modified = datetime.now(tz=utc)
            store[path] = file

        return commit
    return None


def _trim(seen: dict[Any, None]) -> None:
    """Forget the oldest keys of ``seen`` beyond :data:`_REMEMBERED` (once a batch)."""
    over = len(seen) - _REMEMBERED
    if over > 0:
        for key in list(itertools.islice(seen, over)):
            del seen[key]


_writers: dict[str, ContentWriter] = {}
_writers_lock = threading.Lock()
_exit_list: list[weakref.ref[ContentWriter]] = []


def _register_exit(writer: ContentWriter) -> None:
    if not _exit_list:
        atexit.register(_shutdown_all)
    _exit_list.append(weakref.ref(writer))


def _shutdown_all() -> None:
    for ref in _exit_list:
        writer = ref()
        if writer is not None:
            try:
                writer.shutdown()
            except Exception:
                internal_error("content.shutdown")


def _reset_writers_lock() -> None:
    global _writers_lock
    _writers_lock = threading.Lock()


on_fork_in_child(_reset_writers_lock)


def content_writer(url: str, *, pack: bool = False) -> ContentWriter:
    """The process's one writer of store ``url`` (every ``CaptureConfig`` naming it shares it;
    one for packed writes, one for objects).

    Raises:
        ValueError: fsspec is missing or the URL's protocol is unknown.
    """
    key = url.rstrip("/")
    slot = f"{key} packed" if pack else key
    with _writers_lock:
        writer = _writers.get(slot)
        if writer is None or writer._stopped:
            writer = _writers[slot] = ContentWriter(key, pack=pack)
        return writer


def flush_content(timeout_millis: float = DEFAULT_SHUTDOWN_MILLIS) -> bool:
    """Flush every content writer of the process within one budget (tests, before a fork)."""
    deadline = time.monotonic() + timeout_millis / 1000
    ok = True
    for writer in list(_writers.values()):
        left = max(0.0, deadline - time.monotonic()) * 1000
        ok = writer.flush(left) and ok
    return ok


__all__ = [
    "PACKS",
    "ContentWriter",
    "Digester",
    "Pseudonymizer",
    "content_writer",
    "digest_of_name",
    "digest_with",
    "flush_content",
    "key_id",
    "looks_personal",
    "object_name",
    "open_store",
    "parse_key",
    "split_digest",
    "store_key",
]
