# shellcheck shell=bash disable=SC2034
# Shared by bench/heldout.sh, bench/mock.sh and the GPU scripts (gpu-scale.sh, device-choice.sh); sourced from the repository root.
# Settings (environment):
#   SHARED        the shared folder                       [../shared beside the checkout]
#   BENCH_THREADS threads for kraken2 / kmerdb            [2]
#   BENCH_NICE    niceness of the heavy steps             [10]
#   KMERDB        path of a kmerdb binary: also benchmark kmerdb
#   KMERDB_REUSE  1: keep an existing kmerdb index instead of rebuilding it

SHARED=${SHARED:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared}
[[ -d $SHARED/data ]] || SHARED=/work/shared
TAX=$SHARED/data/taxonomy
NODES=$TAX/nodes.dmp.gz
THREADS=${BENCH_THREADS:-2}
NICE=${BENCH_NICE:-10}
BENCHLIB=bench/benchlib.py

log() { printf '\n== %s\n' "$*" >&2; }

# label, command...: runs the command and prints "label: S s" (wall seconds); a failure sets the
# caller's `status` to 1 and goes on (the GPU scripts report every step, then their verdict).
timed_line() {
  local label=$1 t0
  shift
  t0=$(date +%s.%N)
  "$@" || status=1
  echo "$label: $(awk "BEGIN {printf \"%.2f\", $(date +%s.%N) - $t0}") s"
}

# uncache FILE...: drops the files' pages from the page cache (posix_fadvise DONTNEED, after a
# sync), so that the next read of them comes from the disk; needs no root.
uncache() {
  sync "$@"
  python3 -c 'import os, sys
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)' "$@"
}

need_tools() {
  local missing=()
  command -v kraken2 >/dev/null || missing+=(kraken2)
  [[ -x /usr/bin/time ]] || missing+=(time)
  for p in "$@"; do
    case $p in
      art) command -v art_illumina >/dev/null || missing+=(art-nextgen-simulation-tools) ;;
      dwgsim) command -v dwgsim >/dev/null || missing+=(dwgsim) ;;
      iss) command -v iss >/dev/null || { log "installing InSilicoSeq (pip)"; python3 -m pip install --quiet InSilicoSeq; } ;;
    esac
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive nice -n "$NICE" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# timed TIMEV_FILE LOG_FILE CMD...: run CMD under nice and /usr/bin/time -v; on failure show the log.
timed() {
  local tv=$1 lg=$2; shift 2
  if ! /usr/bin/time -v -o "$tv" nice -n "$NICE" "$@" >"$lg" 2>&1; then
    echo "FAILED: $*" >&2; tail -20 "$lg" >&2; return 1
  fi
}

bytes() { du -sbL "$@" 2>/dev/null | awk '{s+=$1} END{print s+0}'; }

# kraken2_db REFS_DIR DB_DIR: build (once) with shared/tools/kraken2_db.sh; the whole script's wall time
# and peak RSS go to DB_DIR.total.timev; the --build step's own line stays in DB_DIR/build.log.
kraken2_db() {
  local refs=$1 db=$2
  if [[ -f $db/hash.k2d ]]; then
    echo "kraken2 db exists, reused: $db ($(tail -1 "$db/build.log" 2>/dev/null))" >&2; return 0
  fi
  rm -rf "$db" "$db.total.timev"   # a half-built db would get its library added twice
  log "building kraken2 db $db from $refs"
  /usr/bin/time -v -o "$db.total.timev.tmp" nice -n "$NICE" \
    bash "$SHARED/tools/kraken2_db.sh" "$refs" "$TAX" "$db" "$THREADS" >&2
  mv "$db.total.timev.tmp" "$db.total.timev"
}

# Figures of the `kraken2-build --build` step alone, from the line kraken2_db.sh leaves in build.log.
kraken2_build_step() { # prints "wall_s peak_kb"
  tail -1 "$1/build.log" | sed -n 's/^kraken2-build: \([0-9.]*\) s wall, \([0-9]*\) KB peak$/\1 \2/p'
}

kraken2_index_bytes() { bytes "$1"/*.k2d; }

# classify_kraken2 DB SETNAME R1 R2 OUTDIR: per-read calls in OUTDIR/kraken2.SET.kraken
classify_kraken2() {
  local db=$1 set=$2 r1=$3 r2=$4 out=$5
  log "kraken2 classify $set"
  timed "$out/kraken2.$set.timev" "$out/kraken2.$set.log" \
    kraken2 --db "$db" --threads "$THREADS" --paired \
      --output "$out/kraken2.$set.kraken" --report "$out/kraken2.$set.kreport" "$r1" "$r2"
  grep -E 'classified|processed' "$out/kraken2.$set.log" | sed 's/^ */  /' >&2 || true
}

# kmerdb_build DB TIMEV LOG SEQID2TAXID REFS_DIR
kmerdb_build() {
  local db=$1 tv=$2 lg=$3 map=$4 refs=$5
  if [[ ${KMERDB_REUSE:-0} == 1 && -e $db ]]; then
    echo "KMERDB_REUSE=1: kmerdb index reused: $db" >&2; return 0
  fi
  rm -rf "$db" "$tv"
  log "kmerdb build $db"
  # shellcheck disable=SC2086
  timed "$tv" "$lg" "$KMERDB" build -d "$db" --taxonomy "$TAX" --seqid2taxid "$map" -t "$THREADS" ${KMERDB_BUILD_ARGS:-} "$refs"
}

# kmerdb_classify DB SETNAME R1 R2 OUTDIR
kmerdb_classify() {
  local db=$1 set=$2 r1=$3 r2=$4 out=$5
  log "kmerdb classify $set"
  rm -f "$out/kmerdb.$set.kraken" "$out/kmerdb.$set.kreport"
  timed "$out/kmerdb.$set.timev" "$out/kmerdb.$set.log" \
    "$KMERDB" classify -d "$db" -t "$THREADS" -1 "$r1" -2 "$r2" \
      -o "$out/kmerdb.$set.kraken" -r "$out/kmerdb.$set.kreport"
}

kmerdb_check() {
  [[ -x $KMERDB ]] || { echo "KMERDB=$KMERDB is not an executable file" >&2; return 1; }
  KMERDB=$(cd "$(dirname "$KMERDB")" && pwd)/$(basename "$KMERDB")
  local v; v=$("$KMERDB" --version 2>/dev/null | head -1 || true)
  echo "kmerdb: $KMERDB (${v:-no --version})" >&2
}
