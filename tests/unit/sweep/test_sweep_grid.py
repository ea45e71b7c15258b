"""The grid file: expansion, stable point keys and one-line errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.errors import ConfigError
from kvbudget.sweep.grid import expand, grid_from_dict, load_grid

BASE = {"workload": {"num_requests": 50, "input_tokens": {"kind": "fixed", "value": 256}}}


def _grid(**axes: object) -> dict[str, object]:
    return {"base": BASE, "grid": axes}


def test_every_combination_is_one_point() -> None:
    grid = grid_from_dict(
        _grid(gpu=["H100-SXM", "A100-80GB"], tp=[1, 2], rate_per_s=[2.0, 4.0, 8.0])
    )
    points = expand(grid)
    assert len(points) == 2 * 2 * 3
    combos = {(p.axes["gpu"], p.axes["tp"], p.axes["rate_per_s"]) for p in points}
    assert len(combos) == 12
    assert len({p.key for p in points}) == 12
    one = next(p for p in points if p.axes == {**p.axes, "gpu": "A100-80GB", "tp": 2})
    # the rate axis becomes the workload's Poisson arrivals; the rest of the base is kept
    assert one.scenario["workload"]["arrivals"]["kind"] == "poisson"
    assert one.scenario["workload"]["num_requests"] == 50
    # axes not swept keep the base / scenario defaults
    assert one.axes["replicas"] == 1 and one.axes["prefix_caching"] is True


def test_point_key_is_stable_across_spellings(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text(
        "base:\n  workload: {num_requests: 50, input_tokens: {kind: fixed, value: 256}}\n"
        "grid:\n  tp: [1, 2]\n  gpu: [H100-SXM]\n"
    )
    b = tmp_path / "b.yaml"  # same grid: other key order, a value spelled with its default
    b.write_text(
        "grid:\n  gpu: [H100-SXM]\n  tp: [1, 2]\n"
        "base:\n  seed: 0\n  workload:\n    input_tokens: {value: 256, kind: fixed}\n"
        "    num_requests: 50\n"
    )
    keys_a = [p.key for p in expand(load_grid(a))]
    keys_b = [p.key for p in expand(load_grid(b))]
    assert keys_a == keys_b
    c = tmp_path / "c.yaml"  # one value changed: other keys
    c.write_text(a.read_text().replace("value: 256", "value: 257"))
    assert not set(keys_a) & {p.key for p in expand(load_grid(c))}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"grid": {"gpus": ["H100-SXM"]}}, ["grid.gpus", "unknown field"]),
        ({"grid": {"tp": "two"}}, ["grid.tp", "'two'"]),
        ({"grid": {"tp": []}}, ["grid.tp"]),
        ({"grid": {"rate_per_s": [0]}}, ["grid.rate_per_s=0", "> 0"]),
        (
            {"slos": [{"name": "a", "ttft_s": {"p99": 1}}, {"name": "a", "tpot_s": {"p99": 1}}]},
            ["used twice"],
        ),
        ({"slos": [{"name": "a"}]}, ["slos.a", "no ceiling"]),
        ({"slos": [{"name": "a", "ttft_s": {"p98": 1}}]}, ["slos.0.ttft_s.p98"]),
        ({"base": {"gpus": "x"}}, ["gpus"]),
        ({"grid": {"router": ["nearest"]}}, ["router", "nearest", "point (router=nearest)"]),
        ({"grid": {"gpu": ["H101"]}}, ["grid.gpu='H101'", "H100-SXM"]),
        ({"gpu_hour_usd": {"L4": -1}}, ["gpu_hour_usd.L4=-1"]),
    ],
)
def test_bad_grid_is_one_line_naming_the_field(data: dict[str, object], words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        expand(grid_from_dict(data))
    text = str(info.value)
    assert "\n" not in text
    for word in words:
        assert word in text, text


def test_grid_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_grid(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: [tp: 1\n")
    with pytest.raises(ConfigError, match="line"):
        load_grid(bad)
    top = tmp_path / "top.yaml"
    top.write_text("- 1\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_grid(top)


def test_a_billion_point_grid_is_refused_before_any_point_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # issue 30 item 5: 10 axes of 8 values (1,073,741,824 points) in a small file. The size is
    # the product of the axes' lengths, counted by hand here; it must be refused before a
    # single scenario is validated.
    import kvbudget.sweep.grid as grid_module

    def no_scenario(*args: object, **kwargs: object) -> object:
        raise AssertionError("a point was validated before the grid size was checked")

    monkeypatch.setattr(grid_module, "scenario_from_dict", no_scenario)
    eight = list(range(1, 9))
    axes = {
        "tp": eight,
        "max_model_len": [1024 * i for i in eight],
        "max_num_seqs": eight,
        "gpu_memory_utilization": [0.5 + 0.05 * i for i in eight],
        "replicas": eight,
        "rate_per_s": [float(i) for i in eight],
        "kv_dtype": ["auto", "fp8"] * 4,
        "router": ["round_robin"] * 8,
        "model": ["m"] * 8,
        "gpu": ["H100-SXM"] * 8,
    }
    with pytest.raises(ConfigError) as info:
        grid_from_dict(_grid(**axes))
    text = info.value.one_line()
    assert "1,073,741,824 points" in text and "100,000" in text and "limit" in text
    assert len(text.splitlines()) == 1
    # expand() refuses too, for a GridFile built without grid_from_dict
    built = grid_module.GridFile.model_validate(_grid(**axes))
    with pytest.raises(ConfigError, match="1,073,741,824 points"):
        expand(built)


def test_a_grid_at_the_limit_is_not_refused_for_its_size() -> None:
    from kvbudget.sweep.grid import grid_size

    grid = grid_from_dict(_grid(rate_per_s=[float(i + 1) for i in range(1000)], tp=[1] * 100))
    assert grid_size(grid) == 100_000
