#!/usr/bin/env bash
# Negative controls (issue 33): reads that should stay unclassified. The mock community's reads with
# every read's bases shuffled (bench/shuffle_reads.py: same lengths and composition, seed 7),
# classified against all of shared/data/refs by Kraken 2, kmerdb, and kmerdb built with --protein
# (its amino-acid stage on). Prints each tool's false-positive rate (reads called at all) and what
# the calls were (top taxa).
#
# usage (from the repository root):   KMERDB=target/release/kmerdb bench/negative-controls.sh
# Written under bench/work/negative/ (Kraken 2's database is bench/mock.sh's, built once and reused).
# Settings: bench/lib.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh

W=bench/work/negative
REFS=$SHARED/data/refs
READS=$SHARED/data/reads
need_tools kraken2
kmerdb_check
mkdir -p "$W/results"
for m in R1 R2; do
  [[ -s $W/shuffled_$m.fq ]] || python3 bench/shuffle_reads.py "$READS/mock_$m.fq.gz" "$W/shuffled_$m.fq" 7
done
kraken2_db "$REFS" bench/work/mock/kraken2_db
classify_kraken2 bench/work/mock/kraken2_db shuffled "$W/shuffled_R1.fq" "$W/shuffled_R2.fq" "$W/results"
kmerdb_build "$W/kmerdb.db" "$W/results/kmerdb.build.timev" "$W/results/kmerdb.build.log" "$REFS/seqid2taxid.map" "$REFS"
KMERDB_BUILD_ARGS=--protein kmerdb_build "$W/kmerdb-protein.db" "$W/results/kmerdb-protein.build.timev" \
  "$W/results/kmerdb-protein.build.log" "$REFS/seqid2taxid.map" "$REFS"
kmerdb_classify "$W/kmerdb.db" shuffled "$W/shuffled_R1.fq" "$W/shuffled_R2.fq" "$W/results"
mkdir -p "$W/results/protein"
kmerdb_classify "$W/kmerdb-protein.db" shuffled "$W/shuffled_R1.fq" "$W/shuffled_R2.fq" "$W/results/protein"

echo
echo "| tool | shuffled read pairs | called | false-positive rate | most called taxa (taxid: reads) |"
echo "|---|---:|---:|---:|---|"
row() {
  local name=$1 calls=$2
  awk -F'\t' -v name="$name" '
    { n++ } $1 == "C" { c++; t[$3]++ }
    END {
      top = ""
      for (k = 0; k < 5; k++) { best = ""; for (x in t) if (best == "" || t[x] > t[best]) best = x
        if (best == "") break; top = top (top == "" ? "" : ", ") best ": " t[best]; delete t[best] }
      printf "| %s | %d | %d | %.3f%% | %s |\n", name, n, c, 100 * c / n, top }' "$calls"
}
row "Kraken 2 $(kraken2 --version | head -1 | awk '{print $3}')" "$W/results/kraken2.shuffled.kraken"
row "kmerdb" "$W/results/kmerdb.shuffled.kraken"
row "kmerdb --protein index" "$W/results/protein/kmerdb.shuffled.kraken"
