#!/usr/bin/env bash
# netns-cluster.sh: a dmtx cluster of network namespaces joined by veth links, and a
# benchmark across it.
#
# Topology (one namespace per node, every link a veth pair, no loopback between nodes):
#
#   PREFIX-mn0 (eth0 10.77.X.10) --veth-- +------------------+
#   PREFIX-mn1 (eth0 10.77.X.11) --veth-- | PREFIX-sw:  br0  |
#   ...                                   |  (bridge, no IP) |
#   PREFIX-cn  (eth0 10.77.X.2)  --veth-- +------------------+
#
# Each memory node runs `dmtx memnode --listen 10.77.X.(10+i):7400` in its namespace; the
# compute node runs `dmtx bench --cluster cluster.toml --check` in PREFIX-cn. `lo` stays
# down in every namespace, so all traffic crosses the veth links and the bridge.
#
# With --cns N (N > 1) there are N compute-node namespaces, PREFIX-cn0 .. PREFIX-cnN-1
# (eth0 10.77.X.(2+i)), listed under [[compute_nodes]] with port 7500; each runs
# `dmtx bench --cluster cluster.toml --cn I --history cnI.history`, they meet at the
# memory nodes and run together, and afterwards `dmtx report` merges their records and
# `dmtx check` checks their histories as one.
#
# --cut-link NODE silently cuts NODE's link during the run (its bridge port goes down:
# frames vanish, no RST, no ICMP, no carrier change seen by either end). The compute node
# must notice within the op deadline (--op-deadline, written into the cluster file: its
# connections to the node are dropped, watched with `ss`), and the bench (`--on-fault
# stop`, its default) must then stop the run and exit non-zero with an error saying the
# node is unreachable.
#
# Exit status: 0 when the run was clean (bench exit 0: invariant and isolation check
# passed). With --cut-link: 0 when the dead link was detected within
# --expect-detect-within seconds and the bench ended non-zero, naming the unreachable
# node, within --expect-error-within seconds of the cut; 1 otherwise. 2 on bad usage or
# setup failure. The elapsed times are printed. Everything (processes, namespaces, work
# directory) is removed on exit, on failure and on Ctrl-C, unless --keep is given.
#
# Needs root, bash 5, iproute2 (ip, ss), and the veth and bridge kernel drivers. Run by
# CI through crates/dmtx/tests/netns.rs.

set -euo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/netns-cluster.sh [OPTIONS] [-- EXTRA BENCH ARGS...]

Build one network namespace per node (memory nodes and one compute node), link them
through a bridge with veth pairs, run `dmtx bench --cluster ... --check` across them.

Options:
  --mns N                    memory nodes, one namespace each                [2]
  --cns N                    compute nodes, one namespace and one `bench --cn I`
                             process each (2..8: a multi-CN run)             [1]
  --replicas N               copies of every table (<= --mns)                [min(2, N)]
  --bin PATH                 the dmtx binary      [$DMTX_BIN or <repo>/target/release/dmtx]
  --duration TIME            bench run length (bench --duration)
                                              [3; with --cut-link: 60, the fault must end it]
  --workload NAME            bench --workload                                [smallbank]
  --protocol NAME            bench --protocol                                [ford]
  --threads N                bench --threads                                 [2]
  --coroutines N             bench --coroutines                              [4]
  --mn-size BYTES            region of each memory node                      [256MiB]
  --cut-link NODE            silently cut NODE's link (e.g. mn0, or cn) during the run
  --cut-after SECS           seconds after the bench starts to cut it        [1]
                             (later if the bench is still connecting then:
                             the cut waits, up to 30 s, for its connections)
  --op-deadline SECS         the cluster file's op_deadline: a post unanswered
                             this long fails (how fast a cut is noticed)     [2]
  --cut-how down|netem       down: set the switch-side veth down (default);
                             netem: 100% loss on both ends (needs sch_netem)
  --expect-detect-within SECS
                             with --cut-link: the compute node must drop its first
                             connection to the cut node within SECS of the cut
                             (the op deadline plus slack)   [op deadline + 2]
  --expect-error-within SECS with --cut-link: the bench must exit non-zero, naming
                             the unreachable node, within SECS of the cut
                             (op deadline + slack)          [op deadline + 4]
  --timeout SECS             kill the bench (and fail) after SECS            [300]
  --prefix NAME              namespace name prefix                   [dmtxns-<pid>]
  --subnet A.B.C             the /24 to use                [10.77.<hash of prefix>]
  --keep                     leave namespaces, processes and files in place
  -h, --help                 this help

