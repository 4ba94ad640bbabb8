#!/usr/bin/env bash
# Runs the libFuzzer targets one after another, one job each (the machines are shared):
#   fuzz/run.sh SECONDS [TARGET...]        (default: every target, SECONDS each)
# Built with AddressSanitizer, debug assertions and overflow checks (cargo-fuzz's defaults; on
# stable Rust through RUSTC_BOOTSTRAP=1). Seeds come from corpus/TARGET, new inputs go to
# work/TARGET, crashes to artifacts/TARGET, libFuzzer's output to work/logs/TARGET.log; the last
# line of each log says how many inputs were run ("Done N runs in S second(s)").
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    targets=(fastx fastx_compressed taxonomy_nodes taxonomy_names taxonomy_merged seqid_map sample_sheet
        index_open index_open_fixed merge_candidates merge_candidates_fixed)
fi
export RUSTC_BOOTSTRAP=1
# Targets write their input to a temporary file: keep that in memory where there is a tmpfs.
[[ -d /dev/shm && -w /dev/shm ]] && export TMPDIR=/dev/shm
mkdir -p work/logs
for t in "${targets[@]}"; do
    # Indexes are 4 KiB-aligned sections (the seeds are about 32 KiB); text formats stay short.
    case $t in index_*) max_len=65536 ;; *) max_len=8192 ;; esac
    mkdir -p "work/$t"
    echo "== $t: $seconds s" >&2
    cargo fuzz run -s address "$t" "work/$t" "corpus/$t" -- -max_total_time="$seconds" -max_len="$max_len" \
        -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 > "work/logs/$t.log" 2>&1 || {
        echo "$t failed: see fuzz/work/logs/$t.log and fuzz/artifacts/$t" >&2
        continue
    }
    grep -E '^Done [0-9]+ runs' "work/logs/$t.log" >&2 || true
done
