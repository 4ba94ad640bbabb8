#!/usr/bin/env bash
# Classification throughput on at least 1 M read pairs, so that start-up cost does not hide it:
# the dev mock repeated 26 times (1,027,104 pairs of 2x150 bp, uncompressed FASTQ, page cache),
# Kraken2 and kmerdb with the same threads on the indexes bench/mock.sh built.
#
#   KMERDB=target/release/kmerdb bench/throughput.sh        (run bench/mock.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared}
THREADS=${BENCH_THREADS:-2}
REPEAT=${REPEAT:-26}
W=bench/work/throughput
M=bench/work/mock
KMERDB=${KMERDB:?set KMERDB=path/to/kmerdb}
mkdir -p "$W"
[[ -s $M/kmerdb.db && -d $M/kraken2_db ]] || { echo "run bench/mock.sh first (it builds both indexes)" >&2; exit 1; }
if [[ ! -s $W/big_R2.fq ]]; then
    for mate in 1 2; do
        zcat "$SHARED/data/reads/mock_R$mate.fq.gz" > "$W/one_R$mate.fq"
        for ((i = 0; i < REPEAT; i++)); do cat "$W/one_R$mate.fq"; done > "$W/big_R$mate.fq"
    done
fi
pairs=$(( $(wc -l < "$W/big_R1.fq") / 4 ))
cat "$W"/big_R?.fq > /dev/null   # into the page cache
timed() { # name, command...: prints "name wall_s peak_kB"
    local name=$1; shift
    /usr/bin/time -f "%e %M" -o "$W/$name.time" "$@" > /dev/null 2> "$W/$name.log"
    echo "$name $(cat "$W/$name.time")"
}
echo "pairs: $pairs, threads: $THREADS"
for run in 1 2 3; do
    timed "kraken2.$run" kraken2 --db "$M/kraken2_db" --threads "$THREADS" --paired \
        --output "$W/k2.out" --report "$W/k2.kreport" "$W/big_R1.fq" "$W/big_R2.fq"
    timed "kmerdb.$run" "$KMERDB" classify -d "$M/kmerdb.db" -t "$THREADS" \
        -1 "$W/big_R1.fq" -2 "$W/big_R2.fq" -o "$W/kmerdb.out" -r "$W/kmerdb.kreport"
done | tee "$W/times.txt"
python3 - "$W/times.txt" "$pairs" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    name, wall, kb = line.split()
    times.setdefault(name.split('.')[0], []).append((float(wall), int(kb)))
pairs = int(sys.argv[2])
med = {t: statistics.median(w for w, _ in v) for t, v in times.items()}
print("| tool | median wall (3 runs) | pairs/s | peak RSS |")
print("|---|---:|---:|---:|")
for t, v in times.items():
    print(f"| {t} | {med[t]:.2f} s | {pairs / med[t]:,.0f} | {max(k for _, k in v) / 1024:.0f} MiB |")
print(f"\nkmerdb / kraken2 throughput: {med['kraken2'] / med['kmerdb']:.2f}x")
PY
