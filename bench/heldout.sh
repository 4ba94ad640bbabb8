#!/usr/bin/env bash
# Strain-exclusion benchmark: genomes left out of the index, reads simulated from them (ART, dwgsim and
# InSilicoSeq),
# classified by Kraken2 (and kmerdb when KMERDB is set), scored at species, genus and family rank.
#
# usage (from the repository root):   bench/heldout.sh
#                                      KMERDB=target/release/kmerdb bench/heldout.sh
#                                      HELDOUT_SET=validation KMERDB=... bench/heldout.sh
#                                      KMERDB_BUILD_ARGS=--protein KMERDB=... bench/heldout.sh
# HELDOUT_SET=validation leaves out another list of genomes (below), written under
# bench/work/heldout-validation/: figures tuned on the first set are checked there.
# HELDOUT_SET=families leaves out whole families (bench/work/heldout-families/): negative controls,
# every call at family or below is wrong.
# Everything is written under bench/work/heldout/. Simulated reads and the Kraken2 database are reused on
# later runs (they are redone when the list or the simulation settings below change); kmerdb's index is
# rebuilt on every run unless KMERDB_REUSE=1. Other settings: see bench/lib.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh

W=bench/work/heldout
[[ ${HELDOUT_SET:-} == validation ]] && W=bench/work/heldout-validation
[[ ${HELDOUT_SET:-} == families ]] && W=bench/work/heldout-families
REFS=$SHARED/data/refs
MANIFEST=$REFS/manifest.tsv

# ---------------------------------------------------------------------------------------------------
# Genomes left out of the index: id, group (the deepest rank at which the index still holds a relative;
# checked against the taxonomy below), reads pairs per simulator, why.
LEFT_OUT=(
  "Ecoli_536           species 2000  UPEC strain; 5 other E. coli strains stay (K-12s, DH1, W, EC590)"
  "Kpn_1084            species 2000  K. pneumoniae; HS11286 and MGH78578 stay"
  "Sau_TW20            species 2000  S. aureus ST239 (hospital MRSA); 6 other S. aureus stay"
  "Sau_RF122           species 2000  S. aureus bovine ST151, a divergent lineage; 6 other S. aureus stay"
  "Vch_O395            species 2000  V. cholerae classical biotype; the El Tor strains N16961, Inaba stay"
  "Hpy_Gambia94_24     species 2000  H. pylori, African isolate (H. pylori is very diverse); 4 others stay"
  "DWV_NC_004830       species  750  Deformed wing virus; the recombinant VDV-1/DWV stays (same taxid)"
  "DENV2               species  750  dengue serotype 2; DENV1 and DENV3 stay (one species, ~65-70% nt id)"
  "IAV_H2N2_Korea1968  species  750  influenza A H2N2; H1N1 PR8 and H3N2 (internal segments) stay"
  "SUDV                genus    750  Sudan ebolavirus: species alone, Bundibugyo ebolavirus stays in genus"
  "ZIKV                genus    750  Zika: species alone, DENV/WNV stay in genus Orthoflavivirus"
  "VDV1                genus    750  Varroa destructor virus 1: species alone, DWV stays in genus Iflavirus"
  "Mtb_H37Rv           none    2000  M. tuberculosis: nothing of its genus or family stays (FP control)"
  "IBV_Brisbane60      family   750  influenza B: genus alone, influenza A stays in the family (FP control)"
  "Mumps               family   750  mumps: genus alone, measles stays in Paramyxoviridae (FP control)"
)
if [[ ${HELDOUT_SET:-} == validation ]]; then
LEFT_OUT=(
  "Ecoli_W             species 2000  E. coli W; 5 other E. coli strains stay"
  "Kpn_MGH78578        species 2000  K. pneumoniae; HS11286 and 1084 stay"
  "Sau_N315            species 2000  S. aureus ST5; 7 other S. aureus stay"
  "Vch_N16961          species 2000  V. cholerae El Tor; O395 and Inaba stay"
  "Hpy_SJM180          species 2000  H. pylori; 4 others stay"
  "DENV3               species  750  dengue serotype 3; DENV1 and DENV2 stay"
  "IAV_H1N1_PR8        species  750  influenza A H1N1; H2N2 and H3N2 (internal segments) stay"
  "BDBV                genus    750  Bundibugyo ebolavirus: species alone, Sudan ebolavirus stays in genus"
  "WNV_L1              genus    750  West Nile: species alone, dengue and Zika stay in genus Orthoflavivirus"
  "Cdi_NCTC11397       none    2000  C. diphtheriae: nothing of its genus or family stays (FP control)"
  "Measles             family   750  measles: genus alone, mumps stays in Paramyxoviridae (FP control)"
)
fi
# Negative controls (issue 33): whole families left out, so that every call at family or below is
# a false positive; the per-group table's "wrong" column is each tool's false-positive rate.
if [[ ${HELDOUT_SET:-} == families ]]; then
LEFT_OUT=(
  "Hpy_Puno120         none     400  Helicobacteraceae: all five H. pylori out"
  "Hpy_ELS37           none     400  Helicobacteraceae"
  "Hpy_SJM180          none     400  Helicobacteraceae"
  "Hpy_Gambia94_24     none     400  Helicobacteraceae"
  "Hpy_G27             none     400  Helicobacteraceae"
  "Mtb_H37Rv           none    2000  Mycobacteriaceae (C. diphtheriae stays in the order)"
  "Marburg             none     750  Filoviridae: Marburg and both ebolaviruses out"
  "BDBV                none     750  Filoviridae"
  "SUDV                none     750  Filoviridae"
  "IAV_H1N1_PR8        none     500  Orthomyxoviridae: the three influenza A and influenza B out"
  "IAV_H2N2_Korea1968  none     500  Orthomyxoviridae"
  "IAV_H3N2_NY392      none     500  Orthomyxoviridae"
  "IBV_Brisbane60      none     500  Orthomyxoviridae"
)
fi
SEED=20261101
READ_LEN=150 FRAG=400 FRAG_SD=30
ART_ARGS="-ss HS25 -l $READ_LEN -m $FRAG -s $FRAG_SD -p -na"
DWGSIM_ARGS="-H -1 $READ_LEN -2 $READ_LEN -d $FRAG -s $FRAG_SD -e 0.01 -E 0.01 -r 0.005 -y 0 -n 5 -o 1"
# InSilicoSeq's NovaSeq model (151 bp reads, its own insert sizes); each sequence of a genome at the
# same coverage (a coverage file), so that reads follow length as with ART and dwgsim.
ISS_ARGS="--model novaseq"
SETS=(art dwgsim iss)
# ---------------------------------------------------------------------------------------------------

