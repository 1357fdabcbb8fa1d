#!/usr/bin/env bash
# Create (once, then reuse) the environment the classic-pipeline Mem0 test runs in: an old
# mem0ai 1.x pin layered over the project's own environment. Prints its python on stdout.
#
#   scripts/mem0_legacy_env.sh [PROJECT_PYTHON]     (default: .venv/bin/python)
#
#   MEMTRACE_MEM0_LEGACY_PIN   mem0ai version (default 1.0.0, the oldest 1.x; classic pipeline;
#                              the app suite uses 1.0.11, the last 1.x)
#   MEMTRACE_MEM0_LEGACY_VENV  where (default ~/.cache/memtrace-otel/venv-mem0-<pin>)
#
# Only mem0ai itself is installed there (--no-deps); every other package, this one included (it
# is installed editable in the project environment, with its entry points), comes from the
# project environment through a .pth file placed after the new environment's own
# site-packages. That keeps creation to seconds (installing all dependencies took ~2.5 minutes),
# the shared packages identical to the ones the other tests use, and this package's metadata
# never stale. The environment is rebuilt when the pin or the project interpreter changes.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
python=${1:-$repo/.venv/bin/python}
pin=${MEMTRACE_MEM0_LEGACY_PIN:-1.0.0}
dest=${MEMTRACE_MEM0_LEGACY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memtrace-otel/venv-mem0-$pin}

base_site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
key="mem0ai==$pin $base_site"
if [[ -f "$dest/.memtrace-env" && "$(cat "$dest/.memtrace-env")" == "$key" ]]; then
    echo "$dest/bin/python"
    exit 0
fi

echo "creating $dest (mem0ai==$pin)" >&2
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
"$python" -m venv --without-pip "$dest"
site=$("$dest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$base_site')" > "$site/_memtrace_project_env.pth"
"$python" -m pip --python "$dest/bin/python" install --quiet --disable-pip-version-check \
    --no-deps "mem0ai==$pin"
echo "$key" > "$dest/.memtrace-env"
echo "$dest/bin/python"
