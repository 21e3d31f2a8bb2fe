"""Side-by-side GPU benchmark: our TFLA kernels vs mlstm_kernels 2.0.6 (the reference TFLA kernels).

Issue 3's configuration (TFLA paper Fig. 4 at S = 8192): B = 8, S = 8192, 16 heads, Dqk = 128, Dv = 256,
bf16. Times the forward and forward+backward passes with triton.testing.do_bench (CUDA events, median,
L2 flushed before every call), records the peak memory increase over the inputs, measures the GPU's
matmul and copy ceilings for the Eq. 116 model fraction, and first checks every kernel in bf16 against
the float64 chunkwise reference at a real size. mlstm_kernels' mLSTMexp xl_chunk aborts the Triton 3.6
compiler on Hopper, so every reference configuration runs in a child process.

Usage: python scripts/bench_tfla_vs_reference.py --out results/h200/tfla-vs-reference [--chunks 64,128,256]
       [--seq-len 65536 --tilings default,state-v64,state-32x64]  (Fig. 4's long end: B = 65536 / S)
       [--fig14-head-dim 256 --tilings default,out-s1 --reference-variants ""]  (Fig. 14 at d = 256)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton

FIG4 = dict(batch=8, seq_len=8192, heads=16, head_dim_qk=128, head_dim_v=256)
TOKENS = 65536
#: the configuration timed: Fig. 4 at --seq-len (65,536 tokens per batch)
CONFIG = dict(FIG4)


def set_seq_len(seq_len: int) -> None:
    if seq_len < 256 or TOKENS % seq_len:
        raise SystemExit(f"--seq-len must divide {TOKENS} and be at least 256, got {seq_len}")
    CONFIG.update(seq_len=seq_len, batch=TOKENS // seq_len)


def set_fig14_head_dim(head_dim: int) -> None:
    """The configuration of TFLA Fig. 14 (the tfla-headdim preset) at one head dim: B 4, T 8192,
    heads = 4096 / head_dim, Dqk = Dv = head_dim."""
    if head_dim < 16 or head_dim & (head_dim - 1) or head_dim > 4096:
        raise SystemExit(f"--fig14-head-dim must be a power of two from 16 to 4096, got {head_dim}")
    CONFIG.update(batch=4, seq_len=8192, heads=4096 // head_dim, head_dim_qk=head_dim, head_dim_v=head_dim)


def make_inputs(layout: str, batch, seq_len, heads, head_dim_qk, head_dim_v, dtype=torch.bfloat16, seed=0):
    """Fresh random inputs. layout "bthd" (ours) or "bhtd" (mlstm_kernels). Gates [B, T, H] or [B, H, T]."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=gen, dtype=torch.float32).to(dtype)

    if layout == "bthd":
        q, k = randn(batch, seq_len, heads, head_dim_qk), randn(batch, seq_len, heads, head_dim_qk)
        v = randn(batch, seq_len, heads, head_dim_v)
        i, f = randn(batch, seq_len, heads), randn(batch, seq_len, heads)
    else:
        q, k = randn(batch, heads, seq_len, head_dim_qk), randn(batch, heads, seq_len, head_dim_qk)
        v = randn(batch, heads, seq_len, head_dim_v)
        i, f = randn(batch, heads, seq_len), randn(batch, heads, seq_len)
    f = (f.float() + 3.0).to(dtype)  # forget gates mostly open, as in trained models
    return q, k, v, i, f


