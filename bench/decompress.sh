#!/usr/bin/env bash
# Decompression rates of the decoders kmerdb could use (issue 13), on the dev mock and on a ~2 GB
# .fastq.gz, each compressed as gzip -6, bgzip, pigz -i and zstd -3. Run from the repository root.
#
#   bench/decompress.sh            make the data (once), build the bench binary, print the table
#   DECOMP_COPIES=N                copies of the mock pair in the large file [260: 6.5 GB FASTQ]
#   DECOMP_RUNS=N                  runs per measurement on the mock, the median is kept [5]
#   DECOMP_BIG_RUNS=N              runs per measurement on the large file [3]
#   DECOMP_THREADS="1 2"           thread counts for the parallel decoders
#   SHARED                         the shared folder [../shared beside the checkout]
#
# Installs pigz, tabix (bgzip), zstd, isal (igzip), libdeflate-tools and time from Debian when
# missing (the command-line tools are measured too, as references). Everything generated goes to
# bench/work/decompress/ (ignored by git); the table is kept in bench/work/decompress/table.md.
#
# The large file: the mock pair's reads COPIES times with the read names made unique per copy,
# compressed by each tool as one stream (gzip -6 takes about 20 minutes of one core here).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-$(cd .. && pwd)/shared}
[[ -d $SHARED/data ]] || SHARED=/work/shared
COPIES=${DECOMP_COPIES:-260}
RUNS=${DECOMP_RUNS:-5}
BIG_RUNS=${DECOMP_BIG_RUNS:-3}
THREADS=${DECOMP_THREADS:-"1 2"}
W=bench/work/decompress
mkdir -p "$W"

