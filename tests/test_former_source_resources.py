"""scripts/former_source_resources.py: which commit compiles a former version's table entries, how a recorded
tiling becomes the commit's, and what it reports and writes (the compiling itself needs git worktrees of
former commits, run by hand)."""

import dataclasses
import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "former_source_resources.py"


def _script():
    spec = importlib.util.spec_from_file_location("former_source_resources", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclasses.dataclass
class _OldTiling:
    chunk: int
    num_warps: int = 4
    lean_gate: bool = False
    backward: str = "tfla"


def test_a_recorded_tiling_sets_what_differs_and_reports_what_the_commit_lacks():
    recorded = {"chunk": 64, "num_warps": 8, "lean_gate": True, "backward": "fused", "fused_dq": False}
    changes, absent = _script()._old_tiling_changes(_OldTiling(64), recorded)
    assert changes == ["num_warps=8", "lean_gate=1", "backward=fused"]
    assert absent == {"fused_dq": False}


def test_the_commits_are_dealt_to_shares_by_their_entries():
    commits = {"a/1": "x", "a/2": "x", "a/3": "x", "b/1": "y", "b/2": "y", "c/1": "z"}
    script = _script()
    shares = [script._share(commits, index, 2) for index in range(2)]
    assert shares == [["x"], ["y", "z"]]
    assert script._share(commits, 0, 1) == ["x", "y", "z"]


def test_the_differences_name_each_changed_field_and_a_missing_kernel():
    entry = {"kernels": {"fused_forward_kernel": {"stack_bytes": 1384, "loop_local_bytes": 1692,
                                                  "registers": 255},
                         "gate_kernel": {"registers": 20}}}
    compiled = {"kernels": {"fused_forward_kernel": {"stack_bytes": 1760, "loop_local_bytes": 2360,
                                                     "registers": 255, "top_loops": []}}}
    lines = _script().differences(entry, compiled)
    assert lines == ["  fused_forward_kernel: stack_bytes 1384 -> 1760, loop_local_bytes 1692 -> 2360",
                     "  gate_kernel: not at the commit"]


def test_writing_replaces_only_the_fields_each_entry_holds(tmp_path):
    """An entry compiled without instruction counts keeps none (the model then sets no issue floor for it),
    and each written entry's commit is recorded."""
    import gzip
    import json

    table = {"entries": {"fused_chunk/exp/64x64/L128/v6": {"tiling": {}, "kernels": {
        "fused_forward_kernel": {"stack_bytes": 1384, "loop_local_bytes": 1692}}}}}
    path = tmp_path / "table.json.gz"
    path.write_bytes(gzip.compress(json.dumps(table).encode()))
    compiled = {"fused_chunk/exp/64x64/L128/v6": {"kernels": {"fused_forward_kernel": {
        "stack_bytes": 1760, "loop_local_bytes": 2360, "instructions": 5816}}}}
    _script().write({"fused_chunk/exp/64x64/L128/v6": "74441fc"}, compiled, path)
    written = json.loads(gzip.decompress(path.read_bytes()))
    assert written["entries"]["fused_chunk/exp/64x64/L128/v6"]["kernels"]["fused_forward_kernel"] == {
        "stack_bytes": 1760, "loop_local_bytes": 2360}
    assert written["former_sources"] == {"fused_chunk/exp/64x64/L128/v6": "74441fc"}
