"""Resolve content references (contract v0.3 section 6) back into the records, in ``sources``.

Spans made under ``REFERENCE`` capture carry content store URLs where values would be:
``memtrace.variable.value_ref`` on variable events, ``content_ref`` inside
``memtrace.variable.meta``, ``memtrace.exception.message_ref`` on exception events,
``memtrace.feedback.expected_ref`` and ``memtrace.feedback.comment_ref`` on evaluation events,
and the upstream ``gen_ai.input.messages_ref``, ``gen_ai.output.messages_ref`` and
``gen_ai.system_instructions_ref`` on chat spans. :class:`ContentResolver` fetches each object
with the reader's own credentials (fsspec), verifies it against the digest its name carries
(never using one that does not match) and puts the value where a capturing run would have put
it, so the graph builder and attribution see the same records as with capture on and never
learn about stores.

A store erased with ``memtrace content erase --store ID`` leaves a tombstone: records of that
memory store are not resolved and :attr:`ContentStats.erased` names the store, so attribution
abstains saying so.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from memtrace_otel.errors import SourceError
from memtrace_otel.instrumentation._capture import META_CONTENT_REF
from memtrace_otel.instrumentation._content import (
    MANIFESTS,
    PACKS,
    TOMBSTONES,
    digest_of_name,
    digest_with,
    key_id,
    open_store,
    parse_key,
    split_digest,
    store_key,
)
from memtrace_otel.semconv import DIGEST_SHA256, EventRecord, SpanRecord
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv.env import ENV_MEMTRACE_DIGEST_KEY

_EVENT_REFS = {
    A.MEMTRACE_VARIABLE_VALUE_REF: A.MEMTRACE_VARIABLE_VALUE,
    A.MEMTRACE_EXCEPTION_MESSAGE_REF: A.EXCEPTION_MESSAGE,
    A.MEMTRACE_FEEDBACK_EXPECTED_REF: A.MEMTRACE_FEEDBACK_EXPECTED,
    A.MEMTRACE_FEEDBACK_COMMENT_REF: A.GEN_AI_EVALUATION_EXPLANATION,
}
_UPSTREAM_REFS = {
    A.GEN_AI_INPUT_MESSAGES_REF: A.GEN_AI_INPUT_MESSAGES,
    A.GEN_AI_OUTPUT_MESSAGES_REF: A.GEN_AI_OUTPUT_MESSAGES,
    A.GEN_AI_SYSTEM_INSTRUCTIONS_REF: A.GEN_AI_SYSTEM_INSTRUCTIONS,
}
_UPSTREAM_KEYS = frozenset(_UPSTREAM_REFS)
_EVENT_REF_KEYS = frozenset(_EVENT_REFS)


_PACKS_KEPT = 16
"""Packs a resolver keeps read (a pack is one writer batch: at most 256 objects)."""


class ContentStoreError(SourceError):
    """A content store the references name could not be read at all (credentials, network)."""


@dataclass
class ContentStats:
    """What resolving content references did."""

    resolved: int = 0
    """Objects fetched, verified and used."""
    upstream: int = 0
    """Objects of upstream ``gen_ai.*_ref`` attributes used (named by the uploader, not by a
    digest: they cannot be verified)."""
    missing: list[str] = field(default_factory=list)
    """Objects the references name that the store does not hold (first 100 names)."""
    missing_count: int = 0
    mismatched: int = 0
    """Objects whose bytes do not match the digest their name carries: not used."""
    unverifiable: int = 0
    """Keyed objects whose key (by key id) this job does not hold: not used."""
    erased: dict[str, str] = field(default_factory=dict)
    """Memory store id -> when its content was erased (its tombstone)."""
    failed_stores: dict[str, int] = field(default_factory=dict)
    """Memory store id -> objects of it missing, mismatched or unverifiable. A reader should
    use none of such a store's resolved values (one missing value among resolved ones can
    mislead attribution): it is then attributed as with capture off."""

    @property
    def any(self) -> bool:
        """Whether any reference was met."""
        return bool(
            self.resolved
            or self.upstream
            or self.missing_count
            or self.mismatched
            or self.unverifiable
            or self.erased
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "resolved": self.resolved,
            "upstream": self.upstream,
            "missing": self.missing_count,
            "missing_objects": list(self.missing),
            "mismatched": self.mismatched,
            "unverifiable": self.unverifiable,
            "erased_stores": dict(self.erased),
            "incomplete_stores": dict(self.failed_stores),
        }

    def fail(self, store: str | None) -> None:
        """Count one object of ``store`` that could not be used."""
        key = store or ""
        self.failed_stores[key] = self.failed_stores.get(key, 0) + 1

    def merge(self, other: ContentStats) -> None:
        """Add what another resolver did (a partition's, a scan's) to these counts. An object two
        partitions read counts in both (a single reader counts a missing or failed one once)."""
        self.resolved += other.resolved
        self.upstream += other.upstream
        self.missing += [n for n in other.missing if n not in self.missing][
            : max(0, 100 - len(self.missing))
        ]
        self.missing_count += other.missing_count
        self.mismatched += other.mismatched
        self.unverifiable += other.unverifiable
        self.erased.update(other.erased)
        for store, count in other.failed_stores.items():
            self.failed_stores[store] = self.failed_stores.get(store, 0) + count


class ContentResolver:
    """Fetches, verifies and puts back the content records refer to.

    Args:
        url: the content store to read (``--content``); references are mapped to it by their
            object names. ``None``: each reference's own location.
        key: the digest key (``MEMTRACE_DIGEST_KEY``), needed to verify keyed objects;
            ``None`` reads the environment.

    Raises:
        ValueError: fsspec is missing, the URL's protocol is unknown, or the key is too short.
    """

    def __init__(self, url: str | None = None, *, key: str | bytes | None = None) -> None:
        if key is None:
            key = os.environ.get(ENV_MEMTRACE_DIGEST_KEY) or None
        self.key = parse_key(key, source=ENV_MEMTRACE_DIGEST_KEY) if key else None
        self.url = url.rstrip("/") if url else None
        self.stats = ContentStats()
        self._stores: dict[str, tuple[Any, str]] = {}
        self._tombstones: dict[tuple[str, str], str | None] = {}
        self._cache: dict[str, str | None] = {}
        self._packed: dict[str, dict[str, tuple[str, int, int]]] = {}
        self._packs: dict[str, bytes] = {}
        if self.url is not None:
            self._store(self.url)  # a bad --content fails here, before any work

    def _store(self, root_url: str) -> tuple[Any, str]:
        store = self._stores.get(root_url)
        if store is None:
            try:
                store = self._stores[root_url] = open_store(root_url)
            except ValueError as exc:
                if root_url == self.url:
                    raise  # --content itself: a usage error, raised at construction
                raise ContentStoreError(
                    f"{exc} (named by a content reference; --content URL reads another store)"
                ) from None
        return store

    def resolve(self, record: SpanRecord) -> SpanRecord:
        """``record`` with every reference it carries resolved (itself when it has none)."""
        attrs = record.attributes
        if _UPSTREAM_KEYS.isdisjoint(attrs):
            for event in record.events:  # a loop, not any(): this runs for every record
                if _has_ref(event):
                    break
            else:
                return record
        upstream = [k for k in _UPSTREAM_REFS if k in attrs]
        store_id = attrs.get(A.GEN_AI_MEMORY_STORE_ID)
        store = str(store_id) if store_id else None
        new_attrs: dict[str, Any] | None = None
        for key in upstream:
            if _UPSTREAM_REFS[key] in attrs:
                continue
            text = self._fetch_upstream(str(attrs[key]), store)
            if text is not None:
                new_attrs = new_attrs if new_attrs is not None else dict(attrs)
                new_attrs[_UPSTREAM_REFS[key]] = text
        events = tuple(self._event(e, store) for e in record.events)
        changed = any(a is not b for a, b in zip(events, record.events, strict=True))
        if new_attrs is None and not changed:
            return record
        return replace(
            record,
            attributes=new_attrs if new_attrs is not None else attrs,
            events=events if changed else record.events,
        )

    def _event(self, event: EventRecord, store: str | None) -> EventRecord:
        attrs = event.attributes
        if not _has_ref(event):
            return event
        new = dict(attrs)
        for ref_key, value_key in _EVENT_REFS.items():
            ref = attrs.get(ref_key)
            if isinstance(ref, str) and value_key not in attrs:
                text = self._fetch(ref, store)
                if text is not None:
                    new[value_key] = text
        meta = attrs.get(A.MEMTRACE_VARIABLE_META)
        if isinstance(meta, str) and META_CONTENT_REF in meta:
            new_meta = self._meta(meta, store)
            if new_meta is not None:
                new[A.MEMTRACE_VARIABLE_META] = new_meta
        if new == attrs:
            return event
        return EventRecord(event.name, event.time_unix_nano, new)

    def _meta(self, meta: str, store: str | None) -> str | None:
        try:
            data = json.loads(meta)
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get(META_CONTENT_REF), str):
            return None
        text = self._fetch(data.pop(META_CONTENT_REF), store)
        if text is None:
            return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        try:
            content = json.loads(text)
        except ValueError:
            return None
        if isinstance(content, dict):
            data.update(content)
        return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    def _locate(self, ref: str) -> tuple[str, str, str] | None:
        """``(store root URL, object name, digest)`` of a reference; ``None`` if it names none."""
        found = digest_of_name(ref)
        if found is None:
            return None
        name, digest = found
        if self.url is not None:
            return self.url, name, digest
        root = ref.rstrip("/")[: -len(name)].rstrip("/")
        return root, name, digest

    def _erased(self, root: str, store: str | None) -> str | None:
        key = (root, store_key(store))
        if key not in self._tombstones:
            fs, path = self._store(root)
            tomb = f"{path}/{TOMBSTONES}/{key[1]}.json"
            when: str | None = None
            try:
                if fs.exists(tomb):
                    raw = json.loads(fs.cat_file(tomb))
                    when = str(raw.get("erased_at", "")) if isinstance(raw, dict) else ""
            except (OSError, ValueError):
                when = None
            self._tombstones[key] = when
        return self._tombstones[key]

    def _fetch(self, ref: str, store: str | None) -> str | None:
        located = self._locate(ref)
        if located is None:
            return None
        root, name, digest = located
        when = self._erased(root, store)
        if when is not None:
            self.stats.erased[store or ""] = when
            return None
        cache_key = f"{root}/{name}"
        if cache_key in self._cache:
            text = self._cache[cache_key]
            if text is not None:
                self.stats.resolved += 1
            else:
                self.stats.fail(store)
            return text
        data = self._read(root, name)
        text = None
        if data is not None:
            verdict = self._verify(digest, data)
            if verdict is True:
                text = data.decode("utf-8", "surrogatepass")
                self.stats.resolved += 1
            elif verdict is False:
                self.stats.mismatched += 1
            else:
                self.stats.unverifiable += 1
        if text is None:
            self.stats.fail(store)
        self._cache[cache_key] = text
        return text

    def _read(self, root: str, name: str) -> bytes | None:
        fs, path = self._store(root)
        try:
            index = self._packed.get(root)
            packed = index.get(name) if index else None
            if packed is None:
                try:
                    return _cat_file(fs, f"{path}/{name}")
                except FileNotFoundError:
                    packed = self._pack_index(root).get(name)
                    if packed is None:
                        raise
            pack, offset, size = packed
            data = self._pack(fs, f"{path}/{pack}")[offset : offset + size]
            if len(data) != size:
                raise FileNotFoundError(name)  # a cut pack: the object is gone
            return data
        except FileNotFoundError:
            self.stats.missing_count += 1
            if len(self.stats.missing) < 100:
                self.stats.missing.append(f"{root}/{name}")
            return None
        except Exception as exc:  # credentials, network: no object of this store can be read
            raise ContentStoreError(
                f"content store {root}: cannot read {name} ({type(exc).__name__}: {exc}); "
                "check the credentials fsspec uses for it, or give --content URL"
            ) from None

    def _pack(self, fs: Any, path: str) -> bytes:
        """A pack's bytes, read once (one request for all its objects); the last few kept."""
        data = self._packs.get(path)
        if data is None:
            if len(self._packs) >= _PACKS_KEPT:
                self._packs.clear()
            data = self._packs[path] = bytes(fs.cat_file(path))
        return data

    def _pack_index(self, root: str) -> dict[str, tuple[str, int, int]]:
        """Object name -> ``(pack, offset, size)`` from every manifest of store ``root``
        (packed writes, ``MEMTRACE_CONTENT_PACK``); read once, when an object is not found."""
        index = self._packed.get(root)
        if index is None:
            fs, path = self._store(root)
            index = self._packed[root] = {}
            for entries in _manifest_entries(fs, f"{path}/{MANIFESTS}").values():
                for entry in entries:
                    if entry.pack is not None:
                        index.setdefault(entry.name, (entry.pack, entry.offset, entry.size))
        return index

    def _verify(self, digest: str, data: bytes) -> bool | None:
        parts = split_digest(digest)
        if parts is None:
            return False
        prefix, kid, _ = parts
        if prefix == DIGEST_SHA256:
            import hashlib

            return digest == DIGEST_SHA256 + hashlib.sha256(data).hexdigest()
        key = self.key
        if key is None:
            return None
        if key_id(key) != kid:
            return None  # another key (rotated): cannot verify with ours
        return digest_with(prefix, key, data) == digest

    def _fetch_upstream(self, ref: str, store: str | None) -> str | None:
        candidates = [ref]
        if self.url is not None:
            candidates.insert(0, f"{self.url}/{ref.rstrip('/').rpartition('/')[2]}")
        for url in candidates:
            if "://" not in url and not os.path.isabs(url):
                continue
            root, _, name = url.rpartition("/")
            try:
                fs, path = self._store(root)
                data: bytes = fs.cat_file(f"{path}/{name}")
            except FileNotFoundError:
                continue
            except ValueError:
                continue
            except Exception as exc:
                raise ContentStoreError(
                    f"content store {root}: cannot read {name} ({type(exc).__name__}: {exc})"
                ) from None
            self.stats.upstream += 1
            return data.decode("utf-8", "replace")
        self.stats.missing_count += 1
        if len(self.stats.missing) < 100:
            self.stats.missing.append(ref)
        self.stats.fail(store)
        return None


