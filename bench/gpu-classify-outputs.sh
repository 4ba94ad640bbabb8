#!/usr/bin/env bash
# What the per-read output costs a GPU classify run, and how noisy the machine is meanwhile:
# 20 M pairs of plain FASTQ (made by kmerdb-gpu-bench --classify-data), classified RUNS times each
# with the Kraken lines to a file, to stdout (into /dev/null), and not written (the report only),
# in turns, while vmstat records the CPU's user, system, I/O-wait and stolen shares every second.
#
#   bench/gpu-classify-outputs.sh [PAIRS_M] [RUNS]      (defaults 20, 3; carry/ as for gpu-classify.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/carry/bin
PAIRS_M=${1:-20}
RUNS=${2:-3}
T=${KMERDB_BENCH_DIR:-/tmp/kmerdb-classify-outputs}
rm -rf "$T" && mkdir -p "$T"
$B/kmerdb-gpu-bench --classify-data "$T" --pairs-m "$PAIRS_M" --samples 8 >/dev/null || exit 1
cd "$T"
# The generated files go to the disk first, so that their write-back does not compete with the runs' output.
sync
cat r1.fq r2.fq >/dev/null
pairs=$((PAIRS_M * 1000000))
vmstat -n 1 >vmstat.log &
vm=$!
for i in $(seq "$RUNS"); do
    for mode in file stdout none; do
        case $mode in
            file) out=(-o gpu.kraken) ;;
            stdout) out=(-o -) ;;
            none) out=(-o /dev/null) ;;
        esac
        echo "--- $mode $i at $(date +%T)" >>vmstat.log
        # A new file each run: replacing the last one's 2 GB would add the file system's freeing of it.
        rm -f gpu.kraken
        t0=$(date +%s.%N)
        $B/kmerdb classify -v -d refs.db -1 r1.fq -2 r2.fq "${out[@]}" -r gpu.kreport >/dev/null 2>"$mode-$i.err"
        t1=$(date +%s.%N)
        awk -v a="$t0" -v b="$t1" -v m="$mode" -v i="$i" -v p="$pairs" \
            'BEGIN {printf "%s run %d: %.2f s = %.2f M pairs/s\n", m, i, b - a, p / (b - a) / 1e6}'
        grep -h "reading" "$mode-$i.err"
    done
done
kill $vm
echo "vmstat (us sy id wa st = user, system, idle, I/O wait, stolen %):"
awk '/^---/ {print; next} $1 ~ /^[0-9]+$/ {print $13, $14, $15, $16, $17}' vmstat.log | paste -sd' ' | sed 's/ --- /\n--- /g'
rm -rf "$T"
