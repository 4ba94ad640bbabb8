#!/usr/bin/env python3
"""Helpers for the kmerdb benchmark scripts (bench/heldout.sh, bench/mock.sh).

Subcommands
  relatives MANIFEST NODES.dmp.gz LEFT_OUT_IDS...
        For each left-out genome: its species/genus/family and how many genomes of the index
        (the manifest less the left-out ones) share each; prints a TSV and the deepest shared rank.
  merge --sim art|dwgsim --out PREFIX --seed N GENOME_ID:FASTA:R1:R2 ...
        Reads the per-genome simulator output, shuffles all pairs deterministically, renames them
        r0000000.. and writes PREFIX_R1.fq.gz, PREFIX_R2.fq.gz and PREFIX.truth.tsv
        (read_id, genome_id, taxid, seq_id: the format of shared/data/reads/mock.truth.tsv).
        Taxids come from --manifest.
  record --out JSON --tool T --set S --truth TRUTH --nodes NODES --calls CALLS
         [--time TIME_V_FILE] [--build-time TIME_V_FILE] [--index-bytes N] [--groups TSV]
         [--kreport FILE]
        Scores CALLS with shared/tools/score.py (--json), adds wall time and peak RSS parsed from
        /usr/bin/time -v output, and, with --groups (genome_id<TAB>group), the score of each group.
  table JSON...   Markdown tables of the recorded results.
  timev FILE      Prints "wall_s peak_rss_kb" from /usr/bin/time -v output.
"""
import argparse, array, gzip, json, os, random, re, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get('SHARED', os.path.join(HERE, '..', '..', 'shared'))
SCORE = os.path.join(SHARED, 'tools', 'score.py')


def opener(p):
    return gzip.open(p, 'rt') if p.endswith('.gz') else open(p)


def read_manifest(path):
    rows = {}
    with open(path) as f:
        head = f.readline().rstrip('\n').split('\t')
        for l in f:
            x = dict(zip(head, l.rstrip('\n').split('\t')))
            rows[x['genome_id']] = x
    return rows


class _Col:
    """A read-only str -> str mapping over an int array indexed by taxid (parent or rank code)."""
    def __init__(self, arr, names=None):
        self.a, self.names = arr, names

    def _get(self, t):
        if not t.isdigit():
            return None
        i = int(t)
        if i >= len(self.a) or self.a[i] < 0 if self.names is None else i >= len(self.a) or self.a[i] == 0:
            return None
        return str(self.a[i]) if self.names is None else self.names[self.a[i]]

    def __contains__(self, t):
        return self._get(t) is not None

    def __getitem__(self, t):
        v = self._get(t)
        if v is None:
            raise KeyError(t)
        return v

    def get(self, t, d=None):
        v = self._get(t)
        return d if v is None else v


def read_nodes(path):
    """parent and rank of every taxon (str -> str mappings). Parsing nodes.dmp takes seconds, so the
    result is cached under bench/work/ as raw arrays indexed by taxid, which load in milliseconds."""
    st = os.stat(path)
    cache = os.path.join(HERE, 'work', f'nodes.{st.st_size}.{int(st.st_mtime)}')
    try:
        with open(cache + '.ranks.json') as f:
            names = json.load(f)
        par, rk = array.array('i'), array.array('B')
        with open(cache + '.parent', 'rb') as f:
            par.frombytes(f.read())
        with open(cache + '.rank', 'rb') as f:
            rk.frombytes(f.read())
        return _Col(par), _Col(rk, names)
    except (OSError, ValueError):
        pass
    rows = []
    with opener(path) as f:
        for l in f:
            x = l.split('\t|\t')
            rows.append((int(x[0]), int(x[1]), x[2]))
    n = max(r[0] for r in rows) + 1
    names = [''] + sorted(set(r[2] for r in rows))
    code = {nm: i for i, nm in enumerate(names)}
    par, rk = array.array('i', [-1]) * n, array.array('B', [0]) * n
    for t, p, r in rows:
        par[t] = p; rk[t] = code[r]
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    for suf, data in (('.parent', par.tobytes()), ('.rank', rk.tobytes()), ('.ranks.json', json.dumps(names).encode())):
        with open(cache + suf + '.tmp', 'wb') as f:
            f.write(data)
        os.replace(cache + suf + '.tmp', cache + suf)
    return _Col(par), _Col(rk, names)


