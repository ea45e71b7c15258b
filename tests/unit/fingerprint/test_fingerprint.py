"""CacheIdentity, compatible() and `kvbudget fingerprint` (expected values written by hand)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kvbudget.errors import SpecError
from kvbudget.spec.fingerprint import CacheIdentity, compatible

BASE = CacheIdentity(
    weights_revision="revision:abc",
    tokenizer_hash="t1",
    chat_template_hash="c1",
    position_encoding='{"rope_theta":500000}',
    adapter="none",
    multimodal_hash="text-only",
    kv_cache_dtype="auto",
    engine="vllm 0.32.0",
    layout="block_size=16 hash=sha256",
    tensor_parallel_size=2,
    pipeline_parallel_size=1,
    connector="none",
)


def test_identical_identities_are_compatible() -> None:
    result = compatible(BASE, replace(BASE))
    assert result.compatible and result.differences == ()


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("weights_revision", "revision:def", "value"),
        ("tokenizer_hash", "t2", "value"),
        ("chat_template_hash", "c2", "value"),
        ("position_encoding", '{"rope_theta":10000}', "value"),
        ("adapter", "sql-lora@1", "value"),
        ("multimodal_hash", "blake3", "value"),
        ("kv_cache_dtype", "fp8", "format"),
        ("engine", "sglang 0.5.9", "format"),
        ("layout", "block_size=32 hash=sha256", "format"),
        ("connector", "LMCacheConnectorV1 0.3.9", "format"),
        ("tensor_parallel_size", 4, "sharding"),
        ("pipeline_parallel_size", 2, "sharding"),
    ],
)
def test_each_field_alone_breaks_compatibility(field: str, value: object, kind: str) -> None:
    result = compatible(BASE, replace(BASE, **{field: value}))
    assert not result.compatible
    assert [(d.field, d.kind) for d in result.differences] == [(field, kind)]
    assert repr(value) in result.reasons[0]


def test_resharding_connector_allows_another_tp() -> None:
    a = replace(BASE, connector_reshards=True)
    b = replace(BASE, tensor_parallel_size=4, connector_reshards=True)
    assert compatible(a, b).compatible
    assert not compatible(a, replace(b, connector_reshards=False)).compatible


def test_unknown_field_never_proves_compatibility() -> None:
    other = replace(BASE, tokenizer_hash=None)
    assert not compatible(BASE, other).compatible
    lenient = compatible(BASE, other, allow_unknown=True)
    assert lenient.compatible and lenient.differences[0].kind == "unknown"


def test_digest_is_sha256_of_canonical_json() -> None:
    text = json.dumps(BASE.as_dict(), sort_keys=True, separators=(",", ":"))
    assert BASE.digest() == hashlib.sha256(text.encode()).hexdigest()
    assert CacheIdentity.from_dict(BASE.as_dict()) == BASE


def test_from_dict_names_the_bad_field() -> None:
    bad = {**BASE.as_dict(), "tensor_parallel_size": 0}
    with pytest.raises(SpecError, match="tensor_parallel_size"):
        CacheIdentity.from_dict(bad)
    with pytest.raises(SpecError, match="'colour'"):
        CacheIdentity.from_dict({**BASE.as_dict(), "colour": "red"})


def _model_dir(tmp: Path, template: str, theta: float) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "rope_theta": theta,
                "max_position_embeddings": 2048,
            }
        )
    )
    (tmp / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (tmp / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return tmp


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvbudget", "fingerprint", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_cli_compare_reports_the_changed_template_and_exits_1(tmp_path: Path) -> None:
    a = _model_dir(tmp_path / "a", "{{ messages }}", 500000.0)
    b = _model_dir(tmp_path / "b", "{{ messages | tojson }}", 500000.0)
    out = tmp_path / "a.json"
    first = _cli("--model", str(a), "--engine-version", "0.32.0", "--out", str(out))
    assert first.returncode == 0, first.stderr
    doc = json.loads(out.read_text())
    expected_tok = hashlib.sha256(b"tokenizer.json\0" + (a / "tokenizer.json").read_bytes())
    assert doc["identity"]["tokenizer_hash"] == expected_tok.hexdigest()
    template = json.dumps("{{ messages }}", sort_keys=True).encode()
    assert doc["identity"]["chat_template_hash"] == hashlib.sha256(template).hexdigest()
    same = _cli("--model", str(a), "--engine-version", "0.32.0", "--compare", str(out), "--json")
    assert same.returncode == 0 and json.loads(same.stdout)["comparison"]["compatible"]
    other = _cli("--model", str(b), "--engine-version", "0.32.0", "--compare", str(out), "--json")
    assert other.returncode == 1
    comparison = json.loads(other.stdout)["comparison"]
    assert [r.split(":")[0] for r in comparison["reasons"]] == ["chat_template_hash"]


def test_cli_bad_compare_file_is_one_line(tmp_path: Path) -> None:
    a = _model_dir(tmp_path / "a", "x", 1.0)
    (tmp_path / "junk.json").write_text("[1, 2]")
    proc = _cli("--model", str(a), "--compare", str(tmp_path / "junk.json"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "identity" in proc.stderr
    assert "Traceback" not in proc.stderr
