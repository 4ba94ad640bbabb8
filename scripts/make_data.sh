#!/usr/bin/env bash
# Regenerate the bundled data set in data/ from ../shared (see data/README.md).
#
#   scripts/make_data.sh            # from anywhere; SHARED=/path/to/shared overrides ../shared
#
# Rewrites data/genomes, data/taxonomy, data/reads and data/seqid2taxid.map; data/README.md is
# left alone. Deterministic: fixed ART seeds, fixed shuffle seed, gzip -n (no name/timestamp).
# Installs nothing. Needs art_illumina (Debian: art-nextgen-simulation-tools), python3, gzip.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SHARED=${SHARED:-$ROOT/../shared}
DATA=$ROOT/data
HELPERS=$ROOT/scripts/make_data_helpers.py

# Genomes to bundle (all with a deb: source in manifest.tsv; the helper refuses any other source).
GENOMES=(Phage_lambda DWV_NC_004830 DWV_VDV1_DWV5 VDV1 Ecoli_K12_MG1655 Ecoli_536 Sau_COL)

# Read simulation: ART, HiSeq 2500 profile, 2x150 bp, fragments 400 +- 30 bp.
VIRUS_FCOV=5          # fold coverage for kingdom "virus"
BACTERIA_FCOV=0.04    # fold coverage for kingdom "bacteria"
ART_SEED=20240901     # genome i (0-based, in GENOMES order) uses ART_SEED + i
SHUFFLE_SEED=7        # Python random.Random seed for mixing the pairs
# -nf 0: no N masking. DWV_NC_004830 has 69 scattered Ns; with ART's default (-nf 1) almost no
# fragment avoids them and that genome gets ~1/4 of its reads, all from its 3' end.
ART_NF=0

die() { echo "make_data.sh: $*" >&2; exit 1; }

command -v art_illumina >/dev/null 2>&1 ||
    die "art_illumina not found; install it first: apt-get install art-nextgen-simulation-tools"
command -v python3 >/dev/null 2>&1 || die "python3 not found"
command -v gzip >/dev/null 2>&1 || die "gzip not found"
for f in refs/manifest.tsv refs/seqid2taxid.map taxonomy/nodes.dmp.gz taxonomy/names.dmp.gz; do
    [[ -f $SHARED/data/$f ]] || die "$SHARED/data/$f missing (set SHARED=/path/to/shared)"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/kmerdb-data.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/data
mkdir -p "$OUT" "$TMP/art"

echo "== genomes and seqid2taxid.map"
python3 "$HELPERS" select "$SHARED/data/refs" "$OUT" "${GENOMES[@]}"

echo "== taxonomy"
python3 "$HELPERS" prune "$OUT/seqid2taxid.map" \
    "$SHARED/data/taxonomy/nodes.dmp.gz" "$SHARED/data/taxonomy/names.dmp.gz" "$OUT/taxonomy"

echo "== reads (art_illumina)"
for i in "${!GENOMES[@]}"; do
    g=${GENOMES[$i]}
    kingdom=$(awk -F'\t' -v g="$g" '$1 == g { print $4 }' "$SHARED/data/refs/manifest.tsv")
    case $kingdom in
        virus) fcov=$VIRUS_FCOV ;;
        bacteria) fcov=$BACTERIA_FCOV ;;
        *) die "$g: unexpected kingdom '$kingdom'" ;;
    esac
    gzip -dc "$OUT/genomes/$g.fna.gz" > "$TMP/art/$g.fa"
    art_illumina -ss HS25 -i "$TMP/art/$g.fa" -p -l 150 -f "$fcov" -m 400 -s 30 \
        -rs $((ART_SEED + i)) -nf "$ART_NF" -na -q -o "$TMP/art/${g}_" > "$TMP/art/$g.log" 2>&1 ||
        { cat "$TMP/art/$g.log" >&2; die "art_illumina failed for $g"; }
done
python3 "$HELPERS" mix "$TMP/art" "$OUT/seqid2taxid.map" "$SHUFFLE_SEED" "$OUT/reads" "${GENOMES[@]}"
gzip -n -9 "$OUT/reads/sample_R1.fq" "$OUT/reads/sample_R2.fq"

echo "== install into $DATA"
mkdir -p "$DATA"
for p in genomes taxonomy reads seqid2taxid.map; do
    rm -rf "${DATA:?}/$p"
    mv "$OUT/$p" "$DATA/$p"
done
(cd "$DATA" && find . -type f ! -name README.md | sort | xargs ls -l | awk '{ printf "%10d  %s\n", $5, $9 }')
du -sh "$DATA"