#: Tiling candidates (chunk filled in per run); keys are Tiling fields, plus "state_dtype" ("float32"
#: stores the materialized states in fp32 like the reference: an ablation at equal state bytes).
TILINGS = {
    "default": dict(),
    "fp32states": dict(state_dtype="float32"),
    "state-w8": dict(state_num_warps=8),
    "state-bl32": dict(block_state=32),
    "state-bl128": dict(block_state=128),
    "out-kv32": dict(out_block_kv=32),
    "out-kv64": dict(out_block_kv=64),
    "fused-dkdv": dict(fused_dkdv=True),
    # next candidates (not measured yet): fewer re-reads of k and v by the state kernel, one q tile per chunk
    "state-128x128": dict(state_block_qk=128, state_block_v=128),
    "state-128x128-w8": dict(state_block_qk=128, state_block_v=128, state_num_warps=8),
    "out-q128-kv32-w8": dict(block_q=128, out_block_kv=32, out_num_warps=8),
    # one output program per (q tile, chunk) over all of Dv = 256: the scores Q K^T computed once, not twice
    "out-v256": dict(out_block_v=256),
    "out-v256-w8": dict(out_block_v=256, out_num_warps=8),
    # the backward's dV kernel over all of Dv = 256: K Q^T computed once per key tile, not twice (the
    # default since v5, results/perf-log.md); dv-v128 is the v4 default
    "dv-v256": dict(dv_block_v=256),
    "dv-v128": dict(dv_block_v=128),
    "out-dv-v256-w8": dict(out_block_v=256, out_num_warps=8, dv_block_v=256, num_warps=8),
    # three output programs per SM instead of two (scripts/kernel_resources.py: 64 KB shared, 168 registers
    # against 112 KB / 210), with the backward's parallel kernels at one stage too (measured slower,
    # results/perf-log.md v5)
    "out-kv32-s1": dict(out_block_kv=32, num_stages=1, out_num_stages=1),
    # the output kernel's warps and tiles (scripts/kernel_resources.py at 128/256, L 128: default 4 warps
    # 112.5 KB / 210 registers; w8 112.5 KB / 156; v64 80.5 KB / 156; v64-w8 80.5 KB / 128; q128-kv64-w8
    # 128.5 KB / 193, its block_q applies to the backward's parallel kernels too)
    "out-w8": dict(out_num_warps=8),
    "out-v64": dict(out_block_v=64),
    "out-v64-w8": dict(out_block_v=64, out_num_warps=8),
    "out-q128-kv64-w8": dict(block_q=128, out_block_kv=64, out_num_warps=8),
    # both query tiles of an L = 128 chunk in one output program: its state tile read once, not twice
    # (Nsight Compute, results/perf-log.md v5: the output kernel runs L2 at 80 % of its throughput, DRAM at
    # 50 %)
    "out-q2": dict(out_q_tiles=2),
    "out-q1": dict(out_q_tiles=1),
    # Dqk = Dv = 256 (Fig. 14), L 128: the output kernel needs 192.5 KB of shared memory at 2 stages (one
    # program per SM); 96 KB with one stage, 64 KB with one stage and one query tile, 112 KB at 2 stages
    # with one query tile and 32-row key/value tiles
    "out-s1": dict(out_num_stages=1),
    "out-s1-q1": dict(out_num_stages=1, out_q_tiles=1),
    "out-kv32-q1": dict(out_block_kv=32, out_q_tiles=1),
    # long sequences, small batch: more state-kernel programs for the sequential recurrence over chunks
    "state-v64": dict(state_block_v=64),
    "state-32x64": dict(state_block_qk=32, state_block_v=64),
    "state-s2": dict(state_num_stages=2),
}


def tiling_for(variant: str, chunk: int, tiling_name: str):
    """(Tiling, materialized-state dtype) of a TILINGS candidate: the kernels' default with its changes."""
    from tflabench.kernels.mlstm.xl_chunk import Tiling

    options = dict(TILINGS[tiling_name])
    state_dtype = getattr(torch, options.pop("state_dtype", "bfloat16"))
    default = Tiling.default(chunk, CONFIG["head_dim_qk"], CONFIG["head_dim_v"], variant=variant)
    return dataclasses.replace(default, **options), state_dtype


def ours(variant: str, chunk: int, tiling_name: str = "default"):
    from tflabench.kernels.mlstm.xl_chunk import mlstm_xl_chunk

    tiling, state_dtype = tiling_for(variant, chunk, tiling_name)

    def run(q, k, v, i, f):
        return mlstm_xl_chunk(q, k, v, i, f, variant=variant, chunk_size=chunk, normalize=False, eps=1e-6,
                              tiling=tiling, state_dtype=state_dtype)

    return run


def forward_breakdown(variant: str, chunk: int, tiling_name: str, inputs) -> dict:
    """Times (ms) of the forward launches: gate cumsums, chunk states, outputs (by difference)."""
    from tflabench.kernels.mlstm import xl_chunk

    tiling, state_dtype = tiling_for(variant, chunk, tiling_name)
    q, k, v, i, f = inputs
    sig = variant == "sig"
    gates = xl_chunk._gate_cumsums(i, f, tiling, sig)
    gate_ms = triton.testing.do_bench(lambda: xl_chunk._gate_cumsums(i, f, tiling, sig), rep=100)
    state_ms = triton.testing.do_bench(
        lambda: xl_chunk._chunk_states(k, v, *gates, None, tiling, not sig, not sig, state_dtype), rep=100)
    total_ms = triton.testing.do_bench(
        lambda: xl_chunk._forward(q, k, v, i, f, None, tiling, sig, not sig, 1e-6, state_dtype), rep=100)
    return dict(gates_ms=gate_ms, states_ms=state_ms, outputs_ms=total_ms - gate_ms - state_ms)