Anything after `--` is passed to `dmtx bench` (e.g. -- --set accounts=1000).
EOF
}

die() {
    echo "netns-cluster: error: $*" >&2
    exit 2
}

log() {
    echo "netns-cluster: $*"
}

# ---------------------------------------------------------------- options
MNS=2
CNS=1
REPLICAS=""
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${DMTX_BIN:-$REPO/target/release/dmtx}"
DURATION=""
WORKLOAD=smallbank
PROTOCOL=ford
THREADS=2
COROUTINES=4
MN_SIZE=256MiB
CUT_LINK=""
CUT_AFTER=1
CUT_HOW=down
OP_DEADLINE=2
EXPECT_WITHIN=""
EXPECT_DETECT=""
TIMEOUT=300
PREFIX="dmtxns-$$"
SUBNET=""
KEEP=0
EXTRA=()

need_arg() {
    [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --mns) need_arg "$@"; MNS="$2"; shift 2 ;;
        --cns) need_arg "$@"; CNS="$2"; shift 2 ;;
        --replicas) need_arg "$@"; REPLICAS="$2"; shift 2 ;;
        --bin) need_arg "$@"; BIN="$2"; shift 2 ;;
        --duration) need_arg "$@"; DURATION="$2"; shift 2 ;;
        --workload) need_arg "$@"; WORKLOAD="$2"; shift 2 ;;
        --protocol) need_arg "$@"; PROTOCOL="$2"; shift 2 ;;
        --threads) need_arg "$@"; THREADS="$2"; shift 2 ;;
        --coroutines) need_arg "$@"; COROUTINES="$2"; shift 2 ;;
        --mn-size) need_arg "$@"; MN_SIZE="$2"; shift 2 ;;
        --cut-link) need_arg "$@"; CUT_LINK="$2"; shift 2 ;;
        --cut-after) need_arg "$@"; CUT_AFTER="$2"; shift 2 ;;
        --cut-how) need_arg "$@"; CUT_HOW="$2"; shift 2 ;;
        --expect-error-within) need_arg "$@"; EXPECT_WITHIN="$2"; shift 2 ;;
        --op-deadline) need_arg "$@"; OP_DEADLINE="$2"; shift 2 ;;
        --expect-detect-within) need_arg "$@"; EXPECT_DETECT="$2"; shift 2 ;;
        --timeout) need_arg "$@"; TIMEOUT="$2"; shift 2 ;;
        --prefix) need_arg "$@"; PREFIX="$2"; shift 2 ;;
        --subnet) need_arg "$@"; SUBNET="$2"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) usage >&2; die "unknown option '$1'" ;;
    esac
done

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_secs() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]]; }

