#!/usr/bin/env bash
# End-to-end classification on a GPU machine, timing the `kmerdb` binary as a user runs it
# (issue 13), with the host's limits measured in the same run. From the repository root, with
# carry/ prepared by scripts/prepare-gpu-carry.sh (called by scripts/gpu-tests.sh --classify-bench):
#
#   bench/gpu-classify.sh [PAIRS_M] [SAMPLES] [RUNS]      (defaults 20, 8, 3)
#
# 1. 20 M pairs of 150 bp as plain FASTQ in the page cache: the GPU (default flags) and the CPU
#    (--gpus none), all cores; per-read outputs and reports compared byte for byte.
# 2. The same pairs as 8 gzipped samples (one member a file) in one --samples run: GPU and CPU.
# 3. The mock (carry/reads) on carry/refs: default flags against --gpus none (the device choice).
# 4. The amino-acid stage: the mock repeated to 4 M pairs on carry/refs built with --protein and
#    without, on the GPU and the CPU; outputs compared.
# Limits: reading the FASTQ from the page cache (cat), and inflating the gzipped samples on
# every core at once (zcat, one process per file) and on one (kmerdb's decoder runs are in
# bench/decompress.sh). Medians of RUNS runs on the GPU; the CPU runs once.
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/carry/bin
PAIRS_M=${1:-20}
SAMPLES=${2:-8}
RUNS=${3:-3}
T=${KMERDB_BENCH_DIR:-/tmp/kmerdb-classify-bench}
threads=$(nproc)
status=0
rm -rf "$T" && mkdir -p "$T"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}

# Arithmetic with fractions (awk: bc may not be installed).
calc() { awk "BEGIN {printf \"%.6f\", $*}"; }
# Seconds since the epoch, with fractions.
now() { date +%s.%N; }
# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# timed NAME COMMAND...: runs COMMAND, prints and returns (in $secs) its wall time; stderr to $T/NAME.err
timed() {
    local name=$1 t0 t1
    shift
    t0=$(now)
    "$@" 2>"$T/$name.err" || { echo "$name FAILED:"; tail -5 "$T/$name.err"; status=1; }
    t1=$(now)
    secs=$(calc "$t1 - $t0")
}

# timeline NAME: when the run of NAME had the index ready, the loop done, the outputs synced, and
# everything done (its -v lines), on one line
timeline() {
    grep -E "index ready|outputs completed|classify finished" "$T/$1.err" | sed -E 's/.*\[([0-9.]+ s)\] (r1: )?/\1 /' |
        sed -E 's/ \(reports.*\)//' | paste -sd';' | sed 's/^/  timeline: /'
}

echo "== classify benchmark data ($PAIRS_M M pairs, $SAMPLES samples)"
$B/kmerdb-gpu-bench --classify-data "$T" --pairs-m "$PAIRS_M" --samples "$SAMPLES" || exit 1
pairs=$(awk "BEGIN {printf \"%d\", $PAIRS_M * 1000000}")
cd "$T"
# The generated files go to the disk first, so that their write-back does not compete with the runs' output.
sync