def lineage_of(parent):
    """taxon -> [taxon, its parent, ..., the root] over `parent` (read_nodes'), remembered."""
    memo = {}
    def lineage(t):
        if t not in memo:
            out, x = [t], t
            while x in parent and parent[x] != x:
                x = parent[x]; out.append(x)
            memo[t] = out
        return memo[t]
    return lineage


def read_truth(path):
    """A truth table (read_id, genome_id, taxid, ...; a header line): read -> taxid, read -> genome."""
    truth, genome = {}, {}
    with opener(path) as f:
        next(f)
        for l in f:
            x = l.rstrip('\n').split('\t'); truth[x[0]] = x[2]; genome[x[0]] = x[1]
    return truth, genome


def kraken_line_call(line):
    """(read id without /1 or /2, taxid; '0' when unclassified) of a Kraken-format line."""
    x = line.rstrip('\n').split('\t')
    rid, tax = x[1], ('0' if x[0] == 'U' else x[2].split('(taxid ')[-1].rstrip(')'))
    return (rid[:-2] if rid[-2:] in ('/1', '/2') else rid), tax


def read_calls(path):
    """A Kraken-format per-read output: read -> taxid ('0' unclassified)."""
    with opener(path) as f:
        return dict(kraken_line_call(l) for l in f)


def score_calls(parent, rank, truth, calls):
    """The rule of shared/tools/score.py, in process (truth: read -> taxid, calls: read -> taxid)."""
    lineage = lineage_of(parent)
    res = {'reads': len(truth), 'called': sum(1 for r, t in calls.items() if t != '0' and r in truth), 'ranks': {}}
    for R in ('species', 'genus', 'family'):
        c = dict(correct=0, vague=0, wrong=0, unclassified=0)
        for rid, tt in truth.items():
            T = next((x for x in lineage(tt) if rank.get(x) == R), None)
            if T is None: continue
            p = calls.get(rid, '0')
            if p == '0' or p not in parent: c['unclassified' if p == '0' else 'wrong'] += 1; continue
            if T in lineage(p): c['correct'] += 1
            elif p in lineage(T)[1:]: c['vague'] += 1
            else: c['wrong'] += 1
        n = sum(c.values())
        sens = c['correct'] / n if n else 0.0
        prec = c['correct'] / (c['correct'] + c['wrong']) if c['correct'] + c['wrong'] else 0.0
        f1 = 2 * sens * prec / (sens + prec) if sens + prec else 0.0
        res['ranks'][R] = dict(c, reads=n, sensitivity=round(sens, 4), precision=round(prec, 4), f1=round(f1, 4))
    return res


def ancestor(parent, rank, t, R):
    while True:
        if rank.get(t) == R:
            return t
        if t not in parent or parent[t] == t:
            return None
        t = parent[t]


# ---------------------------------------------------------------- relatives
def cmd_relatives(a):
    man = read_manifest(a.manifest)
    parent, rank = read_nodes(a.nodes)
    left = set(a.ids)
    missing = left - set(man)
    if missing:
        sys.exit(f'benchlib relatives: not in manifest: {sorted(missing)}')
    index = [g for g in man if g not in left]
    print('genome_id\ttaxid\tspecies_rel\tgenus_rel\tfamily_rel\tdeepest_shared_rank')
    for g in a.ids:
        t = man[g]['taxid']
        n = {}
        for R in ('species', 'genus', 'family'):
            A = ancestor(parent, rank, t, R)
            n[R] = sum(1 for h in index if A is not None and ancestor(parent, rank, man[h]['taxid'], R) == A)
        deepest = next((R for R in ('species', 'genus', 'family') if n[R]), 'none')
        print(f"{g}\t{t}\t{n['species']}\t{n['genus']}\t{n['family']}\t{deepest}")


