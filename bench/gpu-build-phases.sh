#!/usr/bin/env bash
# Where `kmerdb build` spends its time at users' scale on a GPU machine (issue 31's 2.5 Gbp/s):
# the strain-rich synthetic collection of GBP (50) Gbp with its taxonomy (kmerdb-gpu-bench
# --scale-data, as bench/gpu-scale.sh), built by the binary with -v on BUILD_GPUS (0,1):
#   1. into the disk, as users run it, with the disk's state sampled every second (dirty and
#      written-back memory, the rate written to disk, CPU busy);
#   2. with NOTAX=1, the same without --taxonomy (every sequence its own taxon), which is how the
#      `kmerdb-gpu-bench --e2e-gbp` harness builds;
#   3. into memory (/dev/shm), the build without the disk (SHM=0 leaves it out).
# The builds log with -vv (VERBOSE=-vvv: every shard's finishing too; LOGS=DIR keeps each build's
# whole log there as build-NAME.log): the GPUs' condense steps too. AB="OLD NEW" (two kmerdb binaries) times
# them instead, into the disk, AB_RUNS (3) builds each, interleaved, the index bytes compared.
# The machine's limits in the same run: the time to write back the genomes just generated
# (sync), the disk's write rate (dd, fdatasync) and reading the genomes from the page cache (cat).
#   [BUILD_GPUS=0,1] bench/gpu-build-phases.sh [GBP]   (carry/ from scripts/prepare-gpu-carry.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/carry/bin
GBP=${1:-50}
BUILD_GPUS=${BUILD_GPUS:-0,1}
T=${KMERDB_BENCH_DIR:-/tmp/kmerdb-phases}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
rm -rf "$T" && mkdir -p "$T"
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
echo "cores: $(nproc); memory: $(awk '/MemTotal/ {printf "%.0f GB", $2 / 1e6}' /proc/meminfo)"
source bench/lib.sh # timed_line
timed_line "synthetic genomes ($GBP Gbp) and taxonomy written" \
    $B/kmerdb-gpu-bench --scale-data "$T" --e2e-gbp "$GBP" --pairs-m 0
awk '/^(Dirty|Writeback):/ {printf "%s %.1f GB ", $1, $2 / 1e6} END {print "after writing the genomes"}' /proc/meminfo
timed_line "limit: writing back the genomes (sync)" sync
dd if=/dev/zero of="$T/dd.test" bs=1M count=8192 conv=fdatasync 2>&1 | tail -1 | sed 's/^/limit: disk write (dd, 8 GiB): /'
rm -f "$T/dd.test"
cat "$T"/genomes/*.fna >/dev/null
timed_line "limit: cat of the genomes (page cache)" sh -c 'cat "$0"/genomes/*.fna >/dev/null' "$T"

# Every second: seconds, dirty and writeback GB, GB written to disk in that second (pgpgout is
# in KiB), CPU busy % of all cores.
sample() {
    local prev_out prev_busy prev_total t=0
    read -r prev_out < <(awk '/^pgpgout / {print $2}' /proc/vmstat)
    read -r prev_busy prev_total < <(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat)
    while sleep 1; do
        t=$((t + 1))
        local out busy total
        read -r out < <(awk '/^pgpgout / {print $2}' /proc/vmstat)
        read -r busy total < <(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat)
        awk -v t=$t -v o=$((out - prev_out)) -v b=$((busy - prev_busy)) -v a=$((total - prev_total)) \
            '/^Dirty:/ {d = $2} /^Writeback:/ {w = $2} END {printf "sample %3d s: dirty %5.1f GB, writeback %4.1f GB, disk %4.2f GB/s, CPU %3.0f%%\n", t, d / 1e6, w / 1e6, o * 1024 / 1e9, 100 * b / (a > 0 ? a : 1)}' /proc/meminfo
        prev_out=$out prev_busy=$busy prev_total=$total
    done
}

tax=(--taxonomy "$T/taxonomy" --seqid2taxid "$T/seqid2taxid.map")
# build NAME DB [ARGS...]: one timed -v build with the disk sampled, its log's phase lines shown.
build() {
    local name=$1 db=$2
    shift 2
    sample >"$T/samples.log" &
    local sampler=$!
    timed_line "build --gpus $BUILD_GPUS, $name" ${KMERDB:-$B/kmerdb} ${VERBOSE:--vv} build --gpus "$BUILD_GPUS" "$@" -d "$db" "$T/genomes" 2>"$T/build.log"
    kill $sampler 2>/dev/null
    wait $sampler 2>/dev/null
    [[ -n ${LOGS:-} ]] && cp "$T/build.log" "$LOGS/build-${name//[^A-Za-z0-9]/_}.log"
    grep -E "phases|shards:|passes:|pass of shards|condense:|passes over|spilled|built|after " "$T/build.log" | sed 's/^/  /'
    cat "$T/samples.log" | sed 's/^/  /'
    ls -l "$db" | awk -v g="$GBP" '{printf "  index: %.2f GB, %.3f bytes a base\n", $5 / 1e9, $5 / (g * 1e9)}'
    echo "  index cksum: $(cksum "$db" | cut -d' ' -f1)"
    rm -f "$db"
    timed_line "  sync after the build" sync
}
if [[ -n ${AB:-} ]]; then
    read -r old new <<<"$AB"
    for run in $(seq "${AB_RUNS:-3}"); do
        for bin in "$old" "$new"; do
            KMERDB=$bin build "$bin, run $run" "$T/ab.db" "${tax[@]}" | grep -E "^build|phases|passes:|cksum"
        done
    done
    rm -rf "$T"
    exit
fi
build "taxonomy, into the disk" "$T/tax.db" "${tax[@]}"
[[ ${NOTAX:-0} == 1 ]] && build "no taxonomy, into the disk" "$T/notax.db"
# Room for an index of 0.4 bytes a base.
if [[ ${SHM:-1} == 0 ]]; then
    :
elif [[ -d /dev/shm ]] && awk -v a="$(df --output=avail -B1 /dev/shm | tail -1)" -v g="$GBP" 'BEGIN {exit !(a > g * 4e8)}'; then
    build "taxonomy, into memory (/dev/shm)" /dev/shm/kmerdb-phases.db "${tax[@]}"
else
    echo "no room in /dev/shm for the in-memory build"
fi
rm -rf "$T"