#: largest relative difference of a candidate tiling's output or gradients from the default tiling's (bf16
#: rounding in another order stays near 1e-3; Triton 3.6 miscompiles some tilings on Hopper,
#: results/gpu-tests/2026-11-22-grid-miscompile-and-fix/README.md)
AGREEMENT_BOUND = 1e-2


def outputs_and_gradients(run, inputs, mode: str) -> list[torch.Tensor]:
    """[h] for fwd; [h, dq, dk, dv, di, df] for fwdbw with a fixed output gradient."""
    leaves = [x.detach().requires_grad_(mode == "fwdbw") for x in inputs]
    h = run(*leaves)
    if mode == "fwd":
        return [h.detach()]
    gen = torch.Generator(device=h.device).manual_seed(7)
    h.backward(torch.randn(h.shape, device=h.device, generator=gen, dtype=torch.float32).to(h.dtype))
    return [h.detach()] + [leaf.grad for leaf in leaves]


def disagreement(candidate: list[torch.Tensor], default: list[torch.Tensor]) -> float:
    return max(rel_err(x, y.double()) for x, y in zip(candidate, default, strict=True))


def tune(chunks, variants, tilings) -> list[dict]:
    """Our kernels at every (variant, chunk, tiling, mode): result rows like the reference rows. A tiling
    other than the default is timed only after its output (and, in fwdbw, gradients) agree with the
    default tiling's on the same inputs within AGREEMENT_BOUND; the default's correctness at this size is
    the kernel GPU tests' (and check_ours')."""
    inputs = make_inputs("bthd", **CONFIG)
    rows = []
    for variant in variants:
        for chunk in chunks:
            for mode in ("fwd", "fwdbw"):
                default = outputs_and_gradients(ours(variant, chunk), inputs, mode)
                for name in tilings:
                    row = dict(kernel=f"tflabench.{variant}.xl_chunk", variant=variant, chunk=chunk,
                               tiling=name, mode=mode)
                    try:
                        run = ours(variant, chunk, name)
                        difference = disagreement(outputs_and_gradients(run, inputs, mode), default)
                        row["vs_default"] = difference
                        if not difference <= AGREEMENT_BOUND:
                            row.update(status="wrong", reason=f"differs from the default tiling by "
                                       f"{difference:.3g} (bound {AGREEMENT_BOUND:g})")
                        else:
                            row.update(status="ok", **measure(run, inputs, mode))
                            if mode == "fwd":
                                row.update(forward_breakdown(variant, chunk, name, inputs))
                    except Exception as exc:  # out of shared memory / registers for this tiling
                        row.update(status="error", reason=f"{type(exc).__name__}: {str(exc)[:160]}")
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    torch.cuda.empty_cache()
                del default
    return rows


def reference(variant: str, chunk: int):
    if variant == "sig":
        from mlstm_kernels.torch.chunkwise.triton_xl_chunk_siging import mlstm_siging_chunkwise__xl_chunk

        def run(q, k, v, i, f):
            return mlstm_siging_chunkwise__xl_chunk(q, k, v, i, f, chunk_size=chunk, normalize=False)
    else:
        from mlstm_kernels.torch.chunkwise.triton_xl_chunk import mlstm_chunkwise__xl_chunk

        def run(q, k, v, i, f):
            return mlstm_chunkwise__xl_chunk(q, k, v, i, f, chunk_size=chunk)
    return run


def measure(run, inputs, mode: str) -> dict:
    """Median and IQR (ms) over do_bench repeats, and the peak memory increase (MiB) of one call."""
    if mode == "fwdbw":
        leaves = [x.detach().requires_grad_() for x in inputs]
        grad_out = torch.randn_like(run(*leaves))

        def call():
            for x in leaves:
                x.grad = None
            run(*leaves).backward(grad_out)
    else:
        leaves = inputs

        def call():
            with torch.no_grad():
                run(*leaves)

    start = time.perf_counter()
    call()
    torch.cuda.synchronize()
    warmup_s = time.perf_counter() - start
    q25, median, q75 = triton.testing.do_bench(call, warmup=25, rep=200, quantiles=[0.25, 0.5, 0.75])
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    peak_mib = (torch.cuda.max_memory_allocated() - base) / 2**20
    return dict(time_ms=median, q25_ms=q25, q75_ms=q75, peak_mib=peak_mib, warmup_s=warmup_s)


