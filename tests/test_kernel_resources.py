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


def compiler_run(*command: str) -> str:
    """stdout of a Python command that compiles kernels for real, so with the interpreter switched off."""
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, *command], capture_output=True, text=True, env=env, timeout=600,
                          check=True).stdout


def resource_rows(*arguments: str) -> dict[str, list[str]]:
    """kernel -> its row's cells."""
    rows = [line.split() for line in compiler_run(str(SCRIPT), *arguments).splitlines()[1:]]
    return {row[0]: row[1:] for row in rows}


def test_every_kernel_of_a_forward_and_backward_pass_is_compiled_for_hopper_and_reported():
    assert list(resource_rows("--dqk", "32", "--dv", "32", "--chunk", "32")) == SMALL_HEAD_KERNELS
    rows = resource_rows("--dqk", "32", "--dv", "128", "--chunk", "32")
    assert list(rows) == KERNELS
    warps, stages, shared_kb, registers, _local, _stack, _instr, _loop, programs, _per_sm = rows[
        "chunk_outputs_kernel"]
    assert (warps, stages) == ("4", "2") and 0 < float(shared_kb) < 227 and 0 < int(registers) <= 255
    assert programs == "8"  # one value block and one query tile per chunk: 2 chunks x B 2 x H 2
    instructions, loop_instructions = map(int, rows["chunk_states_kernel"][6:8])
    assert 0 < loop_instructions < instructions  # the recurrence's loop over the chunks


def test_sass_instructions_are_counted_in_all_and_in_the_outermost_loop():
    """Five instructions; the backward branch at 0x0040 closes the loop 0x0010-0x0040 (four of them, a
    local store and a local load among them); the forward branch at 0x0020 is no loop, nor a branch back
    from after the EXIT."""
    from tflabench.analysis import sass

    listing = "\n".join([
        "        /*0000*/                   MOV R1, c[0x0][0x28] ;",
        "        /*0010*/                   STL.64 [R1], R2 ;",
        "        /*0020*/              @P0  BRA 0x30 ;",
        "        /*0030*/                   LDL R4, [R1] ;",
        "        /*0040*/                   BRA 0x10 ;",
    ])
    assert sass.instruction_counts(listing) == (5, 4, 0)
    assert sass.loop_local_bytes(listing) == 8 + 4
    body = sass._loop_body(sass._instructions(listing))
    assert sass._local_bytes(body, ("LDL",)) == 4  # the loads alone: what a warp waits for
    assert sass.instruction_counts(listing.replace("BRA 0x10", "EXIT")) == (5, 0, 0)
    retry_stub = "\n".join([  # a tensor-descriptor wait's retry code after EXIT, branching back: no loop
        listing,
        "        /*0050*/                   EXIT ;",
        "        /*0060*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4], RZ ;",
        "        /*0070*/                   BRA 0x0 ;",
    ])
    assert sass.instruction_counts(retry_stub) == (8, 4, 0)
    self_retry = "\n".join([  # a wait's retry stub after the last EXIT that branches to itself: no loop
        listing,
        "        /*0050*/                   EXIT ;",
        "        /*0060*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR4], RZ ;",
        "        /*0070*/              @!P1 BRA 0x60 ;",
    ])
    assert sass.instruction_counts(self_retry) == (8, 4, 0)
    assert sass.top_loops(sass._instructions(self_retry)) == [[4, 0]]


def test_a_loop_inside_the_outermost_loop_is_counted_on_its_own():
    """The outer loop 0x0010-0x0060 (six instructions) holds the inner loop 0x0020-0x0040 (three): a state
    recurrence's sub-chunks within its chunks."""
    from tflabench.analysis import sass

    listing = "\n".join([
        "        /*0000*/                   MOV R1, c[0x0][0x28] ;",
        "        /*0010*/                   STG.E [R2], R4 ;",
        "        /*0020*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;",
        "        /*0030*/                   IADD3 R0, R0, 0x1, RZ ;",
        "        /*0040*/              @P0  BRA 0x20 ;",
        "        /*0050*/                   IADD3 R5, R5, 0x1, RZ ;",
        "        /*0060*/              @P1  BRA 0x10 ;",
        "        /*0070*/                   EXIT ;",
    ])
    assert sass.instruction_counts(listing) == (8, 6, 3)


