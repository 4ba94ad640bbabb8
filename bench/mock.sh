#!/usr/bin/env bash
# Dev-mock benchmark: index all of shared/data/refs, classify shared/data/reads/mock_R{1,2}.fq.gz,
# score against mock.truth.tsv. Kraken2 always (its database is built once and reused); kmerdb too when
# KMERDB is set (its index is rebuilt on every run unless KMERDB_REUSE=1).
#
# usage (from the repository root):   bench/mock.sh
#                                      KMERDB=target/release/kmerdb bench/mock.sh
# Everything is written under bench/work/mock/. Settings: see bench/lib.sh.
# Compare with REFERENCE.md section 7 (Kraken2 2.1.2: build 27.4 s, 835 MB, 71 MB; classify 0.94 s,
# 133 MB; species F1 0.9979, genus F1 0.9980).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh

W=bench/work/mock
REFS=$SHARED/data/refs
READS=$SHARED/data/reads
R1=$READS/mock_R1.fq.gz R2=$READS/mock_R2.fq.gz TRUTH=$READS/mock.truth.tsv

need_tools kraken2
mkdir -p "$W/results"
results=()

# ---- Kraken2 ------------------------------------------------------------------------------------------
kraken2_db "$REFS" "$W/kraken2_db"
read -r kb_wall kb_rss <<<"$(kraken2_build_step "$W/kraken2_db")"
read -r kt_wall kt_rss <<<"$(python3 "$BENCHLIB" timev "$W/kraken2_db.total.timev" 2>/dev/null || echo '- -')"
classify_kraken2 "$W/kraken2_db" mock "$R1" "$R2" "$W/results"
python3 "$BENCHLIB" record --out "$W/results/kraken2.mock.json" --tool "kraken2 $(kraken2 --version | head -1 | awk '{print $3}')" \
  --set mock --truth "$TRUTH" --nodes "$NODES" --calls "$W/results/kraken2.mock.kraken" \
  --time "$W/results/kraken2.mock.timev" --index all-refs \
  --build-wall "$kb_wall" --build-rss-kb "$kb_rss" --index-bytes "$(kraken2_index_bytes "$W/kraken2_db")"
results+=("$W/results/kraken2.mock.json")

# ==== kmerdb (only when KMERDB=path/to/kmerdb is given) ==================================================
kfail=0
if [[ -n ${KMERDB:-} ]]; then
  if kmerdb_check && kmerdb_build "$W/kmerdb.db" "$W/results/kmerdb.build.timev" "$W/results/kmerdb.build.log" \
      "$REFS/seqid2taxid.map" "$REFS" &&
     kmerdb_classify "$W/kmerdb.db" mock "$R1" "$R2" "$W/results" &&
     python3 "$BENCHLIB" record --out "$W/results/kmerdb.mock.json" --tool kmerdb --set mock \
       --truth "$TRUTH" --nodes "$NODES" --calls "$W/results/kmerdb.mock.kraken" \
       --time "$W/results/kmerdb.mock.timev" --index all-refs --kreport "$W/results/kmerdb.mock.kreport" \
       --index-bytes "$(bytes "$W/kmerdb.db")" \
       --build-time "$W/results/kmerdb.build.timev"; then
    results+=("$W/results/kmerdb.mock.json")
  else
    echo "kmerdb part failed" >&2; kfail=1
  fi
else
  log "KMERDB not set: kmerdb part skipped (KMERDB=path/to/kmerdb bench/mock.sh to run it)"
fi
# ==========================================================================================================

log "results ($THREADS threads; heavy steps under nice -n $NICE on a shared machine)"
{
  python3 "$BENCHLIB" table "${results[@]}"
  echo
  echo "Kraken2 build: the kraken2-build --build step alone (as in REFERENCE.md section 7) took ${kb_wall:-?} s," \
       "peak $(( ${kb_rss:-0} / 1024 )) MiB; the whole of shared/tools/kraken2_db.sh (taxonomy unpacking," \
       "--add-to-library of each genome, build) took ${kt_wall} s, peak $( [[ $kt_rss == - ]] && echo - || echo $((kt_rss / 1024)) ) MiB" \
       "(only known when the db was built by this script)."
} | tee "$W/results/table.md"
exit $kfail