# ---------------------------------------------------------------- merge
def fastq_records(path):
    with opener(path) as f:
        while True:
            h = f.readline()
            if not h:
                return
            s = f.readline().rstrip('\n'); f.readline(); q = f.readline().rstrip('\n')
            yield h[1:].rstrip('\n').split()[0], s, q


def fasta_ids(path):
    with opener(path) as f:
        return [l[1:].split()[0] for l in f if l.startswith('>')]


def cmd_merge(a):
    man = read_manifest(a.manifest)
    pairs, counts = [], []
    for spec in a.inputs:
        gid, fasta, r1, r2 = spec.split(':')
        seqids = sorted(fasta_ids(fasta), key=len, reverse=True)
        n = 0
        for (n1, s1, q1), (n2, s2, q2) in zip(fastq_records(r1), fastq_records(r2)):
            b1, b2 = n1[:-2] if n1[-2:] in ('/1', '/2') else n1, n2[:-2] if n2[-2:] in ('/1', '/2') else n2
            if b1 != b2:
                sys.exit(f'benchlib merge: mates out of step in {r1}: {n1} vs {n2}')
            if a.sim == 'art':           # <seqid>-<n>/1
                sid = b1.rsplit('-', 1)[0]
            else:                        # dwgsim: <seqid>_<pos1>_<pos2>_..._<n>/1; iss: <seqid>_<n>_<m>/1
                sid = next((s for s in seqids if b1.startswith(s + '_')), None)
            if sid not in seqids:
                sys.exit(f'benchlib merge: cannot tell the sequence of read {n1} ({gid})')
            pairs.append((gid, sid, s1, q1, s2, q2)); n += 1
        counts.append((gid, n))
    random.Random(a.seed).shuffle(pairs)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + '.tmp'
    with gzip.GzipFile(tmp + '_R1.fq.gz', 'wb', mtime=0) as o1, \
         gzip.GzipFile(tmp + '_R2.fq.gz', 'wb', mtime=0) as o2, open(tmp + '.truth.tsv', 'w') as t:
        t.write('read_id\tgenome_id\ttaxid\tseq_id\n')
        for i, (gid, sid, s1, q1, s2, q2) in enumerate(pairs):
            rid = f'r{i:07d}'
            o1.write(f'@{rid}/1\n{s1}\n+\n{q1}\n'.encode())
            o2.write(f'@{rid}/2\n{s2}\n+\n{q2}\n'.encode())
            t.write(f"{rid}\t{gid}\t{man[gid]['taxid']}\t{sid}\n")
    # truth last: its presence marks a complete read set
    for suf in ('_R1.fq.gz', '_R2.fq.gz', '.truth.tsv'):
        os.replace(tmp + suf, a.out + suf)
    for gid, n in counts:
        print(f'  {a.sim:7s} {gid:22s} {n:6d} pairs')
    print(f'  {a.sim:7s} {"total":22s} {len(pairs):6d} pairs -> {a.out}_R{{1,2}}.fq.gz')


# ---------------------------------------------------------------- record
def parse_timev(path):
    wall = rss = None
    with open(path) as f:
        for l in f:
            l = l.strip()
            if l.startswith('Elapsed (wall clock) time'):
                v = l.rsplit(': ', 1)[1].split(':')
                wall = sum(float(x) * 60 ** i for i, x in enumerate(reversed(v)))
            elif l.startswith('Maximum resident set size'):
                rss = int(l.rsplit(': ', 1)[1])
    return wall, rss


def run_score(truth, nodes, calls):
    out = subprocess.run([sys.executable, SCORE, truth, nodes, calls, '--json'],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f'score.py failed on {calls}: {out.stderr.strip()}')
    return json.loads(out.stdout)


