"""`tflabench.analysis.calibrate` and `calibrate_blocks`: refusing without a GPU, plausible ceilings on one,
every building-block code path under the interpreter, the figures stored beside the ceilings."""

import json
from dataclasses import replace

import pytest
import torch

from tflabench.analysis import calibrate, calibrate_blocks, hardware
from tflabench.errors import InputError

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")


@needs_no_gpu
def test_measuring_without_a_gpu_is_an_input_error():
    with pytest.raises(InputError, match="^no CUDA GPU"):
        calibrate.measure_ceilings()
    with pytest.raises(InputError, match="^no CUDA GPU"):
        calibrate.measure_matmul_flops(256, 1)


@pytest.mark.parametrize("kwargs", [{"matmul_size": 0}, {"copy_bytes": -1}, {"repeats": 2.5}])
def test_bad_sizes_are_input_errors(kwargs):
    with pytest.raises(InputError, match="must be a positive integer"):
        calibrate.measure_ceilings(**kwargs)


@pytest.mark.gpu
def test_measured_ceilings_are_below_and_near_the_datasheet():
    measured = calibrate.measure_ceilings(matmul_size=4096, copy_bytes=2**28, repeats=5)
    device = torch.cuda.get_device_name(0)
    assert measured.source.startswith("measured ") and measured.source.endswith(device)
    gpu = hardware.gpu_from_device_name(device)
    if gpu is None:
        pytest.skip(f"{device} is not in the database")
    datasheet = hardware.datasheet_ceilings(gpu)
    assert 0.3 * datasheet.flops < measured.flops < 1.05 * datasheet.flops
    assert 0.3 * datasheet.bandwidth < measured.bandwidth < 1.05 * datasheet.bandwidth


def test_building_blocks_run_under_the_interpreter_and_report_every_figure():
    """Every microbenchmark runs (tiny sizes, CPU tensors); the timings themselves mean nothing here."""
    blocks = calibrate_blocks.measure_blocks(calibrate_blocks.BlockSizes.tiny())
    assert blocks["dtype"] == "float32"
    assert set(blocks["device"]) == {"sm_count", "shared_memory_per_sm", "registers_per_sm", "l2_bytes"}
    shapes = [(dot["m"], dot["n"], dot["k"], dot["num_warps"]) for dot in blocks["dot"]]
    assert shapes == [(16, 16, 16, 4), (16, 32, 16, 4)]
    rates = {f"{stages}{prefix}{grid}flops_per_s" for stages in ("", "one_stage_")
             for prefix in ("", "a_resident_") for grid in ("", "one_per_sm_")}
    assert all(set(dot) == {"m", "n", "k", "num_warps"} | rates for dot in blocks["dot"])
    assert all(dot[rate] > 0 for dot in blocks["dot"] for rate in rates)
    pointwise = {f"{name}{grid}_elements_per_s" for name in ("exp", "fma", "row_reduce", "row_sum")
                 for grid in ("", "_one_per_sm")}
    assert set(blocks["pointwise"]) == pointwise
    assert all(rate > 0 for rate in blocks["pointwise"].values())
    patterns = {f"{pattern}_{direction}" for pattern in ("token", "token_masked", "state")
                for direction in ("read", "write")}
    patterns |= {"token_read_one_per_sm", "token_masked_read_one_per_sm", "l2_read"}
    assert set(blocks["memory"]) == {f"{pattern}_bytes_per_s" for pattern in patterns}
    assert set(blocks["memory_patterns"]) == {"token", "token_masked", "state"}
    assert set(blocks["launch"]) == {"launch_s", "program_s"}
    assert set(blocks["spills"]) == {"local_bytes_per_s", "spill_bytes_per_thread", "spill_seconds"}
    loops = [(loop["num_warps"], loop["width"]) for loop in blocks["spill_loops"]["loops"]]
    assert loops == [(1, 16), (1, 32), (1, 64)]
    assert all(loop["seconds"] > 0 for loop in blocks["spill_loops"]["loops"])
    assert blocks["spill_loops"]["rates"] == []  # the interpreter compiles nothing: no spills to time
    assert [(walk["kind"], walk["l"], walk["dqk"], walk["dv"]) for walk in blocks["walk"]] == [
        ("state", 16, 16, 32), ("fused", 16, 16, 32), ("fused_exp", 16, 16, 32), ("recurrence", 16, 16, 32),
        ("recurrence_exp", 16, 16, 32)]
    assert all(walk["step_s"] > 0 for walk in blocks["walk"])
    assert all(walk["levels"] == [] for walk in blocks["walk"])  # the interpreter's launches keep no levels
    assert blocks["issue"] == {"walk": ["state", 16, 16, 32, 4, 1], "steps": 2, "levels": []}  # no SASS
    assert blocks["seconds"] > 0


