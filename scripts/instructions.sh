#!/usr/bin/env bash
# Client instructions per W1 pair (one lock + unlock, one task, one key) of
# each row of benches/instructions.rs, counted with callgrind: each row runs
# twice, with N and 2N pairs, and the difference over N is the cost of one
# pair with the start-up (server, connections, scripts) cancelled out.
# Counts do not move with the machine's other tenants the way times do.
#
#   scripts/instructions.sh [ROWS...]
#   TOP=12 scripts/instructions.sh lockwarden kept-floor
#
# Rows: lockwarden rslock floor kept-floor (all by default). N is
# LOCKWARDEN_COST_PAIRS (default 1000). With TOP set, each row also lists
# its TOP costliest functions per pair (their own instructions, callees
# not included). Needs valgrind (apt-get install valgrind).
cd "$(dirname "$0")/.."
. scripts/redis-env.sh
ensure_redis
set -euo pipefail
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }

rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(lockwarden rslock floor kept-floor)
n=${LOCKWARDEN_COST_PAIRS:-1000}
top=${TOP:-0}

bin=$(cargo bench --bench instructions --no-run --message-format=json 2>/dev/null |
    grep '"kind":\["bench"\]' | grep '"name":"instructions"' |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "could not build benches/instructions.rs" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# total FILE: the instructions callgrind collected.
total() { sed -n 's/^summary: *//p' "$1"; }

# self FILE: "instructions function" per function, own instructions only.
self_costs() {
    callgrind_annotate --threshold=100 "$1" 2>/dev/null |
        awk '/^ *[0-9,]+ / && !/PROGRAM TOTALS/ {
                 n = $1; gsub(",", "", n); name = $0
                 sub(/^ *[0-9,]+ +(\([^)]*\) +)?/, "", name); sub(/ \[.*$/, "", name); sub(/^(\?\?\?|\.?\/[^ :]*):/, "", name)
                 cost[name] += n }
             END { for (f in cost) print cost[f] "\t" f }'
}

printf '%-12s %12s\n' row instr/pair
for row in "${rows[@]}"; do
    for k in 1 2; do
        LOCKWARDEN_COST_ROW="$row" LOCKWARDEN_COST_PAIRS=$((k * n)) \
            valgrind --tool=callgrind --callgrind-out-file="$out/$row.$k" "$bin" --bench >/dev/null 2>&1
    done
    a=$(total "$out/$row.1")
    b=$(total "$out/$row.2")
    printf '%-12s %12d\n' "$row" $(((b - a) / n))
    if [ "$top" -gt 0 ]; then
        join -t $'\t' -1 2 -2 2 -a 2 -e 0 -o 0,1.1,2.1 \
            <(self_costs "$out/$row.1" | sort -t $'\t' -k2,2) \
            <(self_costs "$out/$row.2" | sort -t $'\t' -k2,2) |
            awk -F '\t' -v n="$n" '{ printf "%10d  %s\n", ($3 - $2) / n, $1 }' |
            sort -rn | awk -v top="$top" 'NR <= top'
    fi
done