def check_kreport(path):
    """Light check of the kreport format (REFERENCE.md section 4); returns a list of problems."""
    probs = []
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        return [f'cannot read: {e}']
    if not lines:
        return ['empty']
    mq = re.compile(r'^\s{0,2}(\d{1,3}\.\d{1,2})\t(\d+)\t(\d+)\t((\d+)\t(\d+)\t)?([URDKPCOFGS-]\d{0,2})\t(\d+)(\s+)[root|unclassified]')
    if not any(mq.match(l) for l in lines[:2]):
        probs.append('no MultiQC-recognised line among the first two')
    if any(len(l.split('\t')) not in (6, 8) for l in lines):
        probs.append('lines without 6 (or 8) tab-separated columns')
    x = [l.split('\t') for l in lines[:2]]
    if not (len(x) >= 1 and x[0][3:5] == ['U', '0']) and not (len(x) >= 1 and x[0][3:5] == ['R', '1']):
        probs.append('first line is neither unclassified (U, 0) nor root (R, 1)')
    return probs


def cmd_record(a):
    res = {'tool': a.tool, 'set': a.set}
    if a.index:
        res['index'] = a.index
    res['score'] = run_score(a.truth, a.nodes, a.calls)
    if a.time:
        res['wall_s'], res['rss_kb'] = parse_timev(a.time)
    if a.build_time and os.path.exists(a.build_time):   # absent when KMERDB_REUSE=1 kept an old index
        res['build_wall_s'], res['build_rss_kb'] = parse_timev(a.build_time)
    if a.build_wall is not None:
        res['build_wall_s'] = a.build_wall
    if a.build_rss_kb is not None:
        res['build_rss_kb'] = a.build_rss_kb
    if a.index_bytes is not None:
        res['index_bytes'] = a.index_bytes
    if a.kreport:
        res['kreport_problems'] = check_kreport(a.kreport)
    if a.groups:
        groups = {}
        with open(a.groups) as f:
            for l in f:
                g, grp = l.rstrip('\n').split('\t')[:2]
                groups[g] = grp
        truth, genome = read_truth(a.truth)
        calls = read_calls(a.calls)
        parent, rank = read_nodes(a.nodes)
        whole = score_calls(parent, rank, truth, calls)
        if whole != res['score']:
            sys.exit('benchlib record: in-process scoring disagrees with score.py')
        order = ['species', 'genus', 'family', 'none']
        res['groups'], res['genomes'] = {}, {}
        for grp in sorted(set(groups.get(g, 'other') for g in genome.values()),
                          key=lambda g: (order.index(g) if g in order else 9, g)):
            sub = {r: t for r, t in truth.items() if groups.get(genome[r], 'other') == grp}
            res['groups'][grp] = score_calls(parent, rank, sub, calls)
        for gid in dict.fromkeys(groups):
            sub = {r: t for r, t in truth.items() if genome[r] == gid}
            if sub:
                res['genomes'][gid] = dict(score_calls(parent, rank, sub, calls), group=groups[gid])
    with open(a.out, 'w') as f:
        json.dump(res, f, indent=1)


# ---------------------------------------------------------------- table
def fmt(v, nd=4):
    return '-' if v is None else f'{v:.{nd}f}'


def mb(kb):  # /usr/bin/time reports KiB
    return '-' if kb is None else f'{kb / 1024:.0f} MiB'


