"""Rule update's script: updates one part of the index. The part removes the targets of the
removal list that it holds (written to output.removed, empty if none) and the last part takes the
added genomes; a part with nothing to do is copied as built. kmerdb's stderr goes to the log."""

import json
import shutil
import subprocess

sm = snakemake  # noqa: F821 (set by Snakemake's script directive)
p = sm.params

info = subprocess.run([p.kmerdb, "info", "--json", sm.input.db], check=True, capture_output=True, text=True)
held = {t["name"] for t in json.loads(info.stdout)["targets"]}
wanted = []
if p.remove_targets:
    with open(p.remove_targets) as f:
        wanted = [line.split("#")[0].strip() for line in f]
mine = [name for name in wanted if name in held]
with open(sm.output.removed, "w") as f:
    f.write("".join(f"{name}\n" for name in mine))

args = ["--remove-targets", sm.output.removed] if mine else []
if p.add and int(sm.wildcards.part) == p.parts:
    args += ["--add", p.add, "--taxonomy", p.taxonomy, "--seqid2taxid", p.seqid2taxid]
with open(sm.log[0], "w") as log:
    if args:
        command = [p.kmerdb, "update", "-d", sm.input.db, "-o", sm.output.db, "-t", str(sm.threads), *args]
        subprocess.run(command, check=True, stderr=log)
    else:
        shutil.copyfile(sm.input.db, sm.output.db)
        log.write("nothing to update in this part\n")
