#!/usr/bin/env bash
# Debian's chromium, for the browser tests: Playwright drives the system browser
# (executable_path=/usr/bin/chromium) because `playwright install` cannot download browsers here.
# A no-op when it is installed; needs root or sudo otherwise (CI runs as root on fresh Debian).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "install Chromium at /usr/bin/chromium (Debian: apt-get install chromium) for the browser tests" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  SUDO="sudo"
fi
echo "installing Debian's chromium (browser tests) ..."
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
/usr/bin/chromium --version
