#!/usr/bin/env bash
# The test command: formatting, lints, tests (each starts its own
# redis-servers), docs. Installs redis-server with apt when it is missing.
cd "$(dirname "$0")/.."
. scripts/redis-env.sh
ensure_redis
set -x
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo clippy --lib --no-default-features -- -D warnings
cargo test --all-targets
cargo test --doc
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps
