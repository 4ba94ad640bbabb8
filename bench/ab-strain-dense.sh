#!/usr/bin/env bash
# Before and after on the strain-dense CPU classify (issue 32's CPU target): kmerdb binaries timed
# interleaved on both read sets of bench/strain-dense.sh's collection (made by that script first),
# so that a busy machine slows all alike. Prints each binary's median wall and CPU (user + system)
# time per read set, and checks that their per-read lines are identical.
#
#   bench/ab-strain-dense.sh RUNS KMERDB_1 KMERDB_2 ...    (BENCH_THREADS, 2 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
W=bench/work/strain-dense-dense
THREADS=${BENCH_THREADS:-2}
RUNS=${1:?usage: bench/ab-strain-dense.sh RUNS KMERDB_1 KMERDB_2 ...}
shift
[[ -f $W/kmerdb.db && -f $W/reads/indexed_R1.fq ]] || { echo "run bench/strain-dense.sh dense first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((i = 0; i < RUNS; i++)); do
    for b in "$@"; do
        for set in indexed held_out; do
            name=$(basename "$b")
            /usr/bin/time -f "$name $set %e %U %S" "$b" classify -d "$W/kmerdb.db" -t "$THREADS" \
                -1 "$W/reads/${set}_R1.fq" -2 "$W/reads/${set}_R2.fq" -o "$out/$name.$set.kraken" \
                -r "$out/$name.$set.kreport" 2>&1 | tail -1
        done
    done
done | python3 -c "
import sys, statistics, collections
times = collections.defaultdict(list)
for line in sys.stdin:
    name, s, wall, user, system = line.split()
    times[(name, s)].append((float(wall), float(user) + float(system)))
for (name, s), v in sorted(times.items()):
    print(f'{name} {s}: wall median {statistics.median(w for w, _ in v):.3f} s, CPU median {statistics.median(c for _, c in v):.3f} s ({len(v)} runs)')
"
first=$(basename "$1")
for b in "${@:2}"; do
    for set in indexed held_out; do
        cmp -s "$out/$first.$set.kraken" "$out/$(basename "$b").$set.kraken" \
            && echo "$set: $(basename "$b") per-read lines identical to $first" \
            || { echo "$set: $(basename "$b") per-read lines DIFFER from $first"; exit 1; }
    done
done
