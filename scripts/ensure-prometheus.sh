#!/usr/bin/env bash
# Installs Debian's Prometheus (the server and promtool) for the alert-rule tests if missing:
# `promtool test rules` on synthetic series, and one test where a real server scrapes
# `kvbudget serve` on 127.0.0.1. No download outside the Debian archive happens.
set -euo pipefail
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "ensure-prometheus: promtool/prometheus missing; run 'sudo apt-get install -y prometheus' (needed by the alert-rule tests)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends: the server and promtool only (no exporters started as services)
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null
echo "ensure-prometheus: installed $(promtool --version 2>&1 | head -1)"
