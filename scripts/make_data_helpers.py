#!/usr/bin/env python3
"""Helpers for scripts/make_data.sh (Python 3 standard library only).

  select   REFS OUT GENOME...            check and copy genomes, write OUT/seqid2taxid.map
  prune    MAP NODES.gz NAMES.gz OUTDIR  NCBI taxonomy cut down to the lineages of the map's taxids
  mix      ARTDIR MAP SEED OUTDIR GENOME...  shuffle ART pairs into one sample with opaque ids + truth

Everything is deterministic: input order is kept, the only randomness is random.Random(SEED).
"""
import gzip
import os
import random
import shutil
import sys

ALLOWED_SOURCES = ('deb:', 'pypi:')


def die(msg):
    sys.exit(f'make_data_helpers: {msg}')


def read_manifest(refs):
    with open(os.path.join(refs, 'manifest.tsv')) as f:
        head = f.readline().rstrip('\n').split('\t')
        rows = {}
        for line in f:
            row = dict(zip(head, line.rstrip('\n').split('\t')))
            rows[row['genome_id']] = row
    return rows


def read_map(path):
    """[(seq_id, taxid, original line)] in file order."""
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                seq, tax = line.rstrip('\n').split('\t')[:2]
                out.append((seq, tax, line if line.endswith('\n') else line + '\n'))
    return out


def fasta_ids(path):
    with gzip.open(path, 'rt') as f:
        return [l[1:].split()[0] for l in f if l.startswith('>')]


def cmd_select(refs, out, genomes):
    manifest = read_manifest(refs)
    smap = read_map(os.path.join(refs, 'seqid2taxid.map'))
    tax_of = {s: t for s, t, _ in smap}
    wanted = {}
    os.makedirs(os.path.join(out, 'genomes'), exist_ok=True)
    for g in genomes:
        row = manifest.get(g) or die(f'{g}: not in manifest.tsv')
        if not row['source'].startswith(ALLOWED_SOURCES):
            die(f"{g}: source {row['source']!r} may not be copied into the project "
                f"(only {' / '.join(ALLOWED_SOURCES)})")
        src = os.path.join(refs, f'{g}.fna.gz')
        ids = fasta_ids(src)
        listed = row['seq_ids'].split(',')
        if ids != listed:
            die(f'{g}: FASTA headers {ids} differ from manifest seq_ids {listed}')
        if len(ids) != int(row['n_seqs']):
            die(f"{g}: {len(ids)} sequences, manifest says {row['n_seqs']}")
        for s in ids:
            if s not in tax_of:
                die(f'{g}: sequence {s} missing from seqid2taxid.map')
            if tax_of[s] != row['taxid']:
                die(f"{g}: {s} has taxid {tax_of[s]} in the map, {row['taxid']} in the manifest")
            if s in wanted:
                die(f'{s}: listed twice')
            wanted[s] = g
        shutil.copyfile(src, os.path.join(out, 'genomes', f'{g}.fna.gz'))
    with open(os.path.join(out, 'seqid2taxid.map'), 'w') as f:
        for s, _, line in smap:
            if s in wanted:
                f.write(line)


def split_dmp(line):
    return line.rstrip('\n').split('\t|\t')


