"""REFERENCE capture (contract v0.3 section 6): values go to a content store, spans carry refs.

Real parts: the OTel SDK, fsspec's local (``file://``) and memory (``memory://``) filesystems,
the OTLP JSON Lines exporter, the batch job and the CLI.
"""

from __future__ import annotations

import json
import logging
import random
import string
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.attribution import EvidenceMethod
from memtrace_otel.cli import main
from memtrace_otel.instrumentation import CaptureConfig, MemTracer, WriterRegistry, send_feedback
from memtrace_otel.instrumentation._capture import META_CONTENT_REF, redact_pii
from memtrace_otel.instrumentation._content import ContentWriter, digest_of_name, key_id
from memtrace_otel.job import run_batch
from memtrace_otel.semconv import Category
from memtrace_otel.semconv import attributes as A
from memtrace_otel.semconv import env as E
from memtrace_otel.sources import ContentResolver, erase_store, open_source
from tests._pipeline import EXPECTED, write_workload

KEY = "k" * 32


def _store_url(tmp_path: Path) -> str:
    return (tmp_path / "content").as_uri()


def _memory_url() -> str:
    return f"memory://content-{uuid.uuid4().hex}"


def _flush(capture: CaptureConfig) -> None:
    writer = capture.content_writer
    assert writer is not None
    assert writer.flush(10_000)


def _tracer(capture: CaptureConfig) -> tuple[MemTracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mt = MemTracer(
        tracer_provider=provider,
        system="test",
        store_id="user-ana",
        capture=capture,
        registry=WriterRegistry(),
    )
    return mt, exporter


def _events(exporter: InMemorySpanExporter, name: str = A.MEMTRACE_VARIABLE_EVENT) -> list[Any]:
    return [e for s in exporter.get_finished_spans() for e in s.events if e.name == name]


# --- capture --------------------------------------------------------------------------------


def test_reference_events_carry_a_ref_to_a_verified_object_and_no_value() -> None:
    url = _memory_url()
    capture = CaptureConfig(mode="REFERENCE", content_url=url)
    mt, exporter = _tracer(capture)
    with mt.extract("test.extract", inputs=[]) as op:
        op.output(
            mt.variable(
                "fact:1",
                "Ana moved to Porto last May",
                category="memory",
                meta={"source_refs": ["msg:1@1"], "speaker": "Ana Sousa", "turn": 3},
            )
        )
    _flush(capture)
    (event,) = _events(exporter)
    attrs = dict(event.attributes)
    assert A.MEMTRACE_VARIABLE_VALUE not in attrs
    ref = attrs[A.MEMTRACE_VARIABLE_VALUE_REF]
    assert ref.startswith(url + "/objects/sha256/")
    fs = fsspec.filesystem("memory")
    assert fs.cat_file(ref.removeprefix("memory://")) == b"Ana moved to Porto last May"
    # The name verifies the object: it is the digest of the bytes stored.
    assert digest_of_name(ref)[1] == attrs[A.MEMTRACE_VARIABLE_DIGEST]
    meta = json.loads(attrs[A.MEMTRACE_VARIABLE_META])
    assert meta["source_refs"] == ["msg:1@1"] and meta["turn"] == 3  # structure stays inline
    assert "speaker" not in meta and "Ana Sousa" not in attrs[A.MEMTRACE_VARIABLE_META]
    stored = json.loads(fs.cat_file(meta[META_CONTENT_REF].removeprefix("memory://")))
    assert stored == {"speaker": "Ana Sousa"}
    # The store's manifest names both objects, with their times.
    manifests = fs.find(url.removeprefix("memory://") + "/manifests/user-ana")
    names = {json.loads(line)["object"] for m in manifests for line in fs.cat_file(m).splitlines()}
    assert names == {digest_of_name(ref)[0], digest_of_name(meta[META_CONTENT_REF])[0]}


def test_reference_covers_prompts_context_exceptions_and_feedback() -> None:
    url = _memory_url()
    capture = CaptureConfig(mode="REFERENCE", content_url=url)
    mt, exporter = _tracer(capture)
    with mt.generate("test.answer", inputs=[]) as op:
        op.output(mt.variable("ctx:1", "context: Ana lives in Porto", category="context"))
        op.output(mt.variable("p:1", "She lives in Porto, Portugal", category="prediction"))
    message = "cannot merge 'Ana lives in Porto' with 'Ana lives abroad'"
    with pytest.raises(ValueError), mt.update("test.merge", inputs=[]):
        raise ValueError(message)  # a variable: the frames show source lines, not values
    provider = TracerProvider()
    feedback_exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(feedback_exporter))
    send_feedback(
        case_id="case-1",
        correct=False,
        expected="Porto, in the north of Portugal",
        comment="the assistant forgot my sister moved",
        tracer_provider=provider,
        capture=capture,
    )
    _flush(capture)
    for event in _events(exporter):
        assert A.MEMTRACE_VARIABLE_VALUE not in event.attributes
        assert event.attributes[A.MEMTRACE_VARIABLE_VALUE_REF].startswith(url)
    (exc,) = _events(exporter, A.EXCEPTION_EVENT)
    assert A.EXCEPTION_MESSAGE not in exc.attributes
    assert "Porto" not in exc.attributes[A.EXCEPTION_STACKTRACE]
    assert exc.attributes[A.MEMTRACE_EXCEPTION_MESSAGE_REF].startswith(url)
    (failed,) = [
        s
        for s in exporter.get_finished_spans()
        if s.events and s.events[0].name == A.EXCEPTION_EVENT
    ]
    assert "Porto" not in (failed.status.description or "")
    (evaluation,) = _events(feedback_exporter, A.GEN_AI_EVALUATION_RESULT_EVENT)
    assert A.MEMTRACE_FEEDBACK_EXPECTED not in evaluation.attributes
    assert A.GEN_AI_EVALUATION_EXPLANATION not in evaluation.attributes
    fs = fsspec.filesystem("memory")
    for key, text in (
        (A.MEMTRACE_FEEDBACK_EXPECTED_REF, b"Porto, in the north of Portugal"),
        (A.MEMTRACE_FEEDBACK_COMMENT_REF, b"the assistant forgot my sister moved"),
        (A.MEMTRACE_EXCEPTION_MESSAGE_REF, None),
    ):
        attrs = exc.attributes if key == A.MEMTRACE_EXCEPTION_MESSAGE_REF else evaluation.attributes
        body = fs.cat_file(str(attrs[key]).removeprefix("memory://"))
        assert body == (text or b"cannot merge 'Ana lives in Porto' with 'Ana lives abroad'")


