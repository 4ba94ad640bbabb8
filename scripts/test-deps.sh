#!/usr/bin/env bash
# What the tests need beyond Rust: Snakemake (PyPI) for the workflow test, and Chromium (Debian) to
# render the HTML report. Installs what is missing; run before `cargo test --release`.
set -euo pipefail
if ! command -v snakemake >/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check snakemake
fi
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    SUDO=$([[ $(id -u) == 0 ]] && echo "" || echo sudo)
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
