#!/usr/bin/env bash
# Compares two builds of the lockwarden command in one run: both run the
# same workloads, alternating, against the same throwaway servers (five
# masters for W4; the first alone for the others), the servers pinned to
# CPU 0 and the clients to CPU 1 when taskset is there.
#
#   scripts/bench-compare.sh BEFORE_BIN AFTER_BIN [ROUNDS] [DURATION] [WORKLOADS...]
#
# Defaults: 2 rounds, 3s per workload, W1 W2 W3 W4 W5. Prints one row per
# workload and build with the median over the rounds, and after/before.
# Build a commit's binary with, for example:
#   git worktree add /tmp/before REV && (cd /tmp/before && cargo build --release)
cd "$(dirname "$0")/.."
. scripts/redis-env.sh
ensure_redis
set -euo pipefail

before=${1:?before binary}
after=${2:?after binary}
rounds=${3:-2}
duration=${4:-3s}
shift $(( $# < 4 ? $# : 4 ))
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(W1 W2 W3 W4 W5)

pin_server=()
pin_client=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    pin_server=(taskset -c 0)
    pin_client=(taskset -c 1)
fi

dirs=()
pids=()
urls=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for d in "${dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT
for _ in 1 2 3 4 5; do
    d=$(mktemp -d)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "${pin_server[@]}" "${LOCKWARDEN_REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 \
        --save '' --appendonly no --dir "$d" >"$d/log" 2>&1 &
    pids+=($!)
    dirs+=("$d")
    urls+=(--redis "redis://127.0.0.1:$port")
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.05
    done
done

out=$(mktemp)
for round in $(seq 1 "$rounds"); do
    for w in "${workloads[@]}"; do
        for build in before after; do
            bin=$before
            [ "$build" = after ] && bin=$after
            if [ "$w" = W4 ]; then set_urls=("${urls[@]}"); else set_urls=("${urls[@]:0:2}"); fi
            "${pin_client[@]}" "$bin" "${set_urls[@]}" bench --workload "$w" --duration "$duration" --json 2>/dev/null |
                sed "s/^{/{\"build\":\"$build\",\"round\":$round,/" >>"$out"
        done
    done
done

python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs = {}
for r in rows:
    if "workload" in r:
        runs.setdefault((r["workload"], r["build"]), []).append(r)
print(f"{'workload':8} {'build':6} {'ops/s':>10} {'p50 µs':>9} {'cmds/op':>8} {'redis µs/op':>11} {'client µs/op':>12}")
for w in sorted({k[0] for k in runs}):
    med = {}
    for b in ("before", "after"):
        rs = runs.get((w, b), [])
        if not rs:
            continue
        m = lambda k: statistics.median(x.get(k) or 0 for x in rs)
        med[b] = m("ops_per_s")
        print(f"{w:8} {b:6} {m('ops_per_s'):>10.0f} {m('p50_us'):>9.1f} {m('redis_cmds_per_op'):>8.1f} "
              f"{m('redis_cpu_us_per_op'):>11.1f} {m('client_cpu_us_per_op'):>12.1f}")
    if med.get("before"):
        print(f"{w:8} after/before ops/s: {med['after'] / med['before']:.3f}")
bad = [r for r in rows if "workload" in r and (r.get("violations") or r.get("overlaps") or r.get("lost_updates"))]
print(f"safety: {len(bad)} runs with violations, overlaps or lost updates")
EOF
rm -f "$out"
