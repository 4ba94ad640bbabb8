#!/usr/bin/env bash
# The GPU test suite and benchmarks, in one run on a GPU machine, from the repository root, with
# carry/ prepared by scripts/prepare-gpu-carry.sh. Prints what passed and the figures for
# BENCHMARKS.md. Usage: scripts/gpu-tests.sh [--classify-bench] [--skip-bench] [bench options]
# (--classify-bench: also bench/gpu-classify.sh, the binary's end-to-end classification.)
set -uo pipefail
cd "$(dirname "$0")/.."
classify_bench=0
[[ ${1:-} == --classify-bench ]] && { classify_bench=1; shift; }
B=carry/bin
export SOURCE_DATE_EPOCH=1700000000 KMERDB_CACHE_DIR=${KMERDB_CACHE_DIR:-$(mktemp -d)}
export KMERDB_GPU_TEST_REFS=carry/refs KMERDB_GPU_TEST_TAXONOMY=carry/taxonomy KMERDB_GPU_TEST_READS=carry/reads
export KMERDB_BIN=$PWD/carry/bin/kmerdb
status=0
step() { echo; echo "== $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

step "kernels compile with NVRTC; CPU unit tests"
for crate in kmerdb kmerdb_core kmerdb_gpu; do
    KMERDB_REQUIRE_NVRTC=1 $B/test-$crate --test-threads 4 2>&1 | tail -3 || status=1
done

step "GPU tests: kernels against their CPU twins, table against a HashMap, index bytes"
gpus=$(nvidia-smi --list-gpus | wc -l)
if (( gpus >= 2 )); then
    $B/test-gpu --ignored --test-threads 1 --nocapture 2>&1 || status=1
else
    echo "(one GPU: the several-GPU test is left out)"
    $B/test-gpu --ignored --test-threads 1 --nocapture --skip multi_gpu 2>&1 || status=1
fi

step "the real binary: build data/ on the GPU (compiling kernels, then from the cache) and on the CPU"
for run in compile cached; do
    /usr/bin/time -f "$run: %e s" $B/kmerdb -v build --gpus 0 data/genomes --taxonomy data/taxonomy \
        --seqid2taxid data/seqid2taxid.map -d /tmp/gpu.db 2>&1 | grep -E "built|s$|error" || status=1
done
$B/kmerdb build -q --gpus none data/genomes --taxonomy data/taxonomy --seqid2taxid data/seqid2taxid.map -d /tmp/cpu.db
cmp /tmp/gpu.db /tmp/cpu.db && echo "data/: GPU and CPU index files identical" || { echo "data/: index files DIFFER"; status=1; }
# Classification: the same bytes from the GPU and the CPU, through the command line.
for gpus in 0 none; do
    $B/kmerdb classify --gpus $gpus -d /tmp/cpu.db -1 data/reads/sample_R1.fq.gz -2 data/reads/sample_R2.fq.gz \
        -o /tmp/classify-$gpus.txt --report /tmp/classify-$gpus.kreport 2>&1 | grep -E "classified|error" || status=1
done
cmp /tmp/classify-0.txt /tmp/classify-none.txt && cmp /tmp/classify-0.kreport /tmp/classify-none.kreport \
    && echo "data/ reads: GPU and CPU classify outputs identical" || { echo "data/ reads: classify outputs DIFFER"; status=1; }
# A strain-dense collection (bench/strain_dense.py, made here: one species in 300 strains), whose
# core features are clade features: the GPU's index and calls equal the CPU's.
step "strain-dense collection: GPU build and classify equal the CPU's"
sd=$(mktemp -d)
python3 bench/strain_dense.py make dense "$sd" >/dev/null
for gpus in 0 none; do
    $B/kmerdb build -q --gpus $gpus -d "$sd/$gpus.db" --taxonomy "$sd/taxonomy" --seqid2taxid "$sd/refs/seqid2taxid.map" "$sd/refs" || status=1
done
for gpus in 0 none; do
    $B/kmerdb classify --gpus $gpus -d "$sd/none.db" -1 "$sd/reads/held_out_R1.fq" -2 "$sd/reads/held_out_R2.fq" \
        -o "$sd/$gpus.kraken" -r "$sd/$gpus.kreport" --candidates-out "$sd/$gpus.cand" 2>&1 | grep -E "classified|error" || status=1
done
$B/kmerdb info "$sd/none.db" | grep -E "^(features|size)"
for f in db kraken kreport cand; do
    cmp "$sd/0.$f" "$sd/none.$f" && echo "strain-dense: GPU and CPU .$f identical" || { echo "strain-dense: .$f DIFFER"; status=1; }
done
rm -rf "$sd"
# Shuffled reads (bench/shuffle_reads.py): their few calls are weak, which the evidence rule
# checks on every feature's taxon (the GPU's path hands such reads to the CPU's code). Outputs,
# with hit lists as text, as taxa (--candidates-out) and without any, equal the CPU's.
step "shuffled reads against refs: weak calls, GPU equals CPU"
sh=$(mktemp -d)
python3 bench/shuffle_reads.py carry/reads/mock_R1.fq.gz "$sh/r1.fq" && python3 bench/shuffle_reads.py carry/reads/mock_R2.fq.gz "$sh/r2.fq"
$B/kmerdb build -q --gpus none -d "$sh/refs.db" --taxonomy carry/taxonomy --seqid2taxid carry/refs/seqid2taxid.map carry/refs || status=1
for gpus in 0 none; do
    $B/kmerdb classify -q --gpus $gpus -d "$sh/refs.db" -1 "$sh/r1.fq" -2 "$sh/r2.fq" -o "$sh/$gpus.kraken" -r "$sh/$gpus.kreport" || status=1
    # (-o /dev/null: no per-read lines, which would otherwise go to stdout.)
    $B/kmerdb classify -q --gpus $gpus -d "$sh/refs.db" -1 "$sh/r1.fq" -2 "$sh/r2.fq" -o /dev/null -r "$sh/$gpus.bare.kreport" || status=1
    $B/kmerdb classify -q --gpus $gpus -d "$sh/refs.db" -1 "$sh/r1.fq" -2 "$sh/r2.fq" -o /dev/null -r "$sh/$gpus.taxa.kreport" --candidates-out "$sh/$gpus.cand" || status=1
done
# With a --protein index: the protein stage's decoys are made on the host from the reads' bases,
# whichever device listed the k-mers.
$B/kmerdb build -q --gpus none --protein -d "$sh/protein.db" --taxonomy carry/taxonomy --seqid2taxid carry/refs/seqid2taxid.map carry/refs || status=1
for gpus in 0 none; do
    $B/kmerdb classify -q --gpus $gpus -d "$sh/protein.db" -1 "$sh/r1.fq" -2 "$sh/r2.fq" -o "$sh/$gpus.protein.kraken" -r "$sh/$gpus.protein.kreport" || status=1
done
echo "shuffled reads called: $(grep -c '^C' "$sh/none.kraken"), with the protein stage $(grep -c '^C' "$sh/none.protein.kraken")"
for f in kraken kreport bare.kreport taxa.kreport cand protein.kraken protein.kreport; do
    cmp "$sh/0.$f" "$sh/none.$f" && echo "shuffled: GPU and CPU .$f identical" || { echo "shuffled: .$f DIFFER"; status=1; }
done
rm -rf "$sh"
# Several batches, so that both lanes (streams) of a GPU take some, in turn: the mock 16 times
# (632,064 pairs, three GPU batches), with hit lists as text (Kraken lines), as taxa
# (--confidence), and on three streams; outputs equal the CPU's.
step "several batches over the GPU's lanes: GPU equals CPU"
ln=$(mktemp -d)
$B/kmerdb build -q --gpus none -d "$ln/refs.db" --taxonomy carry/taxonomy --seqid2taxid carry/refs/seqid2taxid.map carry/refs || status=1
for m in 1 2; do
    for _ in $(seq 16); do zcat carry/reads/mock_R$m.fq.gz; done >"$ln/r$m.fq"
done
lanes_run() { $B/kmerdb classify -q -d "$ln/refs.db" -1 "$ln/r1.fq" -2 "$ln/r2.fq" "$@" || status=1; }
lanes_run --gpus 0 -o "$ln/g.kraken" -r "$ln/g.kreport"
lanes_run --gpus none -o "$ln/c.kraken" -r "$ln/c.kreport"
KMERDB_GPU_STREAMS=3 lanes_run --gpus 0 -o "$ln/g3.kraken" -r "$ln/g3.kreport"
lanes_run --gpus 0 --confidence 0.1 -o "$ln/gc.kraken" -r "$ln/gc.kreport"
lanes_run --gpus none --confidence 0.1 -o "$ln/cc.kraken" -r "$ln/cc.kreport"
for pair in "g c" "g3 c" "gc cc"; do
    read -r a b <<<"$pair"
    for f in kraken kreport; do
        cmp "$ln/$a.$f" "$ln/$b.$f" && echo "lanes: $a and $b .$f identical" || { echo "lanes: $a and $b .$f DIFFER"; status=1; }
    done
done
rm -rf "$ln"
# A GPU that is not there: a non-zero exit and a message naming it.
if out=$($B/kmerdb build -q --gpus 7 data/genomes -d /tmp/x.db 2>&1); then
    echo "--gpus 7 succeeded"; status=1
elif grep -q "GPU 7" <<<"$out"; then
    echo "--gpus 7: clear error: $out"
else
    echo "--gpus 7: unclear error: $out"; status=1
fi

if ((classify_bench)); then
    step "classification end to end: the kmerdb binary (bench/gpu-classify.sh)"
    bash bench/gpu-classify.sh || status=1
fi

if [[ ${1:-} != --skip-bench ]]; then
    step "benchmarks"
    RUST_LOG=debug $B/kmerdb-gpu-bench "$@" || status=1
fi
echo
[[ $status == 0 ]] && echo "GPU SUITE: all passed" || echo "GPU SUITE: FAILURES"
exit $status
