#!/usr/bin/env bash
# How long `npm start` takes to "ferry ready" (issue 16: a new data directory at most 5 s, a
# restart at most 3 s, on a quiet machine), counted from typing `npm start`, with the start's stage
# lines and the CPU seconds spent up to "ready" by npm, by the stack's node process and by the
# DynamoDB Local JVM (CPU seconds compare across runs on a loaded machine; wall times do not).
#
# Usage: scripts/start-time.sh [ROUNDS] [PORT]
#   Each round: a start on a new data directory, stopped once ready, then a restart on it.
#   ROUNDS default 3; PORT default 18780 (must be free). Run it from any directory.
# The first start in a checkout builds the start bundle (its `bundle` line says `built`): run once
# more for the figures of a start whose bundle is current.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
port=${2:-18780}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# CPU seconds of a process (utime+stime; with `children` also what it waited for: npm's scripts).
cpu() { awk -v children="${2:-}" '{ s = $14 + $15; if (children) s += $16 + $17; printf "%.2f", s / 100 }' "/proc/$1/stat" 2>/dev/null || echo "?"; }

one_start() { # label data_dir
  local label=$1 dir=$2 log="$work/log" t0 t1 npm node java
  : >"$log"
  t0=$(date +%s.%N)
  (cd "$repo" && FERRY_DATA_DIR=$dir FERRY_PORT=$port exec npm start >"$log" 2>&1) &
  npm=$!
  until grep -q '^ferry ready' "$log"; do
    if ! kill -0 "$npm" 2>/dev/null; then echo "npm start exited before ready:" >&2; cat "$log" >&2; exit 1; fi
    sleep 0.01
  done
  t1=$(date +%s.%N)
  node=$(pgrep -P "$npm" node | head -1 || true)
  java=$(pgrep -f -- "-dbPath $dir/dynamodb" | head -1 || true)
  printf '%-8s ready %.2f s after npm start; CPU s: npm %s, node %s, JVM %s\n' "$label" "$(echo "$t1 - $t0" | bc)" \
    "$(cpu "$npm" children)" "${node:+$(cpu "$node")}" "${java:+$(cpu "$java")}"
  grep '^ferry: ' "$log" | grep -v '^ferry: reconcile' | sed 's/^/    /'
  kill -TERM "$npm"
  wait "$npm" 2>/dev/null || true
}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  dir="$work/data-$r"
  one_start fresh "$dir"
  one_start restart "$dir"
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
