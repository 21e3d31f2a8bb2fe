"""scripts/calibrate_more.py adds the building blocks a committed calibration lacks: the committed ones lack
none of the shapes the calibration code times."""

import importlib.util
import json
import os
import subprocess
import sys
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


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
def test_the_committed_spill_loops_have_their_loads(gpu):
    """Each committed spill loop records the part of its local bytes its loads move, and each rate the rate
    of those loads: the rate of all of them x loads / local bytes of its loop."""
    spill_loops = json.loads((REPOSITORY / "results" / "calibration" / f"{gpu}.json").read_text())[
        "blocks"]["spill_loops"]
    loops = {(loop["num_warps"], loop["programs_per_sm"], loop["width"]): loop
             for loop in spill_loops["loops"]}
    assert all(0 <= loop["loop_load_bytes"] <= loop["loop_local_bytes"] for loop in loops.values())
    for rate in spill_loops["rates"]:
        loop = loops[rate["num_warps"], rate["programs_per_sm"], rate["width"]]
        assert 0 < loop["loop_load_bytes"] < loop["loop_local_bytes"]
        assert rate["load_bytes_per_s_per_sm"] == pytest.approx(
            rate["bytes_per_s_per_sm"] * loop["loop_load_bytes"] / loop["loop_local_bytes"])


def test_spill_load_bytes_come_from_the_loop_compiled_as_it_was_timed(monkeypatch):
    """The spill loop compiled here (for real: the interpreter off, in a subprocess) gives the stack and local
    bytes the GPU's JIT gave the timed one (the committed H200 calibration's 8-warp loop of width 512) and the
    loads recorded beside them; a loop that compiles to other bytes is refused."""
    spill_loops = json.loads((REPOSITORY / "results" / "calibration" / "h200.json").read_text())[
        "blocks"]["spill_loops"]
    [timed] = [loop for loop in spill_loops["loops"] if (loop["num_warps"], loop["programs_per_sm"],
                                                          loop["width"]) == (8, 1, 512)]
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import kernel_resources; "
            "print(json.dumps(kernel_resources.spill_loop_resources(8, 512)))")
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    output = subprocess.run([sys.executable, "-c", code, str(REPOSITORY / "scripts")], capture_output=True,
                            text=True, env=env, timeout=600, check=True).stdout
    compiled = json.loads(output.splitlines()[-1])
    assert ([compiled[name] for name in calibrate_blocks.SPILL_LOOP_FIGURES]
            == [timed[name] for name in calibrate_blocks.SPILL_LOOP_FIGURES])
    monkeypatch.syspath_prepend(str(REPOSITORY / "scripts"))
    import kernel_resources

    other = dict(compiled, loop_local_bytes=compiled["loop_local_bytes"] + 4)
    monkeypatch.setattr(kernel_resources, "spill_loop_resources", lambda warps, width: other)
    with pytest.raises(SystemExit, match="not the"):
        _script().add_spill_load_bytes({"loops": [dict(timed)], "rates": []})
