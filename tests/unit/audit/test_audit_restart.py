"""Reuse across a restart (same identity: served from the store) and an upgrade (never)."""

from __future__ import annotations

import asyncio

from kvbudget.audit.restart import run_restart_upgrade
from kvbudget.audit.reuse import ReuseConfig


def test_restart_reuses_the_store_and_the_upgrade_gets_nothing() -> None:
    cfg = ReuseConfig(num_prompts=2, prompt_tokens=64, max_tokens=4)
    section = asyncio.run(run_restart_upgrade(cfg))
    assert section["verdict"] == "pass", section["reason"]
    restart = [c for c in section["checks"] if c["phase"] == "restart"]
    upgrade = [c for c in section["checks"] if c["phase"] == "upgrade"]
    # 64-token prompts, block size 16: 4 full blocks; a hit leaves the last token to compute,
    # so 3 blocks = 48 tokens come from the store
    assert [c["cached_tokens"] for c in restart] == [48, 48]
    assert all(c["output_vs_cold"] == "identical" for c in restart)
    assert [c["cached_tokens"] for c in upgrade] == [0, 0]


def test_same_identity_on_both_sides_of_an_upgrade_is_caught() -> None:
    # a deployment that forgot to change its fingerprint on upgrade: the store serves it
    cfg = ReuseConfig(num_prompts=1, prompt_tokens=64, max_tokens=4)
    section = asyncio.run(run_restart_upgrade(cfg, upgraded_identity="deploy-v1"))
    assert section["verdict"] == "fail"
    assert "incompatible upgrade" in section["reason"]


def test_cli_exit_status_follows_the_verdict() -> None:
    import subprocess
    import sys

    base = [sys.executable, "-m", "kvbudget", "audit", "restart", "--prompts", "1"]
    base += ["--input-tokens", "64", "--json"]
    ok = subprocess.run(base, capture_output=True, text=True, check=False, timeout=300)
    assert ok.returncode == 0, ok.stderr
    same = [*base, "--upgraded-identity", "deploy-v1"]
    bad = subprocess.run(same, capture_output=True, text=True, check=False, timeout=300)
    assert bad.returncode == 1 and '"verdict": "fail"' in bad.stdout
