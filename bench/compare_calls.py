#!/usr/bin/env python3
"""Two tools' (or two settings') per-read calls on one read set, read by read: where they differ.

usage: bench/compare_calls.py TRUTH.tsv NODES.dmp.gz A.kraken B.kraken [--rank species]
                              [--show GENOME:FROM>TO] [--examples N]

Each read's outcome at the rank (as shared/tools/score.py scores it: c correct, v vague, w wrong,
u unclassified) under A and under B, counted per genome where they differ ("VDV1 u>w 50": 50 reads
of VDV1 that A left unclassified and B called wrongly); then each file's wrong calls by genome and
called taxon (with names, from names.dmp beside NODES). --show prints B's per-read lines (with
their hit lists) for one genome and transition, e.g. --show 'Ecoli_536:c>u'. What the issue 33
investigations used (bench/results/HISTORY.md, "Twenty-seventh session"): which reads a rule or a
setting changes, and what their hit lists hold.
"""
import argparse, collections, gzip, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import kraken_line_call, lineage_of, opener, read_calls, read_nodes, read_truth  # noqa: E402


def read_names(nodes_path):
    path = os.path.join(os.path.dirname(nodes_path), 'names.dmp.gz')
    names = {}
    if os.path.exists(path):
        with gzip.open(path, 'rt') as f:
            for line in f:
                x = line.split('\t|\t')
                if x[3].startswith('scientific name'):
                    names[x[0]] = x[1]
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('truth'); ap.add_argument('nodes'); ap.add_argument('a'); ap.add_argument('b')
    ap.add_argument('--rank', default='species')
    ap.add_argument('--show', help='GENOME:FROM>TO, e.g. VDV1:u>w')
    ap.add_argument('--examples', type=int, default=10)
    args = ap.parse_args()
    parent, rank = read_nodes(args.nodes)
    names = read_names(args.nodes)
    truth, genome = read_truth(args.truth)
    a, b = read_calls(args.a), read_calls(args.b)

    lineage = lineage_of(parent)

    def outcome(rid, taxid):
        if taxid == '0':
            return 'u'
        target = next((x for x in lineage(truth[rid]) if rank.get(x) == args.rank), None)
        if target is None:
            return '-'
        if target in lineage(taxid):
            return 'c'
        return 'v' if taxid in lineage(target)[1:] else 'w'

    changes, shown, wrong = collections.Counter(), [], {args.a: collections.Counter(), args.b: collections.Counter()}
    for rid in truth:
        ta, tb = a.get(rid, '0'), b.get(rid, '0')
        oa, ob = outcome(rid, ta), outcome(rid, tb)
        for path, taxid, o in ((args.a, ta, oa), (args.b, tb, ob)):
            if o == 'w':
                wrong[path][(genome[rid], names.get(taxid, taxid), rank.get(taxid, '?'))] += 1
        if oa != ob:
            key = f'{genome[rid]}:{oa}>{ob}'
            changes[key] += 1
            if key == args.show and len(shown) < args.examples:
                shown.append(rid)
    print(f'# reads whose {args.rank} outcome differs (A {args.a}, B {args.b})')
    for key, n in changes.most_common():
        print(f'{n:6d}  {key}')
    for path, counts in wrong.items():
        print(f'\n# wrong {args.rank} calls of {path}: {sum(counts.values())}')
        for (g, taxon, r), n in counts.most_common(15):
            print(f'{n:6d}  {g} -> {taxon} ({r})')
    if args.show:
        print(f'\n# {args.show}: B\'s lines')
        wanted = set(shown)
        with opener(args.b) as f:
            print(''.join(l for l in f if kraken_line_call(l)[0] in wanted), end='')


if __name__ == '__main__':
    main()
