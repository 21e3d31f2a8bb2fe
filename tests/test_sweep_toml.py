"""Sweep TOML files: the documented format, presets, and malformed files (one-line error, exit code 2)."""

import textwrap
from pathlib import Path

import pytest
from cli_capture import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tflabench.bench import sweep as sweep_module
from tflabench.bench.sweep import PRESETS, SweepSpec, load_preset, load_sweep_file
from tflabench.errors import InputError

#: Values that are wrong for each key of [sweep] / [measure], as TOML literals.
_BAD_INT_LIST = ['"abc"', "0", "-4", "true", "[]", '[1, "x"]', "2.5", '"8..4"', "{ a = 1 }", "[[1]]"]
_BAD_INT = ['"65536"', "0", "-1", "true", "[1]", "1.5", "{}"]
_BAD_POSITIVE_NUMBER = ["0", "-0.5", '"half"', "true", "[0.5]", "nan", "inf"]
_BAD_VALUES = {
    **dict.fromkeys(("seq_len", "batch", "heads", "head_dim_qk", "head_dim_v", "chunk_size"), _BAD_INT_LIST),
    "tokens": _BAD_INT, "embedding_dim": _BAD_INT, "qk_ratio": _BAD_POSITIVE_NUMBER,
    "kernels": ["[]", "3", "[1]", '""', '[""]'],
    "dtype": ['"float64"', "[]", "1", '["bfloat16", 3]'],
    "mode": ['"backward"', "[]", "[true]"],
}
_BAD_MEASURE = {"warmup": [value for value in _BAD_INT if value != "0"], "repeats": _BAD_INT,
                "timeout": _BAD_POSITIVE_NUMBER}


def _bad_assignment(values: dict) -> st.SearchStrategy[tuple[str, str]]:
    keys = st.sampled_from(sorted(values))
    return keys.flatmap(lambda key: st.tuples(st.just(key), st.sampled_from(values[key])))


_identifier = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)

#: TOML documents that must be rejected: wrong values, unknown keys, wrong section types, broken syntax.
malformed_documents = st.one_of(
    _bad_assignment(_BAD_VALUES).map(lambda kv: f"[sweep]\n{kv[0]} = {kv[1]}\n"),
    _bad_assignment(_BAD_MEASURE).map(lambda kv: f"[measure]\n{kv[0]} = {kv[1]}\n"),
    _bad_assignment(_BAD_VALUES).map(lambda kv: f'[override."fla.*"]\n{kv[0]} = {kv[1]}\n'),
    _identifier.filter(lambda key: key not in sweep_module._SWEEP_KEYS).map(lambda k: f"[sweep]\n{k} = 1\n"),
    _identifier.filter(lambda key: key not in sweep_module._TOP_KEYS).map(lambda key: f"{key} = 1\n"),
    st.sampled_from(["sweep = 3\n", "override = [1]\n", '[override]\nfla = 1\n', 'preset = "fig4"\n',
                     "preset = 4\n", "[sweep]\nbatch = 8\ntokens = 65536\n", "[sweep\n", "a = [1,\n",
                     "[sweep]\nseq_len = 1\nseq_len = 2\n", "\x00", "= 1\n"]),
)


def _one_line_input_error(path) -> str:
    with pytest.raises(InputError) as raised:
        load_sweep_file(path)
    message = str(raised.value)
    assert message and "\n" not in message
    return message


def test_the_documented_format_is_the_real_format(tmp_path):
    example = textwrap.dedent(sweep_module.__doc__.split("::\n", 1)[1])
    path = tmp_path / "sweep.toml"
    path.write_text(example)
    spec = load_sweep_file(path)
    assert spec.kernels == ("tflabench.*", "softmax_attention")
    assert spec.shape.seq_len == (512, 1024) and spec.shape.tokens == 65536 and spec.shape.batch is None
    assert (spec.warmup, spec.repeats, spec.timeout_s) == (10, 30, 300.0)
    fig4 = load_preset("tfla-fig4")
    assert spec.overrides[: len(fig4.overrides)] == fig4.overrides
    assert spec.overrides[-1] == ("softmax_attention", {"head_dim_v": (128,), "qk_ratio": 1.0})


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_valid_sweep_files(name):
    assert isinstance(load_preset(name), SweepSpec)


