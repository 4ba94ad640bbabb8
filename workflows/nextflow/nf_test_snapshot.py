#!/usr/bin/env python3
"""The nf-test snapshots of the modules in modules/kmerdb, made from real outputs.

Nextflow and nf-test cannot be installed on kmerdb's machines, so the test
`nextflow_modules_run_their_commands` (tests/cli/workflows.rs) runs each module's script and stub
blocks with bash, as Nextflow would, once for every test in the module's tests/main.nf.test, and
hands the work directories to this script:

    nf_test_snapshot.py check RUNS.json   # the checked-in .snap matches these outputs
    nf_test_snapshot.py write RUNS.json   # rewrite the .snap from these outputs

RUNS.json maps each module name (build, classify, merge, update) to its runs, one per nf-test test:
{"test": NAME, "process": "KMERDB_BUILD", "work": DIR, "meta": {"id": "test"}}.

For each run this script does what nf-test does with `snapshot(process.out).match()`: it collects
every output channel that the module declares, in the order of main.nf (numbered, then by name,
as nf-test's sorted map prints them), each file as `name:md5,HEX` (for `.gz` files the md5 of the
decompressed content, as nf-test computes it), an `optional: true` output that was not made as an
empty channel, and each versions tuple by running its `eval` command. It also checks that meta.yml
declares exactly the inputs and outputs of main.nf, that every output not declared optional was
made, and that the runs are the tests of main.nf.test. Only `content` is compared, as nf-test
compares it; `write` keeps the timestamp of an unchanged snapshot and orders the tests as
nf-test's HashMap does, so that a later `nf-test --update-snapshot` gives the same file. Needs
PyYAML (Snakemake brings it).
"""

import datetime
import fnmatch
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

MODULES = Path(__file__).resolve().parent / "modules" / "kmerdb"
# The versions that `meta` records for a newly written snapshot: the nf-test and Nextflow that
# nf-core's modules are tested with at the time of writing (the content does not depend on them).
META = {"nf-test": "0.9.5", "nextflow": "25.10.4"}


class Mismatch(Exception):
    pass


def declared_outputs(main_nf):
    """(emit, path pattern or None, eval command or None, optional) for each output of main.nf, in
    order."""
    block = re.search(r"\n\s*output:\n(.*?)\n\s*when:", main_nf, re.S).group(1)
    outputs = []
    for line in filter(str.strip, block.splitlines()):
        emit = re.search(r"emit:\s*(\w+)", line).group(1)
        path = re.search(r"path\(['\"]([^'\"]+)['\"]\)", line)
        evaluated = re.search(r"eval\('([^']*)'\)", line)
        optional = re.search(r"optional:\s*true", line) is not None
        outputs.append((emit, path and path.group(1), evaluated and evaluated.group(1), optional))
    return outputs


def declared_inputs(main_nf):
    """The inputs of main.nf: a list of names per channel (`tuple val(meta), path(x)` is two)."""
    block = re.search(r"\n\s*input:\n(.*?)\n\s*output:", main_nf, re.S).group(1)
    channels = []
    for line in filter(str.strip, block.splitlines()):
        line = line.strip()
        if line.startswith("tuple"):
            channels.append(re.findall(r"(?:val|path)\((\w+)\)", line))
        else:
            channels.append([line.split()[1]])
    return channels


def check_meta_yml(name, main_nf, meta):
    """meta.yml declares main.nf's inputs and outputs, in main.nf's order."""
    inputs = [[next(iter(e)) for e in (c if isinstance(c, list) else [c])] for c in meta["input"]]
    if inputs != declared_inputs(main_nf):
        raise Mismatch(f"{name}: meta.yml inputs {inputs} are not main.nf's {declared_inputs(main_nf)}")
    outputs = declared_outputs(main_nf)
    if list(meta["output"]) != [emit for emit, _, _, _ in outputs]:
        raise Mismatch(f"{name}: meta.yml outputs {list(meta['output'])} are not main.nf's emits")
    for emit, pattern, command, _ in outputs:
        elements = [next(iter(e)) for e in meta["output"][emit][0]]
        expected = ["meta", pattern] if pattern else ["${task.process}", "kmerdb", command]
        if elements != expected:
            raise Mismatch(f"{name}: meta.yml output {emit} is {elements}, main.nf declares {expected}")
        if command and meta["topics"]["versions"] != meta["output"][emit]:
            raise Mismatch(f"{name}: meta.yml's versions topic differs from output {emit}")


def md5(path):
    digest = hashlib.md5()
    with (gzip.open(path) if path.name.endswith(".gz") else open(path, "rb")) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def made(work, pattern):
    """The files a `path(pattern)` output collects: staged inputs (links) and hidden files are not."""
    return sorted(
        p for p in work.iterdir()
        if p.is_file() and not p.is_symlink() and not p.name.startswith(".") and fnmatch.fnmatch(p.name, pattern)
    )