in_range() { is_uint "$1" && ((10#$1 >= $2 && 10#$1 <= $3)); }

in_range "$MNS" 1 100 || die "--mns $MNS: expected 1..100"
MNS=$((10#$MNS))
# Compute nodes take .2 to .9 of the subnet, memory nodes .10 upwards.
in_range "$CNS" 1 8 || die "--cns $CNS: expected 1..8"
CNS=$((10#$CNS))
[[ -n "$REPLICAS" ]] || REPLICAS=$((MNS < 2 ? MNS : 2))
in_range "$REPLICAS" 1 "$MNS" || die "--replicas $REPLICAS: expected 1..--mns ($MNS)"
is_secs "$CUT_AFTER" || die "--cut-after $CUT_AFTER: expected seconds, e.g. 1 or 0.5"
[[ "$OP_DEADLINE" =~ ^[1-9][0-9]*$ ]] || die "--op-deadline $OP_DEADLINE: expected whole seconds, at least 1"
[[ -n "$EXPECT_WITHIN" ]] || EXPECT_WITHIN=$((OP_DEADLINE + 4))
[[ -n "$EXPECT_DETECT" ]] || EXPECT_DETECT=$((OP_DEADLINE + 2))
is_secs "$EXPECT_WITHIN" || die "--expect-error-within $EXPECT_WITHIN: expected seconds"
is_secs "$EXPECT_DETECT" || die "--expect-detect-within $EXPECT_DETECT: expected seconds"
in_range "$TIMEOUT" 1 1000000 || die "--timeout $TIMEOUT: expected whole seconds >= 1"
TIMEOUT=$((10#$TIMEOUT))
[[ "$CUT_HOW" == down || "$CUT_HOW" == netem ]] || die "--cut-how $CUT_HOW: expected down or netem"
[[ "$PREFIX" =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || die "--prefix $PREFIX: use 1-40 of [A-Za-z0-9_.-]"
if [[ -n "$CUT_LINK" ]] && ((CNS > 1)); then
    die "--cut-link: runs with one compute node only (drop --cns or --cut-link)"
fi
if [[ -n "$CUT_LINK" ]]; then
    if [[ "$CUT_LINK" =~ ^mn([0-9]+)$ ]]; then
        ((10#${BASH_REMATCH[1]} < MNS)) || die "--cut-link $CUT_LINK: there are only $MNS memory nodes"
        CUT_LINK="mn$((10#${BASH_REMATCH[1]}))"
    elif [[ "$CUT_LINK" != cn ]]; then
        die "--cut-link $CUT_LINK: expected mn<i> or cn"
    fi
fi
if [[ -z "$DURATION" ]]; then
    # With a cut, the bench's `--on-fault stop` must end the run, long before this.
    if [[ -n "$CUT_LINK" ]]; then DURATION=60; else DURATION=3; fi
fi
if [[ -z "$SUBNET" ]]; then
    # A /24 of 10.77.0.0/16 picked from the prefix, so parallel runs use distinct ones.
    SUBNET="10.77.$(($(printf '%s' "$PREFIX" | cksum | cut -d' ' -f1) % 256))"
fi
[[ "$SUBNET" =~ ^[0-9]{1,3}[.][0-9]{1,3}[.][0-9]{1,3}$ ]] || die "--subnet $SUBNET: expected A.B.C"

[[ -x "$BIN" ]] || die "--bin $BIN: not an executable (build with cargo build --release, or pass --bin / set DMTX_BIN)"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
command -v ip >/dev/null || die "ip (iproute2) not found"
((EUID == 0)) || die "needs root (ip netns, veth, bridge)"
[[ -n "${EPOCHREALTIME:-}" ]] || die "needs bash 5 or newer (EPOCHREALTIME)"

PORT=7400
CLUSTER_ID=$((RANDOM * 32768 + RANDOM))
EPOCH=1
SW="$PREFIX-sw"
CN="$PREFIX-cn"
CN_ADDR="$SUBNET.2"
mn_ns() { echo "$PREFIX-mn$1"; }
cn_ns() { echo "$PREFIX-cn$1"; }
cn_addr() { echo "$SUBNET.$((2 + $1))"; }
mn_addr() { echo "$SUBNET.$((10 + $1))"; }

# ---------------------------------------------------------------- teardown
NAMESPACES=()
PIDS=()
WORK=""
BENCH_PID=""

teardown() {
    local rc=$?
    trap - EXIT INT TERM HUP PIPE
    set +e
    if ((KEEP)); then
        log "--keep: leaving namespaces (${NAMESPACES[*]}), processes (${PIDS[*]}) and $WORK"
        exit "$rc"
    fi
    local p ns
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for _ in $(seq 20); do
        local alive=0
        for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.1
    done
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    # Anything else still inside our namespaces was started by us too.
    for ns in "${NAMESPACES[@]}"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    done
    for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null; done
    [[ -n "$WORK" ]] && rm -rf "$WORK"
    exit "$rc"
}
trap teardown EXIT
trap 'echo "netns-cluster: interrupted" >&2; exit 130' INT
trap 'echo "netns-cluster: terminated" >&2; exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

# ---------------------------------------------------------------- topology
WORK="$(mktemp -d "${TMPDIR:-/tmp}/$PREFIX.XXXXXX")"

add_ns() {
    ip netns add "$1" || die "ip netns add $1 failed (root and CAP_SYS_ADMIN needed; a stale namespace of that name? try another --prefix)"
    NAMESPACES+=("$1")
}

add_ns "$SW"
ip -n "$SW" link add br0 type bridge || die "cannot create a bridge (bridge driver missing?)"
ip -n "$SW" link set br0 up

# plug NS ADDR: a veth pair p-<tag> (in the switch, on br0) <-> eth0 (in NS, with ADDR).
plug() {
    local ns="$1" tag="$2" addr="$3"
    add_ns "$ns"
    ip -n "$SW" link add "p-$tag" type veth peer name eth0 netns "$ns" ||
        die "cannot create a veth pair (veth driver missing?)"
    ip -n "$SW" link set "p-$tag" master br0
    ip -n "$SW" link set "p-$tag" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
}

for ((i = 0; i < MNS; i++)); do
    plug "$(mn_ns "$i")" "mn$i" "$(mn_addr "$i")"
done
if ((CNS == 1)); then
    plug "$CN" cn "$CN_ADDR"
else
    for ((i = 0; i < CNS; i++)); do
        plug "$(cn_ns "$i")" "cn$i" "$(cn_addr "$i")"
    done
fi
log "namespaces: ${NAMESPACES[*]} (subnet $SUBNET.0/24, bridge br0 in $SW, lo down everywhere)"

# ---------------------------------------------------------------- token and cluster file
(
    umask 077
    head -c 32 /dev/urandom | base64 >"$WORK/token"
)
chmod 600 "$WORK/token"

{
    echo "# written by scripts/netns-cluster.sh (prefix $PREFIX)"
    echo 'format = "dmtx-cluster"'
    echo 'version = 1'
    echo "cluster_id = $CLUSTER_ID"
    echo "epoch = $EPOCH"
    echo 'token_file = "token"'
    echo "replicas = $REPLICAS"
    echo "op_deadline = \"${OP_DEADLINE}s\""
    for ((i = 0; i < MNS; i++)); do
        echo
        echo '[[memory_nodes]]'
        echo "id = $i"
        echo "address = \"$(mn_addr "$i"):$PORT\""
        echo "bytes = \"$MN_SIZE\""
    done
    if ((CNS == 1)); then
        echo
        echo '[[compute_nodes]]'
        echo 'id = 0'
        echo "address = \"$CN_ADDR:7500\""
    fi
    for ((i = 0; CNS > 1 && i < CNS; i++)); do
        echo
        echo '[[compute_nodes]]'
        echo "id = $i"
        echo "address = \"$(cn_addr "$i"):7500\""
    done
} >"$WORK/cluster.toml"

# ---------------------------------------------------------------- memory nodes
for ((i = 0; i < MNS; i++)); do
    ip netns exec "$(mn_ns "$i")" "$BIN" memnode --listen "$(mn_addr "$i"):$PORT" \
        --size "$MN_SIZE" --token-file "$WORK/token" --node-id "$i" \
        --cluster-id "$CLUSTER_ID" --epoch "$EPOCH" \
        >"$WORK/mn$i.log" 2>&1 &
    PIDS+=("$!")
done
for ((i = 0; i < MNS; i++)); do
    ok=0
    for _ in $(seq 100); do
        if grep -q "listening" "$WORK/mn$i.log" 2>/dev/null; then ok=1; break; fi
        kill -0 "${PIDS[$i]}" 2>/dev/null || break
        sleep 0.1
    done
    if ((!ok)); then
        sed 's/^/  mn'"$i"': /' "$WORK/mn$i.log" >&2 || true
        die "memory node $i did not start listening on $(mn_addr "$i"):$PORT"
    fi
    log "mn$i: $(head -n1 "$WORK/mn$i.log")"
done

# ---------------------------------------------------------------- several compute nodes
if ((CNS > 1)); then
    start_s=$SECONDS
    CN_PIDS=()
    for ((i = 0; i < CNS; i++)); do
        CMD=("$BIN" bench --cluster "$WORK/cluster.toml" --cn "$i" --protocol "$PROTOCOL"
            --workload "$WORKLOAD" --threads "$THREADS" --coroutines "$COROUTINES"
            --duration "$DURATION" --history "$WORK/cn$i.history"
            --out "$WORK/result-cn$i.json" "${EXTRA[@]}")
        log "cn$i: ${CMD[*]}"
        ip netns exec "$(cn_ns "$i")" "${CMD[@]}" >"$WORK/cn$i.out" 2>"$WORK/cn$i.err" &
        CN_PIDS+=("$!")
        PIDS+=("$!")
    done
    rcs=()
    for ((i = 0; i < CNS; i++)); do
        # A compute node that does not end is killed at --timeout; its exit is then non-zero.
        while kill -0 "${CN_PIDS[$i]}" 2>/dev/null && ((SECONDS - start_s < TIMEOUT)); do sleep 0.1; done
        kill -KILL "${CN_PIDS[$i]}" 2>/dev/null || true
        set +e
        wait "${CN_PIDS[$i]}"
        rcs+=("$?")
        set -e
        cat "$WORK/cn$i.out"
        sed "s/^/cn$i stderr: /" "$WORK/cn$i.err"
        log "cn$i exit ${rcs[$i]}"
    done
    for ((i = 0; i < CNS; i++)); do
        if ((rcs[i] != 0)); then
            for ((j = 0; j < MNS; j++)); do sed 's/^/  mn'"$j"' log: /' "$WORK/mn$j.log" >&2 || true; done
            echo "netns-cluster: FAIL: compute node $i exited ${rcs[$i]}" >&2
            exit 1
        fi
    done
    RECORDS=()
    HISTORIES=()
    for ((i = 0; i < CNS; i++)); do
        RECORDS+=("$WORK/result-cn$i.json")
        HISTORIES+=("$WORK/cn$i.history")
    done
    "$BIN" report "${RECORDS[@]}" || die "dmtx report of the compute nodes' records failed"
    set +e
    "$BIN" check "${HISTORIES[@]}"
    check_rc=$?
    set -e
    if ((check_rc != 0)); then
        echo "netns-cluster: FAIL: dmtx check of the $CNS histories exited $check_rc" >&2
        exit 1
    fi
    log "OK: clean run of $CNS compute-node namespaces across $MNS memory-node namespaces"
    exit 0
fi

# ---------------------------------------------------------------- the cut
cut_link() {
    local tag="$1"
    local ns
    if [[ "$tag" == cn ]]; then ns="$CN"; else ns="$(mn_ns "${tag#mn}")"; fi
    case "$CUT_HOW" in
        down)
            # The bridge port goes down: frames to and from the node vanish; neither
            # end sees a carrier change, a RST or an ICMP error from the other.
            ip -n "$SW" link set "p-$tag" down
            ;;
        netem)
            # 100% loss leaving the switch towards the node and leaving the node.
            if ! tc -n "$SW" qdisc add dev "p-$tag" root netem loss 100% ||
                ! tc -n "$ns" qdisc add dev eth0 root netem loss 100%; then
                die "tc netem failed (is sch_netem available? try --cut-how down)"
            fi
            ;;
    esac
}

now_us() { echo "${EPOCHREALTIME/./}"; }
fmt_s() { printf '%d.%03d' $(($1 / 1000000)) $((($1 % 1000000) / 1000)); }
secs_us() {
    local s="$1" int frac
    int="${s%%.*}"
    frac="${s#"$int"}"
    frac="${frac#.}000000"
    echo $((10#$int * 1000000 + 10#${frac:0:6}))
}

# ---------------------------------------------------------------- the bench
BENCH=("$BIN" bench --cluster "$WORK/cluster.toml" --protocol "$PROTOCOL" --workload "$WORKLOAD"
    --threads "$THREADS" --coroutines "$COROUTINES" --duration "$DURATION" --check
    --out "$WORK/result.json" "${EXTRA[@]}")
log "cn: ${BENCH[*]}"
if [[ -n "$CUT_LINK" ]]; then
    log "will cut $CUT_LINK's link ($CUT_HOW) ${CUT_AFTER}s after the start; expecting an error within ${EXPECT_WITHIN}s of the cut"
fi

# Established connections from the compute node to the cut node (or to every memory node
# when the compute node's own link is cut); empty when `ss` is missing.
estab() {
    command -v ss >/dev/null || return 0
    local dst="$SUBNET.0/24"
    [[ "$CUT_LINK" == cn ]] || dst="$(mn_addr "${CUT_LINK#mn}"):$PORT"
    ip netns exec "$CN" ss -Htn state established dst "$dst" 2>/dev/null | wc -l
}

cut_peers() {
    if [[ "$CUT_LINK" == cn ]]; then echo "the memory nodes"; else echo "$CUT_LINK"; fi
}

start_us="$(now_us)"
ip netns exec "$CN" "${BENCH[@]}" >"$WORK/bench.out" 2>"$WORK/bench.err" &
BENCH_PID=$!
PIDS+=("$BENCH_PID")

cut_us=""
expect_us="$(secs_us "$EXPECT_WITHIN")"
timeout_us=$((TIMEOUT * 1000000))
conns_before=""
detect_us=""
timed_out=0
if [[ -n "$CUT_LINK" ]]; then
    # One sleep rather than polling: the bench's workers spin on both cores, and a
    # polling loop's wake-ups can come late.
    sleep "$CUT_AFTER"
    # Cut a running bench, not one still connecting: a cut during set-up fails a connect,
    # not a running op, and says nothing about detection. A running bench holds, to each
    # memory node, its control connection and one per worker. (On a loaded host set-up
    # can take most of a minute; a cut before a worker has connected fails its connect
    # and the check on detection with it.)
    want=$(((THREADS + 1) * $([[ "$CUT_LINK" == cn ]] && echo "$MNS" || echo 1)))
    wait_from="$(now_us)"
    while kill -0 "$BENCH_PID" 2>/dev/null; do
        up="$(estab)"
        # Without `ss` there is nothing to wait on.
        ((${up:-$want} < want)) || break
        if ((wait_from + 30000000 < $(now_us))); then
            log "the bench has $up of its $want connections to $(cut_peers) after 30 s: cutting anyway"
            break
        fi
        sleep 0.1
    done
    if kill -0 "$BENCH_PID" 2>/dev/null; then
        conns_before="$(estab)"
        cut_link "$CUT_LINK"
        cut_us="$(now_us)"
        log "cut $CUT_LINK at $(fmt_s $((cut_us - start_us)))s (${conns_before:-?} connections from cn to $(cut_peers) established)"
    fi
fi
while kill -0 "$BENCH_PID" 2>/dev/null; do
    now="$(now_us)"
    if [[ -n "$cut_us" && -z "$detect_us" && -n "$conns_before" ]]; then
        # The first connection to the cut node that the compute node gives up on.
        if (($(estab) < conns_before)); then
            now="$(now_us)"
            detect_us=$((now - cut_us))
            log "first connection from cn to $(cut_peers) dropped $(fmt_s "$detect_us")s after the cut"
        fi
    fi
    if ((now - start_us >= timeout_us)) || { [[ -n "$cut_us" ]] && ((now - cut_us > expect_us + 5000000)); }; then
        # The bench hangs (or runs far past the expectation): stop it, the checks fail.
        timed_out=1
        kill -KILL "$BENCH_PID" 2>/dev/null || true
        break
    fi
    sleep 0.1
done
set +e
wait "$BENCH_PID"
bench_rc=$?
set -e
end_us="$(now_us)"

cat "$WORK/bench.out"
sed 's/^/bench stderr: /' "$WORK/bench.err"
log "bench exit $bench_rc after $(fmt_s $((end_us - start_us)))s"

show_logs() {
    for ((i = 0; i < MNS; i++)); do
        sed 's/^/  mn'"$i"' log: /' "$WORK/mn$i.log" >&2 || true
    done
}

if ((timed_out)); then
    show_logs
    echo "netns-cluster: FAIL: the bench did not end (killed after $(fmt_s $((end_us - start_us)))s)" >&2
    exit 1
fi

if [[ -z "$CUT_LINK" ]]; then
    if ((bench_rc != 0)); then
        show_logs
        echo "netns-cluster: FAIL: the bench exited $bench_rc" >&2
        exit 1
    fi
    log "OK: clean run across $MNS memory-node namespaces"
    exit 0
fi

# --cut-link: the run must end in an error naming the unreachable node, in time.
if [[ -z "$cut_us" ]]; then
    echo "netns-cluster: FAIL: the bench ended (exit $bench_rc) before the cut at ${CUT_AFTER}s; raise --duration or lower --cut-after" >&2
    exit 1
fi
after_cut_us=$((end_us - cut_us))
[[ -n "$detect_us" ]] || detect_us="$after_cut_us"
log "dead link detected after $(fmt_s "$detect_us")s (expected within ${EXPECT_DETECT}s: the op deadline)"
log "error after the cut: $(fmt_s "$after_cut_us")s (expected within ${EXPECT_WITHIN}s)"
if [[ "$CUT_LINK" == cn ]]; then
    named="unreachable"
else
    named="\\b$CUT_LINK\\b.*unreachable|unreachable.*\\b$CUT_LINK\\b"
fi
fail=""
if ((bench_rc == 0)); then
    fail="the bench exited 0 although $CUT_LINK was cut"
elif ! grep -qE "$named" "$WORK/bench.err"; then
    fail="the bench's error (exit $bench_rc) does not say that $CUT_LINK is unreachable"
elif ((detect_us < 1000000)); then
    # Nothing can notice a silent cut that fast (PINGs go out after 1 s of silence and
    # only the deadline fails a connection): the measured run had ended before the cut.
    fail="connections to $(cut_peers) closed $(fmt_s "$detect_us")s after the cut, too early to be the cut's doing: the run had probably ended before it (raise --duration)"
elif ((detect_us > $(secs_us "$EXPECT_DETECT"))); then
    fail="the dead link was detected $(fmt_s "$detect_us")s after the cut, more than ${EXPECT_DETECT}s"
elif ((after_cut_us > expect_us)); then
    fail="the error came $(fmt_s "$after_cut_us")s after the cut, more than ${EXPECT_WITHIN}s"
fi
if [[ -n "$fail" ]]; then
    show_logs
    echo "netns-cluster: FAIL: $fail" >&2
    exit 1
fi
log "OK: cutting $CUT_LINK ended the run in an error after $(fmt_s "$after_cut_us")s"
exit 0
