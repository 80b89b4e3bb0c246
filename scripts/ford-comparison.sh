#!/usr/bin/env bash
# FORD §6.3.2's comparison on the simulator: throughput-latency curves of the one-version
# protocols on FORD's testbed, one JSON record per point, and each protocol's peak.
#
#   scripts/ford-comparison.sh [WORKLOADS] [PROTOCOLS] [COROUTINES] [THREADS]
#
# Defaults: WORKLOADS="kvs tatp smallbank tpcc", PROTOCOLS="farm drtmh ford" (add fordlv
# when it is built), COROUTINES="2 4 6 8 10 12" (coordinators per thread), THREADS=16.
# The testbed is --preset ford (FORD §6.1: one compute node, two memory nodes, 2-way
# replication with primaries on both, KVS of 1 M keys, TPC-C of 8 warehouses) on the
# ConnectX-5 profile with the PM media model of cx5.toml's `[pm]` block turned on (FORD's
# memory nodes are Optane PM). DMTX_DURATION is each point's virtual run (default 20ms,
# after a 5ms warm-up). Records land in DMTX_COMPARE_DIR (default: a new directory under
# results/), one subdirectory per workload and protocol; scripts/sweep.sh runs the points
# (DMTX_JOBS at once; simulated points are deterministic, so parallelism does not change
# them, but TATP and TPC-C points hold 3-4 GiB each).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
workloads=${1:-kvs tatp smallbank tpcc}
protocols=${2:-farm drtmh ford}
coroutines=${3:-2 4 6 8 10 12}
threads=${4:-16}
duration=${DMTX_DURATION:-20ms}
dir=${DMTX_COMPARE_DIR:-$root/results/ford-comparison-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$dir"
dmtx=${DMTX:-$root/target/release/dmtx}
if [ ! -x "$dmtx" ]; then
    (cd "$root" && cargo build --release -q -p dmtx)
fi
export DMTX="$dmtx"

# cx5 with its commented [pm] block turned on.
profile=$dir/cx5-pm.toml
awk '/^# \[pm\]/ { pm = 1 }
     pm && /^# / { line = substr($0, 3); if (line !~ /^#/) print line; next }
     !pm { print }' "$root/crates/dmtx-sim/profiles/cx5.toml" >"$profile"
grep -q '^\[pm\]' "$profile" || { echo "ford-comparison: no [pm] block in cx5.toml" >&2; exit 2; }

for w in $workloads; do
    for p in $protocols; do
        DMTX_SWEEP_DIR=$dir/$w-$p "$root/scripts/sweep.sh" --coroutines "$coroutines" \
            --transport sim --nic "$profile" --preset ford -p "$p" -w "$w" -t "$threads" \
            -d "$duration" --warmup 5ms >/dev/null
    done
done

# Each protocol's peak: the point of highest throughput, with its latency (columns of
# `dmtx report`'s table: committed/s is the 9th, p50 and p99 the 11th and 12th).
printf '%-10s %-7s %12s %8s %8s %8s\n' workload protocol 'peak/s' 't x c' 'p50 us' 'p99 us' |
    tee "$dir/peaks.txt"
for w in $workloads; do
    for p in $protocols; do
        "$dmtx" report "$dir/$w-$p" 2>/dev/null |
            awk -v w="$w" -v p="$p" '
                NR > 1 && $1 == p && $9 + 0 > best { best = $9; tc = $5; p50 = $11; p99 = $12 }
                END { printf "%-10s %-7s %12.0f %8s %8s %8s\n", w, p, best, tc, p50, p99 }'
    done
done | tee -a "$dir/peaks.txt"
echo "records: $dir" >&2