def test_reference_without_a_store_logs_once_and_records_no_content(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from memtrace_otel.instrumentation import _capture

    monkeypatch.delenv(E.ENV_MEMTRACE_CONTENT_URL, raising=False)
    monkeypatch.delenv(E.ENV_GENAI_UPLOAD_BASE_PATH, raising=False)
    monkeypatch.setenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, "REFERENCE")
    monkeypatch.setattr(_capture, "_no_store_logged", [])
    with caplog.at_level(logging.WARNING, "memtrace_otel"):
        first, second = CaptureConfig(), CaptureConfig()
    assert not first.reference and not first.captures_values and not second.captures_values
    assert first.record("Ana lives in Porto", Category.MEMORY) == (None, False)
    assert len([r for r in caplog.records if "REFERENCE" in r.getMessage()]) == 1


def test_the_upstream_upload_base_path_is_honoured_when_ours_is_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = _memory_url()
    monkeypatch.delenv(E.ENV_MEMTRACE_CONTENT_URL, raising=False)
    monkeypatch.setenv(E.ENV_GENAI_UPLOAD_BASE_PATH, url)
    monkeypatch.setenv(E.ENV_MEMTRACE_CAPTURE_CONTENT, "REFERENCE")
    capture = CaptureConfig()
    assert capture.reference and capture.content_url == url
    ref, _ = capture.record("a prompt", Category.PROMPT)
    assert ref is not None and ref.startswith(url)


def test_an_unknown_store_protocol_raises_at_construction() -> None:
    with pytest.raises(ValueError, match="nosuchfs"):
        CaptureConfig(mode="REFERENCE", content_url="nosuchfs://bucket/x")


def test_an_unwritable_store_drops_counted_as_a_metric_and_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"  # the store's root is a file: every write fails
    blocker.write_text("a file where the store's folder should be")
    reader = InMemoryMetricReader()
    writer = ContentWriter(blocker.as_uri(), meter_provider=MeterProvider([reader]))
    for i in range(5):
        writer.put(f"objects/sha256/{i:064x}", b"x", "user-ana")  # never raises
    assert writer.flush(10_000)
    assert writer.dropped == 5 and writer.written == 0
    points = [
        p.value
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == A.METRIC_CONTENT_DROPPED
        for p in m.data.data_points
    ]
    assert points == [5]
    writer.shutdown(1000)


def test_a_local_store_whose_folders_are_removed_between_batches_is_written_again(
    tmp_path: Path,
) -> None:
    # The local writer remembers the folders it made; one removed by hand is made again.
    import shutil

    store = tmp_path / "content"
    writer = ContentWriter(store.as_uri())
    writer.put(f"objects/sha256/{1:064x}", b"one", "user-ana")
    assert writer.flush(10_000)
    shutil.rmtree(store)
    writer.put(f"objects/sha256/{2:064x}", b"two", "user-bo")
    assert writer.flush(10_000)
    assert writer.dropped == 0 and writer.written == 2
    assert (store / "objects" / "sha256" / f"{2:064x}").read_bytes() == b"two"
    (part,) = (store / "manifests" / "user-bo").iterdir()
    assert json.loads(part.read_text())["object"] == f"objects/sha256/{2:064x}"
    writer.shutdown(1000)


def test_a_memory_store_whose_root_is_a_file_drops_counted() -> None:
    url = _memory_url()
    fsspec.filesystem("memory").pipe_file(url, b"a file where the store's folder should be")
    writer = ContentWriter(url)
    for i in range(3):
        writer.put(f"objects/sha256/{i:064x}", b"x", None)
    assert writer.flush(10_000)
    assert writer.dropped == 3 and writer.written == 0
    writer.shutdown(1000)


def test_a_full_queue_drops_instead_of_blocking() -> None:
    writer = ContentWriter(_memory_url(), max_queue_size=2)
    writer._thread = object()  # type: ignore[assignment]  # no worker: the queue only fills
    for i in range(5):
        writer.put(f"objects/sha256/{i:064x}", b"x", None)
    assert writer.dropped == 3 and len(writer._queue) == 2
    writer._thread = None
    writer._stopped = True


# --- keyed digests ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, KEY], ids=["sha256", "keyed"])
def test_a_redacted_value_is_named_by_the_bytes_stored_and_an_unchanged_one_by_its_digest(
    key: str | None,
) -> None:
    # The object's name is the digest of what the store holds: the redacted text when the hook
    # changed it, the variable's own digest (computed once, reused) when it did not.
    url = _memory_url()
    capture = CaptureConfig(mode="REFERENCE", content_url=url, digest_key=key)
    mt, exporter = _tracer(capture)
    secret = "key sk-live-4eC39HqLyjWDarjtT1zdp7dcAb for Ana"
    with mt.extract("test.extract", inputs=[]) as op:
        op.output(mt.variable("fact:1", secret, category="memory"))
        op.output(mt.variable("fact:2", "Ana moved to Porto", category="memory"))
    _flush(capture)
    fs = fsspec.filesystem("memory")
    redacted, plain = (dict(e.attributes) for e in _events(exporter))
    stored = fs.cat_file(redacted[A.MEMTRACE_VARIABLE_VALUE_REF].removeprefix("memory://"))
    assert stored == b"key <api-key> for Ana"
    name_digest = digest_of_name(redacted[A.MEMTRACE_VARIABLE_VALUE_REF])[1]
    assert name_digest == capture.value_digest(stored.decode())
    assert redacted[A.MEMTRACE_VARIABLE_DIGEST] == capture.value_digest(secret) != name_digest
    assert (
        digest_of_name(plain[A.MEMTRACE_VARIABLE_VALUE_REF])[1] == plain[A.MEMTRACE_VARIABLE_DIGEST]
    )