echo "== limits"
cat r1.fq r2.fq >/dev/null
timed cat sh -c "cat r1.fq r2.fq >/dev/null"
bytes=$(($(stat -c %s r1.fq) + $(stat -c %s r2.fq)))
printf "page cache read (cat): %.2f GB in %.2f s = %.2f GB/s\n" "$(calc "$bytes/1e9")" "$secs" "$(calc "$bytes/$secs/1e9")"
cat ./*.fq.gz >/dev/null
t0=$(now)
for f in ./*.fq.gz; do zcat "$f" >/dev/null & done
wait
t1=$(now)
gz_secs=$(calc "$t1 - $t0")
printf "zcat, %d files at once on %d cores: %.2f s = %.2f M pairs/s\n" "$((SAMPLES * 2))" "$threads" "$gz_secs" "$(calc "$pairs/$gz_secs/1e6")"
timed zcat1 sh -c "zcat s0_R1.fq.gz >/dev/null"
one=$(zcat s0_R1.fq.gz | wc -c)
printf "zcat, one file on one core: %.2f GB/s of FASTQ\n" "$(calc "$one/$secs/1e9")"

echo "== 1. $PAIRS_M M pairs, plain FASTQ, $threads threads"
for i in $(seq "$RUNS"); do
    # Each run writes a new file, as run 1 does: replacing the last run's 2 GB output would add
    # the file system's freeing of it (ext4 with `discard`: about 0.7 s), timed here on its own.
    if [[ -e gpu.kraken ]]; then
        timed rm-kraken rm gpu.kraken
        printf "  (removing the last run's output, not timed with the run: %.2f s)\n" "$secs"
    fi
    timed gpu-plain-$i $B/kmerdb classify -v -d refs.db -1 r1.fq -2 r2.fq -o gpu.kraken -r gpu.kreport
    echo "$secs" >>gpu-plain.times
    printf "GPU (default flags) run %d: %.2f s = %.2f M pairs/s\n" "$i" "$secs" "$(calc "$pairs/$secs/1e6")"
    timeline gpu-plain-$i
done
cat gpu-plain-1.err
timed gpu-plain-report $B/kmerdb classify -v -d refs.db -1 r1.fq -2 r2.fq -o /dev/null -r gpu-report-only.kreport
printf "GPU, the report only (no per-read output): %.2f s = %.2f M pairs/s\n" "$secs" "$(calc "$pairs/$secs/1e6")"
cat gpu-plain-report.err
timed cpu-plain $B/kmerdb classify --gpus none -d refs.db -1 r1.fq -2 r2.fq -o cpu.kraken -r cpu.kreport
cpu=$secs
gpu=$(median <gpu-plain.times)
printf "plain: GPU median %.2f s = %.2f M pairs/s; CPU %.2f s = %.2f M pairs/s; GPU/CPU %.1fx\n" "$gpu" \
    "$(calc "$pairs/$gpu/1e6")" "$cpu" "$(calc "$pairs/$cpu/1e6")" "$(calc "$cpu/$gpu")"
cmp gpu.kraken cpu.kraken && cmp gpu.kreport cpu.kreport && echo "plain: GPU and CPU outputs identical" \
    || { echo "plain: outputs DIFFER"; status=1; }
# The disk's share: writing the per-read output alone, synced as kmerdb syncs it (from the page cache).
rm -f cpu.kraken
cat gpu.kraken >/dev/null
timed dd-kraken dd if=gpu.kraken of=dd.kraken bs=8M conv=fdatasync
out_bytes=$(stat -c %s gpu.kraken)
printf "limit: writing the %.2f GB of per-read output (dd, fdatasync): %.2f s = %.2f GB/s, %.2f M pairs/s\n" \
    "$(calc "$out_bytes/1e9")" "$secs" "$(calc "$out_bytes/$secs/1e9")" "$(calc "$pairs/$secs/1e6")"
rm -f gpu.kraken dd.kraken

echo "== 2. $SAMPLES gzipped samples in one --samples run, $threads threads"
for i in $(seq "$RUNS"); do
    timed gpu-gz-$i $B/kmerdb classify -v -d refs.db --samples samples.tsv -o 'gpu-{sample}.kraken' -r 'gpu-{sample}.kreport'
    echo "$secs" >>gpu-gz.times
    printf "GPU (default flags) run %d: %.2f s = %.2f M pairs/s\n" "$i" "$secs" "$(calc "$pairs/$secs/1e6")"
done
cat gpu-gz-1.err
timed gpu-gz-half $B/kmerdb classify -d refs.db --samples samples.tsv --samples-at-once $((threads / 2)) \
    -o 'gpu-{sample}.kraken' -r 'gpu-{sample}.kreport'
printf "GPU, half the threads' samples at once (%d; the default is a quarter): %.2f s = %.2f M pairs/s\n" "$((threads / 2))" "$secs" \
    "$(calc "$pairs/$secs/1e6")"
timed cpu-gz $B/kmerdb classify --gpus none -d refs.db --samples samples.tsv -o 'cpu-{sample}.kraken' -r 'cpu-{sample}.kreport'
cpu=$secs
gpu=$(median <gpu-gz.times)
printf "gzip samples: GPU median %.2f s = %.2f M pairs/s; CPU %.2f s = %.2f M pairs/s; GPU/CPU %.1fx; zcat on all cores %.2f s\n" \
    "$gpu" "$(calc "$pairs/$gpu/1e6")" "$cpu" "$(calc "$pairs/$cpu/1e6")" "$(calc "$cpu/$gpu")" "$gz_secs"
same=1
for s in $(seq 0 $((SAMPLES - 1))); do
    cmp -s gpu-s$s.kraken cpu-s$s.kraken && cmp -s gpu-s$s.kreport cpu-s$s.kreport || same=0
done
((same)) && echo "gzip samples: GPU and CPU outputs identical" || { echo "gzip samples: outputs DIFFER"; status=1; }
rm -f ./*.kraken

echo "== 3. the mock: default flags against --gpus none"
cd - >/dev/null
$B/kmerdb build -q --gpus none carry/refs --taxonomy carry/taxonomy --seqid2taxid carry/refs/seqid2taxid.map -d "$T/mock.db"
for i in $(seq 5); do
    for mode in default none; do
        flag=()
        [[ $mode == none ]] && flag=(--gpus none)
        timed mock-$mode-$i $B/kmerdb classify "${flag[@]}" -d "$T/mock.db" -1 carry/reads/mock_R1.fq.gz \
            -2 carry/reads/mock_R2.fq.gz -o "$T/mock-$mode.kraken" -r "$T/mock-$mode.kreport"
        echo "$secs" >>"$T/mock-$mode.times"
    done
done
grep -h "info\|CPU\|GPU" "$T/mock-default-1.err" | head -3
printf "mock: default flags median %.3f s, --gpus none median %.3f s\n" "$(median <"$T/mock-default.times")" \
    "$(median <"$T/mock-none.times")"
cmp "$T/mock-default.kraken" "$T/mock-none.kraken" && echo "mock: outputs identical" || { echo "mock: outputs DIFFER"; status=1; }

echo "== 4. the amino-acid stage: the mock repeated to 4 M pairs, on a --protein index and on the DNA one"
$B/kmerdb build -q --gpus none --protein carry/refs --taxonomy carry/taxonomy --seqid2taxid carry/refs/seqid2taxid.map \
    -d "$T/mock-protein.db"
for mate in 1 2; do
    zcat carry/reads/mock_R$mate.fq.gz >"$T/one_R$mate.fq"
    for i in $(seq 100); do cat "$T/one_R$mate.fq"; done >"$T/big_R$mate.fq"
done
big=$(($(wc -l <"$T/big_R1.fq") / 4))
for db in mock mock-protein; do
    for mode in 0 none; do
        for i in $(seq "$RUNS"); do
            timed "big-$db-$mode-$i" $B/kmerdb classify -v --gpus $mode -d "$T/$db.db" -1 "$T/big_R1.fq" -2 "$T/big_R2.fq" \
                -o "$T/big-$db-$mode.kraken" -r "$T/big-$db-$mode.kreport"
            echo "$secs" >>"$T/big-$db-$mode.times"
        done
        printf "%s index, --gpus %s: median %.2f s = %.2f M pairs/s\n" "$db" "$mode" "$(median <"$T/big-$db-$mode.times")" \
            "$(calc "$big / $(median <"$T/big-$db-$mode.times") / 1e6")"
    done
    cmp "$T/big-$db-0.kraken" "$T/big-$db-none.kraken" && cmp "$T/big-$db-0.kreport" "$T/big-$db-none.kreport" \
        && echo "$db index: GPU and CPU outputs identical" || { echo "$db index: outputs DIFFER"; status=1; }
done
grep -h "GPU stages" "$T/big-mock-protein-0-1.err" | sed 's/^/  protein index, GPU: /'
grep -h "GPU stages" "$T/big-mock-0-1.err" | sed 's/^/  DNA index, GPU: /'
rm -rf "$T"
exit $status