missing=()
command -v pigz >/dev/null || missing+=(pigz)
command -v bgzip >/dev/null || missing+=(tabix)
command -v zstd >/dev/null || missing+=(zstd)
command -v igzip >/dev/null || missing+=(isal)
command -v libdeflate-gunzip >/dev/null || missing+=(libdeflate-tools)
[[ -x /usr/bin/time ]] || missing+=(time)
if ((${#missing[@]})); then
  echo "installing ${missing[*]} (apt-get)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

R1=$SHARED/data/reads/mock_R1.fq.gz
R2=$SHARED/data/reads/mock_R2.fq.gz

# The large FASTQ: the mock's pairs COPIES times, read names made unique per copy (streamed: the
# plain file is never written).
big_fastq() {
  local i
  for ((i = 0; i < COPIES; i++)); do
    gzip -dc "$R1" "$R2" | sed "s/^@r/@c${i}r/"
  done
}

# make NAME GENERATOR: NAME.gz (gzip -6), NAME.bgzf.gz (bgzip -l 6), NAME.pigzi.gz (pigz -6 -i),
# NAME.zst (zstd -3), each made once.
make_set() {
  local name=$1 gen=$2
  [[ -s $W/$name.gz ]] || { $gen | gzip -6 >"$W/$name.gz.tmp" && mv "$W/$name.gz.tmp" "$W/$name.gz"; }
  [[ -s $W/$name.bgzf.gz ]] || { $gen | bgzip -l 6 -@ 2 >"$W/$name.bgzf.gz.tmp" && mv "$W/$name.bgzf.gz.tmp" "$W/$name.bgzf.gz"; }
  [[ -s $W/$name.pigzi.gz ]] || { $gen | pigz -6 -i -p 2 >"$W/$name.pigzi.gz.tmp" && mv "$W/$name.pigzi.gz.tmp" "$W/$name.pigzi.gz"; }
  [[ -s $W/$name.zst ]] || { $gen | zstd -q -3 -T2 >"$W/$name.zst.tmp" && mv "$W/$name.zst.tmp" "$W/$name.zst"; }
}
mock_fastq() { gzip -dc "$R1"; }

echo "making data in $W (once)" >&2
make_set mock mock_fastq
make_set big big_fastq
ls -l "$W" >&2
[[ ${1:-} == --data-only ]] && exit 0

cargo build --release --quiet --features decompress-bench --bin kmerdb-decompress-bench
BENCH=${CARGO_TARGET_DIR:-target}/release/kmerdb-decompress-bench
OUT=$W/results.tsv
: >"$OUT"

# rust DECODER THREADS FILE RUNS: one line of kmerdb-decompress-bench.
rust() { "$BENCH" --runs "$4" "$1" "$2" "$3" | tee -a "$OUT"; }

# cli NAME THREADS FILE RUNS CMD...: a command-line decoder writing to /dev/null, median wall time
# of RUNS runs (/usr/bin/time), in the same columns (no CRC: the tools check their own).
cli() {
  local name=$1 threads=$2 file=$3 runs=$4; shift 4
  local out; out=$("$@" <"$file" | wc -c)
  local i line
  for ((i = 0; i < runs; i++)); do
    /usr/bin/time -f "%e %U %S" -o "$W/time.tmp" "$@" <"$file" >/dev/null
    cat "$W/time.tmp"
  done | sort -n | awk -v n="$runs" 'NR == int(n / 2) + 1' >"$W/median.tmp"
  read -r wall user sys <"$W/median.tmp"
  line=$(awk -v d="$name" -v t="$threads" -v f="$file" -v i="$(stat -c %s "$file")" -v o="$out" \
    -v w="$wall" -v u="$user" -v s="$sys" 'BEGIN {
      w = (w > 0 ? w : 0.001); c = u + s; c = (c > 0 ? c : 0.001)
      printf "%s\t%s\t%s\t%d\t%d\t-\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", d, t, f, i, o, w, o / w / 1e9, i / w / 1e9, c, o / c / 1e9 }')
  echo "$line" | tee -a "$OUT"
}

# C zlib (what flate2's "zlib" backend would use), streaming through Python's binding.
PY_ZLIB='
import sys, zlib
r, w = sys.stdin.buffer, sys.stdout.buffer
d = zlib.decompressobj(31)
while True:
    b = r.read(1 << 20)
    if not b:
        break
    while b:
        w.write(d.decompress(b))
        b = d.unused_data if d.eof else b""
        if d.eof:
            d = zlib.decompressobj(31)
w.write(d.flush())
'

cat "$W"/*.gz "$W"/*.zst >/dev/null   # into the page cache
for set in mock big; do
  runs=$RUNS; [[ $set == big ]] && runs=$BIG_RUNS
  gz=$W/$set.gz bg=$W/$set.bgzf.gz pi=$W/$set.pigzi.gz zs=$W/$set.zst
  echo "== $set" >&2
  # gzip -6: one member, one thread whatever the decoder.
  rust kmerdb 1 "$gz" "$runs"
  rust flate2 1 "$gz" "$runs"
  if [[ $set == mock ]]; then   # whole-buffer decoders need all of the output in memory
    for lib in libdeflate zlib-rs zune miniz; do rust "$lib-whole" 1 "$gz" "$runs"; done
    cli libdeflate-gunzip 1 "$gz" "$runs" libdeflate-gunzip -c
  fi
  cli "gzip -dc" 1 "$gz" "$runs" gzip -dc
  cli "python3 zlib (C zlib $(python3 -c 'import zlib; print(zlib.ZLIB_RUNTIME_VERSION)'))" 1 "$gz" "$runs" python3 -c "$PY_ZLIB"
  cli "pigz -dc" 1 "$gz" "$runs" pigz -dc
  cli "igzip -dc (ISA-L)" 1 "$gz" "$runs" igzip -dc
  # BGZF
  for t in $THREADS; do rust kmerdb "$t" "$bg" "$runs"; done
  rust flate2 1 "$bg" "$runs"
  for lib in libdeflate zlib-rs zune miniz; do rust "$lib-blocks" 1 "$bg" "$runs"; done
  for t in $THREADS; do cli "bgzip -dc -@ $t" "$t" "$bg" "$runs" bgzip -dc -@ "$t"; done
  cli "igzip -dc (ISA-L)" 1 "$bg" "$runs" igzip -dc
  # pigz -i
  for t in $THREADS; do rust kmerdb "$t" "$pi" "$runs"; done
  rust flate2 1 "$pi" "$runs"
  cli "pigz -dc" 1 "$pi" "$runs" pigz -dc
  cli "igzip -dc (ISA-L)" 1 "$pi" "$runs" igzip -dc
  # zstd -3
  rust kmerdb 1 "$zs" "$runs"
  rust zstd 1 "$zs" "$runs"
  cli "zstd -dc" 1 "$zs" "$runs" zstd -dc
done

# The table: data, format, decoder, threads, sizes, median wall time and rates.
python3 - "$OUT" >"$W/table.md" <<'PY'
import sys
fmt = {".bgzf.gz": "BGZF (bgzip -l 6)", ".pigzi.gz": "pigz -6 -i", ".zst": "zstd -3", ".gz": "gzip -6"}
print("| data | compressed as | decoder | threads | MB in | MB out | wall s | GB/s out | GB/s in | CPU s | GB/s out per CPU s |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
crcs = {}
for line in open(sys.argv[1]):
    d, t, f, i, o, crc, w, go, gi, c, gc = line.rstrip("\n").split("\t")
    name = f.rsplit("/", 1)[-1]
    data = name.split(".", 1)[0]
    kind = next(v for k, v in fmt.items() if name.endswith(k))
    if crc != "-":
        crcs.setdefault(data, set()).add(crc)
    print(f"| {data} | {kind} | {d} | {t} | {int(i)/1e6:.1f} | {int(o)/1e6:.1f} | {w} | {go} | {gi} | {c} | {gc} |")
for data, c in crcs.items():
    print(f"\n{data}: {'all decoders gave the same CRC32 ' + c.pop() if len(c) == 1 else 'CRC32s DIFFER: ' + ' '.join(sorted(c))}")
PY
cat "$W/table.md"
