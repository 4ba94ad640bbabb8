#!/usr/bin/env bash
# Builds everything a GPU run needs into carry/ (git-ignored): the GPU machine has no Rust and no
# network. Then `scripts/gpu-tests.sh` runs there from the repository root, with carry/ carried.
#   carry/bin/       kmerdb, kmerdb-gpu-bench and the test executables gpu-tests.sh runs (stripped):
#                    test-gpu (tests/gpu.rs), the unit tests of each crate: test-kmerdb,
#                    test-kmerdb_core, test-kmerdb_gpu
#   carry/refs/      ../shared/data/refs (genomes and seqid2taxid.map)
#   carry/taxonomy/  the NCBI taxonomy pruned to those genomes' lineages
#   carry/reads/     ../shared/data/reads' mock community (R1, R2)
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared}
rm -rf carry && mkdir -p carry/bin carry/refs carry/taxonomy carry/reads
cargo build --release --bins
json=$(cargo test --release --no-run --message-format=json 2>/dev/null)
for target in gpu kmerdb kmerdb_core kmerdb_gpu; do
    exe=$(printf '%s\n' "$json" | python3 -c "
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['name'] == '$target' \
       and m['profile']['test'] and ('lib' in m['target']['kind'] or '$target' == 'gpu'):
        print(m['executable'])" | head -1)
    strip -o "carry/bin/test-$target" "$exe"
done
strip -o carry/bin/kmerdb target/release/kmerdb
strip -o carry/bin/kmerdb-gpu-bench target/release/kmerdb-gpu-bench
cp "$SHARED"/data/refs/*.fna.gz "$SHARED"/data/refs/seqid2taxid.map carry/refs/
cp "$SHARED"/data/reads/mock_R1.fq.gz "$SHARED"/data/reads/mock_R2.fq.gz carry/reads/
python3 scripts/make_data_helpers.py prune carry/refs/seqid2taxid.map \
    "$SHARED/data/taxonomy/nodes.dmp.gz" "$SHARED/data/taxonomy/names.dmp.gz" carry/taxonomy
du -sh carry carry/*