def ceilings() -> dict:
    """Achievable bf16 matmul FLOP/s (8192^3) and device-copy bandwidth (1 GiB, read + write)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_ms = triton.testing.do_bench(lambda: a @ b, warmup=25, rep=200)
    src = torch.randn(2**28, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200)
    return dict(flops=2 * 8192**3 / (mm_ms * 1e-3), bandwidth=2 * src.numel() * 4 / (copy_ms * 1e-3))


def rel_err(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def _heads_and_dims() -> tuple[int, int, int]:
    return CONFIG["heads"], CONFIG["head_dim_qk"], CONFIG["head_dim_v"]


def check_ours(variant: str, chunk: int, seq_len=8192) -> dict:
    """bf16 kernel vs float64 chunkwise reference (kernel gradient convention), B = 1, real size: the
    configuration's heads and head dims."""
    from tflabench.kernels.mlstm.reference import mlstm_chunkwise

    q, k, v, i, f = make_inputs("bthd", 1, seq_len, *_heads_and_dims(), seed=1)
    leaves = [x.detach().requires_grad_() for x in (q, k, v, i, f)]
    h = ours(variant, chunk)(*leaves)
    dh = torch.randn_like(h)
    h.backward(dh)
    ref_leaves = [x.detach().double().requires_grad_() for x in (q, k, v, i, f)]
    h_ref = mlstm_chunkwise(*ref_leaves, variant=variant, chunk_size=256, detach_normalizer=True)
    h_ref.backward(dh.double())
    errors = {"h": rel_err(h, h_ref.detach())}
    for name, leaf, ref_leaf in zip("qkvif", leaves, ref_leaves, strict=True):
        errors["d" + name] = rel_err(leaf.grad, ref_leaf.grad)
    errors["finite"] = bool(all(torch.isfinite(x.grad).all() for x in leaves) and torch.isfinite(h).all())
    return errors