def cmd_table(a):
    rs = [json.load(open(p)) for p in a.results if os.path.exists(p)]
    if not rs:
        print('(no results)'); return
    print('| tool | read set | reads | classified | species sens | species prec | species F1 | '
          'genus sens | genus prec | genus F1 | family sens | family prec | family F1 | '
          'calls outside the family | classify wall | classify peak RSS |')
    print('|---|---|---:|---:|' + '---:|' * 12)
    for r in rs:
        s = r['score']; k = s['ranks']
        cells = [r['tool'], r['set'], str(s['reads']), f"{100 * s['called'] / max(1, s['reads']):.2f}%"]
        for R in ('species', 'genus', 'family'):
            cells += [fmt(k[R]['sensitivity']), fmt(k[R]['precision']), fmt(k[R]['f1'])]
        # Reads called in a family other than their own (issue 33's cross-family calls).
        cells += [str(k['family']['wrong'])]
        cells += [fmt(r.get('wall_s'), 2) + ' s' if r.get('wall_s') is not None else '-', mb(r.get('rss_kb'))]
        print('| ' + ' | '.join(cells) + ' |')
    if any('build_wall_s' in r or 'index_bytes' in r for r in rs):
        print()
        print('| tool | index | build wall | build peak RSS | index size |')
        print('|---|---|---:|---:|---:|')
        seen = set()
        for r in rs:
            key = (r['tool'], r.get('index', ''))
            if key in seen or not ('build_wall_s' in r or 'index_bytes' in r):
                continue
            seen.add(key)
            ib = r.get('index_bytes')
            print(f"| {r['tool']} | {r.get('index', '-')} | "
                  f"{fmt(r.get('build_wall_s'), 1) + ' s' if r.get('build_wall_s') is not None else '-'} | "
                  f"{mb(r.get('build_rss_kb'))} | {'-' if ib is None else f'{ib / 2**20:.1f} MiB'} |")
    if any('groups' in r for r in rs):
        print()
        print('Per group of left-out genomes (fractions of the group\'s reads: correct / vague / wrong / '
              'unclassified; "wrong" at a rank the index cannot know is a false positive):')
        print()
        print('| tool | read set | group | reads | species c/v/w/u | genus c/v/w/u | family c/v/w/u |')
        print('|---|---|---|---:|---|---|---|')
        for r in rs:
            for grp, s in r.get('groups', {}).items():
                cells = [r['tool'], r['set'], grp, str(s['reads'])]
                for R in ('species', 'genus', 'family'):
                    c = s['ranks'][R]; n = max(1, c['reads'])
                    cells.append('/'.join(f"{c[x] / n:.3f}" for x in ('correct', 'vague', 'wrong', 'unclassified'))
                                 if c['reads'] else '-')
                print('| ' + ' | '.join(cells) + ' |')
    if a.genomes and any('genomes' in r for r in rs):
        print()
        print('Per left-out genome (fractions: correct / vague / wrong / unclassified):')
        print()
        print('| tool | read set | genome | group | reads | species c/v/w/u | genus c/v/w/u | family c/v/w/u |')
        print('|---|---|---|---|---:|---|---|---|')
        for r in rs:
            for gid, s in r.get('genomes', {}).items():
                cells = [r['tool'], r['set'], gid, s['group'], str(s['reads'])]
                for R in ('species', 'genus', 'family'):
                    c = s['ranks'][R]; n = max(1, c['reads'])
                    cells.append('/'.join(f"{c[x] / n:.3f}" for x in ('correct', 'vague', 'wrong', 'unclassified'))
                                 if c['reads'] else '-')
                print('| ' + ' | '.join(cells) + ' |')
    for r in rs:
        if r.get('kreport_problems'):
            print(f"\nwarning: {r['tool']} {r['set']} kreport: {'; '.join(r['kreport_problems'])}")


def main():
    ap = argparse.ArgumentParser()
    sp = ap.add_subparsers(dest='cmd', required=True)
    p = sp.add_parser('relatives'); p.add_argument('manifest'); p.add_argument('nodes'); p.add_argument('ids', nargs='+')
    p = sp.add_parser('merge'); p.add_argument('--sim', required=True, choices=['art', 'dwgsim', 'iss'])
    p.add_argument('--out', required=True); p.add_argument('--seed', type=int, required=True)
    p.add_argument('--manifest', required=True); p.add_argument('inputs', nargs='+')
    p = sp.add_parser('record')
    for o in ('out', 'tool', 'set', 'truth', 'nodes', 'calls'):
        p.add_argument('--' + o, required=True)
    for o in ('time', 'build-time', 'groups', 'kreport', 'index'):
        p.add_argument('--' + o)
    p.add_argument('--index-bytes', type=int); p.add_argument('--build-wall', type=float)
    p.add_argument('--build-rss-kb', type=int)
    p = sp.add_parser('table'); p.add_argument('--genomes', action='store_true'); p.add_argument('results', nargs='+')
    p = sp.add_parser('timev'); p.add_argument('file')
    a = ap.parse_args()
    if a.cmd == 'timev':
        w, r = parse_timev(a.file); print(w, r); return
    {'record': cmd_record, 'relatives': cmd_relatives, 'merge': cmd_merge, 'table': cmd_table}[a.cmd](a)


if __name__ == '__main__':
    main()
