#!/usr/bin/env bash
# Runs the demo against a throwaway redis-server (installed with apt if missing).
cd "$(dirname "$0")/.."
. scripts/redis-env.sh
ensure_redis
start_redis
trap stop_redis EXIT
cargo run --quiet --example demo -- "redis://127.0.0.1:$REDIS_PORT"
