#!/usr/bin/env bash
# Strain-dense collections (issue 31): many strains of one species, as RefSeq holds E. coli. Kraken 2
# and kmerdb index the same synthetic genomes and taxonomy (bench/strain_dense.py: deterministic), then
# classify reads of strains left out of the index and reads of indexed strains.
#
# usage (from the repository root):   KMERDB=target/release/kmerdb bench/strain-dense.sh [dense|large]
#   dense  one species in 300 strains of 200 kbp + 5 species of 5 strains (62 Mbp), a few minutes
#   large  40 species x 5 strains x 3 Mbp + one species of 300 strains of 1 Mbp (900 Mbp), about an
#          hour on 2 cores (Kraken 2's build is most of it)
# Writes under bench/work/strain-dense-SET/ (collection, reads and Kraken 2's database are made once);
# prints the table and keeps it in results/table.md. Settings: bench/lib.sh (BENCH_THREADS, BENCH_NICE),
# BENCH_RUNS (3): classify runs of each tool on each read set, interleaved; the table gives medians.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh

SET=${1:-dense}
W=bench/work/strain-dense-$SET
need_tools
kmerdb_check
if [[ ! -f $W/refs/seqid2taxid.map || ! -f $W/reads/indexed.truth.tsv ]]; then
  log "making the $SET collection in $W"
  rm -rf "$W"
  mkdir -p "$W"
  nice -n "$NICE" python3 bench/strain_dense.py make "$SET" "$W"
fi
TAX=$W/taxonomy   # kraken2_db and kmerdb_build read the taxonomy from here
R=$W/results
mkdir -p "$R"
bases=$(zcat "$W"/refs/*.fna.gz | grep -v '>' | tr -d '\n' | wc -c)

kraken2_db "$W/refs" "$W/kraken2_db"
kmerdb_build "$W/kmerdb.db" "$R/kmerdb.build.timev" "$R/kmerdb.build.log" "$W/refs/seqid2taxid.map" "$W/refs"
rm -f "$R"/*.timev.*
for ((run = 1; run <= ${BENCH_RUNS:-3}; run++)); do
  for set in held_out indexed; do
    classify_kraken2 "$W/kraken2_db" "$set" "$W/reads/${set}_R1.fq" "$W/reads/${set}_R2.fq" "$R"
    kmerdb_classify "$W/kmerdb.db" "$set" "$W/reads/${set}_R1.fq" "$W/reads/${set}_R2.fq" "$R"
    for tool in kraken2 kmerdb; do mv "$R/$tool.$set.timev" "$R/$tool.$set.timev.$run"; done
  done
done
"$KMERDB" info "$W/kmerdb.db" >"$R/kmerdb.info.txt"

python3 - "$W" "$R" "$bases" "$(kraken2_index_bytes "$W/kraken2_db")" "$(kraken2_build_step "$W/kraken2_db")" \
  "$(bytes "$W/kmerdb.db")" >"$R/table.md" <<'PY'
import sys
sys.path.insert(0, 'bench')
import glob, statistics
from benchlib import parse_timev, run_score

def median_timev(prefix):
    """Median wall and peak memory of the runs' /usr/bin/time -v files."""
    runs = [parse_timev(p) for p in sorted(glob.glob(prefix + '.*'))]
    return statistics.median(w for w, _ in runs), statistics.median(r for _, r in runs), len(runs)
W, R, bases, k2_bytes, k2_build, db_bytes = sys.argv[1:7]
bases = int(bases)
nodes = f'{W}/taxonomy/nodes.dmp.gz'
k2_wall, k2_rss = (float(x) for x in k2_build.split())
kb_wall, kb_rss = parse_timev(f'{R}/kmerdb.build.timev')
print(f'Collection {W.split("-")[-1]}: {bases / 1e6:.1f} Mbp.\n')
print('| tool | index | B/base | build s | build peak MB | reads (pairs) | at species | species F1 | genus F1 | classify s (whole set) | pairs/s | peak MB |')
print('|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|')
# The held-out reads split by their species: the strain of the dense species, the others'.
sets = []
for s in ('held_out', 'indexed'):
    rows = open(f'{W}/reads/{s}.truth.tsv').read().splitlines()
    if s == 'indexed':
        sets.append(('indexed strains', s, f'{W}/reads/{s}.truth.tsv'))
        continue
    for name, keep in (('new strain, dense species', True), ('new strain, 5-strain species', False)):
        path = f'{R}/truth.{s}.{"dense" if keep else "other"}.tsv'
        with open(path, 'w') as f:
            f.write(rows[0] + '\n')
            f.writelines(r + '\n' for r in rows[1:] if r.startswith('ho_Densus_multus') == keep)
        sets.append((name, s, path))
for tool, size, bw, brss in (('Kraken 2', int(k2_bytes), k2_wall, k2_rss), ('kmerdb', int(db_bytes), kb_wall, kb_rss)):
    key = 'kraken2' if tool == 'Kraken 2' else 'kmerdb'
    for name, s, truth in sets:
        # score.py refuses calls of reads its truth lacks: the calls of this subset only.
        ids = {l.split('\t')[0] for l in open(truth).read().splitlines()[1:]}
        calls = f'{R}/{key}.{s}.subset.kraken'
        with open(f'{R}/{key}.{s}.kraken') as f, open(calls, 'w') as out:
            out.writelines(l for l in f if l.split('\t')[1].removesuffix('/1') in ids)
        sc = run_score(truth, nodes, calls)
        wall, rss, runs = median_timev(f'{R}/{key}.{s}.timev')
        sp, ge = sc['ranks']['species'], sc['ranks']['genus']
        pairs = sum(1 for _ in open(f'{W}/reads/{s}.truth.tsv')) - 1
        print(f"| {tool} | {size / 1e6:.1f} MB | {size / bases:.3f} | {bw:.1f} | {brss / 1024:.0f} | {name} ({sc['reads']:,}) "
              f"| {100 * sp['correct'] / sp['reads']:.1f}% | {sp['f1']:.4f} | {ge['f1']:.4f} | {wall:.2f} "
              f"| {pairs / wall:,.0f} | {rss / 1024:.0f} |")
print(f'\nClassify times and peak memory: medians of {runs} runs, the tools interleaved.')
print('"at species": reads whose call is the true species or below it (score.py\'s correct at species).')
print('Build times are single runs on a shared machine; Kraken 2\'s build is its `--build` step.')
PY
cat "$R/table.md"
