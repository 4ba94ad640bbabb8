#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets, fuzz/corpus/TARGET/ (see src/fuzzing.rs): small real
# files cut from data/, and each format's edge cases. Deterministic (fixed build date, `gzip -n`):
# change this script and run it again rather than editing seeds by hand, also after a change of the
# index or candidates format. Needs the release binary (`cargo build --release`), python3, gzip,
# bzip2, xz and zstd.
set -euo pipefail
cd "$(dirname "$0")/.."
KMERDB=${KMERDB:-${CARGO_TARGET_DIR:-target}/release/kmerdb}
export SOURCE_DATE_EPOCH=1700000000
C=fuzz/corpus
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
rm -rf "$C"
# The first lines of a gzipped file (zcat stops early on a closed pipe: not an error here).
gzhead() { { zcat "$1" || true; } | head -n "$2"; }
for t in fastx fastx_compressed taxonomy_nodes taxonomy_names taxonomy_merged seqid_map sample_sheet \
    index_open index_open_fixed merge_candidates merge_candidates_fixed; do
    mkdir -p "$C/$t"
done

# Two small genomes: the first 3,040 bases of phage lambda and 2,000 of deformed wing virus, and
# reads cut from them (a pair's second mate is the reverse complement, as sequencers give it).
mkdir "$T/genomes"
gzhead data/genomes/Phage_lambda.fna.gz 39 > "$T/genomes/a_lambda.fa"
gzhead data/genomes/DWV_NC_004830.fna.gz 26 > "$T/genomes/b_dwv.fa"
python3 - "$T" <<'PY'
import sys
t = sys.argv[1]
def seq(name):
    return "".join(l.strip() for l in open(f"{t}/genomes/{name}") if not l.startswith(">"))
lam, dwv = seq("a_lambda.fa"), seq("b_dwv.fa")
rc = lambda s: s[::-1].translate(str.maketrans("ACGT", "TGCA"))
pairs = [(lam, 100), (lam, 1500), (dwv, 200), (dwv, 1300)]
with open(f"{t}/r1.fq", "w") as r1, open(f"{t}/r2.fq", "w") as r2:
    for i, (g, at) in enumerate(pairs):
        a, b = g[at:at + 150], rc(g[at + 250:at + 400])
        r1.write(f"@p{i}/1\n{a}\n+\n{'I' * len(a)}\n")
        r2.write(f"@p{i}/2\n{b}\n+\n{'5' * len(b)}\n")
PY

# fastx: FASTA and FASTQ as given (compressed seeds too: the codec is found from the content).
F=$C/fastx
cp "$T/genomes/a_lambda.fa" $F/lambda.fa
gzhead data/reads/sample_R1.fq.gz 8 > $F/reads.fq
paste -d '\n' <(gzhead data/reads/sample_R1.fq.gz 8 | paste - - - -) \
    <(gzhead data/reads/sample_R2.fq.gz 8 | paste - - - -) | tr '\t' '\n' > $F/interleaved.fq
head -n 6 data/reads/single.fa > $F/single.fa
head -n 7 "$T/genomes/b_dwv.fa" | sed 's/$/\r/' > $F/crlf.fa
sed 's/$/\r/' $F/reads.fq > $F/crlf.fq
printf '>empty1\n>empty2\n\n>x\nACGT\n>last\n' > $F/empty_records.fa
printf '>x desc\nACGTACGTAC\nGTTT' > $F/no_final_newline.fa
printf '@r1\nACGT\n+\nIIII' > $F/no_final_newline.fq
printf '>' > $F/gt_only.fa
printf '@' > $F/at_only.fq
printf '>lower\nacgtnnnnnnnnnnnnnnnnacgtgattacaNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNNgattacauuuu\n' > $F/lowercase_n.fa
printf '>s1|kraken:taxid|562 E. coli\nACGTTGCA\n>s2 x taxid|10710\nGGGCGGCG\n>s3 taxid|99999999999\nAC\n' > $F/taxid_tags.fa
printf '>r\xff\xfe id\nAC\xffGT\n>\xc3\n\x00\x01\n' > $F/not_utf8.fa
printf '@r1 desc\nACGT\n+r1 desc\nIIII\n@r2\n\n+\n\n' > $F/plus_name_empty_read.fq
printf '@r1\nACGT\n+\nII\n' > $F/short_quality.fq
printf '\n\n>a\nAC\n\nGT\n\n>b\n\nTT\n' > $F/blank_lines.fa
gzip -9n < $F/lambda.fa > $F/lambda.fa.gz
bzip2 -9 < $F/reads.fq > $F/reads.fq.bz2
xz -6 < $F/interleaved.fq > $F/interleaved.fq.xz
zstd -q -19 < $F/single.fa > $F/single.fa.zst

# fastx_compressed: [codec (0 gz, 1 bz2, 2 xz, 3 zst), damage (0 none, 1 cut, 2 flip), a, b] + text.
for codec in 0 1 2 3; do
    { printf "\\x0$codec\\x00\\x00\\x00"; cat $F/interleaved.fq; } > $C/fastx_compressed/intact_$codec.fq
    { printf "\\x0$codec\\x01\\x80\\x00"; cat $F/single.fa; } > $C/fastx_compressed/cut_$codec.fa
    { printf "\\x0$codec\\x02\\x11\\x03"; cat $F/crlf.fq; } > $C/fastx_compressed/flipped_$codec.fq