def test_the_loops_no_other_loop_holds_are_listed_with_the_loops_inside_them():
    """A block loop 0x0010-0x0020 (two instructions) before the tile loop 0x0030-0x0080 (six), which holds
    the block loop 0x0040-0x0060 (three): the tile loop first, with the three inside it; the loop before it
    with none. Without a loop, none."""
    from tflabench.analysis import sass

    listing = "\n".join([
        "        /*0000*/                   MOV R1, c[0x0][0x28] ;",
        "        /*0010*/                   HGMMA.64x32x16.F32.BF16 R24, gdesc[UR4], R24 ;",
        "        /*0020*/              @P2  BRA 0x10 ;",
        "        /*0030*/                   LDG.E R4, [R2] ;",
        "        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;",
        "        /*0050*/                   IADD3 R0, R0, 0x1, RZ ;",
        "        /*0060*/              @P0  BRA 0x40 ;",
        "        /*0070*/                   IADD3 R5, R5, 0x1, RZ ;",
        "        /*0080*/              @P1  BRA 0x30 ;",
        "        /*0090*/                   EXIT ;",
    ])
    assert sass.top_loops(sass._instructions(listing)) == [[6, 3], [2, 0]]
    assert sass.top_loops(sass._instructions(listing.replace("BRA 0x", "BRA.U 0x9"))) == []


def test_a_tiling_change_reaches_the_compiled_kernel():
    default = resource_rows("--dqk", "32", "--dv", "128", "--chunk", "32")
    wider = resource_rows("--dqk", "32", "--dv", "128", "--chunk", "32", "--set", "num_warps=8")
    assert default["chunk_dq_kernel"][0] == "4" and wider["chunk_dq_kernel"][0] == "8"
    one_stage = resource_rows("--dqk", "32", "--dv", "128", "--chunk", "32", "--set", "dv_num_stages=1")
    assert default["chunk_dv_kernel"][1] == "2" and one_stage["chunk_dv_kernel"][1] == "1"
    assert one_stage["chunk_dq_kernel"][1] == "2"  # the dV kernel's stages alone


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


#: run by `compiler_run` (the interpreter's kernels are not JIT functions): the integer arguments of
#: mLSTMsig's fused forward at 16 heads (the gates' head stride is 1, their time stride 16) as
#: `kernel_resources` compiles them and as the JIT specializes them (`native_specialize_impl`), one line per
#: argument
SPECIALIZATIONS = """
import argparse, sys
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend
sys.path.insert(0, sys.argv[1])
import kernel_resources
args = argparse.Namespace(dqk=64, dv=64, chunk=64, variant="sig", algorithm="fused_chunk", limit=False,
                          batch=2, heads=16, seq=None, set=[])
launch = next(item for item in kernel_resources._launches(args)
              if item.kernel.fn.__name__ == "fused_forward_kernel")
signature, constexprs, attributes = kernel_resources._compile_arguments(launch)
excluded = set(launch.kernel.do_not_specialize or ())
for index, param in enumerate(launch.kernel.params):
    value = launch.arguments[param.name]
    if not param.is_constexpr and type(value) is int:
        specialize = param.name not in excluded and index not in excluded
        kind, divisibility = native_specialize_impl(BaseBackend, value, False, specialize, specialize)
        ours = signature[param.name], constexprs.get(param.name), (index,) in attributes
        print(param.name, value, kind, divisibility or "-", *ours)
"""


def test_integer_arguments_are_specialized_as_the_jit_specializes_them():
    """An integer 1 is compiled in as a constant and a multiple of 16 gets its divisibility, as the JIT does
    at launch: otherwise the table's kernels are not the ones that run."""
    rows = [line.split() for line in compiler_run("-c", SPECIALIZATIONS, str(SCRIPT.parent)).splitlines()]
    assert any(value == "1" for _, value, *_ in rows)  # the gates' head stride
    for name, _value, kind, divisibility, signature, constant, divisible in rows:
        if kind == "constexpr":
            assert (signature, constant) == ("constexpr", "1"), name
        else:
            assert signature == kind and (divisible == "True") == (divisibility == "D"), name


@pytest.fixture
def kernel_resources_module(monkeypatch):
    """The script as a module (it imports triton and torch, as the tests above do)."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import kernel_resources

    return kernel_resources


class _InlinePool:
    """`multiprocessing.Pool` run in the calling process."""

    def __init__(self, _processes):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        return False

    def starmap(self, function, configs):
        return [function(*config) for config in configs]


def test_a_partial_table_replaces_only_the_chosen_head_dims(kernel_resources_module, monkeypatch, tmp_path):
    """`--table --head-dims 32x32` compiles the configurations at 32/32 alone and keeps every other entry,
    the reference's too."""
    kr = kernel_resources_module
    configs = [("fused_chunk", "sig", 32, 32, 16, None, None), ("fused_chunk", "sig", 64, 64, 16, None, None)]
    monkeypatch.setattr(kr, "_table_configs", lambda: configs)
    monkeypatch.setattr(kr, "_table_entry_or_none", lambda *config: {"compiled": list(config[2:4])})
    monkeypatch.setattr(kr.multiprocessing, "Pool", _InlinePool)
    path = tmp_path / "table.json.gz"
    old = {"fused_chunk/sig/32x32/L16": {"old": 1}, "fused_chunk/sig/64x64/L16": {"old": 2},
           "reference/sig/32x32/L64": {"old": 3}}
    kr._write_table(path, {"entries": old})
    kr.write_table(path, head_dims={(32, 32)})
    entries = kr.structural.read_compiled_resources(path)["entries"]
    assert entries == {"fused_chunk/sig/32x32/L16": {"compiled": [32, 32]},
                       "fused_chunk/sig/64x64/L16": {"old": 2}, "reference/sig/32x32/L64": {"old": 3}}
    with pytest.raises(kr.InputError, match="7x7 are not in TABLE_HEAD_DIMS"):
        kr.write_table(path, head_dims={(7, 7)})


