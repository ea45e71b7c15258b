#!/usr/bin/env bash
# Installs Debian's headless Chromium for the browser tests (web page, HTML report) if missing.
# Playwright drives it through executable_path=/usr/bin/chromium; no browser download happens.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "ensure-chromium: /usr/bin/chromium is missing; run 'sudo apt-get install -y chromium' (needed by the browser tests)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
test -x /usr/bin/chromium
echo "ensure-chromium: installed $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
