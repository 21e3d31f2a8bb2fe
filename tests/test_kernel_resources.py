"""scripts/kernel_resources.py compiles our kernels for Hopper without a GPU and reports their resources."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "kernel_resources.py"
KERNELS = ["gate_cumsum_kernel", "chunk_states_kernel", "chunk_outputs_kernel", "chunk_dq_kernel",
           "chunk_state_grads_kernel", "chunk_dk_kernel", "chunk_dv_kernel", "gate_grads_kernel"]
#: at head dims <= 64 dK and dV come from one kernel, and where a chunk is one tile dQ too, its inter-chunk
#: part from the recomputed recurrence (`Tiling.default`, `Tiling.uses_fused_dq`)
SMALL_HEAD_KERNELS = KERNELS[:3] + ["chunk_states_dq_kernel", "chunk_state_grads_kernel", "chunk_dkdv_kernel",
                                    "gate_grads_kernel"]


def resource_rows(*arguments: str) -> dict[str, list[str]]:
    """kernel -> its row's cells; the compiler runs for real, so the interpreter is switched off."""
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True,
                            env=env, timeout=600, check=True)
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    return {row[0]: row[1:] for row in rows}


def test_every_kernel_of_a_forward_and_backward_pass_is_compiled_for_hopper_and_reported():
    assert list(resource_rows("--dqk", "32", "--dv", "32", "--chunk", "32")) == SMALL_HEAD_KERNELS
    rows = resource_rows("--dqk", "32", "--dv", "128", "--chunk", "32")
    assert list(rows) == KERNELS
    warps, stages, shared_kb, registers, _local, _stack, programs, _per_sm = rows["chunk_outputs_kernel"]
    assert (warps, stages) == ("4", "2") and 0 < float(shared_kb) < 227 and 0 < int(registers) <= 255
    assert programs == "8"  # one value block and one query tile per chunk: 2 chunks x B 2 x H 2


def test_a_tiling_change_reaches_the_compiled_kernel():
    default = resource_rows("--dqk", "32", "--dv", "128", "--chunk", "32")
    wider = resource_rows("--dqk", "32", "--dv", "128", "--chunk", "32", "--set", "num_warps=8")
    assert default["chunk_dq_kernel"][0] == "4" and wider["chunk_dq_kernel"][0] == "8"


def test_the_reference_kernels_launches_are_captured_and_compiled():
    """mlstm_kernels' mLSTMsig xl_chunk: forward recurrence and output, backward recurrences (the forward one
    again: one row per kernel) and dV, dK, dQ. Needs the peer package (not a CI dependency)."""
    pytest.importorskip("mlstm_kernels")
    rows = resource_rows("--reference", "--dqk", "64", "--dv", "64", "--chunk", "64")
    assert [name.removeprefix("mlstm_siging_chunkwise__") for name in rows] == [
        "recurrent_fw_C_kernel", "parallel_fw_Hintra_kernel", "recurrent_bw_dC_kernel",
        "parallel_bw_dV_kernel", "parallel_bw_dK_kernel", "parallel_bw_dQ_kernel"]
    output = rows["mlstm_siging_chunkwise__parallel_fw_Hintra_kernel"]
    warps, stages, _shared_kb, registers = output[:4]
    assert (warps, stages) == ("4", "1") and 0 < int(registers) <= 255
