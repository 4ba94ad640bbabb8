#!/usr/bin/env bash
# What the tests need beyond Rust: Snakemake (PyPI) for the workflow tests, Chromium (Debian) to
# render the HTML report, Kraken 2 and GNU time (Debian) for the negative controls' comparison
# (tests/cli/controls.rs, which builds Kraken 2's database with ../shared/tools/kraken2_db.sh),
# cargo-bundle-licenses (crates.io) for the bioconda recipe's build script, and taxpasta and
# MultiQC (PyPI) for the test that they read kmerdb's reports (MultiQC also for the Snakemake
# workflow's last rule). Installs what is missing; run before `cargo test --release`.
set -euo pipefail
# Pinned: the workflow test lints the Snakefile, and a newer Snakemake may lint differently.
if ! command -v snakemake >/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check snakemake==9.27.1
fi
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    SUDO=$([[ $(id -u) == 0 ]] && echo "" || echo sudo)
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
if ! command -v kraken2 >/dev/null || [[ ! -x /usr/bin/time ]]; then
    SUDO=$([[ $(id -u) == 0 ]] && echo "" || echo sudo)
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends kraken2 time >/dev/null
fi
if ! command -v cargo-bundle-licenses >/dev/null; then
    cargo install --quiet --locked cargo-bundle-licenses@5.0.0
fi
# taxpasta and MultiQC in a virtualenv of their own (their pins, such as pandas 1.x for taxpasta,
# stay apart from Snakemake's), where tests/cli/report_tools.rs looks for them; reinstalled when
# scripts/report-tools.txt changes.
TOOLS=${KMERDB_REPORT_TOOLS:-$HOME/.local/share/kmerdb/report-tools}
PINS=$(dirname "$0")/report-tools.txt
if ! cmp -s "$PINS" "$TOOLS/report-tools.txt"; then
    rm -rf "$TOOLS"
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install --quiet --disable-pip-version-check -r "$PINS"
    cp "$PINS" "$TOOLS/report-tools.txt"
fi