def test_spill_loop_rates_are_the_bytes_over_the_time_above_the_spill_free_line():
    """The loops without spills give the time per carried column (least squares); a spilling loop's excess
    over that line is the time of its spills, and the rate is the SM's spilled bytes (local bytes x threads
    x trips x programs per SM) over it. Loops that do not spill, or do not exceed the line, give no rate."""
    def loop(width, seconds, local=0, stack=0):
        return {"num_warps": 8, "programs_per_sm": 2, "width": width, "seconds": seconds,
                "stack_bytes": stack, "loop_local_bytes": local, "loop_load_bytes": local * 5 // 8}

    line = {64: 0.75e-3, 128: 1.0e-3, 256: 1.5e-3, 512: 2.5e-3}  # 0.5 ms + 3.9 us per column
    timed = [loop(64, line[64] + 1e-5), loop(128, line[128] - 2e-5), loop(256, line[256] + 1e-5),
             loop(512, line[512] + 4e-3, local=704, stack=408), loop(1024, line[512], local=2760, stack=1440)]
    [rate] = calibrate_blocks.spill_loop_rates(timed, trips=64)
    threads = 32 * 8 * 2
    assert rate["width"] == 512 and rate["warps_per_sm"] == 16
    assert rate["stack_bytes_per_sm"] == 408 * threads
    assert rate["bytes_per_s_per_sm"] == pytest.approx(704 * threads * 64 / 4e-3, rel=0.01)
    assert rate["load_bytes_per_s_per_sm"] == pytest.approx(440 * threads * 64 / 4e-3, rel=0.01)
    no_loads = [{key: value for key, value in item.items() if key != "loop_load_bytes"} for item in timed]
    assert "load_bytes_per_s_per_sm" not in calibrate_blocks.spill_loop_rates(no_loads, trips=64)[0]
    assert calibrate_blocks.spill_loop_rates(timed[3:], trips=64) == []  # no line without spill-free loops


def test_the_spill_loop_carries_its_tile_through_the_products():
    """`_spill_loop_kernel` against float64: acc <- A[t] B + acc, carried <- 0.999 carried + rowsum(acc),
    acc <- acc / 2 + rowsum(carried) 1e-6 each trip; out = rowsum(acc) + rowsum(carried) per program."""
    slots, rows, cols, inner, width, trips, programs = 3, 16, 16, 16, 32, 5, 2
    a = torch.rand(slots * rows * inner)
    b = torch.rand(inner * cols)
    out = torch.empty(programs * rows)
    calibrate_blocks._spill_loop_kernel[(programs,)](a, b, out, trips, slots, ROWS=rows, COLS=cols,
                                                     INNER=inner, WIDTH=width, num_warps=1)
    a64, b64 = a.double().view(slots, rows, inner), b.double().view(inner, cols)
    for pid in range(programs):
        acc = torch.zeros(rows, cols, dtype=torch.float64)
        carried = torch.full((rows, width), float(pid), dtype=torch.float64)
        for trip in range(trips):
            acc = a64[trip % slots] @ b64 + acc
            carried = carried * 0.999 + acc.sum(1, keepdim=True)
            acc = acc * 0.5 + carried.sum(1, keepdim=True) * 1e-6
        expected = acc.sum(1) + carried.sum(1)
        torch.testing.assert_close(out[pid * rows:(pid + 1) * rows].double(), expected, rtol=1e-4, atol=0)


@pytest.mark.parametrize("a_resident, b_resident", [(False, False), (True, False), (True, True)])
def test_the_dot_benchmark_accumulates_the_products_of_its_slots(a_resident, b_resident):
    """`_dot_kernel`: program p's accumulator is the sum over its iterations of a[s] @ b[s],
    s = (p + it) mod SLOTS, with a[p mod SLOTS] (b[p mod SLOTS]) in every product where A_RESIDENT
    (B_RESIDENT); against float64."""
    slots, m, n, k, iters, programs = 3, 16, 32, 16, 5, 2
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(slots, m, k, generator=gen), torch.randn(slots, k, n, generator=gen)
    out = torch.empty(programs)
    calibrate_blocks._dot_kernel[(programs,)](a, b, out, iters, slots, M=m, N=n, K=k, NUM_STAGES=1,
                                              A_RESIDENT=a_resident, B_RESIDENT=b_resident)
    a64, b64 = a.double(), b.double()

    def product(p, it):
        slot = (p + it) % slots
        return (a64[p % slots if a_resident else slot] @ b64[p % slots if b_resident else slot]).sum()

    expected = [sum(product(p, it) for it in range(iters)) for p in range(programs)]
    assert torch.allclose(out.double(), torch.tensor(expected), rtol=1e-4)


@pytest.mark.parametrize("head_dim", [16, 12])
def test_the_token_stream_reads_and_writes_only_the_columns_of_its_head_dim(head_dim):
    """`_tile_stream_kernel` over the token pattern ([rows, 16] tiles, the columns past a head dim of 12
    masked): program p sums exactly the tiles of its (batch, head) stream (against float64), the byte count
    is that of the existing columns, and stores leave every other element as it was."""
    sizes = calibrate_blocks.BlockSizes.tiny()
    pattern = calibrate_blocks._token_pattern(sizes, 4, head_dim=head_dim)
    assert (pattern.cols, pattern.row_elements) == (16, head_dim)
    batch, heads = pattern.outer, pattern.inner
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(batch, pattern.tiles * pattern.rows, heads, head_dim, generator=gen)
    sums = torch.empty(pattern.programs)
    calibrate_blocks._tile_stream_kernel[(pattern.programs,)](
        x, x, sums, pattern.tiles, pattern.inner, pattern.outer_stride, pattern.inner_stride,
        pattern.col_blocks, pattern.row_stride, pattern.tile_stride, ROWS=pattern.rows, COLS=pattern.cols,
        DIM=pattern.row_elements, WRITE=False)
    expected = x.double().sum(dim=(1, 3)).flatten()
    assert torch.allclose(sums.double(), expected, rtol=1e-5, atol=1e-5)
    assert pattern.elements == x.numel()
    padded = torch.randn(x.numel() + pattern.cols, generator=gen)
    before = padded.clone()
    calibrate_blocks._tile_stream_kernel[(pattern.programs,)](
        padded, padded, sums, pattern.tiles, pattern.inner, pattern.outer_stride, pattern.inner_stride,
        pattern.col_blocks, pattern.row_stride, pattern.tile_stride, ROWS=pattern.rows, COLS=pattern.cols,
        DIM=pattern.row_elements, WRITE=True)
    written = padded[:x.numel()] == 0
    assert written.all() and torch.equal(padded[x.numel():], before[x.numel():])


def _walk_reference(kind, q, k, v, gate, steps):
    """(state, last h, the states and normalizers before each step) of `_walk_kernel`'s program 0 in
    float64: the kernels' step, written out."""
    logsig = torch.nn.functional.logsigmoid
    slots, chunk, dqk = q.shape
    causal = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    state = torch.zeros(dqk, v.shape[-1], dtype=torch.float64)
    norm, m_state, last_h = torch.zeros(dqk, dtype=torch.float64), 0.0, None
    states, norms = [], []
    for step in range(steps):
        slot = step % slots
        qs, ks, vs = (x[slot].double() for x in (q, k, v))
        first, second = (row.reshape(slots, chunk)[slot].double() for row in gate)
        states.append(state)
        norms.append(norm)
        if kind in calibrate_blocks.STATE_WALKS:
            b, ig = first, second
        else:
            b, ig = logsig(first).cumsum(0), logsig(second) if kind == "fused" else second
        decay = b[-1]
        m_next = 0.0
        if kind == "fused":
            gates = torch.where(causal, torch.exp(b[:, None] - b[None, :] + ig[None, :]), 0.0)
            last_h = (qs * torch.exp(b)[:, None] * 0.125) @ state + (qs @ ks.T * 0.125 * gates) @ vs
        elif kind == "fused_exp":
            m_inter = b + m_state
            m_comb = torch.maximum(m_inter, b + torch.cummax(ig - b, 0).values)
            q_gate = torch.exp(m_inter - m_comb) * 0.125
            log_gates = b[:, None] - m_comb[:, None] - b[None, :] + ig[None, :]
            scores = qs @ ks.T * 0.125 * torch.where(causal, torch.exp(log_gates), 0.0)
            n = q_gate * (qs @ norm) + scores.sum(1)
            denom = torch.maximum(n.abs(), torch.exp(-m_comb)) + 1e-6
            last_h = ((qs * q_gate[:, None]) @ state + scores @ vs) / denom[:, None]
            m_next = max(decay + m_state, (decay - b + ig).max()).item()
        elif kind == "recurrence_exp":
            m_next = max(decay + m_state, gate[1, slot].double()).item()  # gate[1] stands in for a
        scale = torch.exp(decay + m_state - m_next)
        weighted = ks * torch.exp(decay - b + ig - m_next)[:, None]
        state = state * scale + weighted.T @ vs
        norm = norm * scale + weighted.sum(0)
        m_state = m_next
    return state, last_h, torch.stack(states), torch.stack(norms)


def _run_walk(kind, q, k, v, gate, steps, side=0):
    """`_walk_kernel` for ``kind`` with one program (interpreter): (out, h, states, norms)."""
    slots, chunk, dqk = q.shape
    dv = v.shape[-1]
    h, out = torch.zeros(1, chunk, dv), torch.zeros(1)
    states, norms = torch.full((steps, dqk, dv), torch.nan), torch.full((steps, dqk), torch.nan)
    calibrate_blocks._walk_kernel[(1,)](
        q, k, v, gate, h, states, norms, out, steps, slots, L=chunk, DQK=dqk, DV=dv,
        **calibrate_blocks.walk_flags(kind), NUM_STAGES=1, SIDE=side)
    return out, h, states, norms


@pytest.mark.parametrize("kind", ["state", "fused", "fused_exp", "recurrence", "recurrence_exp"])
def test_the_walk_microbenchmark_computes_the_recurrence_it_times(kind):
    """`_walk_kernel` (interpreter, fp32): the state after the steps, the last step's h of a fused walk and
    the states (and mLSTMexp's normalizers) a recurrence walk stores before each step equal the same
    recurrence in float64, so the timed steps do the work they stand for."""
    torch.manual_seed(0)
    slots, chunk, dqk, dv, steps = 2, 16, 16, 32, 3
    q, k = torch.randn(slots, chunk, dqk) / 8, torch.randn(slots, chunk, dqk) / 8
    v = torch.randn(slots, chunk, dv)
    gate = calibrate_blocks._walk_gates(kind, slots, chunk, "cpu")
    out, h, states, norms = _run_walk(kind, q, k, v, gate, steps)
    state, last_h, stored_states, stored_norms = _walk_reference(kind, q, k, v, gate, steps)
    assert out.item() == pytest.approx(state.sum().item(), rel=1e-4)
    if last_h is not None:
        torch.testing.assert_close(h[0].double(), last_h, rtol=1e-4, atol=1e-5)
    if kind in calibrate_blocks.RECURRENCE_WALKS:
        assert stored_states[1:].abs().sum() > 0  # the steps after the first store nonzero states
        torch.testing.assert_close(states.double(), stored_states, rtol=1e-4, atol=1e-5)
    if kind == "recurrence_exp":
        assert stored_norms[1:].abs().sum() > 0
        torch.testing.assert_close(norms.double(), stored_norms, rtol=1e-4, atol=1e-5)


def test_the_state_walks_side_work_leaves_the_state_and_does_its_rounds():
    """`_walk_kernel` with SIDE rounds (interpreter, fp32): the state is the walk's without them, and the
    side tile's sum is SIDE rounds of side <- 0.999 side + b[L-1] per step, from distinct start values."""
    torch.manual_seed(1)
    slots, chunk, dqk, dv, steps, rounds = 2, 16, 16, 32, 3, 4
    q, k = torch.randn(slots, chunk, dqk) / 8, torch.randn(slots, chunk, dqk) / 8
    v = torch.randn(slots, chunk, dv)
    gate = calibrate_blocks._walk_gates("state", slots, chunk, "cpu")
    out, h, _, _ = _run_walk("state", q, k, v, gate, steps, side=rounds)
    state, *_ = _walk_reference("state", q, k, v, gate, steps)
    assert out.item() == pytest.approx(state.sum().item(), rel=1e-4)
    start = torch.arange(chunk, dtype=torch.float64)[:, None] + torch.arange(dv, dtype=torch.float64) * 0.001
    side = start
    for step in range(steps):
        decay = gate[0, (step % slots) * chunk + chunk - 1].double()
        for _ in range(rounds):
            side = side * 0.999 + decay
    assert h[0, 0, 0].item() == pytest.approx(side.sum().item(), rel=1e-5)
    assert side.sum().item() != pytest.approx(start.sum().item(), rel=1e-3)  # the rounds change it


def test_the_gradient_walk_computes_the_loop_it_times():
    """`_gradient_walk_kernel` (interpreter, fp32): program p's accumulator is the sum over its trips of
    (S^T * dP^T * exp(S^T)) q, S^T = k q^T, dP^T = v dh^T, with k and v of slot p and q and dh of slot
    (p + trip) mod SLOTS; against float64."""
    gen = torch.Generator().manual_seed(5)
    slots, chunk, dqk, dv, steps, programs = 3, 16, 16, 32, 4, 2
    q, k = (torch.randn(slots, chunk, dqk, generator=gen) / 8 for _ in range(2))
    v, dh = (torch.randn(slots, chunk, dv, generator=gen) / 8 for _ in range(2))
    out = torch.zeros(programs)
    calibrate_blocks._gradient_walk_kernel[(programs,)](q, k, v, dh, out, steps, slots, L=chunk, DQK=dqk,
                                                        DV=dv, NUM_STAGES=1)
    q64, k64, v64, dh64 = (x.double() for x in (q, k, v, dh))
    for pid in range(programs):
        acc = torch.zeros(chunk, dqk, dtype=torch.float64)
        for step in range(steps):
            slot = (pid + step) % slots
            scores_t = k64[pid % slots] @ q64[slot].T
            acc += (scores_t * (v64[pid % slots] @ dh64[slot].T) * scores_t.exp()) @ q64[slot]
        assert out[pid].item() == pytest.approx(acc.sum().item(), rel=1e-4)
    sizes = replace(calibrate_blocks.BlockSizes.tiny(), issue_walk=("gradient", 16, 16, 32, 4, 1))
    timer = calibrate_blocks.Timer.of(sizes)
    issue = calibrate_blocks.measure_issue(sizes, calibrate_blocks.DeviceLimits.of(sizes.device), timer)
    assert issue["walk"] == ["gradient", 16, 16, 32, 4, 1] and issue["levels"] == []  # the CPU times nothing


def test_the_gpu_sizes_cover_the_kernels_tiles():
    shapes = {(m, n, k) for m, n, k, _ in calibrate_blocks.BlockSizes().dot_shapes}
    assert {(64, 128, 64), (64, 128, 128), (64, 64, 128), (128, 128, 128)} <= shapes


def test_blocks_are_stored_beside_the_ceilings(tmp_path, monkeypatch):
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    ceilings = hardware.Ceilings(7e14, 3e12, "measured 2026-01-01 test")
    assert hardware.load_calibration_blocks("h100") is None
    hardware.save_measured_ceilings("h100", ceilings)
    assert hardware.load_calibration_blocks("h100") is None
    hardware.save_measured_ceilings("h100", ceilings, {"dot": []})
    assert hardware.load_measured_ceilings("h100") == ceilings
    assert hardware.load_calibration_blocks("h100") == {"dot": []}
    record = json.loads((tmp_path / "h100-sxm.json").read_text())
    assert set(record) == {"gpu", "dtype", "flops", "bandwidth", "source", "blocks"}
    provenance = {"git": {"commit": "abc"}, "command": "tflabench calibrate"}
    hardware.save_measured_ceilings("h100", ceilings, {"dot": []}, provenance)
    assert json.loads((tmp_path / "h100-sxm.json").read_text())["provenance"] == provenance

def test_the_timer_can_hide_the_launch_behind_a_gpu_sleep():
    """`BlockSizes.hide_launch` reaches the timer; on the CPU it changes nothing (the wall clock times the
    call itself)."""
    assert calibrate_blocks.Timer.of(calibrate_blocks.BlockSizes(hide_launch=True)).hide_launch
    assert not calibrate_blocks.Timer.of(calibrate_blocks.BlockSizes.tiny()).hide_launch
    timer = calibrate_blocks.Timer("cpu", repeats=3, warmup=0, hide_launch=True)
    assert timer(lambda: sum(range(1000))) > 0


def test_the_timer_can_flush_as_the_harness_does():
    """`BlockSizes.flush_bytes` reaches the timer; on the CPU it changes nothing (no flush buffer)."""
    assert calibrate_blocks.Timer.of(calibrate_blocks.BlockSizes(flush_bytes=2**20)).flush_bytes == 2**20
    assert calibrate_blocks.Timer.of(calibrate_blocks.BlockSizes.tiny()).flush_bytes == 0
    timer = calibrate_blocks.Timer("cpu", repeats=3, warmup=0, flush_bytes=2**20)
    assert timer(lambda: sum(range(1000))) > 0


@pytest.mark.gpu
def test_the_flushed_timer_hides_the_launch_and_evicts_the_l2():
    """Timed as the harness times a call, a tiny launch times less than on an idle GPU (its issue is hidden
    behind the flush), and a read of a 16 MB buffer, L2-resident after the warm-up, takes longer than with
    the launch hidden behind a sleep (the flush evicted it)."""
    x = torch.zeros(16, device="cuda")
    flushed = calibrate_blocks.Timer("cuda", repeats=20, flush_bytes=256 * 10**6)
    assert flushed(lambda: x.add_(1)) < calibrate_blocks.Timer("cuda", repeats=20)(lambda: x.add_(1))
    buffer = torch.ones(4 * 2**20, device="cuda")
    hidden = calibrate_blocks.Timer("cuda", repeats=20, hide_launch=True)
    assert flushed(lambda: buffer.sum()) > hidden(lambda: buffer.sum())


@pytest.mark.gpu
def test_a_hidden_launch_is_not_timed():
    """With the launch's issue hidden behind a GPU sleep, a tiny launch times less than on an idle GPU, whose
    sample waits for the CPU to issue it."""
    x = torch.zeros(16, device="cuda")
    plain = calibrate_blocks.Timer("cuda", repeats=20)(lambda: x.add_(1))
    hidden = calibrate_blocks.Timer("cuda", repeats=20, hide_launch=True)(lambda: x.add_(1))
    assert hidden < plain
