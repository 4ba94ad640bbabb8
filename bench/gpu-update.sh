#!/usr/bin/env bash
# `kmerdb update` at scale, the binary as users run it: an index of GBP Gbp of synthetic genomes
# (20 FASTA files), then one file's genomes removed and a new file's added, on the GPU and on the
# CPU, against fresh builds of the result on the GPU and on the CPU, with the disk's write rate
# (dd) measured in the same run. The updated indexes must have the fresh builds' sections
# (`kmerdb info --json`, all but the provenance). Disk: the genomes (1.05 x GBP GB) and two
# indexes at a time.
# Usage, on the GPU machine from the repository root: bench/gpu-update.sh [GBP] (default 20).
set -euo pipefail
B=${B:-carry/bin}
GPU=${GPU:-0} # GPU=none tries the script on a machine without one
GBP=${1:-20}
FILES=20
W=$(mktemp -d "${TMPDIR:-/tmp}/kmerdb-update.XXXXXX")
trap 'rm -rf "$W"' EXIT
total=$(python3 -c "print($GBP * ($FILES + 1) / $FILES)")
t0=$(date +%s.%N)
$B/kmerdb-gpu-bench --synth-data "$W" --e2e-gbp "$total" --e2e-files $((FILES + 1)) > /dev/null
echo "update bench: $total Gbp of synthetic genomes in $((FILES + 1)) files written in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
cat "$W"/synth*.fna > /dev/null # into the page cache
old=("$W"/synth{00..19}.fna)
new=("$W"/synth{01..20}.fna)
grep '^>' "$W/synth00.fna" | cut -c2- | cut -d' ' -f1 > "$W/removed.txt"
echo "update bench: removing the $(wc -l < "$W/removed.txt") sequences of synth00.fna, adding synth20.fna"

# Seconds that "$@" takes; its stderr goes to the log.
timed() {
    local t
    t=$(date +%s.%N)
    "$@" 2>> "$W/log" || { cat "$W/log" >&2; exit 1; }
    python3 -c "print(f'{$(date +%s.%N) - $t:.2f}')"
}
sections() {
    $B/kmerdb info --json "$1" | python3 -c "import json,sys; print(json.dumps([s for s in json.load(sys.stdin)['sections'] if s['name'] != 'provenance']))"
}

dd=$( { dd if=/dev/zero of="$W/dd" bs=1M count=4096 conv=fdatasync 2>&1 >/dev/null || true; } | tail -1)
rm -f "$W/dd"
echo "limit: disk write, dd 4 GiB with fdatasync: $dd"

build_old=$(timed $B/kmerdb build -q --gpus "$GPU" -d "$W/old.db" "${old[@]}")
echo "fresh build of the old index, --gpus $GPU: $build_old s ($(du -h "$W/old.db" | cut -f1))"
updated=
for gpus in $(printf '%s\n' "$GPU" none | uniq); do
    : > "$W/log"
    t=$(timed $B/kmerdb update -v --gpus "$gpus" -d "$W/old.db" --remove-targets "$W/removed.txt" --add "$W/synth20.fna" -o "$W/new.db")
    grep -E "updated into|shards:|passes for|gathering" "$W/log" | sed 's/^/  /'
    echo "update, --gpus $gpus ($(nproc) threads): $t s"
    [[ $gpus == "$GPU" ]] && update=$t
    if [[ -z $updated ]]; then
        updated=$(sections "$W/new.db")
    elif [[ $(sections "$W/new.db") != "$updated" ]]; then
        echo "update, --gpus $gpus: SECTIONS DIFFER from --gpus $GPU"; exit 1
    fi
    rm "$W/new.db"
done
rm "$W/old.db"
for gpus in $(printf '%s\n' "$GPU" none | uniq); do
    fresh=$(timed $B/kmerdb build -q --gpus $gpus -d "$W/fresh.db" "${new[@]}")
    if [[ $(sections "$W/fresh.db") == "$updated" ]]; then same="same sections"; else same="SECTIONS DIFFER"; fi
    echo "fresh build of the result, --gpus $gpus: $fresh s; update/fresh time $(python3 -c "print(round($update / $fresh, 2))"); $same"
    [[ $same == "same sections" ]] || exit 1
    rm "$W/fresh.db"
done
