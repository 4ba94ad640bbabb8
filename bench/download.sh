#!/usr/bin/env bash
# `kmerdb download` end to end against a local mirror of NCBI's layout made from
# shared/data/refs (each genome an assembly of RefSeq "bacteria", its folder with md5checksums.txt,
# the taxonomy dump), served by Python's http.server on 127.0.0.1: the taxonomy and the genomes
# downloaded (8 at a time), the run repeated (nothing to fetch), the folder built as it is and the
# mock classified against it and against the index of refs built the usual way (the calls must be
# the same), and the bytes a second copied with `cp` for scale.
#
# usage (from the repository root):   KMERDB=target/release/kmerdb bench/download.sh
# Written under bench/work/download/. Settings: bench/lib.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/lib.sh
kmerdb_check
W=bench/work/download
rm -rf "$W" && mkdir -p "$W/mirror"
REFS=$SHARED/data/refs

log "mirror of $REFS"
python3 - "$REFS" "$TAX" "$W/mirror" <<'PY'
import gzip, hashlib, io, os, shutil, sys, tarfile
refs, tax, out = sys.argv[1:]
taxid = {}
for line in open(os.path.join(refs, 'seqid2taxid.map')):
    s, t = line.split()
    taxid[s] = t
parent, rank = {}, {}
for line in gzip.open(os.path.join(tax, 'nodes.dmp.gz'), 'rt'):
    f = line.split('\t|\t'); parent[f[0]] = f[1]; rank[f[0]] = f[2]
def species(t):
    while rank.get(t) != 'species' and parent.get(t, t) != t:
        t = parent[t]
    return t
rows = []
for i, name in enumerate(sorted(n for n in os.listdir(refs) if n.endswith('.fna.gz'))):
    with gzip.open(os.path.join(refs, name), 'rt') as f:
        first = next(l for l in f if l.startswith('>'))[1:].split()[0]
    acc = f'GCF_{i + 1:09d}.1'
    stem = name[:-len('.fna.gz')]
    folder = f'genomes/all/GCF/000/000/{i + 1:03d}/{acc}_{stem}'
    os.makedirs(os.path.join(out, folder))
    fasta = f'{acc}_{stem}_genomic.fna.gz'
    shutil.copy(os.path.join(refs, name), os.path.join(out, folder, fasta))
    md5 = hashlib.md5(open(os.path.join(out, folder, fasta), 'rb').read()).hexdigest()
    open(os.path.join(out, folder, 'md5checksums.txt'), 'w').write(f'{md5}  ./{fasta}\n')
    t = taxid[first]
    rows.append(f'{acc}\tPRJNA1\tna\t{t}\t{species(t)}\t{stem}\tlatest\tComplete Genome\tna\thttps://ftp.ncbi.nlm.nih.gov/{folder}\n')
os.makedirs(os.path.join(out, 'genomes/refseq/bacteria'))
with open(os.path.join(out, 'genomes/refseq/bacteria/assembly_summary.txt'), 'w') as f:
    f.write('##  a mirror of shared/data/refs\n#assembly_accession\tbioproject\trefseq_category\ttaxid\tspecies_taxid\torganism_name\tversion_status\tassembly_level\tgbrs_paired_asm\tftp_path\n')
    f.writelines(rows)
os.makedirs(os.path.join(out, 'pub/taxonomy'))
dump = os.path.join(out, 'pub/taxonomy/taxdump.tar.gz')
with tarfile.open(dump, 'w:gz') as t:
    for n in ['nodes.dmp', 'names.dmp']:
        data = gzip.open(os.path.join(tax, n + '.gz')).read()
        info = tarfile.TarInfo(n); info.size = len(data)
        t.addfile(info, io.BytesIO(data))
md5 = hashlib.md5(open(dump, 'rb').read()).hexdigest()
open(dump + '.md5', 'w').write(f'{md5}  taxdump.tar.gz\n')
print(f'{len(rows)} assemblies')
PY

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$W/mirror" > "$W/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
sleep 1
URL=http://127.0.0.1:$port
bytes=$(du -cb "$W"/mirror/genomes/all/GCF/000/000/*/*/*_genomic.fna.gz | tail -1 | cut -f1)
echo "genomes: $(ls -d "$W"/mirror/genomes/all/GCF/000/000/*/* | wc -l) files, $bytes bytes"

timed_run() { local label=$1; shift; local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); echo "$label: $(echo "$t1 - $t0" | bc) s"; }
timed_run "download taxonomy" "$KMERDB" download taxonomy -o "$W/taxonomy" --mirror "$URL"
timed_run "download genomes (8 at a time)" "$KMERDB" download genomes --group bacteria -o "$W/lib" --mirror "$URL"
timed_run "download genomes again (all present)" "$KMERDB" download genomes --group bacteria -o "$W/lib" --mirror "$URL"
requests=$(grep -c '_genomic.fna.gz' "$W/server.log" || true)
echo "genome files requested over both runs: $requests"
timed_run "cp of the same files" cp -r "$W/mirror/genomes/all" "$W/copied"
cmp <(sort "$W/lib/seqid2taxid.map") <(sort "$REFS/seqid2taxid.map") && echo "seqid2taxid.map: the same lines as refs' own"

timed_run "build of the download" "$KMERDB" build -q -t "$THREADS" -d "$W/dl.db" --taxonomy "$W/taxonomy" --seqid2taxid "$W/lib/seqid2taxid.map" "$W/lib/genomes"
timed_run "build of refs" "$KMERDB" build -q -t "$THREADS" -d "$W/refs.db" --taxonomy "$TAX" --seqid2taxid "$REFS/seqid2taxid.map" "$REFS"
for db in dl refs; do
  "$KMERDB" classify -q -t "$THREADS" -d "$W/$db.db" -1 "$SHARED/data/reads/mock_R1.fq.gz" -2 "$SHARED/data/reads/mock_R2.fq.gz" -o "$W/$db.kraken"
done
cmp "$W/dl.kraken" "$W/refs.kraken" && echo "the mock's per-read calls: identical against both indexes"
