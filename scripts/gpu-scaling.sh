#!/usr/bin/env bash
# Several-GPU run, from the repository root on a GPU machine with carry/ prepared by
# scripts/prepare-gpu-carry.sh: the GPU test suite, then the device-side scaling benchmark on 1,
# 2, 4, ... GPUs (kmerdb-gpu-bench --scaling), then, unless --skip-e2e, `kmerdb build` and
# `kmerdb classify` end to end on each prefix set of GPUs. Logs go to $OUT (or /tmp).
# Usage: scripts/gpu-scaling.sh [--skip-tests] [--skip-e2e] [--only-e2e]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
export KMERDB_CACHE_DIR=${KMERDB_CACHE_DIR:-/tmp/kmerdb-kernels} SOURCE_DATE_EPOCH=1700000000
status=0
args=" $* "
gpus=$(nvidia-smi --list-gpus | wc -l)
sets="0"
for n in 2 4 8; do
    (( n <= gpus )) && sets="$sets $(seq -s, 0 $((n - 1)))"
done
if [[ $args != *" --skip-tests "* && $args != *" --only-e2e "* ]]; then
    bash scripts/gpu-tests.sh --skip-bench 2>&1 | tee "$out/tests.log" | grep -E "^==|test result|identical|GPU SUITE|FAILED|panicked|error" || true
    grep -q "GPU SUITE: all passed" "$out/tests.log" || status=1
fi
if [[ $args != *" --only-e2e "* ]]; then
    carry/bin/kmerdb-gpu-bench --scaling 2>&1 | tee "$out/scaling.log" | grep -vE "^\[" || status=1
fi
if [[ $args != *" --skip-e2e "* ]]; then
    carry/bin/kmerdb-gpu-bench --skip-micro --e2e-gbp 2 --pairs-m 10 --gpu-sets "$sets" 2>&1 \
        | tee "$out/e2e.log" | grep -vE "^\[" || status=1
fi
exit $status