def run_reference_child(variant: str, chunk: int, mode: str) -> dict:
    """One reference configuration in a child process (survives compiler aborts)."""
    cmd = [sys.executable, __file__, "--child", f"{variant},{chunk},{mode}",
           "--seq-len", str(CONFIG["seq_len"])]
    if CONFIG["head_dim_qk"] != FIG4["head_dim_qk"] or CONFIG["head_dim_v"] != FIG4["head_dim_v"]:
        cmd += ["--fig14-head-dim", str(CONFIG["head_dim_v"])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return dict(status=f"crash (exit {proc.returncode})", reason=" | ".join(tail)[-300:])


def check_reference(variant: str, chunk: int, seq_len=8192) -> float:
    """Relative error of the reference kernel's forward output (bf16, B = 1, real size) against our float64
    chunkwise reference: the timings of a kernel are only compared once it computes the right function."""
    from tflabench.kernels.mlstm.reference import mlstm_chunkwise

    q, k, v, i, f = make_inputs("bhtd", 1, seq_len, *_heads_and_dims(), seed=1)
    with torch.no_grad():
        h = reference(variant, chunk)(q, k, v, i, f)
        token_major = [x.transpose(1, 2).double() for x in (q, k, v, i, f)]
        h_ref = mlstm_chunkwise(*token_major, variant=variant, chunk_size=256)
    return rel_err(h.transpose(1, 2), h_ref)


def child(spec: str) -> None:
    variant, chunk, mode = spec.split(",")
    check = check_reference(variant, int(chunk)) if mode == "fwd" else None
    torch.cuda.empty_cache()
    inputs = make_inputs("bhtd", **CONFIG)
    result = measure(reference(variant, int(chunk)), inputs, mode)
    print("RESULT " + json.dumps(dict(status="ok", check_rel_error=check, **result)), flush=True)


def model_ms(variant: str, chunk: int, ceil: dict, mode: str) -> float | None:
    try:
        from tflabench.analysis.hardware import Ceilings
        from tflabench.analysis.models import kernel_cost
        from tflabench.analysis.roofline import runtime_additive
    except ImportError:
        return None
    cost = kernel_cost(f"mlstm_{variant}", **CONFIG, chunk_size=chunk, mode=mode)
    return 1e3 * runtime_additive(cost, Ceilings(ceil["flops"], ceil["bandwidth"], "measured"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="results/h200/tfla-vs-reference")
    parser.add_argument("--chunks", default="64,128,256,512")
    parser.add_argument("--tilings", default="default", help=f"comma list of {', '.join(TILINGS)}")
    parser.add_argument("--variants", default="sig,exp")
    parser.add_argument("--reference-variants", default="sig", help="exp aborts the compiler on Triton 3.6")
    parser.add_argument("--reference-chunks", default="64,128,256")
    parser.add_argument("--skip-check", action="store_true")
    parser.add_argument("--seq-len", type=int, default=FIG4["seq_len"],
                        help=f"sequence length; batch = {TOKENS} / seq_len (Fig. 4)")
    parser.add_argument("--fig14-head-dim", type=int,
                        help="time TFLA Fig. 14's configuration at this head dim instead (B 4, T 8192, "
                             "heads 4096 / d, Dqk = Dv = d)")
    parser.add_argument("--child")
    args = parser.parse_args()
    set_seq_len(args.seq_len)
    if args.fig14_head_dim:
        set_fig14_head_dim(args.fig14_head_dim)
    if args.child:
        return child(args.child)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ceil = ceilings()
    print(f"ceilings: {ceil['flops'] / 1e12:.0f} TFLOP/s bf16, {ceil['bandwidth'] / 1e12:.2f} TB/s",
          flush=True)
    checks = {}
    if not args.skip_check:
        for variant in args.variants.split(","):
            for chunk in (64, 256):
                checks[f"{variant}-L{chunk}"] = check_ours(variant, chunk)
                print(f"check {variant} L={chunk}: {checks[f'{variant}-L{chunk}']}", flush=True)
        torch.cuda.empty_cache()
    chunks = [int(c) for c in args.chunks.split(",")]
    rows = tune(chunks, args.variants.split(","), args.tilings.split(","))
    torch.cuda.empty_cache()
    for variant in filter(None, args.reference_variants.split(",")):
        for chunk in (int(c) for c in args.reference_chunks.split(",")):
            for mode in ("fwd", "fwdbw"):
                r = dict(kernel=f"mlstm_kernels.{variant}.xl_chunk", variant=variant, chunk=chunk, mode=mode,
                         **run_reference_child(variant, chunk, mode))
                rows.append(r)
                print(json.dumps(r), flush=True)
                if r["status"] != "ok":
                    break
    for r in rows:
        if r.get("status") == "ok":
            r["model_ms"] = model_ms(r["variant"], r["chunk"], ceil, r["mode"])
    from tflabench.bench.results import git_state

    meta = dict(
        gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
        cuda=torch.version.cuda, config=CONFIG, dtype="bfloat16", ceilings=ceil, checks=checks,
        tilings={name: TILINGS[name] for name in args.tilings.split(",")},
        command=" ".join(sys.argv), date=time.strftime("%Y-%m-%d %H:%M:%S"), commit=git_state()["commit"],
    )
    try:
        import mlstm_kernels

        meta["mlstm_kernels"] = mlstm_kernels.__version__
    except ImportError:
        meta["mlstm_kernels"] = None
    (out / "results.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    print_summary(rows)


def print_summary(rows) -> None:
    best = {}
    for r in rows:
        if r.get("status") == "ok":
            key = (r["kernel"], r["mode"])
            if key not in best or r["time_ms"] < best[key]["time_ms"]:
                best[key] = r
    print(f"{'kernel':28s} {'mode':6s} {'L':>5s} {'tiling':20s} {'ms':>8s} {'MiB':>8s} {'model ms':>9s}")
    for (kernel, mode), r in sorted(best.items()):
        model = f"{r['model_ms']:.3f}" if r.get("model_ms") else "-"
        print(f"{kernel:28s} {mode:6s} {r['chunk']:5d} {r.get('tiling', '-'):20s} {r['time_ms']:8.3f} "
              f"{r['peak_mib']:8.0f} {model:>9s}")
    for mode in ("fwd", "fwdbw"):
        ref = best.get(("mlstm_kernels.sig.xl_chunk", mode))
        mine = best.get(("tflabench.sig.xl_chunk", mode))
        if ref and mine:
            print(f"sig {mode}: ours/reference = {mine['time_ms'] / ref['time_ms']:.3f}")
        exp = best.get(("tflabench.exp.xl_chunk", mode))
        if exp and mine:
            print(f"{mode}: our exp / our sig = {exp['time_ms'] / mine['time_ms']:.3f}")


if __name__ == "__main__":
    main()
