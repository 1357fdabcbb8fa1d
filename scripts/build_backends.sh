#!/usr/bin/env bash
# Build (once) the real backends that the end-to-end tests run: Jaeger v2 and the project's
# OpenTelemetry Collector distribution (collector_config/builder-config.yaml).
#
# Binaries are cached OUTSIDE the repository, keyed by version, so a clean clone reuses them:
#   ${MEMTRACE_BIN_CACHE:-$HOME/.cache/memtrace-otel/bin}/jaeger-<ref>/jaeger
#   ${MEMTRACE_BIN_CACHE:-$HOME/.cache/memtrace-otel/bin}/otelcol-<ocb version>-<manifest hash>/memtrace-otelcol
# The Go module and build caches live there too (go/, go-build/), so a rebuild after a version
# bump only compiles what changed.
#
# Usage: scripts/build_backends.sh [jaeger|otelcol|all]      (default: all)
# Prints "jaeger=<path>" and "otelcol=<path>" on stdout; progress and errors go to stderr.
# Also writes <cache>/selected.env, which tests/_backends.py reads to find the binaries.
#
# Without Go: prints one line naming what to install and exits 0 (the backend tests then skip),
# unless CI=true, where a missing toolchain is a failure (exit 1).
# A failed build prints the Go error and exits non-zero. When a pinned module version cannot be
# fetched from the module proxy, the script says "blocked:" with the error, and uses the documented
# fallback (see below) instead of skipping quietly.
set -euo pipefail

what="${1:-all}"
case "$what" in jaeger|otelcol|all) ;; *) echo "usage: $0 [jaeger|otelcol|all]" >&2; exit 2 ;; esac

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${MEMTRACE_BIN_CACHE:-$HOME/.cache/memtrace-otel/bin}"

# Jaeger v2.20.0 (the last release with the v1 query API). Module tags do not work for v2: the module
# is github.com/jaegertracing/jaeger (no /v2) and its v1.x tags carry replace directives.
JAEGER_MODULE="github.com/jaegertracing/jaeger"
JAEGER_COMMIT="798e4b0fcf22"
# Fallback when the commit cannot be fetched (some module proxies serve only tagged versions):
# the last tagged module version, v1.76.0 (= Jaeger v2.13.0, same cmd/jaeger), built from its module
# source as the main module so that its replace directive is honoured.
JAEGER_FALLBACK="v1.76.0"
OCB_VERSION="v0.155.0"
MANIFEST="$repo_root/collector_config/builder-config.yaml"

