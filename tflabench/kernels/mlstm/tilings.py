"""Tiling variants of the TFLA (`xl_chunk`) and fused-chunk kernels, selectable per sweep point.

A tiling is written as text: a name of `NAMED` (the candidates measured in results/perf-log.md), or field
overrides ``FIELD=VALUE[,FIELD=VALUE...]`` of the algorithm's tiling class, applied on top of its measured
default (`xl_chunk.Tiling.default`, `fused_chunk.FusedTiling.default`) at the point's chunk size and head
dims. xl_chunk also takes ``state_dtype`` (bfloat16, float16 or float32: the dtype of the materialized
chunk states, float32 like the reference kernels) and ``recompute_states`` (false: the forward's chunk
states kept for the backward instead of recomputed there, `xl_chunk.mlstm_xl_chunk`'s
``recompute_states_in_bw``). `launch_options` turns a tiling into the keyword
arguments of the kernel's launcher; an unknown name or field raises `InputError`.

The Triton kernels are imported only by the functions (Triton's interpreter mode must be chosen first).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from tflabench.errors import InputError

#: algorithms with a tiling parameter
TILED_ALGORITHMS = ("xl_chunk", "fused_chunk")
#: the version of the default tilings (results/perf-log.md), recorded in each run's meta.json
KERNELS_VERSION = "v21"
#: per former version of the default tilings (as a run's meta.json records it): the overrides of today's
#: defaults that give that version's kernels, for all variants and for mLSTMexp only; a field written
#: ``ALGORITHM.FIELD`` sets that algorithm's tiling only (both tiling classes have ``num_warps``). v6: one
#: state stage, mLSTMexp's online max with key/value tiles of 32, split dK and dV kernels, the masked gates
#: in mLSTMexp's fused forward; v7 (5cafde5): one state stage, mLSTMexp's key/value tiles of 32; v7.1
#: (8b13d2d): one state stage; v8 (eceeeae): v9's tilings (its state recurrence decayed the state per
#: sub-chunk, and mLSTMexp's took a row max and a column sum per sub-chunk; a model of it takes v9's);
#: v9 (7722eba): mLSTMexp's fused forward at 8 warps on every shape. Every version before v10 ran mLSTMexp's
#: fused forward at 8 warps; every version before v11 (v10: d9df0bc) computed dQ in its own kernel from
#: stored recomputed states; every version before v12 (v11: 4410c6d) ran mLSTMexp's fused forward at 8
#: warps where its query/key head dim is at most 64 but its value head dim is not (the ``exp_wide_values``
#: entries, applied only at such head dims: `former_default`); every version before v13 (v12: 035395d) took
#: the TFLA kernels' head-dim blocks from the divisors of the head dims only (32 at 96: ``head_dim_blocks``
#: "exact", not a tiling field but `xl_chunk.Tiling.default`'s and `fused_chunk.FusedTiling.default`'s
#: ``exact_head_blocks``, which the structural model passes on), every version before v14 (v13: 5377b88)
#: the fused forward's value blocks (``fused_chunk.head_dim_blocks``), and every version before v15 (v14:
#: 9aeea67) the output and gradient kernels' pointer tiles and the output kernel's query tiles per program
#: (``output_tiles`` "v14": `xl_chunk.Tiling.default`'s ``former_output_tiles``); every version before v16
#: (v15: d591e13) the backward's gate gradients as PyTorch ops (``fused_gate_grads`` False); every version
#: before v17 (v16: fd79924) 64-wide output and dV value blocks at Dv 192 (``value_blocks`` "v16":
#: `xl_chunk.Tiling.default`'s ``former_value_blocks``); every version before v18 (v17: 3632df8) 128-wide
#: state value blocks and a 256-wide dV block at value dims 144-176 (``state_blocks`` "v17":
#: `xl_chunk.Tiling.default`'s ``former_state_blocks``), and v18 (a7ee960) the least-padded state value
#: blocks and 128-wide dV blocks at every query/key head dim (``state_blocks`` "v18"), v19 (a22f021) where
#: 64 does not divide it (``state_blocks`` "v19"), and v20 (c3f81de) the dV kernel's masked 256-wide blocks
#: over such query/key head dims outside Dv 144-176 (``state_blocks`` "v20").
_EXP_FUSED_8_WARPS = {"fused_chunk.num_warps": 8}
_DQ_KERNEL = {"fused_dq": False}
_BEFORE_V21 = {"state_blocks": "v20"}
_BEFORE_V20 = {"state_blocks": "v19"}
_BEFORE_V19 = {"state_blocks": "v18"}
_BEFORE_V18 = {"state_blocks": "v17"}
_BEFORE_V17 = {"value_blocks": "v16", **_BEFORE_V18}
_BEFORE_V16 = {"fused_gate_grads": False, **_BEFORE_V17}
_BEFORE_V15 = {"output_tiles": "v14", **_BEFORE_V16}
_EXACT_HEAD_BLOCKS = {"head_dim_blocks": "exact", **_BEFORE_V15}
FORMER_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "v6": {"all": {"state_num_stages": 1, "fused_dkdv": False, "dkdv_num_warps": 8, "dkdv_num_stages": 1,
                   **_DQ_KERNEL, **_EXACT_HEAD_BLOCKS},
           "exp": {"out_prefix_max": False, "out_block_kv": 32, "lean_gate": False, **_EXP_FUSED_8_WARPS}},
    "v7": {"all": {"state_num_stages": 1, **_DQ_KERNEL, **_EXACT_HEAD_BLOCKS},
           "exp": {"out_block_kv": 32, **_EXP_FUSED_8_WARPS}},
    "v7.1": {"all": {"state_num_stages": 1, **_DQ_KERNEL, **_EXACT_HEAD_BLOCKS},
             "exp": dict(_EXP_FUSED_8_WARPS)},
    "v8": {"all": {**_DQ_KERNEL, **_EXACT_HEAD_BLOCKS}, "exp": dict(_EXP_FUSED_8_WARPS)},
    "v9": {"all": {**_DQ_KERNEL, **_EXACT_HEAD_BLOCKS}, "exp": dict(_EXP_FUSED_8_WARPS)},
    "v10": {"all": {**_DQ_KERNEL, **_EXACT_HEAD_BLOCKS}, "exp": {},
            "exp_wide_values": dict(_EXP_FUSED_8_WARPS)},
    "v11": {"all": dict(_EXACT_HEAD_BLOCKS), "exp": {}, "exp_wide_values": dict(_EXP_FUSED_8_WARPS)},
    "v12": {"all": dict(_EXACT_HEAD_BLOCKS), "exp": {}},
    "v13": {"all": {"fused_chunk.head_dim_blocks": "exact", **_BEFORE_V15}, "exp": {}},
    "v14": {"all": dict(_BEFORE_V15), "exp": {}},
    "v15": {"all": dict(_BEFORE_V16), "exp": {}},
    "v16": {"all": dict(_BEFORE_V17), "exp": {}},
    "v17": {"all": dict(_BEFORE_V18), "exp": {}},
    "v18": {"all": dict(_BEFORE_V19), "exp": {}},
    "v19": {"all": dict(_BEFORE_V20), "exp": {}},
    "v20": {"all": dict(_BEFORE_V21), "exp": {}},
}
#: dtypes of xl_chunk's ``state_dtype``
STATE_DTYPES = ("bfloat16", "float16", "float32")

#: Named candidates: field overrides of the default tiling (xl_chunk's unless they set FusedTiling fields).
#: Block sizes and the shared memory and registers they need: scripts/kernel_resources.py; timings of each
#: on an H200 (Dqk 128 / Dv 256 and Dqk = Dv = 256): results/perf-log.md.
NAMED: dict[str, dict[str, Any]] = {
    # the materialized chunk states in fp32 like the reference kernels (an ablation at equal state bytes)
    "fp32states": {"state_dtype": "float32"},
    # the forward's chunk states kept for the backward (memory for the backward's second state recurrence)
    "keep-states": {"recompute_states": False},
    # the backward's gate gradients in one kernel instead of a dozen PyTorch ops (the default since v16, named
    # for the A/B runs before it); with the states kept
    "gate-grads-kernel": {"fused_gate_grads": True},
    "keep-states-gate-grads-kernel": {"recompute_states": False, "fused_gate_grads": True},
    # the recurrent (state) kernel: warps, sub-chunk, state tiles, stages
    "state-w8": {"state_num_warps": 8},
    "state-bl32": {"block_state": 32},
    "state-bl128": {"block_state": 128},
    "state-128x128": {"state_block_qk": 128, "state_block_v": 128},
    "state-128x128-w8": {"state_block_qk": 128, "state_block_v": 128, "state_num_warps": 8},
    "state-v64": {"state_block_v": 64},
    "state-32x64": {"state_block_qk": 32, "state_block_v": 64},
    "state-s2": {"state_num_stages": 2},
    # one pipeline stage in the state and state-gradient recurrences (the default before state-s2 measured
    # faster)
    "state-s1": {"state_num_stages": 1},
    # the forward output kernel: key/value tiles, value block (the scores Q K^T computed once per block),
    # query tiles per program (the state tile read once for all of them), warps, stages
    "out-kv32": {"out_block_kv": 32},
    "out-kv64": {"out_block_kv": 64},
    "out-q128-kv32-w8": {"block_q": 128, "out_block_kv": 32, "out_num_warps": 8},
    "out-q128-kv64-w8": {"block_q": 128, "out_block_kv": 64, "out_num_warps": 8},
    "out-v64": {"out_block_v": 64},
    "out-v64-w8": {"out_block_v": 64, "out_num_warps": 8},
    "out-v256": {"out_block_v": 256},
    "out-v256-w8": {"out_block_v": 256, "out_num_warps": 8},
    "out-w8": {"out_num_warps": 8},
    "out-q1": {"out_q_tiles": 1},
    "out-q2": {"out_q_tiles": 2},
    "out-s1": {"out_num_stages": 1},
    "out-s1-q1": {"out_num_stages": 1, "out_q_tiles": 1},
    "out-kv32-q1": {"out_block_kv": 32, "out_q_tiles": 1},
    "out-kv32-s1": {"out_block_kv": 32, "num_stages": 1, "out_num_stages": 1},
    # mLSTMexp's output kernel with the online max over key/value tiles (the v6 kernel) instead of the
    # gate kernel's prefix max
    "out-online-max": {"out_prefix_max": False},
    # the backward's dV kernel (K Q^T computed once per key tile for dv_block_v columns) and dK + dV fused
    "dv-v128": {"dv_block_v": 128},
    "dv-v256": {"dv_block_v": 256},
    "out-dv-v256-w8": {"out_block_v": 256, "out_num_warps": 8, "dv_block_v": 256, "num_warps": 8},
    "fused-dkdv": {"fused_dkdv": True},
    # the backward at small head dims (Dqk = Dv = 64: one tile per kernel and chunk, 2 programs of 4 warps
    # per SM in dK and dV); predictions and sm_90 resources in results/perf-log.md, "Prepared candidates"
    "bwd-small-dkdv": {"fused_dkdv": True, "dkdv_num_warps": 4, "dkdv_num_stages": 2},
    "bwd-small-s1": {"num_stages": 1},
    "bwd-small-dkdv-state32": {"fused_dkdv": True, "dkdv_num_warps": 4, "dkdv_num_stages": 2,
                               "state_block_qk": 32},
    # the split dK and dV kernels (the default before bwd-small-dkdv became the default at head dims <= 64)
    "bwd-split": {"fused_dkdv": False},
    # dQ from its own kernel, the states recomputed and stored (the default before fused_dq)
    "bwd-dq-split": {"fused_dq": False},
    # fused_chunk: the backward with the state gradients on chip instead of TFLA's
    "fused-backward": {"backward": "fused"},
    # fused_chunk: the forward's gates without a live [L, L] log-gate (the mLSTMexp default since its A/B),
    # and with the masked [L, L] log-gate (mLSTMsig's default)
    "fused-lean-gate": {"lean_gate": True},
    "fused-masked-gate": {"lean_gate": False},
    # fused_chunk: the forward at 4 warps (mLSTMexp's default at head dims and chunks <= 64 since v10)
    "fused-w4": {"num_warps": 4},
    # fused_chunk: the forward at 8 warps (mLSTMexp's default before v10 on every shape, since then beyond
    # head dims and chunks of 64)
    "fused-w8": {"num_warps": 8},
}


def former_default(version: str | None, variant: str,
                   head_dims: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """The overrides of today's default tilings that give the default kernels of ``version`` for a
    variant at head_dims (Dqk, Dv) (without them, those of every head dim but the ``exp_wide_values``
    ones): {} for today's, None for a version they cannot reproduce (or an unknown one)."""
    if version in (None, KERNELS_VERSION):
        return {}
    former = FORMER_DEFAULTS.get(version)
    if former is None:
        return None
    from tflabench.kernels.mlstm.launch import EXP_FOUR_WARPS_MAX

    overrides = {**former["all"], **(former["exp"] if variant == "exp" else {})}
    if variant == "exp" and head_dims is not None and head_dims[0] <= EXP_FOUR_WARPS_MAX < head_dims[1]:
        overrides |= former.get("exp_wide_values", {})
    return overrides


