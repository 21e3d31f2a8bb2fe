"""`tflabench calibrate-median`: the per-figure median of several calibrations of one GPU."""

import copy
import json
from pathlib import Path

import pytest
from cli_capture import run_cli

from tflabench.analysis import hardware, structural
from tflabench.analysis.calibrate_median import median_calibration
from tflabench.errors import InputError

CALIBRATION = json.loads((Path(__file__).parent / "fixtures" / "calibration" / "h100-sxm.json").read_text())


def scaled(factor: float, record: dict = CALIBRATION) -> dict:
    """The calibration with every float multiplied by ``factor`` (the naming fields kept)."""
    if isinstance(record, float):
        return record * factor
    if isinstance(record, dict):
        return {key: scaled(factor, value) for key, value in record.items()}
    if isinstance(record, list):
        return [scaled(factor, value) for value in record]
    return record


def floats(record, path=""):
    """(path, value) of every float of a record, in order."""
    if isinstance(record, float):
        yield path, record
    elif isinstance(record, dict):
        for key, value in record.items():
            yield from floats(value, f"{path}.{key}")
    elif isinstance(record, list):
        for index, value in enumerate(record):
            yield from floats(value, f"{path}[{index}]")


def test_every_float_is_the_median_and_tile_entries_match_in_any_order():
    low, middle, high = scaled(0.9), scaled(1.0), scaled(1.25)
    high["blocks"]["dot"].reverse()
    names = ["a.json", "b.json", "c.json"]
    merged = median_calibration([low, high, middle], names, "tflabench calibrate-median")
    without = {key: value for key, value in merged.items() if key not in ("source", "provenance")}
    assert list(floats(without)) == list(floats({k: v for k, v in CALIBRATION.items() if k != "source"}))
    assert merged["blocks"]["dot"][0]["m"] == CALIBRATION["blocks"]["dot"][0]["m"]
    assert merged["source"] == "median of 3 calibrations (a.json, b.json, c.json)"
    assert [entry["file"] for entry in merged["provenance"]["median_of"]] == names


def test_two_calibrations_give_their_mean():
    merged = median_calibration([scaled(1.0), scaled(2.0)], ["a", "b"], "")
    assert merged["flops"] == pytest.approx(1.5 * CALIBRATION["flops"])
    assert merged["blocks"]["memory"]["token_read_bytes_per_s"] == pytest.approx(
        1.5 * CALIBRATION["blocks"]["memory"]["token_read_bytes_per_s"])


def changed(edit) -> dict:
    record = copy.deepcopy(CALIBRATION)
    edit(record)
    return record


@pytest.mark.parametrize(("other", "message"), [
    (changed(lambda r: r.update(gpu="h200")), "different GPUs"),
    (changed(lambda r: r["blocks"]["memory"].pop("token_read_bytes_per_s")), "token_read_bytes_per_s"),
    (changed(lambda r: r["blocks"]["dot"][0].update(m=256)), "same entries in blocks.dot"),
    (changed(lambda r: r["blocks"]["device"].update(sm_count=114)), "blocks.device.sm_count"),
    ({"not": "a calibration"}, "not a calibration file"),
])
def test_calibrations_that_do_not_measure_the_same_things_are_refused(other, message):
    with pytest.raises(InputError, match=message):
        median_calibration([CALIBRATION, other], ["a.json", "b.json"], "")


def test_a_list_of_naming_values_is_kept_where_the_calibrations_agree():
    """The issue block names its walk by a list of plain values (kind, L, Dqk, Dv, warps, stages), with a
    repeated 64: it is kept as it is where every calibration has it, its levels' floats merged, and refused
    where one differs."""
    def with_issue(factor: float, walk: list) -> dict:
        record = scaled(factor)
        record["blocks"]["issue"] = {"walk": walk, "levels": [
            {"warps_per_scheduler": 1.0, "seconds_per_instruction": factor * 2e-9}]}
        return record

    walk = ["state", 64, 64, 64, 4, 2]
    merged = median_calibration([with_issue(1.0, walk), with_issue(2.0, list(walk)), with_issue(4.0, walk)],
                                ["a", "b", "c"], "")
    assert merged["blocks"]["issue"]["walk"] == walk
    assert merged["blocks"]["issue"]["levels"][0]["seconds_per_instruction"] == pytest.approx(4e-9)
    with pytest.raises(InputError, match="blocks.issue.walk"):
        median_calibration([with_issue(1.0, walk), with_issue(1.0, ["state", 128, 64, 64, 4, 2])],
                           ["a", "b"], "")


def test_one_calibration_is_no_median():
    with pytest.raises(InputError, match="two or more"):
        median_calibration([CALIBRATION], ["a.json"], "")


def write(folder: Path, name: str, record: dict) -> str:
    path = folder / name
    path.write_text(json.dumps(record))
    return str(path)


def test_the_command_stores_a_calibration_the_model_loads(tmp_path, monkeypatch):
    files = [write(tmp_path, f"{name}.json", scaled(factor)) for name, factor in (("a", 0.8), ("b", 1.0),
                                                                                   ("c", 1.1))]
    store = tmp_path / "store"
    code, out, err = run_cli(["calibrate-median", *files, "--out", str(store / "h100-sxm.json"), "--json"])
    assert code == 0, err
    payload = json.loads(out)
    token = payload["figures"]["memory.token_read_bytes_per_s"]
    read = CALIBRATION["blocks"]["memory"]["token_read_bytes_per_s"]
    assert (token["min"], token["median"], token["max"]) == pytest.approx((0.8 * read, read, 1.1 * read))
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(store))
    assert hardware.load_calibration_blocks("h100-sxm")["memory"]["token_read_bytes_per_s"] == read
    assert structural.load_rates("h100-sxm").memory("token_read") == read


def test_the_default_output_is_the_gpus_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path / "store"))
    files = [write(tmp_path, f"{name}.json", scaled(factor)) for name, factor in (("a", 1.0), ("b", 1.0))]
    code, out, err = run_cli(["calibrate-median", *files])
    assert code == 0, err
    assert "stored in" in out and (tmp_path / "store" / "h100-sxm.json").exists()


@pytest.mark.parametrize("bad", ["folder", "missing.json", "text.txt"])
def test_a_file_that_is_not_a_calibration_is_a_one_line_error(tmp_path, bad):
    (tmp_path / "folder").mkdir()
    (tmp_path / "text.txt").write_text("not json\n")
    good = write(tmp_path, "good.json", CALIBRATION)
    code, _, err = run_cli(["calibrate-median", good, str(tmp_path / bad), "--out", str(tmp_path / "o.json")])
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert not (tmp_path / "o.json").exists()