def _cat_file(fs: Any, path: str) -> bytes:
    """``fs.cat_file(path)``; on the local filesystem a plain read (fsspec's own opens a file
    object of its own: some ten times the read of a small object)."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        with open(path, "rb") as handle:
            return handle.read()
    data: bytes = fs.cat_file(path)
    return data


def _has_ref(event: EventRecord) -> bool:
    attrs = event.attributes
    if not _EVENT_REF_KEYS.isdisjoint(attrs):
        return True
    meta = attrs.get(A.MEMTRACE_VARIABLE_META)
    return isinstance(meta, str) and META_CONTENT_REF in meta


def resolve_records(
    resolver: ContentResolver, records: list[SpanRecord], store_of: Callable[[SpanRecord], str]
) -> list[SpanRecord]:
    """``records`` with their references resolved by ``resolver``, except those of a store some
    object of which could not be used (missing, tampered with, keyed by another key): one
    missing value among resolved ones misleads attribution, so such a store keeps its references
    alone and is attributed as with capture off (structure decides, or it abstains).

    ``records`` must hold every record of each store it holds (the decision is per store);
    ``store_of`` gives a record's store as ``ContentStats.failed_stores`` keys it.
    """
    resolved = [resolver.resolve(record) for record in records]
    return keep_complete_stores(resolver.stats, records, resolved, store_of)


def keep_complete_stores(
    stats: ContentStats,
    originals: list[SpanRecord],
    resolved: list[SpanRecord],
    store_of: Callable[[SpanRecord], str],
) -> list[SpanRecord]:
    """``resolved``, each record of a store in ``stats.failed_stores`` put back as it was read
    (:func:`resolve_records`' rule; ``originals[i]`` is ``resolved[i]`` before resolving)."""
    failed = stats.failed_stores
    if not failed:
        return resolved
    return [
        original if new is not original and store_of(original) in failed else new
        for original, new in zip(originals, resolved, strict=True)
    ]


@dataclass
class EraseResult:
    """What :func:`erase_store` did."""

    store: str
    deleted: int = 0
    """Objects deleted: only the erased store referred to them."""
    kept_shared: int = 0
    """Objects the store referred to that another store (or a newer write) still refers to."""
    missing: int = 0
    """Objects the manifests named that were already gone."""
    manifests: int = 0
    """Manifest parts removed or rewritten."""
    tombstone: str | None = None
    """Where the tombstone was written (a full erase only)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "deleted": self.deleted,
            "kept_shared": self.kept_shared,
            "missing": self.missing,
            "manifests": self.manifests,
            "tombstone": self.tombstone,
        }


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


_REF_KEYS = (b'_ref"', b'_ref\\"')
"""How every reference key ends in a JSON Lines file (``memtrace.variable.value_ref``,
``gen_ai.input.messages_ref``, meta's ``content_ref`` inside an escaped JSON string, ...);
``memtrace.variable.ref`` and meta's ``source_refs`` do not end so."""


class ReferenceKinds(NamedTuple):
    """Which content references a byte scan of trace files found (see :func:`reference_kinds`)."""

    memtrace: bool
    """``memtrace.*`` ones: ``value_ref``, exception and feedback refs, meta's ``content_ref``."""
    upstream: bool
    """Upstream GenAI ones: ``gen_ai.input.messages_ref`` and the like (the scan stops at the
    first, so ``memtrace`` then says only what was met before it)."""


def reference_kinds(paths: list[str], chunk: int = 1 << 20) -> ReferenceKinds:
    """Which content references the files ``paths`` may carry: a byte scan, no parse.

    A streamed run (``memtrace attribute``'s default on large exports) resolves references
    store by store, and need not look for them when there are none. A false positive costs
    only the look.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.jsonl").write_text('{"key": "memtrace.variable.ref"}')
    >>> reference_kinds([str(d / "a.jsonl")])
    ReferenceKinds(memtrace=False, upstream=False)
    >>> _ = (d / "b.jsonl").write_text('{"key": "memtrace.variable.value_ref"}')
    >>> _ = (d / "c.jsonl").write_text('{"key": "gen_ai.input.messages_ref"}')
    >>> reference_kinds([str(d / "a.jsonl"), str(d / "b.jsonl")])
    ReferenceKinds(memtrace=True, upstream=False)
    >>> reference_kinds([str(d / "c.jsonl")])
    ReferenceKinds(memtrace=False, upstream=True)
    """
    longest = max(len(k) for k in _REF_KEYS)
    overlap = longest - 1 + len(_UPSTREAM_STEMS[1])  # a key cut by a block, and its stem
    memtrace = upstream = False
    for path in paths:
        with open(path, "rb") as handle:
            tail = b""
            while block := handle.read(chunk):
                window = tail + block
                # the keys that end in the new block (those of the tail alone were seen)
                for match in _REF_KEY.finditer(window, max(0, len(tail) - longest + 1)):
                    stem = window[max(0, match.start() - 12) : match.start()]
                    if stem.endswith(_UPSTREAM_STEMS):
                        upstream = True
                        return ReferenceKinds(memtrace, upstream)  # in memory, whatever else
                    memtrace = True
                tail = window[-overlap:]
    return ReferenceKinds(memtrace, upstream)


_UPSTREAM_STEMS = (b"messages", b"instructions")
"""What the upstream reference keys (``gen_ai.*_messages_ref``, ``gen_ai.system_instructions_ref``)
end with before their ``_ref``; no ``memtrace.*`` one ends so."""

_REF_KEY = re.compile(b"|".join(re.escape(key) for key in _REF_KEYS))


def parse_age(text: str) -> float:
    """Seconds of an age such as ``30d``, ``12h``, ``90m``, ``3600s`` or ``2w``.

    >>> parse_age("30d"), parse_age("90m")
    (2592000.0, 5400.0)

    Raises:
        ValueError: not a positive number followed by s, m, h, d or w.
    """
    value = text.strip().lower()
    unit = value[-1:] if value[-1:] in _UNITS else "s"
    number = value[:-1] if value[-1:] in _UNITS else value
    try:
        seconds = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"invalid age {text!r}: expected e.g. 30d, 12h, 90m") from None
    if not seconds > 0:
        raise ValueError(f"invalid age {text!r}: expected a positive age")
    return seconds


class _Entry(NamedTuple):
    """One manifest line: an object the store refers to, when, and where it is packed
    (``pack`` ``None``: its own object, ``objects/...``)."""

    name: str
    time: int
    pack: str | None = None
    offset: int = 0
    size: int = 0

    def line(self) -> str:
        item: dict[str, Any] = {"object": self.name, "time": self.time}
        if self.pack is not None:
            item.update(pack=self.pack, offset=self.offset, size=self.size)
        return json.dumps(item, separators=(",", ":")) + "\n"


def _manifest_entries(fs: Any, folder: str) -> dict[str, list[_Entry]]:
    """Manifest part path -> its entries (bad lines skipped)."""
    parts: dict[str, list[_Entry]] = {}
    try:
        paths = [p for p in fs.find(folder) if str(p).endswith(".jsonl")]
    except FileNotFoundError:
        return parts
    for path in paths:
        entries: list[_Entry] = []
        for line in fs.cat_file(path).decode("utf-8", "replace").splitlines():
            try:
                item = json.loads(line)
                pack = item.get("pack")
                if pack is None:
                    entries.append(_Entry(str(item["object"]), int(item["time"])))
                    continue
                offset, size = int(item["offset"]), int(item["size"])
                if not (isinstance(pack, str) and pack.startswith(f"{PACKS}/")):
                    continue
                if offset < 0 or size < 0 or ".." in pack.split("/"):
                    continue
                entries.append(_Entry(str(item["object"]), int(item["time"]), pack, offset, size))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        parts[str(path)] = entries
    return parts


def store_pseudonym(identifier: str) -> str:
    """``identifier`` as ``CaptureConfig(pseudonymize_ids=True)`` sends it, with the key in
    ``MEMTRACE_DIGEST_KEY`` (``memtrace content pseudonym``); as it is without a key.

    Raises:
        ValueError: the key is shorter than 16 bytes.
    """
    import os

    from memtrace_otel.instrumentation._content import Pseudonymizer, parse_key
    from memtrace_otel.semconv.env import ENV_MEMTRACE_DIGEST_KEY

    raw = os.environ.get(ENV_MEMTRACE_DIGEST_KEY, "").strip()
    if not raw:
        return identifier
    return Pseudonymizer(parse_key(raw, source=ENV_MEMTRACE_DIGEST_KEY)).plain(identifier)


def erase_store(
    url: str, store: str, *, older_than: float | None = None, now_ns: int | None = None
) -> EraseResult:
    """Delete from content store ``url`` the objects only memory store ``store`` refers to.

    The manifests decide: an object another store's manifest names stays (counted as shared).
    Without ``older_than`` every object of the store goes, its manifests with them, and a
    tombstone (``tombstones/<store>.json``) makes later attribution of that store abstain
    saying its content was erased. With ``older_than`` (seconds) only entries older than that
    go, the manifests keep the newer ones, and no tombstone is written.

    Raises:
        ContentStoreError: the store cannot be read or written.
        ValueError: fsspec is missing or the URL's protocol is unknown.
    """
    import time as _time

    fs, root = open_store(url)
    now = _time.time_ns() if now_ns is None else now_ns
    cutoff = None if older_than is None else now - int(older_than * 1e9)
    pseudonym = store_pseudonym(store)
    if pseudonym != store and fs.exists(f"{root}/{MANIFESTS}/{store_key(pseudonym)}"):
        store = pseudonym  # written with pseudonymised identifiers: its manifests go by it
    key = store_key(store)
    result = EraseResult(store=store)
    try:
        everything = _manifest_entries(fs, f"{root}/{MANIFESTS}")
        mine_prefix = f"{root}/{MANIFESTS}/{key}/".lstrip("/")
        selected: set[str] = set()
        kept: set[str] = set()
        packed: dict[str, str] = {}  # erased name -> the pack of the store's that holds it
        rewrites: dict[str, list[_Entry]] = {}
        for path, entries in everything.items():
            if not path.lstrip("/").startswith(mine_prefix):
                kept.update(entry.name for entry in entries)
                continue
            # A pack goes whole: with its newest entry (a pack is one batch: <= 0.25 s apart).
            newest: dict[str, int] = {}
            for entry in entries:
                if entry.pack is not None:
                    newest[entry.pack] = max(newest.get(entry.pack, entry.time), entry.time)
            newer = []
            for entry in entries:
                written = entry.time if entry.pack is None else newest[entry.pack]
                if cutoff is not None and written >= cutoff:
                    newer.append(entry)
                    continue
                selected.add(entry.name)
                if entry.pack is not None:
                    packed[entry.name] = entry.pack
            kept.update(entry.name for entry in newer)
            rewrites[path] = newer
        doomed = set(packed.values())
        present = {pack for pack in doomed if fs.exists(f"{root}/{pack}")}
        for name in sorted(selected):
            if name in kept:
                result.kept_shared += 1
                continue
            target = f"{root}/{name}"
            if fs.exists(target):
                fs.rm_file(target)
                result.deleted += 1
            elif packed.get(name) in present:
                result.deleted += 1  # with its pack, below
            else:
                result.missing += 1
        for pack in sorted(present):
            fs.rm_file(f"{root}/{pack}")
        for path, newer in rewrites.items():
            if newer:
                body = "".join(entry.line() for entry in newer)
                fs.pipe_file(path, body.encode("utf-8"))
            else:
                fs.rm_file(path)
            result.manifests += 1
        if cutoff is None:
            import datetime as dt

            tomb = f"{root}/{TOMBSTONES}/{key}.json"
            when = dt.datetime.fromtimestamp(now / 1e9, dt.UTC).isoformat(timespec="seconds")
            fs.makedirs(tomb.rpartition("/")[0], exist_ok=True)
            fs.pipe_file(
                tomb,
                json.dumps(
                    {"store": store, "erased_at": when, "objects_deleted": result.deleted}
                ).encode("utf-8"),
            )
            result.tombstone = tomb
    except (FileNotFoundError, ValueError):
        raise
    except Exception as exc:
        raise ContentStoreError(f"content store {url}: {type(exc).__name__}: {exc}") from None
    return result


__all__ = [
    "ContentResolver",
    "ContentStats",
    "ContentStoreError",
    "EraseResult",
    "erase_store",
    "parse_age",
]
