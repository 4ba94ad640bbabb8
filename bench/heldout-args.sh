#!/usr/bin/env bash
# Classifies the read sets of an earlier bench/heldout.sh run again with extra classify settings, and
# scores them as heldout.sh does (bench/benchlib.py): seconds a try, for sweeping the decision's
# settings against the held-out sets without rebuilding anything.
#   KMERDB=target/release/kmerdb bench/heldout-args.sh [SET] [--] [CLASSIFY ARGS...]
# SET: heldout (default), heldout-validation or heldout-families, the folder under bench/work/ that
# heldout.sh (with HELDOUT_SET for the others) wrote; its index (kmerdb.db) and reads are used.
# Prints heldout.sh's results table, one row per read set (tool "kmerdb ARGS").
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
SET=heldout
# A first word that is not an option names the set; `--` before the settings is optional.
if [[ -n ${1:-} && ${1:0:1} != - ]]; then SET=$1; shift; fi
[[ ${1:-} == -- ]] && shift
W=bench/work/$SET
[[ -f $W/kmerdb.db && -f $W/groups.tsv ]] || { echo "no $W/kmerdb.db: run bench/heldout.sh (KMERDB=...) first" >&2; exit 1; }
: "${KMERDB:?KMERDB=path/to/kmerdb}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
results=()
for sim in art dwgsim iss; do
  "$KMERDB" classify -q -d "$W/kmerdb.db" -t "$THREADS" -1 "$W/reads/${sim}_R1.fq.gz" -2 "$W/reads/${sim}_R2.fq.gz" \
    -o "$out/$sim.kraken" "$@"
  python3 "$BENCHLIB" record --out "$out/$sim.json" --tool "kmerdb $*" --set "$SET-$sim" \
    --truth "$W/reads/$sim.truth.tsv" --nodes "$NODES" --calls "$out/$sim.kraken" --groups "$W/groups.tsv" --index "$SET"
  results+=("$out/$sim.json")
done
python3 "$BENCHLIB" table "${results[@]}" | sed '/^$/q'
