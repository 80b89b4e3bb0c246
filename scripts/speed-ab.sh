#!/usr/bin/env bash
# Compare the simulator's speed at two git revisions on a shared, noisy host.
#
#   scripts/speed-ab.sh REV_A REV_B ["CASES"] [RUNS] [VIRTUAL_MS]
#
# Builds `examples/speed.rs` of each revision (in a worktree under target/speed-ab/,
# one target directory each, kept for the next call), then runs the cases ("0 1 2 3 4
# 5 6 7" or a subset; default "1 3") alternately, A then B, RUNS times each (default 5),
# over VIRTUAL_MS of virtual time (default 50), and prints per case the medians of
# simulated verb completions per real second and B's median over A's.
#
# One build's speed moves by a third or more within minutes on a shared host
# (docs/sim-model.md, "Speed"); runs minutes apart do not compare, alternating ones do.
# Run nothing else meanwhile.
#
# SPEED_AB_PAIRED=1 runs A and B at the same time instead, pinned to CPUs 0 and 1, then
# swapped; a round's B/A is the geometric mean of its two pairings (each CPU's own
# speed cancels), and B/A is the median round's. Both builds then see the same
# neighbours at every moment, a second opinion when the host's load drifts during a
# comparison; rounds of one build against itself fell within 0.98-1.04 on the 2-core
# host, as alternating runs' ratios do. Needs taskset and two CPUs.
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
rev_a=$1
rev_b=$2
cases=${3:-"1 3"}
runs=${4:-5}
ms=${5:-50}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$root/target/speed-ab
mkdir -p "$work"

# Build the speed example of revision $1 into $work/<commit>; print the binary's path.
build() {
    local commit dir
    commit=$(git -C "$root" rev-parse --verify --quiet "$1^{commit}") || {
        echo "speed-ab: \`$1\` is not a revision of this repository" >&2
        exit 2
    }
    dir=$work/$commit
    if [ ! -x "$dir/speed" ]; then
        rm -rf "$dir/src"
        git -C "$root" worktree add --detach --force "$dir/src" "$commit" >/dev/null 2>&1
        (cd "$dir/src" && CARGO_TARGET_DIR=$dir/target cargo build --release -q -p dmtx-sim --example speed) >&2
        cp "$dir/target/release/examples/speed" "$dir/speed"
        git -C "$root" worktree remove --force "$dir/src"
    fi
    echo "$dir/speed"
}

a=$(build "$rev_a")
b=$(build "$rev_b")

median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print v[int((NR + 1) / 2)]}'; }

# One run of binary $1 on case $2 pinned to CPU $3 (or unpinned): M verbs per real second.
speed() {
    local pin=()
    [ -n "${3:-}" ] && pin=(taskset -c "$3")
    DMTX_SPEED_CASE=$2 "${pin[@]}" "$1" "$ms" | grep -o '[0-9.]* M verb completions/s' | cut -d' ' -f1
}

printf '%-6s %-40s %-40s %8s %8s %6s\n' case "A runs" "B runs" "A med" "B med" "B/A"
if [ "${SPEED_AB_PAIRED:-0}" = 1 ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    for c in $cases; do
        ra=""
        rb=""
        ratios=""
        for _ in $(seq "$runs"); do
            speed "$a" "$c" 0 >"$out/a0" &
            speed "$b" "$c" 1 >"$out/b1" &
            wait
            speed "$b" "$c" 0 >"$out/b0" &
            speed "$a" "$c" 1 >"$out/a1" &
            wait
            read -r a0 <"$out/a0"
            read -r a1 <"$out/a1"
            read -r b0 <"$out/b0"
            read -r b1 <"$out/b1"
            ra="$ra $a0 $a1"
            rb="$rb $b0 $b1"
            ratios="$ratios $(awk -v a0="$a0" -v a1="$a1" -v b0="$b0" -v b1="$b1" 'BEGIN { printf "%.4f", sqrt((b1 / a0) * (b0 / a1)) }')"
        done
        printf '%-6s %-40s %-40s %8s %8s %6s\n' "$c" "$ra" "$rb" "$(echo "$ra" | median)" "$(echo "$rb" | median)" "$(echo "$ratios" | median)"
        echo "       B/A by round:$ratios"
    done
    exit 0
fi
for c in $cases; do
    ra=""
    rb=""
    for _ in $(seq "$runs"); do
        for side in a b; do
            bin=$a
            [ $side = b ] && bin=$b
            v=$(speed "$bin" "$c")
            if [ $side = a ]; then ra="$ra $v"; else rb="$rb $v"; fi
        done
    done
    ma=$(echo "$ra" | median)
    mb=$(echo "$rb" | median)
    printf '%-6s %-40s %-40s %8s %8s %6s\n' "$c" "$ra" "$rb" "$ma" "$mb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.3f", b / a }')"
done
