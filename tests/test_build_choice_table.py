"""scripts/build_choice_table.py: a later run's rows replace an earlier run's for the same GPU, variant, mode,
shape and algorithm; what the later run did not measure keeps the earlier rows."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build_choice_table.py"


def _script():
    spec = importlib.util.spec_from_file_location("build_choice_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(algorithm, chunk, ms, seq_len=8192, variant="sig"):
    shape = {"batch": 65536 // seq_len, "seq_len": seq_len, "heads": 16, "head_dim_qk": 128,
             "head_dim_v": 256}
    return {"gpu": "h100", "variant": variant, "mode": "fwd", "shape": shape, "algorithm": algorithm,
            "chunk_size": chunk, "median_ms": ms}


def test_a_newer_run_replaces_the_rows_it_measured_again():
    older = [_row("xl_chunk", 128, 1.50), _row("xl_chunk", 256, 1.49), _row("fused_chunk", 64, 1.70),
             _row("xl_chunk", 128, 2.40, seq_len=65536), _row("xl_chunk", 128, 1.8, variant="exp")]
    newer = [_row("xl_chunk", 128, 1.40), _row("xl_chunk", 256, 1.43)]
    rows = _script().newest_rows([older, newer])
    by_algorithm = {(row["variant"], row["shape"]["seq_len"], row["algorithm"], row["chunk_size"]):
                    row["median_ms"] for row in rows}
    assert by_algorithm == {("sig", 8192, "xl_chunk", 128): 1.40, ("sig", 8192, "xl_chunk", 256): 1.43,
                            ("sig", 8192, "fused_chunk", 64): 1.70, ("sig", 65536, "xl_chunk", 128): 2.40,
                            ("exp", 8192, "xl_chunk", 128): 1.8}
    assert len(rows) == 5
