#!/usr/bin/env bash
# Create (once, then reuse) the environment the LangMem apps and tests run in: langmem and the
# LangChain packages it needs (langchain-openai, trustcall, ...) layered over the project's own
# environment. Prints its python on stdout.
#
#   scripts/langmem_env.sh [PROJECT_PYTHON]     (default: .venv/bin/python)
#
#   MEMTRACE_LANGMEM_PIN   langmem version (default 0.0.30)
#   MEMTRACE_LANGMEM_VENV  where (default ~/.cache/memtrace-otel/venv-langmem-<pin>)
#
# The project environment (langgraph, langchain-core, openai, this package installed editable
# with its entry points) is reached through a .pth file placed after the new environment's own
# site-packages, as in scripts/mem0_legacy_env.sh; pip sees those distributions as installed and
# puts only what is missing here (a constraints file pins the shared ones to the project's
# versions, so nothing the other tests use is shadowed by another version). The environment is
# rebuilt when the pin or the project interpreter changes.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
python=${1:-$repo/.venv/bin/python}
pin=${MEMTRACE_LANGMEM_PIN:-0.0.30}
dest=${MEMTRACE_LANGMEM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memtrace-otel/venv-langmem-$pin}

base_site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
key="langmem==$pin $base_site"
if [[ -f "$dest/.memtrace-env" && "$(cat "$dest/.memtrace-env")" == "$key" ]]; then
    echo "$dest/bin/python"
    exit 0
fi

echo "creating $dest (langmem==$pin)" >&2
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
"$python" -m venv --without-pip "$dest"
site=$("$dest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$base_site')" > "$site/_memtrace_project_env.pth"
constraints="$dest/constraints.txt"
"$python" -m pip list --format=freeze --disable-pip-version-check --exclude-editable \
    > "$constraints"
"$python" -m pip --python "$dest/bin/python" install --quiet --disable-pip-version-check \
    --constraint "$constraints" "langmem==$pin"
echo "$key" > "$dest/.memtrace-env"
echo "$dest/bin/python"
