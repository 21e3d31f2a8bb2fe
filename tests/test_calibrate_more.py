"""scripts/calibrate_more.py adds the building blocks a committed calibration lacks: the committed ones lack
none of the shapes the calibration code times."""

import importlib.util
import json
from pathlib import Path

import pytest

from tflabench.analysis import calibrate_blocks

REPOSITORY = Path(__file__).resolve().parents[1]


#: walks of `calibrate_blocks.WALK_SHAPES` a committed calibration does not time yet (`calibrate_more.py
#: --walks` adds them; remove the entry then): the H100's fused walks at Dqk 32
PENDING_WALKS = {"h100-sxm": calibrate_blocks.WALK_SHAPES[-6:]}


def _script():
    path = REPOSITORY / "scripts" / "calibrate_more.py"
    spec = importlib.util.spec_from_file_location("calibrate_more", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_missing_lists_the_shapes_without_an_entry():
    script = _script()
    entries = [{"m": 64, "n": 64, "k": 64, "num_warps": 4, "flops_per_s": 1.0}]
    shapes = ((64, 64, 64, 4), (16, 64, 128, 4))
    assert script.missing(entries, script.DOT_NAME, shapes) == ((16, 64, 128, 4),)
    assert script.missing([], script.DOT_NAME, shapes) == shapes


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
def test_the_committed_calibrations_time_every_walk_and_product_of_the_code(gpu):
    script = _script()
    blocks = json.loads((REPOSITORY / "results" / "calibration" / f"{gpu}.json").read_text())["blocks"]
    pending = PENDING_WALKS.get(gpu, ())
    assert script.missing(blocks["walk"], script.WALK_NAME, calibrate_blocks.WALK_SHAPES) == pending
    assert script.missing(blocks["dot"], script.DOT_NAME, calibrate_blocks.DOT_SHAPES) == ()
    assert blocks["spill_loops"]["rates"]
    levels = blocks["issue"]["levels"]
    assert [level["warps_per_scheduler"] for level in levels] == list(calibrate_blocks.ISSUE_PROGRAMS_PER_SM)
    seconds = [level["seconds_per_instruction"] for level in levels]
    assert seconds == sorted(seconds) and 1e-9 < seconds[0] and seconds[-1] < 10e-9  # warps share schedulers