def _field_types(algorithm: str) -> dict[str, str]:
    """Field name -> type name of the algorithm's tiling (``chunk`` excluded: the sweep's chunk size)."""
    if algorithm == "fused_chunk":
        from tflabench.kernels.mlstm.fused_chunk import FusedTiling

        return {item.name: str(item.type) for item in fields(FusedTiling) if item.name != "chunk"}
    from tflabench.kernels.mlstm.xl_chunk import Tiling

    types = {item.name: str(item.type) for item in fields(Tiling) if item.name != "chunk"}
    return types | {"state_dtype": "str", "recompute_states": "bool"}


def overrides(tiling: str) -> dict[str, Any]:
    """The field overrides of a tiling text. InputError for an unknown name, a malformed pair, a field of
    neither tiling class or a value of the wrong type."""
    if tiling in NAMED:
        return dict(NAMED[tiling])
    if "=" not in tiling:
        raise InputError(f"unknown tiling {tiling!r} (named tilings: {', '.join(NAMED)}; or FIELD=VALUE,... "
                         "overrides of xl_chunk.Tiling or fused_chunk.FusedTiling)")
    known = {name: kind for algorithm in TILED_ALGORITHMS for name, kind in _field_types(algorithm).items()}
    values: dict[str, Any] = {}
    for pair in tiling.split(","):
        name, _, text = pair.partition("=")
        if name not in known:
            raise InputError(f"tiling {tiling!r}: unknown field {name!r} "
                             f"(fields: {', '.join(sorted(known))})")
        values[name] = _typed(text, known[name], name, tiling)
    return values


