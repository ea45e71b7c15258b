"""The canary's Prometheus textfile never overwrites a file that is not its own (issue 16).

Found by the flag fuzz: ``canary --metrics-textfile ../../etc/passwd`` (run as root) replaced
the host's /etc/passwd with two counters. Now such a file is refused in one line, before the
canary runs, and other services' counters in a shared textfile are kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.accept.canary_metrics import read_textfile, write_textfile
from kvbudget.errors import ConfigError

PASSWD = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"


def test_a_foreign_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    victim = tmp_path / "passwd"
    victim.write_text(PASSWD, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        write_textfile(victim, service="svc", verdict="pass")
    line = info.value.one_line()
    assert line.startswith("ConfigError: --metrics-textfile") and "line 1" in line
    assert "root:x" not in line  # the file's content is never echoed
    assert victim.read_text(encoding="utf-8") == PASSWD


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"kvbudget_canary_runs_total 1\n"])
def test_binary_or_unlabelled_content_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.prom"
    path.write_bytes(content)
    with pytest.raises(ConfigError):
        read_textfile(path)
    assert path.read_bytes() == content


def test_other_services_counters_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "canary.prom"
    write_textfile(path, service="a", verdict="fail")
    write_textfile(path, service="b", verdict="untested")
    write_textfile(path, service="a", verdict="pass")
    text = path.read_text(encoding="utf-8")
    # a: two runs, one failed; b: one run, untested (counted by hand from the calls above)
    assert 'kvbudget_canary_runs_total{service="a"} 2' in text
    assert 'kvbudget_canary_failures_total{service="a"} 1' in text
    assert 'kvbudget_canary_runs_total{service="b"} 1' in text
    assert 'kvbudget_canary_failures_total{service="b"} 0' in text
    assert 'kvbudget_canary_untested_total{service="b"} 1' in text
    assert 'kvbudget_canary_untested_total{service="a"} 0' in text
    assert read_textfile(path)[("kvbudget_canary_runs_total", "a")] == 2
