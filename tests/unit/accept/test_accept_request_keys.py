"""Acceptance request ids: one typed key, written and read in one place.

The expected strings are the id forms earlier runs wrote to ``records.jsonl`` (copied from a
demo run's file and the docstring of ``with_quality_prompts`` before the key existed), so
``--resume`` of an older run still finds its records.
"""

from __future__ import annotations

import pytest

from kvbudget.accept.request_keys import RequestKey


@pytest.mark.parametrize(
    ("text", "cell", "rep", "generated", "checkpoint", "run_id"),
    [
        ("short/single#0/r000012", "short/single", 0, "r000012", None, "short/single#0"),
        ("long/peak#11/r000000", "long/peak", 11, "r000000", None, "long/peak#11"),
        (
            "medium/normal#1/quality:capital-exact",
            "medium/normal",
            1,
            "",
            "capital-exact",
            "medium/normal#1",
        ),
        ("warmup/r000003", "warmup", None, "r000003", None, "warmup"),
    ],
)
def test_old_ids_decode_and_encode_back(
    text: str, cell: str, rep: int | None, generated: str, checkpoint: str | None, run_id: str
) -> None:
    key = RequestKey.decode(text)
    assert (key.cell_id, key.repetition, key.request, key.checkpoint) == (
        cell,
        rep,
        generated,
        checkpoint,
    )
    assert key.run_id == run_id
    assert key.encode() == text


def test_quality_slot_keeps_cell_and_repetition() -> None:
    assert (
        RequestKey("short/peak", 2, "r000007").quality("cap").encode() == "short/peak#2/quality:cap"
    )


@pytest.mark.parametrize("text", ["r000001", "short/single/r1", "short/single#x/r1", "a#1"])
def test_foreign_ids_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an acceptance request id"):
        RequestKey.decode(text)