@pytest.mark.parametrize("mode", ["REFERENCE", "PRODUCTION"])
def test_a_built_in_hook_runs_once_per_clean_value_and_a_users_hook_every_time(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A value a built-in hook left unchanged is known by its digest: the same value again (a
    # system prompt on every call) skips the hook and is recorded the same. A value the hook
    # changed, and every value of a hook the user gave, go through the hook every time.
    from memtrace_otel.instrumentation import _capture as C

    calls: list[str] = []

    def counting(text: str) -> str:
        calls.append(text)
        return C.redact_pii(text)

    def settings(hook: Any) -> dict[str, Any]:
        if mode == "REFERENCE":
            return {"mode": "REFERENCE", "content_url": _memory_url(), "redact": hook}
        return {"memory_mode": "PRODUCTION", "redact": hook}

    secret = "key sk-live-4eC39HqLyjWDarjtT1zdp7dcAb for Ana"
    values = ["Ana moved to Porto", secret, "Ana moved to Porto", secret, "Ana moved to Porto"]
    recorded: dict[bool, list[object]] = {}
    for built_in in (True, False):
        if built_in:  # counted as if it were one of the built-in hooks
            monkeypatch.setattr(C, "_PURE_HOOKS", frozenset([counting]))
        else:
            monkeypatch.setattr(C, "_PURE_HOOKS", frozenset([C.redact_secrets, C.redact_pii]))
        capture = CaptureConfig(**settings(counting))
        mt, exporter = _tracer(capture)
        calls.clear()
        for i, value in enumerate(values):
            with mt.extract("test.extract", inputs=[]) as op:
                op.output(mt.variable(f"fact:{i}", value, category="memory"))
        key = A.MEMTRACE_VARIABLE_VALUE_REF if mode == "REFERENCE" else A.MEMTRACE_VARIABLE_VALUE
        # (under REFERENCE each capture has a store of its own: the object's name is compared)
        recorded[built_in] = [str(e.attributes[key]).rpartition("/")[2] for e in _events(exporter)]
        expected_calls = [values[0], secret, secret] if built_in else values
        assert calls == expected_calls
        if capture.content_writer is not None:
            _flush(capture)
    assert recorded[True] == recorded[False]  # the same records either way
    first, redacted = recorded[True][:2]
    assert recorded[True] == [first, redacted, first, redacted, first] and first != redacted
    if mode == "PRODUCTION":
        assert redacted == "key <api-key> for Ana"


def test_the_clean_values_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from memtrace_otel.instrumentation import _capture as C

    monkeypatch.setattr(C, "_CLEAN_REMEMBERED", 8)
    capture = CaptureConfig(mode="REFERENCE", content_url=_memory_url())
    mt, _ = _tracer(capture)
    for i in range(20):
        with mt.extract("test.extract", inputs=[]) as op:
            op.output(
                mt.variable(f"fact:{i}", f"Ana moved to Porto in year {i}", category="memory")
            )
    assert 0 < len(capture._clean) <= 8
    _flush(capture)


def test_a_digest_key_keys_digests_and_object_names_with_its_key_id() -> None:
    url = _memory_url()
    keyed = CaptureConfig(mode="REFERENCE", content_url=url, digest_key=KEY)
    plain = CaptureConfig(mode="SPAN_AND_EVENT")
    rotated = CaptureConfig(mode="SPAN_AND_EVENT", digest_key="r" * 32)
    kid = key_id(KEY.encode())
    assert keyed.value_digest("Porto").startswith(f"b2k:{kid}:")
    assert plain.value_digest("Porto").startswith("sha256:")
    assert rotated.value_digest("Porto").split(":")[1] != kid  # a rotated key is told apart
    ref, _ = keyed.record("Porto", Category.MEMORY)
    assert ref is not None and f"/objects/b2k/{kid}/" in ref
    with pytest.raises(ValueError, match="at least 16"):
        CaptureConfig(digest_key="short")


# --- redaction --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "placeholder"),
    [
        ("sk-live-4eC39HqLyjWDarjtT1zdp7dcAb", "<api-key>"),
        ("sk-proj-Abc123Def456Ghi789Jkl012Mno345", "<api-key>"),
        ("Authorization: Bearer ya29.a0AfH6SMBx-long_opaque.token", "Bearer <token>"),
        ("AKIAIOSFODNN7EXAMPLE", "<aws-key>"),
        (
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "<jwt>",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo\n"
            "-----END RSA PRIVATE KEY-----",
            "<private-key>",
        ),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA", "<private-key>"),
        ("ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "<token>"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "<secret>"),
    ],
    ids=["openai", "openai-project", "bearer", "aws", "jwt", "pem", "pem-cut", "github", "named"],
)
def test_builtin_redaction_removes_each_kind_of_secret(secret: str, placeholder: str) -> None:
    text = f"remember this: {secret} thanks"
    redacted = redact_pii(text)
    assert placeholder in redacted
    body = secret.split()[-1] if placeholder != "<private-key>" else secret
    assert body not in redacted
    assert (redacted.startswith("remember this: ") and redacted.endswith(" thanks")) or (
        placeholder == "<private-key>"
    )


def test_a_github_fine_grained_token_is_redacted_without_gh_elsewhere() -> None:
    # "github_pat_" holds no "gh": its gate must look for it by name (it was missed).
    token = "github_pat_11ABCDEFG0123456789abcdefXYZijABCDEFGHIJ"
    assert redact_pii(f"my pat {token} ok") == "my pat <token> ok"


def test_redaction_near_its_needles_equals_the_patterns_own_substitution() -> None:
    # redact_secrets tries each pattern only next to the substrings it needs; on texts with
    # secrets packed, overlapping, cased and glued together, that is exactly pattern.sub.
    from memtrace_otel.instrumentation import _capture as C

    pieces = [
        "sk-live-4eC39HqLyjWDarjtT1zdp7dcAb",
        "xsk-abc_sk-live-4eC39HqLyjWDarjtT1zdp7dc",
        "API_KEY=abcdef123456",
        "ApiKey: 'zzzzzz99'",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG",
        "PASSWORD=hunter22x",
        "TOKEN  abcdefgh12345",
        "Authorization: Bearer ya29.a0AfH6SMBx-long",
        "basic dXNlcjpwYXNzd29yZA==",
        "AKIAIOSFODNN7EXAMPLE",
        "XAKIAIOSFODNN7EXAMPLE",
        "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "xoxb-123456789012-abcdef",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.dozjgNryP4J3jVmNHl0w5N",
        "keykeykey: secretsecret=tokentoken",
        "the key to Porto is a token of love",
    ]
    texts = [" ".join(pieces), "".join(pieces), ";".join(reversed(pieces)), *pieces]
    cases = [
        (C._JWT, C._JWT_AT, "<jwt>", False),
        (C._BEARER, C._BEARER_AT, r"\1\2<token>", True),
        (C._API_KEY, C._API_KEY_AT, "<api-key>", False),
        (C._VENDOR_TOKEN, C._VENDOR_AT, "<token>", False),
        (C._AWS_KEY, C._AWS_AT, "<aws-key>", False),
        (C._NAMED_SECRET, C._NAMED_AT, C._named_secret, True),
    ]
    for pattern, needles, repl, folded in cases:
        for text in texts:
            haystack = text.lower() if folded else text
            starts = C._starts(haystack, needles)
            assert C._sub_at(pattern, text, starts, repl) == pattern.sub(repl, text)


def _ungated(text: str) -> str:
    """Every pattern of :func:`redact_secrets` applied in turn, without its gates."""
    from memtrace_otel.instrumentation import _capture as C

    text = C._PEM.sub("<private-key>", text)
    text = C._JWT.sub("<jwt>", text)
    text = C._BEARER.sub(r"\1\2<token>", text)
    text = C._API_KEY.sub("<api-key>", text)
    text = C._VENDOR_TOKEN.sub("<token>", text)
    text = C._AWS_KEY.sub("<aws-key>", text)
    return C._NAMED_SECRET.sub(C._named_secret, text)


def _assert_gated_equals_ungated(secrets: list[str], prose: list[str]) -> None:
    """Each secret alone, before prose and inside it: redacted as by every pattern in turn."""
    from memtrace_otel.instrumentation import _capture as C

    for secret in secrets:
        for text in prose:
            for joined in (f"{text} {secret} {text}", f"{secret}{text}", secret):
                assert C.redact_secrets(joined) == _ungated(joined), joined
    for text in prose:
        assert C.redact_secrets(text) == _ungated(text) == text


@pytest.fixture(params=["finders", "substrings"])
def word_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways :func:`redact_secrets` tests for its words: by its finders' regexes (long text)
    and by substrings (short text), whatever the length of the text."""
    from memtrace_otel.instrumentation import _capture as C

    monkeypatch.setattr(C, "_SHORT", 0 if request.param == "finders" else 10**9)
    return str(request.param)


def test_redact_secrets_gated_equals_every_pattern_applied_in_turn(word_tests: str) -> None:
    # Its gates (one-character tests first) skip a pattern only where it cannot match: on each
    # secret alone, in prose with and without "-", "_", ":" and "=", it is every substitution.
    secrets = [
        "sk-live-4eC39HqLyjWDarjtT1zdp7dcAb",
        "sk_live_4eC39HqLyjWDarjtT1zdp7dcAb",
        "rk_test_4eC39HqLyjWDarjtT1zdp7dcAb",
        "Bearer ya29a0AfH6SMBxlong",
        "token abcdefgh12345",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "github_pat_11ABCDEFG0123456789abcdefXYZijABCDEFGHIJ",
        "xoxb-123456789012-abcdef",
        # every vendor prefix, and the other key prefixes (each finder must see them all)
        *(f"gh{c}_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8" for c in "pousr"),
        *(f"xox{c}-123456789012-abcdef" for c in "abposr"),
        "pk_test_4eC39HqLyjWDarjtT1zdp7dcAb",
        "rk-live-4eC39HqLyjWDarjtT1zdp7dcAb",
        *(f"{p}IOSFODNN7EXAMPLE" for p in ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA")),
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        "secret_access_key = wJalrXUtnFEMI",
        "apikey=zzzzzz99",
        "api-key: zzzzzz99",
        "passwd: hunter22x",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.dozjgNryP4J3jVmNHl0w5N",
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END EC PRIVATE KEY-----",
        "password=hunter22x",
        "api key: zzzzzz99",
    ]
    prose = [
        "Ana moved to Porto in May and works as a nurse",
        "Ana's well-known flat near the river",
        "a snake_case name and the key to Porto",
        "ratio 3:2, x=y",
    ]
    _assert_gated_equals_ungated(secrets, prose)


def test_redact_secrets_gated_equals_every_pattern_on_non_ascii_text_and_folding_letters(
    word_tests: str,
) -> None:
    # Non-ASCII text is gated too; the case-insensitive patterns also match the
    # four non-ASCII letters that fold to ASCII ones (İ, ı, ſ, the Kelvin sign): a gate must
    # see those words too, or a secret written with one slips through.
    secrets = [
        "Bearer ya29a0AfH6SMBxlong",
        "Baſic dXNlcjpwYXNzd29yZA==",  # long s
        "BASİC dXNlcjpwYXNzd29yZA==",  # dotted capital I
        "to\u212aen abcdefgh12345",  # Kelvin sign
        "ſecret: hunter22x",
        "paſſword=hunter22x",
        "apı_key=zzzzzz99",  # dotless i
        "api_\u212aey=zzzzzz99",
        "password=hunter22x",
        "sk-live-4eC39HqLyjWDarjtT1zdp7dcAb",
    ]
    prose = [
        "Ana mudou-se para o Porto em maio — é enfermeira no hospital",
        "Ana 🙂 lives in Porto: a flat near the river",
        "Ayşe İstanbul'da yaşıyor, ratio x=y",
        "plain ASCII prose about a token of love",
    ]
    _assert_gated_equals_ungated(secrets, prose)


def _random_text(rng: random.Random) -> str:
    """A text glued from the secret patterns' own pieces: their words in any case (and with the
    folding letters), prefixes, separators, quotes, whitespace, runs of their alphabets, and
    plain words and non-ASCII letters."""
    words = ["bearer", "token", "basic", "key", "api_key", "apikey", "api-key", "secret",
             "secret_key", "secret-access-key", "password", "passwd", "passw"]  # fmt: skip
    needles = ["sk-", "sk_", "rk_", "pk-", "k-", "k_", "xsk-", "ghp_", "gho_", "gh", "github_pat_",
               "xoxb-", "xox", "eyJ", "eyJhbGciOiJIUzI1NiJ9", ".", "AKIA", "ASIA", "ABIA", "ACCA",
               "AGPA", "AIDA", "AROA", "A", "XAKIA", "-----BEGIN ", "RSA ", "PRIVATE KEY-----",
               "-----END ", "-----", "<token>", "<secret>", "<api-key>", "<", ">"]  # fmt: skip
    separators = [":", "=", " ", "  ", "\t", "\n", "\u00a0", "'", '"', ",", ";", "@", "/", "+"]
    alphabets = [
        string.ascii_letters + string.digits + "._~+/=-",  # a bearer token's
        string.ascii_uppercase + string.digits,  # an AWS key's
        string.ascii_letters + string.digits + "_-",  # an API key's, a JWT segment's
        "abcdefghijklmnopqrstuvwxyz ",
    ]
    plain = ["Ana", "moved to Porto", "the key to", "a token of love", "basic training", "é",
             "—", "🙂", "Ayşe", "İstanbul", "naïve", "\u212a", "ſ", "ı", "İ"]  # fmt: skip
    folds = {"i": ["ı", "İ", "I"], "s": ["ſ", "S"], "k": ["\u212a", "K"]}

    def run(alphabet: str, low: int, high: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))

    b64, upper = alphabets[2], alphabets[1]
    # near-secrets: a prefix and a run of its alphabet about as long as the pattern needs
    shapes = [
        lambda: "eyJ" + run(b64, 3, 7) + "." + run(b64, 3, 7) + "." + run(b64, 3, 7),
        lambda: rng.choice(needles[17:25]) + run(upper, 14, 18),
        lambda: "-----BEGIN " + rng.choice(["", "RSA ", "EC ", "rsa "]) + "PRIVATE KEY-----"
        + run(b64, 0, 6) + rng.choice(["", "-----END PRIVATE KEY-----", "-----END EC PRIVATE KEY-----"]),
        lambda: rng.choice(["sk-", "rk_", "pk-", "ghp_", "github_pat_", "xoxb-"]) + run(b64, 8, 36),
    ]  # fmt: skip
    pieces = []
    for _ in range(rng.randint(1, 14)):
        kind = rng.random()
        if kind < 0.08:
            piece = rng.choice(shapes)()
        elif kind < 0.3:
            word = rng.choice(words)
            # each letter in either case, or a folding letter the pattern takes for it
            piece = "".join(
                rng.choice(folds[c]) if c in folds and rng.random() < 0.15
                else c.upper() if rng.random() < 0.3 else c
                for c in word
            )  # fmt: skip
        elif kind < 0.5:
            piece = rng.choice(needles)
        elif kind < 0.7:
            piece = rng.choice(separators)
        elif kind < 0.9:
            alphabet = rng.choice(alphabets)
            piece = "".join(
                rng.choice(alphabet) for _ in range(rng.choice((1, 5, 8, 12, 16, 20, 34)))
            )
        else:
            piece = rng.choice(plain)
        pieces.append(piece)
    return "".join(pieces)


def test_redact_secrets_gated_equals_every_pattern_on_random_texts(word_tests: str) -> None:
    # Property-style, seeded: on texts glued at random from the patterns' own words (any case,
    # folding letters), prefixes, separators and alphabets, with plain and non-ASCII text, the
    # gated redact_secrets is every pattern's plain .sub in turn. Many of them hold secrets.
    from memtrace_otel.instrumentation import _capture as C

    rng = random.Random(31)
    kinds = dict.fromkeys(
        ["<private-key>", "<jwt>", "<token>", "<api-key>", "<aws-key>", "<secret>"], 0
    )
    for _ in range(6000):
        text = _random_text(rng)
        expected = _ungated(text)
        assert C.redact_secrets(text) == expected, repr(text)
        for placeholder in kinds:
            kinds[placeholder] += expected.count(placeholder) > text.count(placeholder)
    assert min(kinds.values()) >= 50, kinds  # every kind of secret is there, many times


def test_the_gates_lowering_keeps_every_place_and_lowers_all_a_pattern_can_match() -> None:
    # The case-insensitive patterns' gates lower non-ASCII text through its UTF-8 bytes: every
    # ASCII letter lowered, the folding letters mapped, every other code point (surrogates
    # included) unchanged at its place. No other code point can be part of such a match:
    # re.IGNORECASE takes only those four for an ASCII letter, and only they lower to one.
    import re

    from memtrace_otel.instrumentation import _capture as C

    chars = "".join(chr(c) for c in range(0x80, 0x110000))
    assert C._gate("AZaz09" + chars) == "azaz09" + chars.translate(C._FOLD)
    folding = sorted(C._FOLD_CHARS)
    assert sorted(set(re.compile("[a-z]", re.IGNORECASE).findall(chars))) == folding
    assert [c for c in chars if len(low := c.lower()) != 1 or low.isascii()] == ["İ", "\u212a"]


def test_redaction_keeps_ordinary_text() -> None:
    text = "Ana asked for a task list: skim the report, book the flight, call Tokyo at 9"
    assert redact_pii(text) == text


# --- the batch job resolves references ---------------------------------------------------------


def old_then_new(capture: CaptureConfig) -> tuple[str, str, int]:
    """Two memories of one store written 10 ms apart, each flushed: their refs and a time
    between the two writes."""
    import time

    old, _ = capture.record("an old memory of Ana", Category.MEMORY, "user-ana")
    _flush(capture)
    between = time.time_ns()
    time.sleep(0.01)
    new, _ = capture.record("a newer memory of Ana", Category.MEMORY, "user-ana")
    _flush(capture)
    return old, new, between


def assert_keyed_verdicts(traces: Path, cases: Path, url: str, expected: Any) -> None:
    """With the job holding the digest key: the verdicts ``expected``, by the refs' own location
    and by ``--content url``."""
    import os

    os.environ[E.ENV_MEMTRACE_DIGEST_KEY] = KEY
    try:
        assert _verdicts(traces, cases) == expected
        assert _verdicts(traces, cases, content=url) == expected
    finally:
        del os.environ[E.ENV_MEMTRACE_DIGEST_KEY]


def _verdicts(traces: Path, cases: Path, **options: Any) -> dict[str, tuple[Any, Any]]:
    verdicts, _ = run_batch(
        [str(traces)], EvidenceMethod(), cases_file=str(cases), source_options=options
    )
    return {v.case_id: (v.error_type, v.op_name) for v in verdicts}


def _captured_texts(tmp_path: Path) -> tuple[dict[str, tuple[Any, Any]], set[str]]:
    """Verdicts and every value text of the same workload with capture on."""
    folder = tmp_path / "on"
    folder.mkdir()
    traces, cases = write_workload(folder, capture="SPAN_AND_EVENT")
    texts: set[str] = set()
    for record in open_source(str(traces)).records():
        for event in record.events:
            value = event.attributes.get(A.MEMTRACE_VARIABLE_VALUE)
            if isinstance(value, str):
                texts.update(_leaves(value))
    return _verdicts(traces, cases), texts


def _leaves(value: str) -> list[str]:
    """The texts of a value: itself, or the strings of its JSON other than refs (structure)."""
    from memtrace_otel.semconv import is_ref

    try:
        data = json.loads(value)
    except ValueError:
        return [value]
    out: list[str] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not is_ref(item):
            out.append(item)
    return out


def _substrings(texts: set[str], width: int = 12) -> set[str]:
    return {t[i : i + width] for t in texts for i in range(len(t) - width + 1)}


def test_reference_gives_the_same_verdicts_and_no_text_reaches_the_spans(tmp_path: Path) -> None:
    expected, texts = _captured_texts(tmp_path)
    assert {k: v for k, v in expected.items() if v[0]} == {
        f"case-{f}": v for f, v in EXPECTED.items()
    }
    url = _store_url(tmp_path)
    capture = CaptureConfig(mode="REFERENCE", content_url=url, digest_key=KEY)
    folder = tmp_path / "ref"
    folder.mkdir()
    traces, cases = write_workload(folder, capture=capture)
    _flush(capture)
    # The byte scan: no 12-character piece of any captured text is in the exported spans.
    raw = traces.read_text(encoding="utf-8")
    decoded = json.dumps([json.loads(line) for line in raw.splitlines()], ensure_ascii=False)
    leaked = sorted(p for p in _substrings(texts) if p in raw or p in decoded)
    assert leaked == []
    # Same verdicts with the job's key, by the refs' own location or by --content.
    import os

    assert_keyed_verdicts(traces, cases, url, expected)
    # Verdict spans written back from these verdicts carry labels and refs, no text.
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from memtrace_otel.job._writeback import send_verdicts

    os.environ[E.ENV_MEMTRACE_DIGEST_KEY] = KEY
    try:
        verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    finally:
        del os.environ[E.ENV_MEMTRACE_DIGEST_KEY]
    assert summary.resolved_content
    sink = InMemorySpanExporter()
    send_verdicts(verdicts, sink, textless=True)
    written = json.dumps(
        [dict(s.attributes or {}) for s in sink.get_finished_spans()], ensure_ascii=False
    )
    assert len(sink.get_finished_spans()) == len(verdicts)
    assert sorted(p for p in _substrings(texts) if p in written) == []
    # Without the key the keyed objects cannot be verified: not used, so no verdict is wrong.
    without = _verdicts(traces, cases)
    for case, verdict in without.items():
        assert verdict in (expected[case], (None, None)), case


def test_a_tampered_object_is_counted_and_not_used(tmp_path: Path) -> None:
    url = _store_url(tmp_path)
    capture = CaptureConfig(mode="REFERENCE", content_url=url)
    folder = tmp_path / "ref"
    folder.mkdir()
    traces, cases = write_workload(folder, capture=capture, faults=("update",))
    _flush(capture)
    objects = sorted((tmp_path / "content" / "objects").rglob("*"))
    target = next(p for p in objects if p.is_file() and p.read_bytes() == b"Ana lives abroad")
    target.write_bytes(b"Ana lives in Porto")  # the culprit's output, rewritten
    verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    assert summary.content["mismatched"] == 1
    assert summary.content["incomplete_stores"] == {"user-update": 1}
    (verdict,) = verdicts
    assert verdict.error_type in ("UpdateError", None)  # right, or honestly unsure
    resolver = ContentResolver()
    values = [
        e.attributes.get(A.MEMTRACE_VARIABLE_VALUE)
        for r in open_source(str(traces)).records()
        for e in resolver.resolve(r).events
    ]
    assert "Ana lives in Porto" in values and values.count("Ana lives abroad") == 0


def test_missing_objects_are_named_and_the_cli_report_says_it_contains_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _store_url(tmp_path)
    capture = CaptureConfig(mode="REFERENCE", content_url=url)
    folder = tmp_path / "ref"
    folder.mkdir()
    traces, cases = write_workload(folder, capture=capture, faults=("update", "deletion"))
    _flush(capture)
    report = tmp_path / "report"
    code = main(
        [
            "attribute",
            str(traces),
            "--cases",
            str(cases),
            "--content",
            url,
            "--report",
            str(report),
            "--quiet",
        ]
    )
    assert code == 0
    err = capsys.readouterr().err
    assert "content by reference:" in err and "0 missing" in err
    assert "CONTAINS CONTENT" in (report / "index.html").read_text(encoding="utf-8")
    assert (report / "summary.md").read_text(encoding="utf-8").splitlines()[2].startswith("> ")
    # An object gone from the store: named, the run goes on.
    victim = next(p for p in (tmp_path / "content" / "objects").rglob("*") if p.is_file())
    victim.unlink()
    main(["attribute", str(traces), "--cases", str(cases), "--content", url, "--quiet"])
    err = capsys.readouterr().err
    assert "missing content object: " in err and victim.name in err


def test_a_store_that_cannot_be_read_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["attribute", str(tmp_path), "--content", "nosuchfs://bucket/x", "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nosuchfs" in err and "Traceback" not in err


def test_upstream_gen_ai_refs_are_resolved(tmp_path: Path) -> None:
    from memtrace_otel.semconv import EventRecord, SpanRecord

    store = tmp_path / "uploads"
    store.mkdir()
    messages = [{"role": "user", "parts": [{"type": "text", "content": "Where does Ana live?"}]}]
    (store / "abc_input.json").write_text(json.dumps(messages))
    record = SpanRecord(
        trace_id="0" * 31 + "1",
        span_id="0" * 15 + "1",
        name="chat gpt-4o",
        attributes={A.GEN_AI_INPUT_MESSAGES_REF: (store / "abc_input.json").as_uri()},
        events=(EventRecord("x"),),
    )
    resolver = ContentResolver()
    resolved = resolver.resolve(record)
    assert json.loads(resolved.attributes[A.GEN_AI_INPUT_MESSAGES]) == messages
    assert resolver.stats.upstream == 1
    # With --content the object is found by its name under the given store.
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "abc_input.json").write_text(json.dumps(messages))
    (store / "abc_input.json").unlink()
    again = ContentResolver(moved.as_uri()).resolve(record)
    assert A.GEN_AI_INPUT_MESSAGES in again.attributes


# --- erase ------------------------------------------------------------------------------------


def test_erase_removes_only_the_objects_no_other_store_refers_to_and_leaves_a_tombstone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _store_url(tmp_path)
    capture = CaptureConfig(mode="REFERENCE", content_url=url)
    folder = tmp_path / "ref"
    folder.mkdir()
    traces, cases = write_workload(folder, capture=capture, faults=("update", "deletion"))
    _flush(capture)
    root = tmp_path / "content"

    def manifest(store: str) -> set[str]:
        return {
            json.loads(line)["object"]
            for part in (root / "manifests" / store).glob("*.jsonl")
            for line in part.read_text().splitlines()
        }

    update, deletion = manifest("user-update"), manifest("user-deletion")
    only_update, shared = update - deletion, update & deletion
    assert only_update and shared  # "Ana lives abroad" is the update store's alone
    before = {p.relative_to(root).as_posix() for p in (root / "objects").rglob("*") if p.is_file()}
    code = main(["content", "erase", "--store", "user-update", "--content", url])
    assert code == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["deleted"] == len(only_update) and counts["kept_shared"] == len(shared)
    after = {p.relative_to(root).as_posix() for p in (root / "objects").rglob("*") if p.is_file()}
    assert before - after == only_update
    assert deletion <= after  # nothing another store refers to went
    assert (root / "tombstones" / "user-update.json").is_file()
    verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases))
    by_case = {v.case_id: v for v in verdicts}
    erased = by_case["case-update"]
    assert erased.error_type is None and "erased" in erased.reason
    assert by_case["case-deletion"].error_type == "DeletionError"
    assert summary.content["erased_stores"].keys() == {"user-update"}


def test_erase_older_than_keeps_newer_entries() -> None:

    url = _memory_url()
    capture = CaptureConfig(mode="REFERENCE", content_url=url)
    old, new, between = old_then_new(capture)
    # "Older than 1 ms" on a clock set 1 ms after the first write: only that one goes.
    result = erase_store(url, "user-ana", older_than=0.001, now_ns=between + 1_000_000)
    assert (result.deleted, result.kept_shared, result.tombstone) == (1, 0, None)
    fs = fsspec.filesystem("memory")
    assert not fs.exists(str(old).removeprefix("memory://"))
    assert fs.exists(str(new).removeprefix("memory://"))
    again = erase_store(url, "user-ana", older_than=0.001, now_ns=between + 1_000_000)
    assert again.deleted == 0  # the manifests kept only the newer entry
    full = erase_store(url, "user-ana")
    assert full.deleted == 1 and full.tombstone is not None


def test_refs_written_by_the_upstream_upload_hook_are_resolved(tmp_path: Path) -> None:
    """The real ``opentelemetry-util-genai`` fsspec uploader writes the messages and stamps
    ``gen_ai.*_ref`` on the span; the resolver puts them back as ``gen_ai.*`` attributes."""
    upload = pytest.importorskip("opentelemetry.util.genai._upload.completion_hook")
    from opentelemetry.util.genai import types

    from memtrace_otel.export import span_to_record

    store = tmp_path / "uploads"
    store.mkdir()
    hook = upload.UploadCompletionHook(base_path=store.as_uri())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    question = "Where does my sister Ana live these days?"
    with provider.get_tracer("app").start_as_current_span("chat gpt-4o") as span:
        hook.on_completion(
            inputs=[types.InputMessage(role="user", parts=[types.Text(content=question)])],
            outputs=[
                types.OutputMessage(
                    role="assistant", parts=[types.Text(content="In Porto.")], finish_reason="stop"
                )
            ],
            system_instruction=[types.Text(content="Answer from the user's memories.")],
            span=span,
        )
    hook.shutdown()
    (finished,) = exporter.get_finished_spans()
    record = span_to_record(finished)
    assert A.GEN_AI_INPUT_MESSAGES not in record.attributes
    assert question not in json.dumps(dict(record.attributes))
    resolver = ContentResolver()
    resolved = resolver.resolve(record)
    inputs = json.loads(str(resolved.attributes[A.GEN_AI_INPUT_MESSAGES]))
    assert inputs[0]["parts"][0]["content"] == question
    assert "In Porto." in str(resolved.attributes[A.GEN_AI_OUTPUT_MESSAGES])
    assert "memories" in str(resolved.attributes[A.GEN_AI_SYSTEM_INSTRUCTIONS])
    assert resolver.stats.upstream == 3 and resolver.stats.missing_count == 0


def test_written_back_reasons_name_labels_and_refs_only() -> None:
    from memtrace_otel.attribution import Verdict
    from memtrace_otel.job._writeback import verdict_attributes

    verdict = Verdict(
        "case-1",
        "UpdateError",
        "ab12",
        "mem0.update",
        "evidence",
        0.9,
        ("mem:1@2",),
        reason="the update replaced 'Ana lives in Porto' with 'Ana lives abroad'",
    )
    textless = verdict_attributes(verdict, textless=True)[A.GEN_AI_EVALUATION_EXPLANATION]
    assert textless == "UpdateError at mem0.update; evidence: mem:1@2"
    assert "Porto" in str(verdict_attributes(verdict)[A.GEN_AI_EVALUATION_EXPLANATION])


# --- streamed and spilled runs ---------------------------------------------------------------
SCALED = [{"executor": "inline"}, {"executor": "local[2]"}, {"memory_bound": "64M"}]


def _run(traces: Path, cases: Path, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    verdicts, summary = run_batch([str(traces)], EvidenceMethod(), cases_file=str(cases), **options)
    return {v.case_id: (v.error_type, v.op_name, v.reason) for v in verdicts}, summary.content


def _reference_workload(tmp_path: Path) -> tuple[str, Path, Path]:
    """The workload under REFERENCE capture into a local store: its URL, traces and cases."""
    url = _store_url(tmp_path)
    capture = CaptureConfig(mode="REFERENCE", content_url=url)
    folder = tmp_path / "ref"
    folder.mkdir()
    traces, cases = write_workload(folder, capture=capture)
    _flush(capture)
    return url, traces, cases


@pytest.mark.parametrize("scaled", SCALED, ids=["inline", "pool", "spilled"])
def test_streamed_and_spilled_runs_resolve_references_as_one_process(
    tmp_path: Path, scaled: dict[str, str]
) -> None:
    # Large exports stream by store (or spill): they used to leave every reference unresolved,
    # so each case abstained as if capture were off.
    url, traces, cases = _reference_workload(tmp_path)
    expected, content = _run(traces, cases)
    assert {c: v[:2] for c, v in expected.items() if v[0]} == {
        f"case-{f}": v for f, v in EXPECTED.items()
    }
    got, got_content = _run(traces, cases, **scaled)
    assert got == expected
    assert got_content["resolved"] == content["resolved"] > 0
    # A tampered object: its store keeps its refs alone, in every run alike.
    objects = sorted(p for p in (tmp_path / "content" / "objects").rglob("*") if p.is_file())
    target = next(p for p in objects if p.read_bytes() == b"Ana lives abroad")
    target.write_bytes(b"Ana lives in Porto")
    expected, content = _run(traces, cases)
    got, got_content = _run(traces, cases, **scaled)
    assert got == expected and got_content["mismatched"] == content["mismatched"] == 1
    assert got_content["incomplete_stores"] == content["incomplete_stores"] == {"user-update": 1}
    # An erased store abstains and says so, in every run alike.
    assert main(["content", "erase", "--store", "user-deletion", "--content", url]) == 0
    expected, content = _run(traces, cases)
    got, got_content = _run(traces, cases, **scaled)
    assert got == expected and "erased" in got["case-deletion"][2]
    assert got_content["erased_stores"].keys() == content["erased_stores"].keys()


def test_a_streamed_run_that_finds_no_reference_does_not_look_for_them(tmp_path: Path) -> None:
    from memtrace_otel.job import RunOptions
    from memtrace_otel.job._executors import run_scaled

    folder = tmp_path / "on"
    folder.mkdir()
    traces, cases = write_workload(folder, capture="SPAN_AND_EVENT")
    options = RunOptions(cases_file=str(cases), executor="inline")
    looked, _ = run_scaled([str(traces)], EvidenceMethod(), options)
    skipped, summary = run_scaled([str(traces)], EvidenceMethod(), options, resolve_content=False)
    assert looked == skipped and not summary.content


@pytest.mark.parametrize("chunk", [1, 5, 7, 16, 1 << 20])
def test_the_byte_scan_tells_the_reference_kinds_apart_across_block_edges(
    tmp_path: Path, chunk: int
) -> None:
    from memtrace_otel.sources._content import reference_kinds

    cases = {
        b'"key":"gen_ai.system_instructions_ref"': (False, True),
        b'"key":"gen_ai.input.messages_ref"': (False, True),
        b'"key":"memtrace.variable.value_ref"': (True, False),
        b'"stringValue":"{\\"content_ref\\":\\"x\\"}"': (True, False),
        b'"key":"memtrace.variable.ref"': (False, False),
        b'"key":"memtrace.meta.source_refs"': (False, False),
    }
    path = tmp_path / "t.jsonl"
    for text, kinds in cases.items():
        for pad in range(0, 24):
            path.write_bytes(b"x" * pad + text + b"\n")
            assert tuple(reference_kinds([str(path)], chunk=chunk)) == kinds, (text, pad)
    # The scan stops at the first upstream ref: either kind turns resolving on.
    path.write_bytes(b"".join(cases))
    assert reference_kinds([str(path)], chunk=chunk).upstream


@pytest.mark.parametrize(
    "scaled",
    [[], ["--executor", "inline"], ["--executor", "local[2]"], ["--memory-bound", "64M"]],
    ids=["in-memory", "inline", "pool", "spilled"],
)
def test_a_reference_to_a_store_the_job_cannot_open_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scaled: list[str]
) -> None:
    # Refs naming a store of an unknown protocol: one line naming it, exit 2 (it was a
    # traceback in memory and when spilled, and a failed partition per store when streamed).
    url, traces, cases = _reference_workload(tmp_path)
    moved = tmp_path / "moved.jsonl"
    moved.write_text(traces.read_text().replace(url, "nosuchfs://bucket/content"))
    args = ["attribute", str(moved), "--cases", str(cases), "--quiet", *scaled]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nosuchfs://bucket" in err and "Traceback" not in err
    # Given the store where the objects are, the same run reads them by their names.
    out = tmp_path / "verdicts.jsonl"
    assert main([*args, "--content", url, "--out", str(out)]) == 0
    assert sum(1 for line in out.read_text().splitlines() if '"error_type": "' in line) == len(
        EXPECTED
    )
