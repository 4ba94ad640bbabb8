#!/usr/bin/env python3
"""Strain-dense synthetic collections for bench/strain-dense.sh: genomes, an NCBI-format taxonomy,
reads with truth, and the summary table. Deterministic for a collection name (fixed seeds).

usage: strain_dense.py make SET OUT_DIR        # SET: dense | large
       strain_dense.py table OUT_DIR RESULTS.tsv

A species is a random genome (its "ancestor"); its strains are copies with independent point
mutations and a few short insertions and deletions (a star phylogeny: two strains are about twice
the divergence apart). A sister species in the same genus is the ancestor mutated by 8% first. The
strains of the dense species are numbered side by side, as in RefSeq. Each strain has its own taxid
(no rank "strain") under its species; strain N+1 of each species listed in HELD_OUT is made but not
indexed, and reads of it form the held-out set.

dense: one species in 300 strains of 200 kbp (0.5% from the ancestor) with a sister species of 5
       strains, and 4 more species of 5 strains in 3 genera (REFERENCE.md section 2's collection).
large: 40 species of 5 strains of 3 Mbp (1%) in 20 genera, and one species of 300 strains of 1 Mbp.
"""
import gzip, os, random, sys

ANCESTOR_SEED = 31
BASES = b'ACGT'


def random_genome(rng, n):
    return bytearray(rng.choices(BASES, k=n))


def mutate(rng, seq, rate, indel_share=0.05):
    """A copy of seq with round(len * rate) changes: substitutions, and a share of 1-10 base indels."""
    out = bytearray(seq)
    changes = int(len(seq) * rate)
    indels = int(changes * indel_share)
    for _ in range(changes - indels):
        at = rng.randrange(len(out))
        out[at] = rng.choice([b for b in BASES if b != out[at]])
    for _ in range(indels):
        at = rng.randrange(len(out) - 20)
        n = rng.randint(1, 10)
        if rng.random() < 0.5:
            del out[at:at + n]
        else:
            out[at:at] = bytes(rng.choices(BASES, k=n))
    return out


def collection(name):
    """(species list, genera): each species is (name, genus, strains, genome_len, divergence, sister_of)."""
    if name == 'dense':
        species = [('Densus multus', 'Densus', 300, 200_000, 0.005, None),
                   ('Densus alter', 'Densus', 5, 200_000, 0.005, 0),
                   ('Raritas prima', 'Raritas', 5, 200_000, 0.005, None),
                   ('Raritas secunda', 'Raritas', 5, 200_000, 0.005, 2),
                   ('Solus unus', 'Solus', 5, 200_000, 0.005, None),
                   ('Tertius unus', 'Tertius', 5, 200_000, 0.005, None)]
        held_out = [0, 2]
    elif name == 'large':
        species = [('Densus multus', 'Densus', 300, 1_000_000, 0.005, None)]
        for g in range(20):
            genus = f'Genus{g:02d}'
            first = len(species)
            species.append((f'{genus} alpha', genus, 5, 3_000_000, 0.01, None))
            species.append((f'{genus} beta', genus, 5, 3_000_000, 0.01, first))
        held_out = [0, 1, 2, 11, 22, 33]
    else:
        sys.exit(f'strain_dense.py: unknown collection {name!r} (dense or large)')
    return species, held_out


def make(name, out):
    species, held_out = collection(name)
    os.makedirs(f'{out}/refs', exist_ok=True)
    os.makedirs(f'{out}/taxonomy', exist_ok=True)
    os.makedirs(f'{out}/held_out', exist_ok=True)
    nodes = [(1, 1, 'no rank', 'root'), (2, 1, 'superkingdom', 'Bacteria'), (3, 2, 'family', 'Synthaceae')]
    genus_taxid = {}
    for _, genus, *_ in species:
        if genus not in genus_taxid:
            genus_taxid[genus] = 100 + len(genus_taxid)
            nodes.append((genus_taxid[genus], 3, 'genus', genus))
    seqmap = []
    strain_taxid = 100_000
    ancestors = []
    for i, (sp_name, genus, strains, length, div, sister_of) in enumerate(species):
        sp_taxid = 1000 + i
        nodes.append((sp_taxid, genus_taxid[genus], 'species', sp_name))
        rng = random.Random(ANCESTOR_SEED * 1_000_003 + i)
        if sister_of is None:
            ancestor = random_genome(rng, length)
        else:
            ancestor = mutate(rng, ancestors[sister_of], 0.08)
        ancestors.append(ancestor)
        tag = sp_name.replace(' ', '_')
        path = f'{out}/refs/{tag}.fna.gz'
        held = f'{out}/held_out/{tag}.fna'
        with gzip.open(path + '.tmp', 'wb', compresslevel=1) as f:
            for s in range(strains + (i in held_out)):
                strain_taxid += 1
                seqid = f'{tag}_s{s + 1:03d}'
                nodes.append((strain_taxid, sp_taxid, 'no rank', f'{sp_name} strain S{s + 1}'))
                genome = mutate(rng, ancestor, div)
                record = b'>' + seqid.encode() + b'\n' + b'\n'.join(
                    bytes(genome[j:j + 80]) for j in range(0, len(genome), 80)) + b'\n'
                if s == strains:
                    with open(held, 'wb') as h:
                        h.write(record)
                    with open(f'{out}/held_out/{tag}.taxid', 'w') as h:
                        h.write(f'{strain_taxid}\n')
                else:
                    f.write(record)
                    seqmap.append((seqid, strain_taxid))
        os.replace(path + '.tmp', path)
    with open(f'{out}/refs/seqid2taxid.map', 'w') as f:
        f.writelines(f'{s}\t{t}\n' for s, t in seqmap)
    with gzip.open(f'{out}/taxonomy/nodes.dmp.gz', 'wt') as f:
        f.writelines(f'{t}\t|\t{p}\t|\t{r}\t|\t\t|\n' for t, p, r, _ in nodes)
    with gzip.open(f'{out}/taxonomy/names.dmp.gz', 'wt') as f:
        f.writelines(f'{t}\t|\t{n}\t|\t\t|\tscientific name\t|\n' for t, _, _, n in nodes)
    reads(out, species, held_out)


