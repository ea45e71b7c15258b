"""``kvbudget sim --json`` gives the same summary when its percentile values spill to disk.

The oracle is the same run with every value in memory (numpy on the whole arrays, as before
the spill existed); with a 7-row buffer almost every value goes through the temporary file, the
radix selection and the spilled queue check. Both a stable and an unstable (growing) queue.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvbudget.cli.main import main
from kvbudget.metrics import spilled

_STABLE = ["--num-requests", "300", "--rate", "2", "--input-tokens", "256",
           "--output-tokens", "16"]  # fmt: skip
_UNSTABLE = ["--gpu", "L4", "--max-model-len", "4k", "--num-requests", "300", "--rate", "200",
             "--input-tokens", "2048", "--output-tokens", "64"]  # fmt: skip


def _summary(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    with pytest.raises(SystemExit) as info:
        main(["sim", "--json", *argv])
    out = capsys.readouterr().out
    assert info.value.code == 0, out
    doc: dict[str, object] = json.loads(out)
    doc.pop("wall_s")
    return doc


@pytest.mark.parametrize("argv", [_STABLE, _UNSTABLE], ids=["stable", "unstable"])
def test_summary_same_with_values_spilled(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    in_memory = _summary(capsys, argv)
    monkeypatch.setattr(spilled, "BUFFER_ROWS", 7)
    monkeypatch.setattr(spilled, "READ_ROWS", 5)
    keys = spilled._keys
    calls: list[int] = []

    def counted(values: np.ndarray) -> np.ndarray:
        calls.append(values.size)
        return keys(values)

    monkeypatch.setattr(spilled, "_keys", counted)
    spilled_run = _summary(capsys, argv)
    assert calls  # the radix selection over the file did run
    assert spilled_run == in_memory
    queue = in_memory["queue"]
    assert isinstance(queue, dict)
    assert queue["stable"] is (argv is _STABLE)
