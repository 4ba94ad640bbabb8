#!/usr/bin/env python3
"""Negative-control reads: every read's bases shuffled (same length and composition, qualities
kept), deterministically (a seed per run, one generator for the whole file).

usage: shuffle_reads.py IN.fq[.gz] OUT.fq [SEED]

Reads that keep their composition but lose their sequence should stay unclassified: what a
classifier calls of them is its false-positive floor (issue 33's negative controls).
"""
import gzip
import os
import random
import sys


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) == 4 else 7)
    opener = gzip.open if src.endswith('.gz') else open
    # Written beside DST and renamed at the end: a bad input leaves no half-written DST.
    tmp = f'{dst}.tmp'
    try:
        n = shuffle(src, tmp, opener, rng)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, dst)
    print(f'{dst}: {n} reads shuffled', file=sys.stderr)


def shuffle(src, dst, opener, rng):
    with opener(src, 'rt') as f, open(dst, 'w') as out:
        n = 0
        while True:
            header = f.readline()
            if not header:
                break
            seq, plus, qual = f.readline().rstrip('\n'), f.readline(), f.readline()
            if not header.startswith('@') or not plus.startswith('+') or not qual:
                sys.exit(f'{src}: record {n + 1} is not a FASTQ record')
            bases = list(seq)
            rng.shuffle(bases)
            out.write(f"{header}{''.join(bases)}\n+\n{qual}")
            n += 1
    return n


if __name__ == '__main__':
    main()