def cmd_prune(map_path, nodes_gz, names_gz, outdir):
    taxids = {t for _, t, _ in read_map(map_path)}
    parent = {}
    with gzip.open(nodes_gz, 'rt') as f:
        for line in f:
            x = split_dmp(line)
            parent[x[0]] = x[1]
    keep = set()
    for t in sorted(taxids, key=int):
        seen = []
        while True:
            if t not in parent:
                die(f'taxid {t} not in {nodes_gz}')
            if t in seen:
                die(f'cycle in the taxonomy at {t}')
            seen.append(t)
            keep.add(t)
            if t == '1' or parent[t] == t:
                break
            t = parent[t]
        if seen[-1] != '1':
            die(f'lineage {seen} does not end at root (1)')
    os.makedirs(outdir, exist_ok=True)
    n_nodes = 0
    with gzip.open(nodes_gz, 'rt') as f, open(os.path.join(outdir, 'nodes.dmp'), 'w') as o:
        for line in f:
            if line.split('\t|\t', 1)[0] in keep:
                o.write(line); n_nodes += 1
    named = set()
    with gzip.open(names_gz, 'rt') as f, open(os.path.join(outdir, 'names.dmp'), 'w') as o:
        for line in f:
            x = split_dmp(line)
            if x[0] in keep and x[3].rstrip('\t|') == 'scientific name':
                o.write(line); named.add(x[0])
    if n_nodes != len(keep) or named != keep:
        die(f'kept {len(keep)} taxa but wrote {n_nodes} nodes and {len(named)} names')
    print(f'taxonomy: {len(keep)} taxa kept for {len(taxids)} genome taxids')


def read_fastq(path):
    with open(path) as f:
        while True:
            h = f.readline()
            if not h:
                return
            s, p, q = f.readline(), f.readline(), f.readline()
            if not h.startswith('@') or not p.startswith('+') or len(s) != len(q):
                die(f'{path}: malformed FASTQ record {h.strip()!r}')
            yield h[1:].split()[0], s.rstrip('\n'), q.rstrip('\n')


def cmd_mix(artdir, map_path, seed, outdir, genomes, n_single=200):
    tax_of = {s: t for s, t, _ in read_map(map_path)}
    pairs = []  # (genome, seq_id, seq1, qual1, seq2, qual2)
    for g in genomes:
        r1 = read_fastq(os.path.join(artdir, f'{g}_1.fq'))
        r2 = read_fastq(os.path.join(artdir, f'{g}_2.fq'))
        n = 0
        for (i1, s1, q1), (i2, s2, q2) in zip(r1, r2, strict=True):
            if not (i1.endswith('/1') and i2.endswith('/2') and i1[:-2] == i2[:-2]):
                die(f'{g}: mates out of step: {i1} {i2}')
            seq_id = i1[:-2].rsplit('-', 1)[0]  # ART names reads <seq_id>-<n>/1
            if seq_id not in tax_of:
                die(f'{g}: read {i1} from unknown sequence {seq_id}')
            pairs.append((g, seq_id, s1, q1, s2, q2))
            n += 1
        print(f'reads: {g}\t{n} pairs')
    random.Random(seed).shuffle(pairs)
    width = max(7, len(str(len(pairs) - 1)))
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, 'sample_R1.fq'), 'w') as o1, \
            open(os.path.join(outdir, 'sample_R2.fq'), 'w') as o2, \
            open(os.path.join(outdir, 'sample.truth.tsv'), 'w') as ot, \
            open(os.path.join(outdir, 'single.fa'), 'w') as of:
        ot.write('read_id\tgenome_id\ttaxid\tseq_id\n')
        for k, (g, seq_id, s1, q1, s2, q2) in enumerate(pairs):
            rid = f'r{k:0{width}d}'
            o1.write(f'@{rid}/1\n{s1}\n+\n{q1}\n')
            o2.write(f'@{rid}/2\n{s2}\n+\n{q2}\n')
            ot.write(f'{rid}\t{g}\t{tax_of[seq_id]}\t{seq_id}\n')
            if k < n_single:
                of.write(f'>{rid}\n{s1}\n')
    print(f'reads: total\t{len(pairs)} pairs, {min(n_single, len(pairs))} single reads')


def main(argv):
    if len(argv) >= 4 and argv[1] == 'select':
        cmd_select(argv[2], argv[3], argv[4:])
    elif len(argv) == 6 and argv[1] == 'prune':
        cmd_prune(*argv[2:])
    elif len(argv) >= 7 and argv[1] == 'mix':
        cmd_mix(argv[2], argv[3], int(argv[4]), argv[5], argv[6:])
    else:
        die(__doc__)


if __name__ == '__main__':
    main(sys.argv)
