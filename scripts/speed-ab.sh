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
# One build's speed moves by up to 1.8x within minutes on a shared host
# (docs/sim-model.md, "Speed"); runs minutes apart do not compare, alternating ones do.
# Run nothing else meanwhile.
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
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

printf '%-6s %-40s %-40s %8s %8s %6s\n' case "A runs" "B runs" "A med" "B med" "B/A"
for c in $cases; do
    ra=""
    rb=""
    for _ in $(seq "$runs"); do
        for side in a b; do
            bin=$a
            [ $side = b ] && bin=$b
            v=$(DMTX_SPEED_CASE=$c "$bin" "$ms" | grep -o '[0-9.]* M verb completions/s' | cut -d' ' -f1)
            if [ $side = a ]; then ra="$ra $v"; else rb="$rb $v"; fi
        done
    done
    ma=$(echo "$ra" | median)
    mb=$(echo "$rb" | median)
    printf '%-6s %-40s %-40s %8s %8s %6s\n' "$c" "$ra" "$rb" "$ma" "$mb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.3f", b / a }')"
done
