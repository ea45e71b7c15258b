from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from kvbudget.records import RequestRecord, derive_latencies, excerpt, sha256_text


def test_ok_record_roundtrips_through_json() -> None:
    rec = RequestRecord(
        request_id="r1",
        source="measured",
        status="ok",
        sent_s=1.0,
        first_token_s=1.25,
        done_s=2.0,
        token_times_s=[1.25, 1.5, 2.0],
        output_tokens=3,
    )
    again = RequestRecord.model_validate_json(rec.model_dump_json())
    assert again == rec


def test_itl_is_gap_between_tokens() -> None:
    rec = RequestRecord(
        request_id="r", source="simulated", status="ok", token_times_s=[1.0, 1.5, 1.75]
    )
    assert rec.itl_s() == [0.5, 0.25]


def test_latencies_by_hand() -> None:
    # sent at 10, first token at 10.2, done at 11.2 with 11 tokens: tpot = 1.0 / 10
    ttft, tpot, e2e = derive_latencies(
        sent_s=10.0, first_token_s=10.2, done_s=11.2, output_tokens=11
    )
    assert ttft == pytest.approx(0.2)
    assert tpot == pytest.approx(0.1)
    assert e2e == pytest.approx(1.2)
    assert derive_latencies(sent_s=1.0, first_token_s=None, done_s=None, output_tokens=0) == (
        None,
        None,
        None,
    )
    # a single token has no TPOT
    assert derive_latencies(sent_s=0.0, first_token_s=1.0, done_s=1.0, output_tokens=1)[1] is None


@pytest.mark.parametrize(
    ("status", "kind"),
    [("ok", "timeout"), ("error", None), ("error", "cancelled"), ("cancelled", "connect")],
)
def test_status_and_error_kind_must_agree(status: str, kind: str | None) -> None:
    with pytest.raises(ValidationError):
        RequestRecord(request_id="x", source="measured", status=status, error_kind=kind)  # type: ignore[arg-type]


def test_unknown_fields_rejected() -> None:
    with pytest.raises(ValidationError):
        RequestRecord.model_validate(
            {"request_id": "x", "source": "measured", "status": "ok", "api_key": "s"}
        )


def test_sha256_matches_hashlib() -> None:
    assert sha256_text("héllo") == hashlib.sha256("héllo".encode()).hexdigest()


def test_excerpt_is_one_bounded_line() -> None:
    text = "line one\nline two " + "x" * 500
    out = excerpt(text, limit=50)
    assert "\n" not in out
    assert len(out) == 50