COMPLEMENT = bytes.maketrans(b'ACGT', b'TGCA')


def sample_pairs(rng, genome, n, prefix, taxid, r1, r2, truth, genome_id):
    """n pairs of 2x150 from random fragments (300 +- 30 bases) of either strand, 0.2% substitutions."""
    for i in range(n):
        frag = max(160, min(len(genome), int(rng.gauss(300, 30))))
        at = rng.randrange(len(genome) - frag + 1)
        f = genome[at:at + frag]
        if rng.random() < 0.5:
            f = f.translate(COMPLEMENT)[::-1]
        mates = [bytearray(f[:150]), bytearray(f[-150:].translate(COMPLEMENT)[::-1])]
        for m in mates:
            for j in range(len(m)):
                if rng.random() < 0.002:
                    m[j] = rng.choice([b for b in BASES if b != m[j]])
        rid = f'{prefix}_{i}'
        for out, m in zip((r1, r2), mates):
            out.write(b'@' + rid.encode() + b'\n' + bytes(m) + b'\n+\n' + b'I' * len(m) + b'\n')
        truth.append((rid, genome_id, taxid))


def read_fasta(path, opener=open):
    with opener(path, 'rb') as f:
        name, seq = None, []
        for line in f:
            if line.startswith(b'>'):
                if name:
                    yield name, b''.join(seq)
                name, seq = line[1:].split()[0].decode(), []
            else:
                seq.append(line.strip())
        if name:
            yield name, b''.join(seq)


def reads(out, species, held_out, pairs=100_000):
    """Two read sets: pairs of the strains left out (held_out), and pairs of indexed strains."""
    os.makedirs(f'{out}/reads', exist_ok=True)
    rng = random.Random(20261126)
    taxa = dict(l.split('\t') for l in open(f'{out}/refs/seqid2taxid.map').read().split('\n') if l)
    # Held out: the pairs shared evenly between the left-out strains.
    per = pairs // len(held_out)
    with open(f'{out}/reads/held_out_R1.fq', 'wb') as r1, open(f'{out}/reads/held_out_R2.fq', 'wb') as r2:
        truth = []
        for i in held_out:
            tag = species[i][0].replace(' ', '_')
            (name, genome), = read_fasta(f'{out}/held_out/{tag}.fna')
            taxid = open(f'{out}/held_out/{tag}.taxid').read().strip()
            sample_pairs(rng, genome, per, f'ho_{tag}', taxid, r1, r2, truth, name)
        write_truth(f'{out}/reads/held_out.truth.tsv', truth)
    # Indexed: each species gets the same share, spread over its strains at random.
    per = pairs // len(species)
    with open(f'{out}/reads/indexed_R1.fq', 'wb') as r1, open(f'{out}/reads/indexed_R2.fq', 'wb') as r2:
        truth = []
        for sp in species:
            tag = sp[0].replace(' ', '_')
            genomes = list(read_fasta(f'{out}/refs/{tag}.fna.gz', gzip.open))
            picks = [rng.randrange(len(genomes)) for _ in range(per)]
            for g in sorted(set(picks)):
                name, genome = genomes[g]
                sample_pairs(rng, genome, picks.count(g), f'ix_{name}', taxa[name], r1, r2, truth, name)
        write_truth(f'{out}/reads/indexed.truth.tsv', truth)


def write_truth(path, truth):
    with open(path, 'w') as f:
        f.write('read_id\tgenome_id\ttaxid\n')
        f.writelines(f'{r}\t{g}\t{t}\n' for r, g, t in truth)


def table(results):
    """A Markdown table from the results TSV written by bench/strain-dense.sh."""
    rows = [l.rstrip('\n').split('\t') for l in open(results) if l.strip()]
    head, body = rows[0], rows[1:]
    print('| ' + ' | '.join(head) + ' |')
    print('|' + '|'.join('---' if i < 2 else '---:' for i in range(len(head))) + '|')
    for r in body:
        print('| ' + ' | '.join(r) + ' |')


if __name__ == '__main__':
    if len(sys.argv) == 4 and sys.argv[1] == 'make':
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == 'table':
        table(sys.argv[2])
    else:
        sys.exit(__doc__)
