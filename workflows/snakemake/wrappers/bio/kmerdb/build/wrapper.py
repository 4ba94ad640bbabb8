"""Snakemake wrapper for kmerdb build: an index of reference genomes."""

__author__ = "kmerdb maintainers"
__license__ = "MIT"

from shlex import quote

from snakemake.shell import shell

extra = snakemake.params.get("extra", "")
# kmerdb logs to stderr only.
log = snakemake.log_fmt_shell(stdout=False, stderr=True)

taxonomy = snakemake.input.get("taxonomy", "")
if taxonomy:
    taxonomy = f"--taxonomy {quote(taxonomy)}"

# One or more maps (seqid<TAB>taxid or NCBI *.accession2taxid); --seqid2taxid is repeatable.
seqid2taxid = snakemake.input.get("seqid2taxid", [])
if isinstance(seqid2taxid, str):
    seqid2taxid = [seqid2taxid]
seqid2taxid = " ".join(f"--seqid2taxid {quote(m)}" for m in seqid2taxid)

shell(
    "kmerdb build"
    " {snakemake.input.genomes:q}"
    " {taxonomy}"
    " {seqid2taxid}"
    " --db {snakemake.output.db:q}"
    " --threads {snakemake.threads}"
    " {extra}"
    " {log}"
)
