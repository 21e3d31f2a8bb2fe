"""scripts/holdout_predictions.py writes the model's predictions for every point of our kernels in a sweep
config, the same documents `tflabench predict --json` prints."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "holdout_predictions.py"
CONFIG = ROOT / "examples" / "holdout-v17-value-blocks.toml"


def test_every_point_of_our_kernels_is_predicted_as_predict_prints_it(tmp_path):
    out = tmp_path / "predictions.json.gz"
    subprocess.run([sys.executable, str(SCRIPT), str(CONFIG), "--gpu", "h100-sxm", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=300)
    predictions = json.load(gzip.open(out))["predictions"]
    keys = {(p["shape"]["heads"], p["variant"], p["mode"], p["tiling"]) for p in predictions}
    assert len(predictions) == len(keys) == 2 * 2 * 2 * 2  # head configs x variants x modes x tilings
    first = predictions[0]
    shape = first["shape"]
    printed = subprocess.run(
        [sys.executable, "-m", "tflabench", "predict", "--gpu", "h100-sxm", "--batch", str(shape["batch"]),
         "--seq-len", str(shape["seq_len"]), "--heads", str(shape["heads"]),
         "--head-dim-qk", str(shape["head_dim_qk"]), "--head-dim-v", str(shape["head_dim_v"]),
         "--variant", first["variant"], "--mode", first["mode"], "--json"],
        check=True, capture_output=True, text=True, timeout=300, cwd=ROOT).stdout
    assert first["tiling"] == "default" and first["prediction"] == json.loads(printed)