log() { echo "build_backends: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
    msg="Go not found: install Go >= 1.24 (https://go.dev/dl/ or apt-get install golang-go) to build Jaeger and the Collector; backend tests skip without them"
    if [ "${CI:-}" = "true" ]; then
        echo "build_backends: error: $msg" >&2
        exit 1
    fi
    echo "build_backends: skip: $msg" >&2
    exit 0
fi

mkdir -p "$cache"
export GOTOOLCHAIN=auto
export GOPATH="$cache/go"
export GOMODCACHE="$cache/go/pkg/mod"
export GOCACHE="$cache/go-build"
# The repository's own go.work/go.mod (there is none today) must not influence these builds.
export GOWORK=off

# Run a build step, keeping its full output in a log; on failure print the tail and the log path.
run_logged() {
    local logfile="$1"; shift
    if "$@" >"$logfile" 2>&1; then
        return 0
    fi
    log "FAILED: $*"
    tail -n 30 "$logfile" >&2
    log "full log: $logfile"
    return 1
}

elapsed() { echo $(( $(date +%s) - $1 ))s; }

build_jaeger() {
    local pinned_dir="$cache/jaeger-$JAEGER_COMMIT"
    local fallback_dir="$cache/jaeger-$JAEGER_FALLBACK"
    if [ -x "$pinned_dir/jaeger" ]; then
        JAEGER_BIN="$pinned_dir/jaeger"; return 0
    fi
    # A pinned build already known to be blocked is not retried on every run (that would cost a
    # proxy round trip and repeat the warning); MEMTRACE_RETRY_PINNED=1 forces a retry.
    if [ -x "$fallback_dir/jaeger" ] && [ -f "$pinned_dir/BLOCKED" ] && [ "${MEMTRACE_RETRY_PINNED:-}" != "1" ]; then
        log "jaeger@$JAEGER_COMMIT is blocked here ($(head -n 1 "$pinned_dir/BLOCKED")); using $JAEGER_FALLBACK"
        JAEGER_BIN="$fallback_dir/jaeger"; return 0
    fi

    local start; start=$(date +%s)
    mkdir -p "$pinned_dir"
    log "building jaeger@$JAEGER_COMMIT (cold builds take minutes)..."
    if GOBIN="$pinned_dir" go install "$JAEGER_MODULE/cmd/jaeger@$JAEGER_COMMIT" >"$pinned_dir/build.log" 2>&1; then
        rm -f "$pinned_dir/BLOCKED"
        log "jaeger@$JAEGER_COMMIT built in $(elapsed "$start")"
        JAEGER_BIN="$pinned_dir/jaeger"; return 0
    fi
    # Only a fetch refusal falls back; a compile error stays an error.
    if ! grep -qE "not available|404 Not Found|410 Gone|invalid version|unknown revision" "$pinned_dir/build.log"; then
        log "FAILED: go install $JAEGER_MODULE/cmd/jaeger@$JAEGER_COMMIT"
        tail -n 30 "$pinned_dir/build.log" >&2
        return 1
    fi
    { grep -m1 -E "not available|404|410|invalid version|unknown revision" "$pinned_dir/build.log"; } >"$pinned_dir/BLOCKED"
    log "blocked: go install $JAEGER_MODULE/cmd/jaeger@$JAEGER_COMMIT: $(head -n 1 "$pinned_dir/BLOCKED")"
    log "falling back to $JAEGER_MODULE@$JAEGER_FALLBACK (Jaeger v2.13.0) built from its module source"

    if [ -x "$fallback_dir/jaeger" ]; then
        JAEGER_BIN="$fallback_dir/jaeger"; return 0
    fi
    mkdir -p "$fallback_dir"
    local src="$fallback_dir/src"
    local moddir
    moddir=$(go mod download -json "$JAEGER_MODULE@$JAEGER_FALLBACK" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
    if [ -z "$moddir" ]; then
        log "FAILED: go mod download $JAEGER_MODULE@$JAEGER_FALLBACK"; return 1
    fi
    # The module cache is read-only; build from a writable copy as the main module.
    rm -rf "$src"; cp -r "$moddir" "$src"; chmod -R u+w "$src"
    if ! (cd "$src" && GOFLAGS=-mod=mod run_logged "$fallback_dir/build.log" \
            go build -trimpath -ldflags "-s -w" -o "$fallback_dir/jaeger" ./cmd/jaeger); then
        return 1
    fi
    rm -rf "$src"
    log "jaeger@$JAEGER_FALLBACK built in $(elapsed "$start")"
    JAEGER_BIN="$fallback_dir/jaeger"
}

build_otelcol() {
    local hash key dir
    hash=$(sha256sum "$MANIFEST" | cut -c1-12)
    key="otelcol-$OCB_VERSION-$hash"
    dir="$cache/$key"
    if [ -x "$dir/memtrace-otelcol" ]; then
        OTELCOL_BIN="$dir/memtrace-otelcol"; return 0
    fi
    if [ -f "$dir/BLOCKED" ] && [ "${MEMTRACE_RETRY_PINNED:-}" != "1" ]; then
        local fb; fb=$(sed -n 's/^fallback=//p' "$dir/BLOCKED")
        if [ -n "$fb" ] && [ -x "$fb" ]; then
            log "$(grep '^blocked:' "$dir/BLOCKED" | tr '\n' ' ')"
            log "using the Collector built without the blocked components: $fb"
            OTELCOL_BIN="$fb"; return 0
        fi
    fi

    local start; start=$(date +%s)
    local ocb="$cache/ocb-$OCB_VERSION/builder"
    if [ ! -x "$ocb" ]; then
        mkdir -p "$cache/ocb-$OCB_VERSION"
        log "installing the Collector builder $OCB_VERSION..."
        GOBIN="$cache/ocb-$OCB_VERSION" run_logged "$cache/ocb-$OCB_VERSION/build.log" \
            go install "go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION"
    fi

    mkdir -p "$dir"
    rm -f "$dir/BLOCKED.tmp"
    # Every module the manifest names must be fetchable; a proxy that lacks one makes the whole build
    # fail late, so check first and name what is blocked. Ask the proxy alone (no ",direct"
    # fallback), so that the message is the proxy's answer, not a failed git clone.
    local proxy_only; proxy_only=$(go env GOPROXY | sed 's/[,|]direct$//')
    [ -z "$proxy_only" ] && proxy_only=direct
    local blocked=() line mod err
    while IFS= read -r line; do
        mod=$(echo "$line" | sed -n 's/^\s*- gomod: *"\{0,1\}\([^ "]*\) \([^ "]*\)"\{0,1\}.*/\1@\2/p')
        [ -z "$mod" ] && continue
        if ! err=$(GOPROXY="$proxy_only" go list -m "$mod" 2>&1); then
            blocked+=("$mod")
            echo "blocked: $mod: $(echo "$err" | grep -m1 -E '404|410|403|not available|fatal' || echo "$err" | tail -n 1)" >>"$dir/BLOCKED.tmp"
        fi
    done <"$MANIFEST"

    local manifest_used="$dir/builder-config.yaml" outdir="$dir"
    if [ "${#blocked[@]}" -gt 0 ]; then
        # Build what can be built, loudly: the configs that need a blocked component cannot be
        # validated with this binary, and the tests say so.
        outdir="$cache/$key-partial"
        mkdir -p "$outdir"
        manifest_used="$outdir/builder-config.yaml"
        cp "$MANIFEST" "$manifest_used"
        for mod in "${blocked[@]}"; do
            grep -vF "${mod%@*} " "$manifest_used" >"$manifest_used.tmp"; mv "$manifest_used.tmp" "$manifest_used"
        done
        sed 's/^/build_backends: /' "$dir/BLOCKED.tmp" >&2
    else
        cp "$MANIFEST" "$manifest_used"
    fi
    # The generated sources and the binary go to the cache, never into the repository.
    sed -i "s|^\(\s*output_path:\).*|\1 $outdir/src|" "$manifest_used"

    log "building the Collector ($key) with ocb $OCB_VERSION (cold builds take minutes)..."
    # ocb generates the sources, then we compile them ourselves: ocb's own module step runs
    # `go mod tidy`, which also fetches the TEST dependencies of every component (for example
    # contrib's pkg/golden), and some module proxies do not serve those. `go build -mod=mod`
    # resolves only what the binary links, with the versions the manifest pins (Go's minimal
    # version selection).
    rm -rf "$outdir/src"
    if ! run_logged "$outdir/build.log" "$ocb" --skip-compilation --skip-get-modules --config="$manifest_used"; then
        rm -f "$dir/BLOCKED.tmp"
        return 1
    fi
    # With --skip-get-modules ocb writes no go.mod: require what the manifest pins, plus the
    # Collector core at the builder's own version (what ocb's go.mod would say).
    {
        echo "module $(sed -n 's/^\s*module: *//p' "$manifest_used")"
        echo "go 1.25"
        echo "require ("
        sed -n 's/^\s*- gomod: *"\{0,1\}\([^"]*[^" ]\)"\{0,1\}\s*$/\t\1/p' "$manifest_used"
        printf '\tgo.opentelemetry.io/collector/otelcol %s\n' "$OCB_VERSION"
        echo ")"
    } >"$outdir/src/go.mod"
    if ! (cd "$outdir/src" && GOFLAGS=-mod=mod run_logged "$outdir/build.log" \
            go build -trimpath -ldflags "-s -w" -o "$outdir/memtrace-otelcol" .); then
        rm -f "$dir/BLOCKED.tmp"
        return 1
    fi
    rm -rf "$outdir/src"
    log "Collector built in $(elapsed "$start")"
    if [ "${#blocked[@]}" -gt 0 ]; then
        { cat "$dir/BLOCKED.tmp"; echo "fallback=$outdir/memtrace-otelcol"; } >"$dir/BLOCKED"
    fi
    rm -f "$dir/BLOCKED.tmp"
    OTELCOL_BIN="$outdir/memtrace-otelcol"
}

JAEGER_BIN=""
OTELCOL_BIN=""
selected="$cache/selected.env"
# Keep the other binary's entry when building only one.
if [ -f "$selected" ]; then
    JAEGER_BIN=$(sed -n 's/^MEMTRACE_JAEGER_BIN=//p' "$selected")
    OTELCOL_BIN=$(sed -n 's/^MEMTRACE_OTELCOL_BIN=//p' "$selected")
fi
if [ "$what" = "jaeger" ] || [ "$what" = "all" ]; then build_jaeger; fi
if [ "$what" = "otelcol" ] || [ "$what" = "all" ]; then build_otelcol; fi

printf 'MEMTRACE_JAEGER_BIN=%s\nMEMTRACE_OTELCOL_BIN=%s\n' "$JAEGER_BIN" "$OTELCOL_BIN" >"$selected.tmp"
mv "$selected.tmp" "$selected"
[ -n "$JAEGER_BIN" ] && echo "jaeger=$JAEGER_BIN"
[ -n "$OTELCOL_BIN" ] && echo "otelcol=$OTELCOL_BIN"
exit 0
