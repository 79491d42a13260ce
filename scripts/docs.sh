#!/usr/bin/env bash
# Builds the book (docs/, mdBook) and checks it: no broken internal link (scripts/check-doc-links.py:
# mdbook itself does not fail on one), and the configuration reference is what the release
# binary's --help says (scripts/config-reference.py --check; needs target/release/decide or
# DECIDE_BIN). Installs mdbook from crates.io when it is not on PATH (once, a few minutes on 2
# cores: no serve/watch features). Every check runs; exits 1 if any failed.
#
#   scripts/docs.sh                 # build and check
#   DOCS_SKIP_REFERENCE=1 scripts/docs.sh   # without the binary: build and links only
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

MDBOOK_VERSION=0.5.4
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if ! command -v mdbook >/dev/null || [[ "$(mdbook --version)" != "mdbook v$MDBOOK_VERSION" ]]; then
    echo "docs: installing mdbook $MDBOOK_VERSION from crates.io (no serve/watch)"
    nice -n 5 cargo install mdbook --locked --version "$MDBOOK_VERSION" \
        --no-default-features --features search --quiet || exit 1
fi

status=0
echo "docs: mdbook build docs"
mdbook build docs || status=1
echo "docs: internal links"
python3 scripts/check-doc-links.py || status=1
if [[ -z "${DOCS_SKIP_REFERENCE:-}" ]]; then
    echo "docs: the configuration reference against the binary's --help"
    python3 scripts/config-reference.py --check || status=1
fi
exit $status
