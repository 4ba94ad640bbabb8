#!/usr/bin/env bash
# The device `--gpus all` chooses against the small index, on a GPU machine (issue 32, item 3): the
# mock (39,504 pairs, the CPU's) and 2 M pairs (the mock 51 times, plain FASTQ: the GPU's) against
# ../shared/data/refs (carry/refs), each with --gpus 0, all and none, two runs each, outputs
# compared. The large-index case is bench/gpu-scale.sh's. carry/ from scripts/prepare-gpu-carry.sh.
#   bench/device-choice.sh
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/carry/bin
T=${KMERDB_BENCH_DIR:-/tmp/kmerdb-choice}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
status=0
rm -rf "$T" && mkdir -p "$T"
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
echo "cores: $(nproc)"
source bench/lib.sh  # timed_line
$B/kmerdb build -q --gpus 0 -d "$T/refs.db" --taxonomy carry/taxonomy --seqid2taxid carry/refs/seqid2taxid.map carry/refs
for mate in 1 2; do
    zcat carry/reads/mock_R$mate.fq.gz > "$T/mock_R$mate.fq"
    for ((i = 0; i < 51; i++)); do cat "$T/mock_R$mate.fq"; done > "$T/many_R$mate.fq"
done
for set in mock many; do
    for gpus in 0 all none; do
        for run in 1 2; do
            timed_line "$set: classify --gpus $gpus (run $run)" $B/kmerdb classify -q --gpus $gpus -d "$T/refs.db" \
                -1 "$T/${set}_R1.fq" -2 "$T/${set}_R2.fq" -o "$T/$set.$gpus.kraken" -r "$T/$set.$gpus.kreport"
        done
    done
    $B/kmerdb classify -vv --gpus all -d "$T/refs.db" -1 "$T/${set}_R1.fq" -2 "$T/${set}_R2.fq" -r /dev/null 2>&1 \
        | grep -E "device choice|classified on|classifying on" | sed "s/^/$set: /"
    for f in kraken kreport; do
        cmp "$T/$set.0.$f" "$T/$set.none.$f" && cmp "$T/$set.all.$f" "$T/$set.none.$f" \
            && echo "$set .$f: GPU, default and CPU identical" || { echo "$set .$f DIFFER"; status=1; }
    done
done
rm -rf "$T"
[[ $status == 0 ]] && echo "CHOICE: all passed" || echo "CHOICE: FAILURES"
exit $status
