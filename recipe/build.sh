#!/bin/bash
# conda-build runs this in the unpacked source ($SRC_DIR) and packages what lands in $PREFIX.
set -euxo pipefail

# The licences of the crates linked into the binary, shipped as the recipe's license_file.
cargo-bundle-licenses --format yaml --output "${SRC_DIR}/THIRDPARTY.yml"

# The kmerdb binary only (not the GPU benchmark tool), without symbols; --no-track leaves no
# .crates.toml in $PREFIX.
export CARGO_PROFILE_RELEASE_STRIP=symbols
cargo install --no-track --locked --verbose --root "${PREFIX}" --path . --bin kmerdb