def test_a_partial_table_replaces_only_the_chosen_chunk_sizes(kernel_resources_module, monkeypatch, tmp_path):
    """`--table --chunks 32` compiles the configurations at L = 32 alone and keeps every other entry."""
    kr = kernel_resources_module
    configs = [("xl_chunk", "sig", 32, 32, 32, None, None), ("xl_chunk", "sig", 32, 32, 64, None, None)]
    monkeypatch.setattr(kr, "_table_configs", lambda: configs)
    monkeypatch.setattr(kr, "_table_entry_or_none", lambda *config: {"compiled": config[4]})
    monkeypatch.setattr(kr.multiprocessing, "Pool", _InlinePool)
    path = tmp_path / "table.json.gz"
    old = {"xl_chunk/sig/32x32/L32": {"old": 1}, "xl_chunk/sig/32x32/L64": {"old": 2}}
    kr._write_table(path, {"entries": old})
    kr.write_table(path, chunks={32})
    assert kr.structural.read_compiled_resources(path)["entries"] == {
        "xl_chunk/sig/32x32/L32": {"compiled": 32}, "xl_chunk/sig/32x32/L64": {"old": 2}}


def test_the_table_holds_fused_chunks_backward_below_xl_chunks_chunk_sizes(kernel_resources_module):
    """fused_chunk's backward at L = 16 and 32 runs the xl_chunk kernels there: the table compiles them at
    today's default tiling for every head-dim pair, so the model's fwd+bwd rows at those chunk sizes get
    compiled resources (`structural.launches` looks them up as xl_chunk entries)."""
    kr = kernel_resources_module
    configs = kr._table_configs()
    for chunk in kr.FUSED_BACKWARD_CHUNKS:
        assert chunk < min(kr.TABLE_CHUNKS["xl_chunk"])
        assert {config[2:4] for config in configs if config[0] == "xl_chunk" and config[4] == chunk
                and config[5] is None and config[6] is None} == set(kr.TABLE_HEAD_DIMS)


NARROW = "block_qk=32,block_v=32,out_block_v=32,dv_block_v=32,state_block_qk=32,state_block_v=32"


def test_the_kernels_with_block_loops_of_several_trips_are_chosen_by_their_tiling(kernel_resources_module):
    """32-wide blocks at 96/96: every block loop makes two or three trips; today's default at 128/128 (one
    128-wide block each) none; at 144/144 (two masked blocks) the gradient kernels', not the output kernel's
    (its loop starts at the second Dqk block: one trip); the fused forward has none."""
    kr = kernel_resources_module
    narrow = ("xl_chunk", "sig", 96, 96, 128, None, NARROW)
    assert kr._block_loop_kernels(narrow) == set(kr.BLOCK_LOOP_KERNELS)
    assert kr._block_loop_kernels(("xl_chunk", "sig", 128, 128, 128, None, None)) == set()
    assert kr._block_loop_kernels(("xl_chunk", "exp", 144, 144, 128, None, None)) == {
        "chunk_dq_kernel", "chunk_dk_kernel", "chunk_dv_kernel"}
    assert kr._block_loop_kernels(("fused_chunk", "sig", 144, 144, 64, None, None)) == set()


def test_a_sweep_configs_tilings_are_the_entries_its_predictions_need(kernel_resources_module, tmp_path):
    """`--sweep-config`: each (variant, head dims, chunk size) of our TFLA kernels with a tiling other than
    the default, at today's kernels version; a config of default tilings needs none."""
    from tflabench.kernels.mlstm.tilings import KERNELS_VERSION

    kr = kernel_resources_module
    config = tmp_path / "sweep.toml"
    config.write_text('[sweep]\nkernels = ["tflabench.mlstm_sig.xl_chunk"]\nseq_len = [1024]\ntokens = 4096\n'
                      'head_configs = [[4, 96, 96]]\nchunk_size = [64, 128]\nmode = ["fwd", "fwdbw"]\n'
                      f'tilings = ["default", "{NARROW}"]\n')
    assert kr._sweep_tilings(config) == [("xl_chunk", "sig", 96, 96, chunk, KERNELS_VERSION, NARROW)
                                         for chunk in (64, 128)]
    config.write_text(config.read_text().replace(f', "{NARROW}"', ""))
    assert kr._sweep_tilings(config) == []
