#!/usr/bin/env bash
# Before and after on the CPU: two kmerdb binaries timed in one run, interleaved, so that a busy
# machine slows both alike (quote the medians and their ratio).
#
#   bench/ab-cpu.sh OLD_KMERDB NEW_KMERDB
#
# Each binary builds ../shared/data/refs with the full taxonomy (3 builds each, alternating; each
# binary keeps its own index, as two format versions may differ), then classifies the dev mock (5
# runs each) and the 1,027,104 pairs of bench/throughput.sh (3 runs each), alternating, with
# BENCH_THREADS threads (2). The per-read outputs and reports of the two must be identical. Writes
# under bench/work/ab/.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared}
THREADS=${BENCH_THREADS:-2}
OLD=$(realpath "${1:?usage: bench/ab-cpu.sh OLD_KMERDB NEW_KMERDB}")
NEW=$(realpath "${2:?usage: bench/ab-cpu.sh OLD_KMERDB NEW_KMERDB}")
W=bench/work/ab
T=bench/work/throughput
mkdir -p "$W" "$T"
if [[ ! -s $T/big_R2.fq ]]; then
    for mate in 1 2; do
        zcat "$SHARED/data/reads/mock_R$mate.fq.gz" > "$T/one_R$mate.fq"
        for ((i = 0; i < 26; i++)); do cat "$T/one_R$mate.fq"; done > "$T/big_R$mate.fq"
    done
fi
cat "$T"/big_R?.fq > /dev/null # into the page cache
export SOURCE_DATE_EPOCH=1700000000
timed() { # name, command...: appends "name wall_s peak_kB" to times.txt
    local name=$1
    shift
    /usr/bin/time -f "%e %M" -o "$W/$name.time" "$@" > /dev/null 2> "$W/$name.log"
    echo "$name $(cat "$W/$name.time")" | tee -a "$W/times.txt"
}
: > "$W/times.txt"
for run in 1 2 3; do
    for which in old new; do
        bin=$OLD
        [[ $which == new ]] && bin=$NEW
        timed "build.$which.$run" "$bin" build -t "$THREADS" --gpus none -d "$W/$which.db" \
            --taxonomy "$SHARED/data/taxonomy" --seqid2taxid "$SHARED/data/refs/seqid2taxid.map" "$SHARED/data/refs"
    done
done
for run in 1 2 3 4 5; do
    for which in old new; do
        bin=$OLD
        [[ $which == new ]] && bin=$NEW
        timed "mock.$which.$run" "$bin" classify -t "$THREADS" --gpus none -d "$W/$which.db" \
            -1 "$SHARED/data/reads/mock_R1.fq.gz" -2 "$SHARED/data/reads/mock_R2.fq.gz" \
            -o "$W/mock.$which.kraken" -r "$W/mock.$which.kreport"
    done
done
for run in 1 2 3; do
    for which in old new; do
        bin=$OLD
        [[ $which == new ]] && bin=$NEW
        timed "pairs.$which.$run" "$bin" classify -t "$THREADS" --gpus none -d "$W/$which.db" \
            -1 "$T/big_R1.fq" -2 "$T/big_R2.fq" -o "$W/pairs.$which.kraken" -r "$W/pairs.$which.kreport"
    done
done
for f in mock.kraken mock.kreport pairs.kraken pairs.kreport; do
    cmp "$W/${f%%.*}.old.${f#*.}" "$W/${f%%.*}.new.${f#*.}" || { echo "outputs differ: $f" >&2; exit 1; }
done
echo "outputs identical (per-read lines and reports, mock and 1 M pairs)"
python3 - "$W/times.txt" <<'PY'
import statistics, sys
t = {}
for line in open(sys.argv[1]):
    name, wall, kb = line.split()
    what, which, _ = name.split(".")
    t.setdefault((what, which), []).append((float(wall), int(kb)))
print("| step | old: median wall (runs) | new: median wall (runs) | new / old | peak RSS old / new |")
print("|---|---:|---:|---:|---:|")
for what in ("build", "mock", "pairs"):
    o, n = t[(what, "old")], t[(what, "new")]
    mo, mn = statistics.median(w for w, _ in o), statistics.median(w for w, _ in n)
    runs = lambda v: ", ".join(f"{w:.2f}" for w, _ in v)
    rss = lambda v: max(k for _, k in v) / 1024
    print(f"| {what} | {mo:.2f} s ({runs(o)}) | {mn:.2f} s ({runs(n)}) | {mn / mo:.3f} | {rss(o):.0f} / {rss(n):.0f} MiB |")
PY
