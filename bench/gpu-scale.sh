#!/usr/bin/env bash
# Build and classify at users' scale on a GPU machine (issue 31/32), the binary as users run it:
# GBP (20) of the strain-rich synthetic collection with its taxonomy, and PAIRS_M (4) million
# pairs (kmerdb-gpu-bench --scale-data, src/bin/kmerdb-gpu-bench/synth/scale.rs: species of 5 strains 1% apart; 75% of
# the pairs from indexed strains, 20% from a sixth strain of each species left out of the index,
# 5% from unrelated species; 0.5% substitutions). The index is built on the GPU and on the CPU (all
# cores), bytes compared; the pairs are classified on the GPU (--gpus 0), by default (--gpus all)
# and on the CPU (--gpus none), outputs compared, and the calls scored by kind of read
# (bench/score_kinds.py). The machine's limits in the same run: disk write (dd, fdatasync) and
# reading the reads from the page cache (cat). Every timed run writes new output files (the last
# run's are removed first, outside the timing): replacing a 1.7 GB Kraken file costs its unlink,
# 0.5-0.74 s on an H100 host's ext4, in the rename at the end.
# With CPU=0 the CPU's build and classify are left out (the GPUs' and the default's outputs are
# still compared): for many pairs, where the CPU would take minutes. BUILD_GPUS (0): the GPUs of
# the build; GPU_SETS ("0"): the --gpus lists classify runs besides the default (e.g. "0 0,1").
#   [CPU=0] [BUILD_GPUS=0,1] [GPU_SETS="0 0,1"] bench/gpu-scale.sh [GBP] [PAIRS_M]
# SCORE=0 leaves out the scoring of the calls; RUNS (3): classify runs of each device; STREAMS
# ("2"): the streams a GPU classifies on (KMERDB_GPU_STREAMS), each value timed for every GPU set
# (e.g. "1 2" to compare). AB="OLD NEW ..." (kmerdb binaries) times their classify instead, on
# every GPU set, RUNS runs each, interleaved, with -vv (index load, stage times, CPU time), and
# compares their outputs. ZSTD=1 writes the genomes compressed (zstd, level 1), so that 50 Gbp,
# its reads and its index fit one GPU machine's 64 GB disk; the build then reads .fna.zst.
# KEEP=1 keeps the collection, reads and index after an AB run; REUSE=1 uses them (same machine,
# GBP and PAIRS_M) instead of making them again: several AB calls in one lease. COLD=1 (AB runs)
# also times every binary with the reads read from the disk: before each such run the reads are
# dropped from the page cache (posix_fadvise DONTNEED, bench/lib.sh's `uncache`), and `cat` of the
# same files from the disk (both at once, as classify reads them) is that case's limit.
# UTIL=1 (AB runs) samples each GPU's utilization (nvidia-smi, every 100 ms: the share of the
# driver's last sample period in which a kernel ran) while each classify runs, and prints its
# median over the samples between the first and last nonzero one (the pipeline, roughly).
# (carry/ from scripts/prepare-gpu-carry.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/carry/bin
GBP=${1:-20}
PAIRS_M=${2:-4}
CPU=${CPU:-1}
BUILD_GPUS=${BUILD_GPUS:-0}
GPU_SETS=${GPU_SETS:-0}
RUNS=${RUNS:-3}
STREAMS=${STREAMS:-2}
T=${KMERDB_BENCH_DIR:-/tmp/kmerdb-scale}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
status=0
reuse=0
[[ ${REUSE:-0} == 1 && -f $T/gpu.db && -f $T/r1.fq && -f $T/r2.fq ]] && reuse=1
[[ $reuse == 1 ]] || { rm -rf "$T" && mkdir -p "$T"; }
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
echo "cores: $(nproc)"
source bench/lib.sh  # timed_line
if [[ $reuse == 1 ]]; then
    echo "reusing $T (REUSE=1): $(ls -l "$T/gpu.db" | awk '{print $5}') index bytes"
