#!/usr/bin/env bash
# Create (once, then reuse) the Python 3.12 environment that runs zjunlp's `smartcomment`
# recorder (the MemTraceBench format's writer; it needs Python >= 3.12). Prints its python.
#
#   scripts/smartcomment_env.sh
#
#   MEMTRACE_SMARTCOMMENT_PIN   smartcomment version (default 0.1.2, the one MemTraceBench used)
#   MEMTRACE_SMARTCOMMENT_VENV  where (default ~/.cache/memtrace-otel/venv-smartcomment-<pin>)
#   MEMTRACE_PYTHON312          the interpreter to build it from (default: python3.12 on PATH,
#                               else the newest pyenv 3.12 install)
#
# Only smartcomment and its two dependencies (pydantic, loguru) go there: the recorder script
# (memtrace_bench/memtracebench/_smartcomment_recorder.py) imports nothing from this project, so the
# project itself stays on its own interpreter. Rebuilt when the pin or the base python changes.
set -euo pipefail

pin=${MEMTRACE_SMARTCOMMENT_PIN:-0.1.2}
dest=${MEMTRACE_SMARTCOMMENT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memtrace-otel/venv-smartcomment-$pin}

is312() { [[ -n "$1" ]] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }

base=""
for candidate in "${MEMTRACE_PYTHON312:-}" "$(command -v python3.12 2>/dev/null || true)" \
    $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | sort -rV); do
    if is312 "$candidate"; then
        base=$candidate
        break
    fi
done
if [[ -z "$base" ]]; then
    echo "smartcomment_env: no Python 3.12 found (set MEMTRACE_PYTHON312)" >&2
    exit 1
fi

key="smartcomment==$pin $(readlink -f "$base")"
if [[ -f "$dest/.memtrace-env" && "$(cat "$dest/.memtrace-env")" == "$key" ]]; then
    echo "$dest/bin/python"
    exit 0
fi

echo "creating $dest (smartcomment==$pin on $base)" >&2
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
"$base" -m venv "$dest"
"$dest/bin/python" -m pip install --quiet --disable-pip-version-check "smartcomment==$pin"
"$dest/bin/python" -c 'import smartcomment' >&2
echo "$key" > "$dest/.memtrace-env"
echo "$dest/bin/python"
