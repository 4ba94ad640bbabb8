#!/usr/bin/env python3
"""Calls below species against a truth table (issue 18.6): of the reads whose true taxon lies below
its species, how many are called at their own strain, at a taxon between it and the species (an
ancestor: right but vaguer), at a sibling strain (another taxon below the same species: wrong),
at the species itself, or elsewhere; and of the reads whose true taxon
is a species, how many are called at a strain below it. score.py scores species and above only.

usage: strain_calls.py TRUTH.tsv NODES.dmp[.gz] CALLS.kraken
"""
import gzip
import sys


def opener(p):
    return gzip.open(p, "rt") if p.endswith(".gz") else open(p)


def main():
    truth_path, nodes_path, calls_path = sys.argv[1:4]
    parent, rank = {}, {}
    with opener(nodes_path) as f:
        for line in f:
            x = line.split("\t|\t")
            parent[x[0]], rank[x[0]] = x[1], x[2]

    def species_of(t):
        while t in parent:
            if rank.get(t) == "species":
                return t
            if parent[t] == t:
                return None
            t = parent[t]
        return None

    truth = {}
    with opener(truth_path) as f:
        next(f)
        for line in f:
            x = line.rstrip("\n").split("\t")
            truth[x[0]] = x[2]
    def lineage(t):
        out = [t]
        while t in parent and parent[t] != t:
            t = parent[t]
            out.append(t)
        return out

    counts = dict(own_strain=0, between=0, sibling_strain=0, species=0, other=0, reads=0)
    over = dict(reads=0, strain=0)
    with opener(calls_path) as f:
        for line in f:
            x = line.rstrip("\n").split("\t")
            rid = x[1][:-2] if x[1][-2:] in ("/1", "/2") else x[1]
            call = "0" if x[0] == "U" else x[2].split("(taxid ")[-1].rstrip(")")
            t = truth[rid]
            sp = species_of(t)
            if sp is None:
                continue
            if sp == t:
                over["reads"] += 1
                if call != sp and species_of(call) == sp:
                    over["strain"] += 1
                continue
            counts["reads"] += 1
            if call == t:
                counts["own_strain"] += 1
            elif call != sp and call in lineage(t):
                counts["between"] += 1
            elif call == sp:
                counts["species"] += 1
            elif species_of(call) == sp:
                counts["sibling_strain"] += 1
            else:
                counts["other"] += 1
    n = max(counts["reads"], 1)
    print(
        f"reads of strains: {counts['reads']}: own strain {counts['own_strain']} ({100 * counts['own_strain'] / n:.1f}%), "
        f"between it and the species {counts['between']} ({100 * counts['between'] / n:.1f}%), "
        f"sibling strain {counts['sibling_strain']} ({100 * counts['sibling_strain'] / n:.1f}%), "
        f"species {counts['species']} ({100 * counts['species'] / n:.1f}%), other {counts['other']}"
    )
    print(f"reads of species-level genomes called at a strain below: {over['strain']} of {over['reads']}")


main()