else
    timed_line "synthetic genomes ($GBP Gbp), taxonomy and $PAIRS_M M pairs written" \
        $B/kmerdb-gpu-bench --scale-data "$T" --e2e-gbp "$GBP" --pairs-m "$PAIRS_M" $([[ ${ZSTD:-0} == 1 ]] && echo --zstd-genomes)
    du -sh "$T"/genomes | sed 's/^/genomes on disk: /'
    dd if=/dev/zero of="$T/dd.test" bs=1M count=8192 conv=fdatasync 2>&1 | tail -1 | sed 's/^/limit: disk write (dd, 8 GiB): /'
    rm -f "$T/dd.test"
    cat "$T"/genomes/*.fna* >/dev/null
    tax=(--taxonomy "$T/taxonomy" --seqid2taxid "$T/seqid2taxid.map")
    timed_line "build --gpus $BUILD_GPUS" $B/kmerdb build -q --gpus $BUILD_GPUS "${tax[@]}" -d "$T/gpu.db" "$T/genomes"
    ls -l "$T/gpu.db" | awk -v g="$GBP" '{printf "index: %.2f GB, %.3f bytes a base\n", $5 / 1e9, $5 / (g * 1e9)}'
    if [[ $CPU == 1 ]]; then
        timed_line "build --gpus none" $B/kmerdb build -q --gpus none "${tax[@]}" -d "$T/cpu.db" "$T/genomes"
        cmp "$T/gpu.db" "$T/cpu.db" && echo "index bytes: GPU and CPU identical" || { echo "index bytes DIFFER"; status=1; }
        rm -f "$T/cpu.db"
    fi
    rm -rf "$T/genomes"
fi
cat "$T/r1.fq" "$T/r2.fq" >/dev/null
timed_line "limit: cat of the reads (page cache)" sh -c 'cat "$0" "$1" >/dev/null' "$T/r1.fq" "$T/r2.fq"
if [[ ${COLD:-0} == 1 ]]; then
    uncache "$T/r1.fq" "$T/r2.fq"
    timed_line "limit: cat of the reads from the disk (both files at once, as classify reads them)" sh -c \
        'cat "$0" >/dev/null & cat "$1" >/dev/null; wait' "$T/r1.fq" "$T/r2.fq"
fi
if [[ -n ${AB:-} ]]; then
    read -r -a bins <<<"$AB"
    first=$(basename "${bins[0]}")
    caches=(cached)
    [[ ${COLD:-0} == 1 ]] && caches+=(disk)
    for run in $(seq "$RUNS"); do
        for cache in "${caches[@]}"; do
            for gpus in $GPU_SETS; do
                for bin in "${bins[@]}"; do
                    name=$(basename "$bin")
                    rm -f "$T/ab.$name.$gpus.kraken" "$T/ab.$name.$gpus.kreport"
                    # Dropped before a disk run; read back before a cached run only where a disk run
                    # dropped them.
                    if [[ $cache == disk ]]; then
                        uncache "$T/r1.fq" "$T/r2.fq"
                    elif [[ ${COLD:-0} == 1 ]]; then
                        cat "$T/r1.fq" "$T/r2.fq" >/dev/null
                    fi
                    [[ ${UTIL:-0} == 1 ]] && { nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits -lms 100 >"$T/util.csv" & util=$!; }
                    timed_line "classify --gpus $gpus, $name ($PAIRS_M M pairs, reads $cache, run $run)" /usr/bin/time -f "  user %U s, system %S s" \
                        "$bin" classify -vv --gpus "$gpus" -d "$T/gpu.db" -1 "$T/r1.fq" -2 "$T/r2.fq" \
                        -o "$T/ab.$name.$gpus.kraken" -r "$T/ab.$name.$gpus.kreport" 2>"$T/ab.log"
                    if [[ ${UTIL:-0} == 1 ]]; then
                        kill "$util" 2>/dev/null; wait "$util" 2>/dev/null
                        python3 - "$T/util.csv" "$gpus" <<'PY'
import statistics, sys
samples = {}
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 2 and parts[1].isdigit():
        samples.setdefault(parts[0], []).append(int(parts[1]))
used = sys.argv[2].split(",")
out = []
for gpu in used:
    s = samples.get(gpu, [])
    busy = [i for i, v in enumerate(s) if v > 0]
    mid = s[busy[0]:busy[-1] + 1] if busy else []
    out.append(f"GPU {gpu} median {statistics.median(mid) if mid else 0}% over {len(mid)} samples")
print("  utilization (nvidia-smi, 100 ms):", "; ".join(out))
PY
                    fi
                    grep -E "index opened|GPU\(s\) started|index verified|index ready|index loaded|GPU stages|each stage|host CPU time|left to the CPU|outputs completed|summary made|freed in|closed in|user .* system" "$T/ab.log" \
                        | sed 's/^/  /'
                done
            done
        done
    done
    for f in kraken kreport; do
        same=1
        for gpus in $GPU_SETS; do
            for bin in "${bins[@]}"; do
                cmp -s "$T/ab.$first.${GPU_SETS%% *}.$f" "$T/ab.$(basename "$bin").$gpus.$f" || same=0
            done
        done
        [[ $same == 1 ]] && echo "classify .$f: identical across ${bins[*]##*/} on --gpus ${GPU_SETS// /, }" \
            || { echo "classify .$f DIFFER"; status=1; }
    done
    [[ ${KEEP:-0} == 1 ]] || rm -rf "$T"
    exit $status
fi
devices="$GPU_SETS all"
[[ $CPU == 1 ]] && devices="$GPU_SETS all none"
# Each GPU set once per streams value (runs interleaved: the machine's noise falls on all alike);
# the default and the CPU with the default streams.
runs=()
for gpus in $GPU_SETS; do
    for streams in $STREAMS; do runs+=("$gpus:$streams"); done
done
for gpus in $devices; do
    [[ " $GPU_SETS " == *" $gpus "* ]] || runs+=("$gpus:")
done
for run in $(seq "$RUNS"); do
    for r in "${runs[@]}"; do
        gpus=${r%%:*} streams=${r#*:}
        rm -f "$T/out.$gpus.$streams.kraken" "$T/out.$gpus.$streams.kreport"
        KMERDB_GPU_STREAMS=$streams timed_line "classify --gpus $gpus${streams:+, $streams streams a GPU} ($PAIRS_M M pairs, run $run)" \
            $B/kmerdb classify -q --gpus $gpus -d "$T/gpu.db" \
            -1 "$T/r1.fq" -2 "$T/r2.fq" -o "$T/out.$gpus.$streams.kraken" -r "$T/out.$gpus.$streams.kreport"
    done
done
for r in "${runs[@]}"; do
    gpus=${r%%:*} streams=${r#*:}
    [[ $gpus == none ]] && continue
    echo "-- --gpus $gpus${streams:+, $streams streams a GPU}:"
    # The wall time beside the run's own last timestamp: what the process's end (freeing the GPU's
    # memory, unmapping the index) costs.
    rm -f "$T/vv.kraken"
    KMERDB_GPU_STREAMS=$streams /usr/bin/time -f "wall time: %e s (user %U s, system %S s)" $B/kmerdb classify -vv \
        --gpus $gpus -d "$T/gpu.db" -1 "$T/r1.fq" -2 "$T/r2.fq" -o "$T/vv.kraken" -r /dev/null 2>&1 \
        | grep -E "device choice|index ready|classified on|GPU stages|each stage|outputs completed|summary made|freed in|closed in|wall time"
done
for f in kraken kreport; do
    same=1
    for r in "${runs[@]}"; do
        cmp -s "$T/out.${r%%:*}.${r#*:}.$f" "$T/out.all..$f" || same=0
    done
    [[ $same == 1 ]] && echo "classify .$f: identical across ${runs[*]} (--gpus:streams)" || { echo "classify .$f DIFFER"; status=1; }
done
if [[ ${SCORE:-1} == 1 ]]; then
    (cd bench && python3 score_kinds.py "$T/truth.tsv" "$T/taxonomy/nodes.dmp" "$T/out.all..kraken") || status=1
fi
rm -rf "$T"
[[ $status == 0 ]] && echo "SCALE: all passed" || echo "SCALE: FAILURES"
exit $status