def test_a_file_can_start_from_a_preset(tmp_path):
    path = tmp_path / "fig5_fwd.toml"
    path.write_text('preset = "tfla-fig5"\n[sweep]\nmode = "fwd"\nchunk_size = "128..512"\n')
    spec = load_sweep_file(path)
    assert spec.modes == ("fwd",) and spec.shape.chunk_size == (128, 256, 512)
    assert spec.shape.head_dim_v == (512,) and spec.shape.batch == (8,)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=malformed_documents)
def test_malformed_files_give_one_line_errors(tmp_path, document):
    path = tmp_path / "bad.toml"
    path.write_text(document)
    _one_line_input_error(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_arbitrary_bytes_parse_or_fail_cleanly(tmp_path, data):
    path = tmp_path / "any.toml"
    path.write_bytes(data)
    try:
        assert isinstance(load_sweep_file(path), SweepSpec)
    except InputError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=malformed_documents)
def test_cli_exits_2_with_one_error_line_for_malformed_files(tmp_path, document):
    path = tmp_path / "bad.toml"
    path.write_text(document)
    code, _, stderr = run_cli(["sweep", "--config", str(path), "--dry-run"])
    assert code == 2
    assert stderr.startswith("error: ") and stderr.count("\n") == 1


def test_cli_reports_a_missing_file_and_bad_flags_in_one_line(tmp_path):
    code, _, stderr = run_cli(["sweep", "--config", str(tmp_path / "missing.toml"), "--dry-run"])
    assert code == 2 and "cannot read sweep file" in stderr and stderr.count("\n") == 1
    code, _, stderr = run_cli(["sweep", "--seq-len", "8..4", "--dry-run"])
    assert code == 2 and stderr == "error: --seq-len: empty range 8..4\n"
    code, _, stderr = run_cli(["sweep", "--preset", "fig4", "--dry-run"])
    assert code == 2 and "unknown preset 'fig4'" in stderr


def test_head_configs_replace_the_product_of_the_head_axes(tmp_path):
    """tfla-grid's (heads, Dqk, Dv) triples; an override of one head axis replaces them for its kernels."""
    from tflabench.bench.registry import get_kernel
    from tflabench.bench.sweep import kernel_points

    spec = load_preset("tfla-grid")
    ours, fla = get_kernel("tflabench.mlstm_sig.xl_chunk"), get_kernel("fla.chunk_simple_gla")
    points = kernel_points(spec.shape_for(ours), ("bfloat16",), ("fwd",), ours)
    assert {(p.heads, p.head_dim_qk, p.head_dim_v) for p in points} == {
        (32, 64, 64), (32, 128, 128), (16, 128, 256), (8, 256, 512)}
    assert {(p.seq_len, p.batch) for p in points} == {(2048, 32), (8192, 8), (32768, 2), (65536, 1)}
    assert len(points) == 4 * 4 * 3
    assert {p.seq_len for p in kernel_points(spec.shape_for(fla), ("bfloat16",), ("fwd",), fla)} == {8192}
    path = tmp_path / "sweep.toml"
    path.write_text('preset = "tfla-grid"\n[override."tflabench.*"]\n'
                    'head_dim_v = 64\nheads = 4\nhead_dim_qk = 32\n')
    overridden = load_sweep_file(path).shape_for(ours)
    assert overridden.head_configs is None
    assert {(p.heads, p.head_dim_qk, p.head_dim_v) for p in kernel_points(
        overridden, ("bfloat16",), ("fwd",), ours)} == {(4, 32, 64)}


@pytest.mark.parametrize("value", ["[[32, 64]]", "[]", "[[32, 64, -1]]", "32"])
def test_malformed_head_configs_are_refused(tmp_path, value):
    path = tmp_path / "sweep.toml"
    path.write_text(f"[sweep]\nhead_configs = {value}\n")
    with pytest.raises(InputError, match="head_configs"):
        load_sweep_file(path)


def test_the_documented_example_is_a_valid_sweep_file(tmp_path):
    page = (Path(__file__).parents[1] / "docs" / "sweep-toml.md").read_text()
    example = page.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "my-sweep.toml"
    path.write_text(example)
    spec = load_sweep_file(path)
    assert spec.shape.seq_len == (1024, 2048, 4096, 8192) and spec.shape.chunk_size == (64, 128)
    assert [selector for selector, _ in spec.overrides][-2:] == ["softmax_attention", "fla.*"]
    code, out, stderr = run_cli(["sweep", "--config", str(path), "--dry-run", "--out", str(tmp_path)])
    assert code == 0, stderr
