#!/usr/bin/env bash
# The web console's browser test (tests/browser): headless Chromium from Debian's packages,
# driven by Selenium through Debian's chromedriver, against the release binary with SmolLM2.
# Installs what it needs when missing (apt: chromium, chromium-driver; pip: selenium, pinned in
# tests/browser/requirements.txt); never downloads a browser or a driver of its own. Screenshots
# of each view go to target/console-screenshots/ (DECIDE_CONSOLE_SCREENSHOTS to change it).
# Bounded: the test gets DECIDE_BROWSER_TEST_SECONDS (default 600) and is killed past it.
#
#   scripts/browser-test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
    echo "browser test: installing chromium and chromium-driver (Debian)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
python3 -m pip install --quiet --disable-pip-version-check -r tests/browser/requirements.txt
# Selenium must not look for a driver or browser of its own (its manager would try the network).
export SE_OFFLINE=true
timeout --kill-after=10 "${DECIDE_BROWSER_TEST_SECONDS:-600}" python3 -m pytest -q tests/browser
echo "browser test: screenshots in ${DECIDE_CONSOLE_SCREENSHOTS:-target/console-screenshots}/"
