# Sourced by the scripts: makes sure redis-server is installed (apt-get when
# missing) and offers start_redis/stop_redis for a throwaway server.
set -euo pipefail

ensure_redis() {
    if ! command -v "${LOCKWARDEN_REDIS_SERVER:-redis-server}" >/dev/null 2>&1; then
        echo "redis-server not found: installing it with apt-get" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
    fi
    # Debian starts a system service on install; our tests never use it.
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
