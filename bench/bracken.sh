#!/usr/bin/env bash
# Bracken on kmerdb's outputs: `kmerdb bracken-prep` makes the read distribution of an index of all of
# shared/data/refs, kmerdb classifies the mock, and Bracken 2.9's est_abundance.py re-estimates the
# species abundances from the kreport. Species fractions are compared with the mock's truth (L1
# distance, in percentage points), before and after Bracken.
#
# usage (from the repository root):   BRACKEN=path/to/Bracken KMERDB=target/release/kmerdb bench/bracken.sh
# BRACKEN is a Bracken 2.9 checkout (its src/est_abundance.py is run; Bracken is not packaged in
# Debian or PyPI). Everything is written under bench/work/bracken/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh

: "${BRACKEN:?set BRACKEN to a Bracken 2.9 checkout}" "${KMERDB:?set KMERDB to the kmerdb binary}"
W=bench/work/bracken
REFS=$SHARED/data/refs
READS=$SHARED/data/reads
mkdir -p "$W"
kmerdb_check
kmerdb_build "$W/kmerdb.db" "$W/build.timev" "$W/build.log" "$REFS/seqid2taxid.map" "$REFS"
log "kmerdb bracken-prep -r 150"
timed "$W/bracken-prep.timev" "$W/bracken-prep.log" "$KMERDB" bracken-prep -d "$W/kmerdb.db" -r 150 -t "$THREADS" "$REFS"
kmerdb_classify "$W/kmerdb.db" mock "$READS/mock_R1.fq.gz" "$READS/mock_R2.fq.gz" "$W"
log "Bracken $(grep -m1 '^VERSION=' "$BRACKEN/bracken" | cut -d'"' -f2): est_abundance.py -l S -t 10"
python3 "$BRACKEN/src/est_abundance.py" -i "$W/kmerdb.mock.kreport" -k "$W/database150mers.kmer_distrib" \
  -o "$W/mock.bracken" -l S -t 10 >"$W/bracken.log"
python3 - "$READS/mock.truth.tsv" "$NODES" "$W/kmerdb.mock.kreport" "$W/mock.bracken" <<'PY'
import gzip, sys, collections
truth, nodes, kreport, bracken = sys.argv[1:]
parent, rank = {}, {}
with gzip.open(nodes, 'rt') as f:
    for l in f:
        x = l.split('\t|\t'); parent[x[0]] = x[1]; rank[x[0]] = x[2]
def species(t):
    while t in parent and rank[t] != 'species' and parent[t] != t: t = parent[t]
    return t if rank.get(t) == 'species' else None
counts = collections.Counter(species(l.split('\t')[2]) for l in list(open(truth))[1:])
true = {s: n / sum(counts.values()) for s, n in counts.items()}
# The kreport's species rows (clade reads), as fractions of the reads classified at species or below.
kr = {}
for l in open(kreport):
    x = l.rstrip('\n').split('\t')
    if x[3] == 'S': kr[x[4]] = int(x[1])
kr = {s: n / sum(kr.values()) for s, n in kr.items()}
br = {}
for l in list(open(bracken))[1:]:
    x = l.rstrip('\n').split('\t'); br[x[1]] = float(x[6])
names = {}
def l1(est): return 100 * sum(abs(est.get(s, 0) - true.get(s, 0)) for s in set(est) | set(true))
print(f"{'species':>10} {'truth %':>8} {'kreport %':>10} {'Bracken %':>10}")
for s in sorted(true, key=lambda s: -true[s]):
    print(f"{s:>10} {100*true[s]:8.2f} {100*kr.get(s,0):10.2f} {100*br.get(s,0):10.2f}")
print(f"L1 distance to the truth (percentage points): kreport {l1(kr):.2f}, Bracken {l1(br):.2f}")
PY
