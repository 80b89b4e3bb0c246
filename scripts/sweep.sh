#!/usr/bin/env bash
# Sweep one `dmtx bench` flag over values, one process per point, and tabulate.
#
#   scripts/sweep.sh FLAG "V1 V2 ..." [bench args...]
#
# Example, FORD Fig. 22 (§6.3.1) on the simulator: throughput and latency against
# coroutines per thread, SmallBank, ConnectX-5:
#
#   scripts/sweep.sh --coroutines "1 2 3 4 5 6 8 10 12" \
#       --transport sim --nic cx5 --preset ford -w smallbank -t 1 -d 50ms
#
# Points run as parallel processes (DMTX_JOBS of them, default: the CPU count); simulated
# points are deterministic, so parallelism does not change their numbers. Real-time
# (`mem`) points compete for cores: run them with DMTX_JOBS=1. The JSON records land in
# DMTX_SWEEP_DIR (default: a new directory under results/), and `dmtx report` prints the
# table. DMTX is the binary to run (default: target/release/dmtx, built if missing).
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
flag=$1
values=$2
shift 2

root=$(cd "$(dirname "$0")/.." && pwd)
dmtx=${DMTX:-$root/target/release/dmtx}
if [ ! -x "$dmtx" ]; then
    (cd "$root" && cargo build --release -q -p dmtx)
fi
jobs=${DMTX_JOBS:-$(nproc)}
dir=${DMTX_SWEEP_DIR:-$root/results/sweep-${flag#--}-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$dir"

failed=0
i=0
running=0
for v in $values; do
    i=$((i + 1))
    name=$(printf '%03d' "$i")
    (
        if ! "$dmtx" bench "$flag" "$v" "$@" -q -o "$dir/$name.json" 2>"$dir/$name.err"; then
            echo "sweep: point $flag $v failed: $(tail -n 1 "$dir/$name.err")" >&2
            exit 1
        fi
        rm -f "$dir/$name.err"
    ) &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
echo "records: $dir" >&2
"$dmtx" report "$dir"
exit "$failed"
