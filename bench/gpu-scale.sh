#!/usr/bin/env bash
# Build and classify at users' scale on a GPU machine (issue 31/32), the binary as users run it:
# GBP (20) of the strain-rich synthetic collection (kmerdb-gpu-bench --synth-data: species of 5
# strains, 1% apart), built on the GPU and on the CPU (all cores), index bytes compared; then PAIRS_M
# (2) million pairs sampled from it (bench/sample_pairs.py) classified on the GPU (--gpus 0), by
# default (--gpus all) and on the CPU (--gpus none), outputs compared. The machine's limits in the
# same run: disk write (dd, fdatasync) and reading the reads from the page cache (cat).
#   bench/gpu-scale.sh [GBP] [PAIRS_M]          (carry/ from scripts/prepare-gpu-carry.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/carry/bin
GBP=${1:-20}
PAIRS_M=${2:-2}
T=${KMERDB_BENCH_DIR:-/tmp/kmerdb-scale}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
status=0
rm -rf "$T" && mkdir -p "$T/genomes"
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
echo "cores: $(nproc)"
timed() { # label, command...: prints "label: S s"
    local label=$1; shift
    local t0=$(date +%s.%N)
    "$@" || status=1
    echo "$label: $(awk "BEGIN {printf \"%.2f\", $(date +%s.%N) - $t0}") s"
}
timed "synthetic genomes ($GBP Gbp) written" $B/kmerdb-gpu-bench --synth-data "$T/genomes" --e2e-gbp "$GBP" >/dev/null
dd if=/dev/zero of="$T/dd.test" bs=1M count=8192 conv=fdatasync 2>&1 | tail -1 | sed 's/^/limit: disk write (dd, 8 GiB): /'
rm -f "$T/dd.test"
cat "$T"/genomes/*.fna >/dev/null
timed "build --gpus 0" $B/kmerdb build -q --gpus 0 -d "$T/gpu.db" "$T/genomes"
timed "build --gpus none" $B/kmerdb build -q --gpus none -d "$T/cpu.db" "$T/genomes"
ls -l "$T/gpu.db" | awk -v g="$GBP" '{printf "index: %.2f GB, %.3f bytes a base\n", $5 / 1e9, $5 / (g * 1e9)}'
cmp "$T/gpu.db" "$T/cpu.db" && echo "index bytes: GPU and CPU identical" || { echo "index bytes DIFFER"; status=1; }
rm -f "$T/cpu.db"
files=$(ls "$T"/genomes/*.fna | head -8)
timed "reads sampled" python3 bench/sample_pairs.py $((PAIRS_M * 1000000)) "$T/r1.fq" "$T/r2.fq" $files
rm -rf "$T/genomes"
timed "limit: cat of the reads (page cache)" cat "$T/r1.fq" "$T/r2.fq" >/dev/null
for gpus in 0 all none; do
    for run in 1 2; do
        timed "classify --gpus $gpus ($PAIRS_M M pairs, run $run)" $B/kmerdb classify -q --gpus $gpus -d "$T/gpu.db" \
            -1 "$T/r1.fq" -2 "$T/r2.fq" -o "$T/out.$gpus.kraken" -r "$T/out.$gpus.kreport"
    done
done
$B/kmerdb classify -vv --gpus all -d "$T/gpu.db" -1 "$T/r1.fq" -2 "$T/r2.fq" -r /dev/null 2>&1 | grep -E "device choice|classified on|index loaded"
for f in kraken kreport; do
    cmp "$T/out.0.$f" "$T/out.none.$f" && cmp "$T/out.all.$f" "$T/out.none.$f" \
        && echo "classify .$f: GPU, default and CPU identical" || { echo "classify .$f DIFFER"; status=1; }
done
rm -rf "$T"
[[ $status == 0 ]] && echo "SCALE: all passed" || echo "SCALE: FAILURES"
exit $status