need_tools art dwgsim iss
mkdir -p "$W"
ids=() ; for l in "${LEFT_OUT[@]}"; do read -r id _ <<<"$l"; ids+=("$id"); done

# The data made here depends on these settings only; a change wipes it.
config=$(printf '%s\n' "${LEFT_OUT[@]}" "seed $SEED" "art $ART_ARGS" "dwgsim $DWGSIM_ARGS" "iss $ISS_ARGS" \
  "$(md5sum "$MANIFEST" "$REFS/seqid2taxid.map" | cut -d' ' -f1)")
if [[ -f $W/config.txt && $(cat "$W/config.txt") != "$config" ]]; then
  log "settings changed since the last run: removing the old $W"
  rm -rf "${W:?}"/{index_refs,reads,sim,kraken2_db,kraken2_db.total.timev,kmerdb.db,results}
fi
printf '%s\n' "$config" >"$W/config.txt"

log "left-out genomes and their closest relatives in the index"
python3 "$BENCHLIB" relatives "$MANIFEST" "$NODES" "${ids[@]}" | tee "$W/relatives.tsv" | column -t >&2
: >"$W/groups.tsv"
for l in "${LEFT_OUT[@]}"; do
  read -r id grp _ <<<"$l"
  got=$(awk -F'\t' -v g="$id" '$1==g{print $6}' "$W/relatives.tsv")
  [[ $got == "$grp" ]] || { echo "heldout.sh: $id is listed as '$grp' but its deepest shared rank is '$got'" >&2; exit 1; }
  printf '%s\t%s\n' "$id" "$grp" >>"$W/groups.tsv"
done

