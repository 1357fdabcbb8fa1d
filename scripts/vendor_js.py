#!/usr/bin/env python3
"""Re-fetch the report's pinned JavaScript packages from npm into the package assets.

The HTML report draws case graphs with Cytoscape.js and its dagre layout extension. Both are
third-party, minified files committed under ``memtrace_otel/reporting/assets/vendor/`` (reports
must work offline, so nothing is loaded from a CDN). This script is how they got there: it runs
``npm pack`` for each pinned version, checks the tarball's integrity against the pin, and copies
the browser build and the licence file. ``cytoscape-dagre`` bundles ``@dagrejs/dagre`` and
``@dagrejs/graphlib``; their tarballs are fetched only for their licence files.

Usage: ``python scripts/vendor_js.py`` (needs ``npm``; run from anywhere). To upgrade, change the
pins below, set the integrity of each new tarball to ``""`` once, run the script, and copy the
integrity it prints back into the pin.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[1] / "memtrace_otel" / "reporting" / "assets" / "vendor"


@dataclass(frozen=True)
class Pin:
    """One npm package version and what to copy out of it."""

    name: str
    version: str
    integrity: str  # npm's sha512 "integrity" of the tarball
    files: tuple[tuple[str, str], ...]  # (path inside the tarball, file name under vendor/)


PINS = (
    Pin(
        "cytoscape",
        "3.35.0",
        "sha512-sMvBIXiGMnhkCaWz2R06FwF/27MNlS+Tqvi17foO9UhnUg3XGZccKjxsvEqQFAQYMSSZmN5SxYzUYlQ0DOJJ3g==",
        (
            ("package/dist/cytoscape.min.js", "cytoscape.min.js"),
            ("package/LICENSE", "LICENSE.cytoscape.txt"),
        ),
    ),
    Pin(
        "cytoscape-dagre",
        "4.0.1",
        "sha512-hyNdh8Vp1nwzBcjHnM4c71G81bFhPmQYLXD2HM9AZIvl+8TrMzWEOPW45hF/XOBQiEguPcDQzi6VrXR1XBcXOA==",
        (
            ("package/dist/cytoscape-dagre.min.js", "cytoscape-dagre.min.js"),
            ("package/LICENSE", "LICENSE.cytoscape-dagre.txt"),
        ),
    ),
    # Bundled inside cytoscape-dagre's browser build; fetched for the licence text only.
    Pin(
        "@dagrejs/dagre",
        "3.0.0",
        "sha512-ZzhnTy1rfuoew9Ez3EIw4L2znPGnYYhfn8vc9c4oB8iw6QAsszbiU0vRhlxWPFnmmNSFAkrYeF1PhM5m4lAN0Q==",
        (("package/LICENSE", "LICENSE.dagre.txt"),),
    ),
    Pin(
        "@dagrejs/graphlib",
        "4.0.1",
        "sha512-IvcV6FduIIAmLwnH+yun+QtV36SC7mERqa86aClNqmMN09WhmPPYU8ckHrZBozErf+UvHPWOTJYaGYiIcs0DgA==",
        (("package/LICENSE", "LICENSE.graphlib.txt"),),
    ),
)


def fetch(pin: Pin, work: Path) -> tuple[Path, str]:
    """``npm pack`` one pinned version into ``work``; returns the tarball and its integrity."""
    result = subprocess.run(
        ["npm", "pack", "--json", "--silent", f"{pin.name}@{pin.version}"],
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
    )
    info = json.loads(result.stdout)[0]
    return work / info["filename"], str(info["integrity"])


def main() -> int:
    if shutil.which("npm") is None:
        print("vendor_js: npm is not installed", file=sys.stderr)
        return 2
    VENDOR.mkdir(parents=True, exist_ok=True)
    manifest = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for pin in PINS:
            tarball, integrity = fetch(pin, work)
            if pin.integrity and integrity != pin.integrity:
                print(
                    f"vendor_js: {pin.name}@{pin.version}: integrity {integrity} "
                    f"does not match the pin {pin.integrity}",
                    file=sys.stderr,
                )
                return 1
            with tarfile.open(tarball) as archive:
                for inner, target in pin.files:
                    member = archive.extractfile(inner)
                    if member is None:
                        print(f"vendor_js: {inner} missing in {tarball.name}", file=sys.stderr)
                        return 1
                    (VENDOR / target).write_bytes(member.read())
            manifest.append(
                {
                    "name": pin.name,
                    "version": pin.version,
                    "integrity": integrity,
                    "files": [target for _, target in pin.files],
                }
            )
            print(f"{pin.name}@{pin.version} {integrity}")
    (VENDOR / "VENDORED.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
