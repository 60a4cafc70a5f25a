#!/usr/bin/env bash
# The test command: formatting, lints, tests (each starts its own
# redis-servers), docs. Installs redis-server with apt when it is missing,
# and fetches a server with WAITAOF for tests/aof.rs (scripts/redis-env.sh).
cd "$(dirname "$0")/.."
. scripts/redis-env.sh
ensure_redis
ensure_waitaof_server
set -x
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo clippy --lib --no-default-features -- -D warnings
# One test at a time: several tests assert timing windows (a lease handed
# over within 50 ms, a loss seen within one renewal period) that CPU
# contention between parallel tests on a small CI machine would blur.
cargo test --lib --bins --tests --examples -- --test-threads=1
# The benches run once each in test mode (criterion's harness takes no
# --test-threads).
cargo test --benches
cargo test --doc
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps
# No foreign type in the public API unless announced (stable rustdoc).
scripts/check-public-api.sh
