#!/usr/bin/env bash
# Installs the headless browser of the status-page test (tests/e2e/status_page.rs): Debian's
# chromium and chromium-driver, with apt-get, when `chromium` or `chromedriver` is missing.
# Idempotent. Not root: tries `sudo -n`, else says what to run and exits 2.
# (Selenium, which drives it, is a Python package: scripts/bootstrap.sh installs it into .venv.)
set -euo pipefail

say() { echo "browser-tools: $*" >&2; }

missing() {
    command -v chromium >/dev/null 2>&1 || echo chromium
    command -v chromedriver >/dev/null 2>&1 || echo chromedriver
}

if [[ -z $(missing) ]]; then
    say "chromium $(chromium --version 2>/dev/null | awk '{print $2}') and chromedriver already installed"
    exit 0
fi
SUDO=()
if [[ $(id -u) != 0 ]]; then
    if sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        say "not root and sudo needs a password; run as root:"
        say "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver"
        say "(or set TLI_SKIP_BROWSER_TESTS=1 to skip the browser test)"
        exit 2
    fi
fi
start=$SECONDS
{
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends chromium chromium-driver
} >&2 || { say "apt-get failed"; exit 1; }
still=$(missing)
[[ -z $still ]] || { say "still missing after install: $still"; exit 1; }
say "installed in $((SECONDS - start)) s"
