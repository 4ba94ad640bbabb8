#!/usr/bin/env bash
# A careless or hostile user against the GPU build at scale, on a GPU machine, from the repository
# root with carry/ prepared (scripts/prepare-gpu-carry.sh): GBP (10) of the strain-rich synthetic
# collection built with --gpus 0 while
#   1. Ctrl-C (SIGINT) arrives while reading and in the GPU passes: exit 130, the older index
#      unchanged, no temporary file left;
#   2. the output's disk is full (a 100 MB tmpfs, where the machine lets us mount one): a non-zero
#      exit naming the file, nothing left behind;
#   3. two builds write the same index at once: both finish or fail cleanly and the index is whole
#      (`kmerdb info` reads it, its bytes are one build's);
#   4. -d names a device node: refused.
# Prints FAULTS: all passed, or what failed.   usage: [GPUS=0] scripts/gpu-faults.sh [GBP]
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/carry/bin
GBP=${1:-10}
T=${KMERDB_FAULTS_DIR:-/tmp/kmerdb-faults}
export SOURCE_DATE_EPOCH=1700000000
status=0
fail() { echo "FAILED: $*"; status=1; }
rm -rf "$T" && mkdir -p "$T"
$B/kmerdb-gpu-bench --scale-data "$T" --e2e-gbp "$GBP" --pairs-m 0 | tail -1
build=($B/kmerdb build --gpus "${GPUS:-0}" --taxonomy "$T/taxonomy" --seqid2taxid "$T/seqid2taxid.map")
# leftovers DIR: a build's temporary files in DIR (`.NAME.kmerdb-PID-XXXXXX.tmp`).
leftovers() { find "$1" -mindepth 1 -maxdepth 1 -name '*kmerdb-*' | sed 's/^/  left: /'; }

# The older index every interrupted build must leave as it was.
"${build[@]}" -q -d "$T/x.db" "$T/genomes" || fail "the first build"
old=$(cksum <"$T/x.db")
echo "index: $(stat -c %s "$T/x.db") bytes"

echo "== 1. Ctrl-C during the build"
# While reading (after a second), and once the log says the GPU passes have begun.
log=/tmp/kmerdb-faults-int.log
for when in reading passes; do
    "${build[@]}" -v -d "$T/x.db" "$T/genomes" 2>"$log" &
    pid=$!
    if [[ $when == reading ]]; then
        sleep 1
    else
        # "1 pass over" or "N passes over": one pass of 10 Gbp on an H200 ends in under a second.
        for _ in $(seq 600); do grep -qE "pass(es)? over" "$log" && break; sleep 0.02; done
        sleep 0.1
    fi
    kill -INT "$pid"
    wait "$pid"
    rc=$?
    seen=$(grep -oE "pass(es)? over|built" "$log" | tail -1)
    echo "SIGINT while $when (last seen: ${seen:-reading}): exit $rc"
    [[ $rc == 130 ]] || fail "SIGINT while $when gave exit $rc"
    [[ $(cksum <"$T/x.db") == "$old" ]] || fail "SIGINT while $when changed the older index"
    [[ -z $(leftovers "$T") ]] || { leftovers "$T"; fail "SIGINT while $when left files"; }
done

echo "== 2. a full disk"
small=$T/small
mkdir -p "$small"
if mount -t tmpfs -o size=100M tmpfs "$small" 2>/dev/null; then
    out=$("${build[@]}" -q -d "$small/y.db" "$T/genomes" 2>&1)
    rc=$?
    echo "into a 100 MB tmpfs: exit $rc: $(tail -1 <<<"$out")"
    [[ $rc != 0 ]] || fail "a full disk gave exit 0"
    grep -q "y.db" <<<"$out" || fail "the error does not name the index"
    [[ -z $(ls -A "$small") ]] || { ls -la "$small"; fail "a full disk left files"; }
    umount "$small"
else
    echo "(no tmpfs could be mounted here: left out)"
fi

echo "== 3. two builds into one index at once"
"${build[@]}" -q -d "$T/z.db" "$T/genomes" & a=$!
"${build[@]}" -q -d "$T/z.db" "$T/genomes" & b=$!
wait $a; ra=$?
wait $b; rb=$?
echo "exits $ra and $rb"
[[ $ra == 0 || $rb == 0 ]] || fail "neither build finished"
$B/kmerdb info "$T/z.db" >/dev/null || fail "the index is not whole"
[[ $(cksum <"$T/z.db") == "$old" ]] || fail "the index is not a build's bytes"
[[ -z $(leftovers "$T") ]] || { leftovers "$T"; fail "two builds left files"; }

echo "== 4. -d /dev/null"
if out=$("${build[@]}" -q -d /dev/null "$T/genomes" 2>&1); then
    fail "-d /dev/null succeeded"
else
    echo "refused: $(tail -1 <<<"$out")"
fi
[[ -c /dev/null ]] || fail "/dev/null is no longer a device"

rm -rf "$T"
[[ $status == 0 ]] && echo "FAULTS: all passed" || echo "FAULTS: FAILURES"
exit $status