def content(name, outputs, run):
    """What `snapshot(process.out)` records for one run."""
    work = Path(run["work"])
    meta = dict(sorted(run["meta"].items()))
    channels = {}
    for i, (emit, pattern, command, optional) in enumerate(outputs):
        if pattern:
            files = made(work, pattern)
            if not files and optional:
                channels[str(i)] = channels[emit] = []
                continue
            if not files:
                raise Mismatch(f"{name}, test '{run['test']}': no output {emit} ({pattern}) in {work}")
            rendered = [f"{f.name}:md5,{md5(f)}" for f in files]
            item = [meta, rendered[0] if len(rendered) == 1 else rendered]
        else:
            result = subprocess.run(["bash", "-c", command], cwd=work, capture_output=True, text=True)
            if result.returncode != 0 or not result.stdout.strip():
                raise Mismatch(f"{name}: versions command failed: {command}\n{result.stderr}")
            item = [run["process"], "kmerdb", result.stdout.strip()]
        channels[str(i)] = channels[emit] = [item]
    return [dict(sorted(channels.items()))]


def java_hash(s):
    """Java's String.hashCode, spread as HashMap spreads it."""
    units = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h ^ (h >> 16)


def hashmap_order(keys):
    """The order in which a java.util.HashMap holding `keys` (inserted in this order) iterates."""
    size = 16
    while len(keys) > size * 3 // 4:
        size *= 2
    return sorted(keys, key=lambda k: java_hash(k) & (size - 1))


def test_names(nf_test):
    return re.findall(r'\n\s*test\("([^"]+)"\)', nf_test)


def test_block(nf_test, name):
    start = nf_test.index(f'test("{name}")')
    following = [m.start() for m in re.finditer(r'\n\s*test\("', nf_test) if m.start() > start]
    return nf_test[start : following[0] if following else len(nf_test)]


def groovy_map(meta):
    values = {True: "true", False: "false"}
    return ", ".join(f"{k}:{values.get(v, repr(v))}" for k, v in meta.items())


def snapshot_of(name, runs):
    """Checks the module's files and runs; returns the test names and their content."""
    module = MODULES / name
    main_nf = (module / "main.nf").read_text()
    meta_yml = yaml.safe_load((module / "meta.yml").read_text())
    check_meta_yml(name, main_nf, meta_yml)
    nf_test = (module / "tests" / "main.nf.test").read_text()
    names = test_names(nf_test)
    if sorted(names) != sorted(r["test"] for r in runs):
        raise Mismatch(f"{name}: main.nf.test's tests {names} are not the runs {[r['test'] for r in runs]}")
    for run in runs:
        block = test_block(nf_test, run["test"])
        if ('options "-stub"' in block) != run["test"].endswith(" - stub"):
            raise Mismatch(f"{name}, test '{run['test']}': a stub test is named '... - stub' and has options \"-stub\"")
        setup = nf_test[: nf_test.index('test("')]
        if groovy_map(run["meta"]) not in block + setup:
            raise Mismatch(f"{name}, test '{run['test']}': main.nf.test does not give meta [{groovy_map(run['meta'])}]")
    outputs = declared_outputs(main_nf)
    return names, {run["test"]: content(name, outputs, run) for run in runs}


def timestamp():
    t = datetime.datetime.now().isoformat()
    return t.rstrip("0") if "." in t else t


def main():
    mode, runs_file = sys.argv[1:]
    runs = json.loads(Path(runs_file).read_text())
    failures = []
    for name, module_runs in sorted(runs.items()):
        snap_path = MODULES / name / "tests" / "main.nf.test.snap"
        try:
            names, contents = snapshot_of(name, module_runs)
        except Mismatch as e:
            failures.append(str(e))
            continue
        old = json.loads(snap_path.read_text()) if snap_path.exists() else {}
        if mode == "check":
            for test in names:
                if test not in old:
                    failures.append(f"{snap_path}: no snapshot '{test}'")
                elif old[test]["content"] != contents[test]:
                    failures.append(
                        f"{snap_path}: snapshot '{test}' differs from the outputs:\n"
                        f"  checked in: {json.dumps(old[test]['content'])}\n"
                        f"  made now:   {json.dumps(contents[test])}"
                    )
            for test in sorted(set(old) - set(names)):
                failures.append(f"{snap_path}: obsolete snapshot '{test}'")
        elif mode == "write":
            snap = {}
            for test in hashmap_order([t for t in old if t in contents] + [t for t in names if t not in old]):
                if test in old and old[test]["content"] == contents[test]:
                    snap[test] = old[test]
                else:
                    snap[test] = {"content": contents[test], "timestamp": timestamp(), "meta": META}
            snap_path.write_text(json.dumps(snap, indent=4))
            print(f"wrote {snap_path.relative_to(MODULES.parents[2])}")
        else:
            sys.exit(f"unknown mode {mode}: check or write")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
