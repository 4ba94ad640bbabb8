"""Snakemake wrapper for kmerdb classify: one sample's reads against an index."""

__author__ = "kmerdb maintainers"
__license__ = "MIT"

from shlex import quote

from snakemake.shell import shell

extra = snakemake.params.get("extra", "")
# kmerdb logs to stderr only.
log = snakemake.log_fmt_shell(stdout=False, stderr=True)

reads = snakemake.input.reads
if isinstance(reads, str):
    reads = [reads]
if len(reads) == 1:
    reads = quote(reads[0])
elif len(reads) == 2:
    reads = f"-1 {quote(reads[0])} -2 {quote(reads[1])}"
else:
    raise ValueError("input.reads must be one file (single-end or interleaved) or two (paired-end)")

# Each named output is written by one option of kmerdb classify.
OPTIONS = {
    "kraken": "--output",
    "report": "--report",
    "abundance": "--abundance",
    "cami": "--cami",
    "krona": "--krona",
    "mpa": "--mpa",
    "html": "--html",
    "candidates": "--candidates-out",
}
unknown = [name for name in snakemake.output.keys() if name not in OPTIONS]
if unknown or not snakemake.output.keys():
    raise ValueError(
        f"name each output after what it holds, one of {', '.join(OPTIONS)}"
        + (f" (not {', '.join(unknown)})" if unknown else "")
    )
outputs = " ".join(f"{OPTIONS[name]} {quote(path)}" for name, path in snakemake.output.items())
# Without a kraken output the per-read lines would go to stdout (as Kraken 2's do): none are made.
if "kraken" not in snakemake.output.keys():
    outputs += " --output /dev/null"

shell(
    "kmerdb classify"
    " --db {snakemake.input.db:q}"
    " {reads}"
    " {outputs}"
    " --threads {snakemake.threads}"
    " {extra}"
    " {log}"
)