# ---- index_refs: the remaining genomes (symlinks), their seqid2taxid.map and manifest ----------------
if [[ ! -f $W/index_refs/seqid2taxid.map ]]; then
  log "index_refs: $(( $(tail -n +2 "$MANIFEST" | wc -l) - ${#ids[@]} )) genomes"
  rm -rf "$W/index_refs"; mkdir -p "$W/index_refs.tmp"
  printf '%s\n' "${ids[@]}" >"$W/left_out.txt"
  awk -F'\t' 'NR==FNR{out[$1]=1; next} FNR==1 || !($1 in out)' "$W/left_out.txt" "$MANIFEST" \
    >"$W/index_refs.tmp/manifest.tsv"
  tail -n +2 "$W/index_refs.tmp/manifest.tsv" | while IFS=$'\t' read -r gid _; do
    ln -s "$(cd "$REFS" && pwd)/$gid.fna.gz" "$W/index_refs.tmp/$gid.fna.gz"
  done
  tail -n +2 "$W/index_refs.tmp/manifest.tsv" | cut -f8 | tr ',' '\n' \
    | awk -F'\t' 'NR==FNR{keep[$1]=1; next} $1 in keep' - "$REFS/seqid2taxid.map" >"$W/index_refs.tmp/seqid2taxid.map"
  mv "$W/index_refs.tmp" "$W/index_refs"
fi
echo "index: $(find "$W/index_refs/" -name "*.fna.gz" | wc -l) genomes, $(wc -l <"$W/index_refs/seqid2taxid.map") sequences" >&2

# ---- reads ----------------------------------------------------------------------------------------------
genome_bp() { awk -F'\t' -v g="$1" '$1==g{print $6}' "$MANIFEST"; }
simulate() { # SIM
  local sim=$1 d=$W/sim/$1 inputs=() i=0 l id grp pairs fa
  rm -rf "$d"; mkdir -p "$d"
  for l in "${LEFT_OUT[@]}"; do
    read -r id grp pairs _ <<<"$l"
    i=$((i + 1)); fa=$d/$id.fa
    zcat "$REFS/$id.fna.gz" >"$fa"
    case $sim in
      art)
        # ART takes a fold coverage: pairs * 2 * read length / genome length. ART drops read pairs that
        # would contain an N, so a genome with scattered Ns (DWV_NC_004830 has 69) gives too few: then
        # the coverage is raised once by the shortfall (deterministic: same seed, same inputs).
        local f got
        f=$(awk -v p="$pairs" -v l="$READ_LEN" -v b="$(genome_bp "$id")" 'BEGIN{printf "%.6f", p*2*l/b}')
        # shellcheck disable=SC2086
        nice -n "$NICE" art_illumina $ART_ARGS -f "$f" -rs $((SEED + i)) -i "$fa" -o "$d/$id." >"$d/$id.log" 2>&1
        got=$(( $(wc -l <"$d/$id.1.fq") / 4 ))
        if (( got > 0 && got < pairs * 9 / 10 )); then
          f=$(awk -v f="$f" -v p="$pairs" -v g="$got" 'BEGIN{printf "%.6f", f*p/g}')
          echo "  art: $id gave $got of $pairs pairs (Ns in the reference?): coverage raised to $f" >&2
          # shellcheck disable=SC2086
          nice -n "$NICE" art_illumina $ART_ARGS -f "$f" -rs $((SEED + i)) -i "$fa" -o "$d/$id." >"$d/$id.log" 2>&1
        fi
        inputs+=("$id:$fa:$d/$id.1.fq:$d/$id.2.fq") ;;
      dwgsim)
        # shellcheck disable=SC2086
        nice -n "$NICE" dwgsim $DWGSIM_ARGS -N "$pairs" -z $((SEED + i)) "$fa" "$d/$id" >"$d/$id.log" 2>&1
        inputs+=("$id:$fa:$d/$id.bwa.read1.fastq.gz:$d/$id.bwa.read2.fastq.gz") ;;
      iss)
        local f
        f=$(awk -v p="$pairs" -v l="$READ_LEN" -v b="$(genome_bp "$id")" 'BEGIN{printf "%.6f", p*2*l/b}')
        grep '>' "$fa" | sed 's/^>//; s/[[:space:]].*//' | awk -v f="$f" '{print $1 "\t" f}' >"$d/$id.coverage"
        # shellcheck disable=SC2086
        nice -n "$NICE" iss generate --genomes "$fa" --coverage_file "$d/$id.coverage" $ISS_ARGS --seed $((SEED + i)) \
          --cpus 1 --quiet --output "$d/$id" >"$d/$id.log" 2>&1
        inputs+=("$id:$fa:$d/${id}_R1.fastq:$d/${id}_R2.fastq") ;;
    esac
  done
  python3 "$BENCHLIB" merge --sim "$sim" --seed "$SEED" --manifest "$MANIFEST" --out "$W/reads/$sim" "${inputs[@]}" >&2
  rm -rf "$d"
}
for sim in "${SETS[@]}"; do
  if [[ -f $W/reads/$sim.truth.tsv ]]; then
    echo "reads exist, reused: $W/reads/${sim}_R{1,2}.fq.gz ($(($(wc -l <"$W/reads/$sim.truth.tsv") - 1)) pairs)" >&2
  else
    log "simulating $sim reads"; simulate "$sim"
  fi