def _typed(text: str, kind: str, name: str, tiling: str) -> Any:
    """The value of one override: an int, a bool (true / false) or a string (state_dtype, backward)."""
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise InputError(f"tiling {tiling!r}: {name} must be true or false, got {text!r}")
        return text.lower() == "true"
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise InputError(f"tiling {tiling!r}: {name} must be an integer, got {text!r}") from None
    if name == "state_dtype" and text not in STATE_DTYPES:
        raise InputError(f"tiling {tiling!r}: state_dtype must be one of {', '.join(STATE_DTYPES)}, "
                         f"got {text!r}")
    return text


def launch_options(algorithm: str, tiling: str | None, *, chunk: int, head_dim_qk: int, head_dim_v: int,
                   variant: str) -> dict[str, Any]:
    """The launcher's keyword arguments (``tiling``, and ``state_dtype`` and ``recompute_states_in_bw``
    where given) of a tiling text (None: the default tiling) at one chunk size and pair of head dims.
    InputError when the tiling is unknown, sets a field the algorithm's tiling class does not have, or does
    not fit the head dims and chunk size."""
    values = {} if tiling is None else overrides(tiling)
    foreign = sorted(set(values) - set(_field_types(algorithm)))
    if foreign:
        raise InputError(f"tiling {tiling!r} sets {', '.join(foreign)}, not a field of {algorithm}'s tiling")
    if algorithm == "fused_chunk":
        from tflabench.kernels.mlstm.fused_chunk import FusedTiling

        fused = replace(FusedTiling.default(chunk, head_dim_qk, head_dim_v, variant=variant), **values)
        fused.check(head_dim_qk, head_dim_v)
        return {"tiling": fused}
    import torch

    from tflabench.kernels.mlstm.xl_chunk import Tiling

    state_dtype = values.pop("state_dtype", None)
    recompute_states = values.pop("recompute_states", None)
    default = Tiling.default(chunk, head_dim_qk, head_dim_v, variant=variant)
    chosen = replace(default, **values).for_chunk(chunk)
    chosen.check(head_dim_qk, head_dim_v)
    options: dict[str, Any] = {"tiling": chosen}
    if state_dtype is not None:
        options["state_dtype"] = getattr(torch, state_dtype)
    if recompute_states is not None:
        options["recompute_states_in_bw"] = recompute_states
    return options

