"""``memtrace content erase --store ID``: delete a memory store's objects from a content store."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from memtrace_otel.semconv.env import ENV_GENAI_UPLOAD_BASE_PATH, ENV_MEMTRACE_CONTENT_URL
from memtrace_otel.sources import erase_store, parse_age, store_pseudonym


def register(subparsers: Any) -> None:
    """Add the ``content`` subcommand (``content erase``)."""
    parser = subparsers.add_parser(
        "content",
        help="manage the content store of REFERENCE capture (erase a store's objects)",
        description="The content store REFERENCE capture writes memory values to.",
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION")
    erase = actions.add_parser(
        "erase",
        help="delete the objects only one memory store refers to (the right to be forgotten)",
        description=(
            "Delete from the content store every object that only memory store ID refers to "
            "(the manifests decide: an object another store still refers to stays), then "
            "leave a tombstone so a later attribution of that store abstains saying its "
            "content was erased. Prints the counts as JSON on stdout."
        ),
    )
    erase.add_argument("--store", required=True, metavar="ID", help="the memory store id")
    erase.add_argument(
        "--content",
        metavar="URL",
        help=f"the content store (any fsspec URL); default: {ENV_MEMTRACE_CONTENT_URL}, "
        f"else {ENV_GENAI_UPLOAD_BASE_PATH}",
    )
    erase.add_argument(
        "--older-than",
        metavar="AGE",
        help="only objects written longer ago than AGE (30d, 12h, 90m); no tombstone",
    )
    erase.set_defaults(func=run_erase)
    pseudonym = actions.add_parser(
        "pseudonym",
        help="print an identifier as pseudonymised identifiers send it (search a backend by it)",
        description=(
            "Print ID (a store id, case id or ref) with its e-mail addresses and phone numbers "
            "replaced by the keyed pseudonyms CaptureConfig(pseudonymize_ids=True) sends, "
            "with the key in MEMTRACE_DIGEST_KEY."
        ),
    )
    pseudonym.add_argument("id", metavar="ID")
    pseudonym.set_defaults(func=run_pseudonym)
    parser.set_defaults(func=lambda _args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_pseudonym(args: argparse.Namespace) -> int:
    """Print one identifier's pseudonym; exit 2 without a (valid) digest key."""
    from memtrace_otel.semconv.env import ENV_MEMTRACE_DIGEST_KEY

    if not os.environ.get(ENV_MEMTRACE_DIGEST_KEY, "").strip():
        print(f"memtrace: error: set {ENV_MEMTRACE_DIGEST_KEY} (the app's key)", file=sys.stderr)
        return 2
    try:
        print(store_pseudonym(args.id))
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return 2
    return 0


def run_erase(args: argparse.Namespace) -> int:
    """Erase one store's objects; exit 0, or 2 on bad usage or an unreadable store."""
    url = (
        args.content
        or os.environ.get(ENV_MEMTRACE_CONTENT_URL)
        or os.environ.get(ENV_GENAI_UPLOAD_BASE_PATH)
    )
    if not url:
        print(
            f"memtrace: error: say which content store: --content URL or {ENV_MEMTRACE_CONTENT_URL}",
            file=sys.stderr,
        )
        return 2
    try:
        age = parse_age(args.older_than) if args.older_than else None
        result = erase_store(url, args.store, older_than=age)
    except ValueError as exc:
        print(f"memtrace: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_json(), sort_keys=True))
    print(
        f"erased store {args.store!r}: {result.deleted} objects deleted, {result.kept_shared} "
        f"kept (another store refers to them), {result.missing} already gone",
        file=sys.stderr,
    )
    return 0