done

# ---- Kraken2 ------------------------------------------------------------------------------------------
mkdir -p "$W/results"
results=()
kraken2_db "$W/index_refs" "$W/kraken2_db"
read -r kb_wall kb_rss <<<"$(kraken2_build_step "$W/kraken2_db")"
for sim in "${SETS[@]}"; do
  classify_kraken2 "$W/kraken2_db" "$sim" "$W/reads/${sim}_R1.fq.gz" "$W/reads/${sim}_R2.fq.gz" "$W/results"
  python3 "$BENCHLIB" record --out "$W/results/kraken2.$sim.json" --tool "kraken2 $(kraken2 --version | head -1 | awk '{print $3}')" \
    --set "heldout-$sim" --truth "$W/reads/$sim.truth.tsv" --nodes "$NODES" --calls "$W/results/kraken2.$sim.kraken" \
    --time "$W/results/kraken2.$sim.timev" --groups "$W/groups.tsv" --index heldout \
    --build-wall "$kb_wall" --build-rss-kb "$kb_rss" --index-bytes "$(kraken2_index_bytes "$W/kraken2_db")"
  results+=("$W/results/kraken2.$sim.json")
done

# ==== kmerdb (only when KMERDB=path/to/kmerdb is given) ==================================================
kfail=0
if [[ -n ${KMERDB:-} ]]; then
  if kmerdb_check && kmerdb_build "$W/kmerdb.db" "$W/results/kmerdb.build.timev" "$W/results/kmerdb.build.log" \
      "$W/index_refs/seqid2taxid.map" "$W/index_refs"; then
    for sim in "${SETS[@]}"; do
      if kmerdb_classify "$W/kmerdb.db" "$sim" "$W/reads/${sim}_R1.fq.gz" "$W/reads/${sim}_R2.fq.gz" "$W/results" &&
         python3 "$BENCHLIB" record --out "$W/results/kmerdb.$sim.json" --tool kmerdb --set "heldout-$sim" \
           --truth "$W/reads/$sim.truth.tsv" --nodes "$NODES" --calls "$W/results/kmerdb.$sim.kraken" \
           --time "$W/results/kmerdb.$sim.timev" --groups "$W/groups.tsv" --index heldout \
           --kreport "$W/results/kmerdb.$sim.kreport" --index-bytes "$(bytes "$W/kmerdb.db")" \
           --build-time "$W/results/kmerdb.build.timev"; then
        results+=("$W/results/kmerdb.$sim.json")
      else
        echo "kmerdb failed on $sim" >&2; kfail=1
      fi
    done
  else
    echo "kmerdb build failed" >&2; kfail=1
  fi
else
  log "KMERDB not set: kmerdb part skipped (KMERDB=path/to/kmerdb bench/heldout.sh to run it)"
fi
# ==========================================================================================================

log "results (2x$READ_LEN; $THREADS threads; heavy steps under nice -n $NICE on a shared machine)"
python3 "$BENCHLIB" table "${results[@]}" | tee "$W/results/table.md"
python3 "$BENCHLIB" table --genomes "${results[@]}" >"$W/results/table_genomes.md"
echo "(the same with a row per left-out genome: $W/results/table_genomes.md)"
exit $kfail
