#!/bin/bash
# conda-build runs this in the unpacked source ($SRC_DIR) and packages what lands in $PREFIX.
set -euxo pipefail

# The licences of the crates linked into the binary, shipped as the recipe's license_file.
cargo-bundle-licenses --format yaml --output "${SRC_DIR}/THIRDPARTY.yml"

# The kmerdb binary only (not the GPU benchmark tool), without symbols; --no-track leaves no
# .crates.toml in $PREFIX.
export CARGO_PROFILE_RELEASE_STRIP=symbols
cargo install --no-track --locked --verbose --root "${PREFIX}" --path . --bin kmerdb

# Man pages (made from the same definitions as --help; man/ is checked current by the tests) and
# shell completions, where conda's shells and man look for them.
install -d "${PREFIX}/share/man/man1" "${PREFIX}/share/bash-completion/completions" \
    "${PREFIX}/share/zsh/site-functions" "${PREFIX}/share/fish/vendor_completions.d"
install -m 644 man/*.1 "${PREFIX}/share/man/man1/"
"${PREFIX}/bin/kmerdb" completions bash > "${PREFIX}/share/bash-completion/completions/kmerdb"
"${PREFIX}/bin/kmerdb" completions zsh > "${PREFIX}/share/zsh/site-functions/_kmerdb"
"${PREFIX}/bin/kmerdb" completions fish > "${PREFIX}/share/fish/vendor_completions.d/kmerdb.fish"
