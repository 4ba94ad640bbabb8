#!/usr/bin/env python3
"""Scores Kraken-format calls of the scale benchmark's reads (kmerdb-gpu-bench --scale-data) by
the kind of read its truth names: of indexed strains, of left-out strains, of unrelated species
(negative controls), with benchlib's in-process rule of shared/tools/score.py.

usage: score_kinds.py TRUTH.tsv NODES.dmp CALLS.kraken
prints a Markdown table: pairs, share called, and correct/vague/wrong/unclassified with F1 at
species and genus, per kind.
"""
import sys
from benchlib import opener, score_calls

truth_path, nodes_path, calls_path = sys.argv[1:4]
parent, rank = {}, {}
for line in opener(nodes_path):
    f = line.split('\t|\t')
    parent[f[0]] = f[1]
    rank[f[0]] = f[2]
kinds = {}
for line in list(opener(truth_path))[1:]:
    rid, _, taxid, kind = line.rstrip('\n').split('\t')
    kinds.setdefault(kind, {})[rid] = taxid
calls = {}
for line in opener(calls_path):
    f = line.split('\t', 3)
    calls[f[1].removesuffix('/1')] = f[2].split(' (taxid ')[-1].rstrip(')') if '(taxid' in f[2] else f[2]
print('| reads | pairs | called | species: correct / vague / wrong / unclassified | species F1 | genus F1 |')
print('|---|---:|---:|---|---:|---:|')
for kind in ('indexed', 'left_out', 'unindexed'):
    truth = kinds.get(kind, {})
    if not truth:
        continue
    sc = score_calls(parent, rank, truth, calls)
    sp, ge = sc['ranks']['species'], sc['ranks']['genus']
    print(f"| {kind.replace('_', ' ')} | {sc['reads']:,} | {100 * sc['called'] / sc['reads']:.2f}% "
          f"| {sp['correct']:,} / {sp['vague']:,} / {sp['wrong']:,} / {sp['unclassified']:,} "
          f"| {sp['f1']:.4f} | {ge['f1']:.4f} |")
