from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvbudget.records import (
    JsonlWriter,
    MetricSample,
    Provenance,
    RequestRecord,
    ResultDocument,
    read_document,
    read_jsonl,
    read_jsonl_dicts,
)


def _rec(i: int) -> RequestRecord:
    return RequestRecord(request_id=f"r{i}", source="measured", status="ok", output_tokens=i)


def test_writer_appends_and_reader_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "out" / "requests.jsonl"
    with JsonlWriter(path) as w:
        for i in range(3):
            w.write(_rec(i))
    with JsonlWriter(path) as w:
        w.write(_rec(3))
    got = read_jsonl(path, RequestRecord)
    assert [r.request_id for r in got.items] == ["r0", "r1", "r2", "r3"]
    assert got.skipped_lines == []
    assert not got.truncated_tail


def test_truncated_tail_is_dropped_and_repaired(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    full = _rec(1).model_dump_json() + "\n" + _rec(2).model_dump_json() + "\n"
    partial = _rec(3).model_dump_json()[:17]
    path.write_text(full + partial)
    got = read_jsonl(path, RequestRecord)
    assert [r.request_id for r in got.items] == ["r1", "r2"]
    assert got.truncated_tail
    assert got.skipped_lines == [3]
    # reopening for append cuts the partial line, so the next record is on its own line
    with JsonlWriter(path) as w:
        assert w.repaired_bytes == len(partial)
        w.write(_rec(4))
    again = read_jsonl(path, RequestRecord)
    assert [r.request_id for r in again.items] == ["r1", "r2", "r4"]
    assert again.skipped_lines == []


def test_bad_middle_line_is_skipped_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(
        _rec(1).model_dump_json() + "\n{not json\n[1]\n" + _rec(2).model_dump_json() + "\n"
    )
    got = read_jsonl(path, RequestRecord)
    assert [r.request_id for r in got.items] == ["r1", "r2"]
    assert got.skipped_lines == [2, 3]
    assert len(read_jsonl_dicts(path).items) == 2


_WRITER = """
import sys
from pathlib import Path
from kvbudget.records import JsonlWriter, RequestRecord
w = JsonlWriter(Path(sys.argv[1]))
i = 0
while i < 10_000_000:
    w.write(RequestRecord(request_id=f"r{i}", source="measured", status="ok",
                          output_text="x" * 3000))
    if i == 50:
        print("ready", flush=True)
    i += 1
"""


def test_sigkill_keeps_every_finished_record(tmp_path: Path) -> None:
    path = tmp_path / "k.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    got = read_jsonl(path, RequestRecord)
    n = len(got.items)
    assert n > 50
    # records are contiguous: nothing lost in the middle, at most the partial tail skipped
    assert [r.request_id for r in got.items] == [f"r{i}" for i in range(n)]
    assert got.skipped_lines in ([], [n + 1])


def test_metric_sample_and_document_roundtrip(tmp_path: Path) -> None:
    s = MetricSample(timestamp_s=1.5, name="kv_usage", value=0.5, labels={"engine": "x"})
    assert MetricSample.model_validate_json(s.model_dump_json()) == s
    doc = ResultDocument(kind="bench", provenance=Provenance(kind="measured", engine="vllm"))
    from kvbudget.records import write_document

    path = tmp_path / "doc.json"
    write_document(path, doc)
    assert read_document(path, ResultDocument) == doc


def test_provenance_names_its_source() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Provenance(kind="simulated")
    with pytest.raises(ValidationError):
        Provenance(kind="measured")
    assert Provenance(kind="simulated", timing_model="roofline").label() == "simulated (roofline)"
    assert (
        Provenance(kind="measured", engine="vllm", engine_version="0.11.0", hardware="H100").label()
        == "measured (vllm 0.11.0, H100)"
    )


def test_read_document_errors_are_one_line(tmp_path: Path) -> None:
    import pytest

    from kvbudget.errors import ReportError

    path = tmp_path / "bad.json"
    path.write_text('{"kind": "x"}')
    with pytest.raises(ReportError, match="provenance"):
        read_document(path, ResultDocument)
    with pytest.raises(ReportError, match="does not exist"):
        read_document(tmp_path / "none.json", ResultDocument)
