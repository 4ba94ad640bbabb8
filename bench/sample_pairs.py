#!/usr/bin/env python3
"""Read pairs sampled from FASTA genomes, for bench/gpu-scale.sh: 2x150 from fragments of 300 +- 30
bases of either strand, 0.3% substitutions; deterministic (seed 7).

usage: sample_pairs.py PAIRS R1.fq R2.fq FASTA...   (genomes are read one file at a time)
"""
import random, sys

COMPLEMENT = bytes.maketrans(b'ACGT', b'TGCA')


def records(path):
    name, seq = None, []
    with open(path, 'rb') as f:
        for line in f:
            if line.startswith(b'>'):
                if name:
                    yield name, b''.join(seq)
                name, seq = line[1:].split()[0], []
            else:
                seq.append(line.strip())
    if name:
        yield name, b''.join(seq)


def main():
    pairs, r1, r2, files = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    rng = random.Random(7)
    per_file = pairs // len(files)
    n = 0
    with open(r1, 'wb') as o1, open(r2, 'wb') as o2:
        for path in files:
            genomes = list(records(path))
            for _ in range(per_file):
                name, g = genomes[rng.randrange(len(genomes))]
                frag = max(160, int(rng.gauss(300, 30)))
                at = rng.randrange(len(g) - frag)
                f = g[at:at + frag]
                if rng.random() < 0.5:
                    f = f.translate(COMPLEMENT)[::-1]
                mates = [bytearray(f[:150]), bytearray(f[-150:].translate(COMPLEMENT)[::-1])]
                for m in mates:
                    for _ in range(int(rng.random() < 0.45)):
                        j = rng.randrange(150)
                        m[j] = b'ACGT'[(b'ACGT'.index(m[j]) + 1 + rng.randrange(3)) % 4] if m[j] in b'ACGT' else m[j]
                n += 1
                rid = b'@p%d_%s' % (n, name)
                o1.write(rid + b'\n' + bytes(mates[0]) + b'\n+\n' + b'I' * 150 + b'\n')
                o2.write(rid + b'\n' + bytes(mates[1]) + b'\n+\n' + b'I' * 150 + b'\n')


main()