done
{ printf '\x00\x00\x00\x00'; cat $F/empty_records.fa; } > $C/fastx_compressed/intact_empty_records.fa
{ printf '\x03\x00\x00\x00'; cat $F/no_final_newline.fq; } > $C/fastx_compressed/intact_no_final_newline.fq

# Taxonomy dumps: the bundled ones (plain, gzip, CRLF) and lines at the edge of the format.
cp data/taxonomy/nodes.dmp $C/taxonomy_nodes/nodes.dmp
gzip -9n < data/taxonomy/nodes.dmp > $C/taxonomy_nodes/nodes.dmp.gz
sed 's/$/\r/' data/taxonomy/nodes.dmp > $C/taxonomy_nodes/crlf.dmp
printf '1\t|\t1\t|\tno rank\t|\n4294967295\t|\t1\t|\tspecies\t|\n562\t|\t4294967295\t|\tstrain' \
    > $C/taxonomy_nodes/three_fields_huge_taxid.dmp
printf '1\t|\t1\t|\tno rank\t|\n2\t|\t3\t|\tgenus\t|\n3\t|\t2\t|\tspecies\t|\n' > $C/taxonomy_nodes/cycle.dmp
cp data/taxonomy/names.dmp $C/taxonomy_names/names.dmp
gzip -9n < data/taxonomy/names.dmp > $C/taxonomy_names/names.dmp.gz
sed 's/$/\r/' data/taxonomy/names.dmp > $C/taxonomy_names/crlf.dmp
printf '562\t|\tBacillus coli\t|\t\t|\tsynonym\t|\n562\t|\tEscherichia col\xc3\xa9\t|\t\t|\tscientific name\t|\n1\t|\t\t|\t\t|\tscientific name\t|\n' \
    > $C/taxonomy_names/synonym_utf8_empty_name.dmp
printf '12\t|\t562\t|\n13\t|\t12\t|\n' > $C/taxonomy_merged/merged.dmp
gzip -9n < $C/taxonomy_merged/merged.dmp > $C/taxonomy_merged/merged.dmp.gz
printf '12\t|\t562\t|\r\n4294967295\t|\t10710\t|\r\n5\t|\t5\t|' > $C/taxonomy_merged/crlf_huge_self.dmp

# Sequence id maps: the bundled seqid2taxid.map, an accession2taxid of the same sequences, edge cases.
S=$C/seqid_map
cp data/seqid2taxid.map $S/seqid2taxid.map
gzip -9n < data/seqid2taxid.map > $S/seqid2taxid.map.gz
{
    printf 'accession\taccession.version\ttaxid\tgi\n'
    printf 'NC_001416\tNC_001416.1\t10710\t9626243\nNC_004830\tNC_004830.2\t198112\t71480055\n'
    printf 'NC_004830\tNC_004830.1\t198113\t0\nHM067437\tHM067437.1\t198112\t301070167\n'
} > $S/nucl_gb.accession2taxid
printf 'a.1 5\r\na 7\n\n  \t\nb.2\t0\nb.10 4294967295\nc. 3\n.4 4\n' > $S/versions_crlf_zero.map

# Sample sheets.
printf '# name\tR1\tR2\nmock\treads/R1.fq.gz\treads/R2.fq.gz\nsolo\tsingle.fa\n' > $C/sample_sheet/paired_and_single.tsv
printf 'a\tr1.fq\r\n\r\n#x\r\nb\t/abs/r.fq\t../up.fq\r\n' > $C/sample_sheet/crlf_absolute.tsv
printf 'a\t\tr2.fq\nb\tr\xff.fq\n' > $C/sample_sheet/empty_field_not_utf8.tsv

# Indexes of the two genomes: with the bundled taxonomy (default parameters), and without one
# (every sequence its own taxon) with small k, window and sketch and a cap of one location (so its
# dropped section is not empty) and an amino-acid table. Built inside the temporary
# folder with relative paths: an index records its command line.
cp -r data/taxonomy data/seqid2taxid.map "$T/"
M=$PWD/$C/merge_candidates
KMERDB=$(realpath "$KMERDB")
(
    cd "$T"
    "$KMERDB" build -q --gpus none -t 1 -d tiny.db --taxonomy taxonomy --seqid2taxid seqid2taxid.map genomes
    "$KMERDB" build -q --gpus none -t 1 -d small_k.db -k 12 -w 40 -s 8 --max-locations-per-feature 1 --protein \
        --protein-sample 1 genomes
    # Candidates files of the two halves of the index (a partition each), for the pairs and for
    # their first mates alone; a merge seed is one file or several back to back.
    for part in 1 2; do
        "$KMERDB" build -q --gpus none -t 1 -d part$part.db --partition $part/2 --taxonomy taxonomy \
            --seqid2taxid seqid2taxid.map genomes
        "$KMERDB" classify -q --gpus none -t 1 -d part$part.db -1 r1.fq -2 r2.fq --candidates-out pairs$part.cand
        "$KMERDB" classify -q --gpus none -t 1 -d part$part.db r1.fq --candidates-out single$part.cand
    done
    cp pairs1.cand "$M/pairs_part1.cand"
    cat pairs1.cand pairs2.cand > "$M/pairs_two_parts.cand"
    cat single2.cand single1.cand > "$M/single_two_parts.cand"
    gzip -9n < single1.cand > "$M/single_part1.cand.gz"
)
for t in index_open index_open_fixed; do
    cp "$T/tiny.db" "$T/small_k.db" $C/$t/
done
cp $C/merge_candidates/* $C/merge_candidates_fixed/

du -sh "$C"
