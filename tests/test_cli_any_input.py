"""Every command answers any input with exit code 0, or with exit code 2 and exactly one ``error:`` line on
stderr: never a traceback, never another exit code (property-based, hypothesis).

Inputs: numbers at and beyond every bound (0, -1, 2**31, 1e400, NaN, inf), empty and unicode strings, and
paths of every kind: a folder, a regular file, a path under a regular file, a missing path, a valid run, a
folder without a run, unicode and over-long names, and a place nobody can write. The tests run as root on
CI, where permission bits do not stop writing, so the unwritable place is ``/proc`` (a file system that
accepts no new files) and paths under a regular file stand for unreachable folders.

No generated input may start real work: ``sweep`` always runs with ``--dry-run`` (a rejected dry run is
repeated without it, which must be rejected the same way), ``demo`` and ``bundle`` get only inputs that
fail their checks, ``calibrate`` runs only without a GPU and with ``--no-save``, and shapes stay small.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_capture import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FIXTURES = Path(__file__).parent / "fixtures"
MAX_EXAMPLES = 25
SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@dataclass(frozen=True)
class PathRef:
    """A path of the playground, named by its kind; resolved in the test (the folder is per test)."""

    kind: str


#: kind -> path relative to the playground (None: an absolute path outside it)
PLAYGROUND = {
    "folder": "folder",
    "file": "file.txt",
    "under_file": "file.txt/child",
    "missing": "missing/deeper",
    "run": "runs/existing",
    "run_csv": "runs/existing/results.csv",
    "runs": "runs",
    "no_run": "folder",
    "unicode": "ünïcödé 🦀",
    "long_name": "x" * 300,
    "unwritable": None,
}
UNWRITABLE = Path("/proc/tflabench-cannot-write-here")


#: rows of the playground's run: few, so that plotting it takes a fraction of a second
RUN_ROWS = 3


def playground(tmp_path: Path) -> Path:
    """Folders and files of every kind, with one small valid run (the first rows of a fixture) under
    runs/existing; made on the first call of a test, reused by its later examples."""
    root = tmp_path / "playground"
    if root.exists():
        return root
    (root / "folder").mkdir(parents=True)
    (root / "file.txt").write_text("not a folder\n")
    run = root / "runs" / "existing"
    shutil.copytree(FIXTURES / "h200_small", run)
    lines = (run / "results.csv").read_text().splitlines(keepends=True)
    (run / "results.csv").write_text("".join(lines[: RUN_ROWS + 1]))
    return root


def resolve(argv: list, root: Path) -> list[str]:
    return [str(resolve_path(item, root)) if isinstance(item, PathRef) else item for item in argv]


def resolve_path(ref: PathRef, root: Path) -> Path:
    relative = PLAYGROUND[ref.kind]
    return UNWRITABLE if relative is None else root / relative


def assert_clean_answer(code: object, stderr: str, argv: list[str]) -> None:
    assert code in (0, 2), f"exit code {code!r} for {argv}: {stderr}"
    assert "Traceback" not in stderr, f"traceback for {argv}: {stderr}"
    if code == 2:
        lines = stderr.splitlines()
        one_line = len(lines) == 1 and lines[0].startswith("error: ")
        assert one_line, f"not one error line for {argv}: {stderr!r}"


def without_time(text: str) -> str:
    """The text with the time stamps of default run names (``sweep-20260101-120000``) masked."""
    return re.sub(r"\d{8}-\d{6}", "<time>", text)


def run_and_check(argv: list, root: Path) -> tuple[int, str, str]:
    args = resolve(argv, root)
    code, out, err = run_cli(args)
    assert_clean_answer(code, err, args)
    return code, out, err


# ----------------------------------------------------------------------------------------------- values

#: numbers at and beyond the bounds of every numeric option, as the command line spells them
numbers = st.one_of(
    st.integers(min_value=-2, max_value=4).map(str),
    st.sampled_from(["0", "-1", "2147483647", "2147483648", "99999999999", "1e400", "-1e400", "nan", "inf",
                     "-inf", "0.0", "-0.0", "0.5", "1.5", "4.0001", "1e-300", "", " ", "½", "٣", "1_000"]),
)
texts = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["", " ", ",", "..", ".", "/", "a/../b", "ünï", "🦀", "-", "--", "--json", "\x00"]),
)
paths = st.sampled_from(sorted(PLAYGROUND)).map(PathRef)
#: paths that fail the output-folder checks (a file, under a file, unwritable, a name too long)
bad_out_paths = st.sampled_from(["file", "under_file", "run_csv", "unwritable", "long_name"]).map(PathRef)


#: options per generated command line: with more, nearly every line holds a bad value and fails early
MAX_OPTIONS = 6


def options(table: dict[str, st.SearchStrategy], flags: tuple[str, ...] = ()) -> st.SearchStrategy[list]:
    """A random subset of ``--name value`` options and flags, in random order."""
    pairs = [st.tuples(st.just(name), value).map(list) for name, value in table.items()]
    pairs += [st.just([flag]) for flag in flags]
    chosen = st.lists(st.sampled_from(range(len(pairs))), unique=True, max_size=min(MAX_OPTIONS, len(pairs)))
    return chosen.flatmap(lambda indices: st.tuples(*(pairs[index] for index in indices))).map(
        lambda groups: [item for group in groups for item in group])


NO_ARGUMENTS = st.just([])


def command(name: str, table: dict[str, st.SearchStrategy], flags: tuple[str, ...] = (),
            arguments: st.SearchStrategy[list] = NO_ARGUMENTS) -> st.SearchStrategy[list]:
    """``name``, its positional arguments, then a random subset of its options."""
    return st.tuples(arguments, options(table, flags)).map(lambda parts: [name, *parts[0], *parts[1]])


gpu_names = st.one_of(st.sampled_from(["h100", "a100", "h200", "H100", "", "🦀", "b300x"]), texts)
ANALYSIS = {
    "--gpu": gpu_names, "--head-dim-v": numbers, "--qk-ratio": numbers, "--state-bytes": numbers,
    "--causal-factor": numbers, "--seq-len": numbers, "--batch": numbers, "--heads": numbers,
    "--chunk-sizes": st.one_of(numbers, st.sampled_from(["64,128", "0,64", "64,,128", "99999999999", "a,b"])),
}
optimal_chunk_commands = command("optimal-chunk", ANALYSIS, ("--measured", "--json"))
roofline_commands = command("roofline", {
    **ANALYSIS, "--head-dim-qk": numbers,
    "--family": st.one_of(st.sampled_from(["mlstm_sig", "mlstm_exp", "softmax_attention", "gla", ""]), texts),
    "--mode": st.one_of(st.sampled_from(["fwd", "fwdbw"]), texts),
    "--dtype": st.one_of(st.sampled_from(["bfloat16", "float32", "float64"]), texts),
    "--formulation": st.one_of(st.sampled_from(["chunkwise", "parallel", "recurrent"]), texts),
    "--param": st.one_of(st.sampled_from(["degree=2", "degree=nan", "=", "x"]), texts),
}, ("--measured", "--json"))
simple_commands = st.one_of(
    st.sampled_from([["gpus"], ["gpus", "--json"], ["version"], ["kernels", "--json"]]),
    st.tuples(st.sampled_from(["gpus", "version", "plot", "report"]), texts).map(list),
)

#: small axis values only: a dry run lists every job, and no product of axes may grow large
axis_values = st.sampled_from(["16", "8,16", "16..32", "0", "-4", "8..4", "abc", "", "nan", "99999999999",
                               "1e3", "🦀", "16,"])
sweep_commands = command("sweep", {
    "--preset": st.sampled_from(["tiny", "tfla-fig4", "bogus", "", "../tiny"]),
    "--config": paths,
    "--kernels": st.sampled_from(["tflabench.mlstm_sig.xl_chunk", "tflabench.*.limit_chunk", "nothing.*", "",
                                  "mlstm_sig", "🦀", ","]),
    "--seq-len": axis_values, "--batch": axis_values, "--heads": axis_values, "--head-dim-v": axis_values,
    "--head-dim-qk": axis_values, "--chunk-size": axis_values,
    "--tokens": numbers, "--embedding-dim": numbers, "--qk-ratio": numbers,
    "--dtype": st.sampled_from(["float32", "bfloat16,float16", "float64", "", "🦀"]),
    "--mode": st.sampled_from(["fwd", "fwd,fwdbw", "bwd", ""]),
    "--warmup": numbers, "--repeats": numbers, "--timeout": numbers, "--budget": numbers,
    "--run-name": st.one_of(
        st.sampled_from(["existing", "new-run", "..", ".", "a/b", "../escape", "x" * 300]), texts),
    "--out": paths,
    "--retry": st.sampled_from(["crash", "failed_check,timeout", "ok", "bogus", "", ","]),
    "--gpus": st.sampled_from(["0", "0,0", "a", "", "-1"]),
}, ("--resume",))

plot_commands = command("plot", {
    "--kind": st.one_of(st.sampled_from(["runtime", "roofline,memory", "all", "bogus", "", ","]), texts),
    "--format": st.one_of(st.sampled_from(["png", "svg", "png,svg", "jpeg", "", ","]), texts),
    "--out": paths,
}, arguments=paths.map(lambda ref: [ref]))
report_commands = command("report", {
    "--baseline": st.one_of(st.sampled_from(["torch.sdpa.flash", "nothing"]), texts),
    "--out": paths,
}, arguments=paths.map(lambda ref: [ref]))
rederive_commands = paths.map(lambda ref: ["rederive", ref])
demo_commands = st.tuples(bad_out_paths, st.booleans()).map(
    lambda pair: ["demo", "--out", pair[0], *(["--quick"] if pair[1] else [])])
#: every output-folder option with the command's other inputs valid: only the path decides
path_option_commands = st.tuples(st.sampled_from([
    ["plot", PathRef("run"), "--kind", "roofline", "--format", "png", "--out"],
    ["report", PathRef("run"), "--out"],
    ["sweep", "--dry-run", "--preset", "tiny", "--kernels", "tflabench.mlstm_sig.xl_chunk", "--out"],
    ["sweep", "--dry-run", "--preset", "tiny", "--kernels", "tflabench.mlstm_sig.xl_chunk", "--resume",
     "--run-name", "existing", "--out"],
    ["sweep", "--dry-run", "--preset", "tiny", "--kernels", "tflabench.mlstm_sig.xl_chunk", "--config"],
    ["rederive"],
]), paths).map(lambda pair: [*pair[0], pair[1]])
#: --python values that bundle rejects (a valid one with valid other options would download wheels)
bad_pythons = texts.filter(lambda text: not re.fullmatch(r"3\.\d+", text))
bundle_commands = command("bundle", {
    "--platform": st.one_of(st.just("manylinux_2_28_x86_64"), texts),
    "--dest": paths,
}, arguments=bad_pythons.map(lambda text: ["--python", text]))


# ----------------------------------------------------------------------------------------------- tests


@SETTINGS
@given(argv=st.one_of(optimal_chunk_commands, roofline_commands, simple_commands))
def test_analysis_commands_answer_any_input_cleanly(tmp_path, argv):
    run_and_check(argv, tmp_path)


@settings(SETTINGS, max_examples=2 * MAX_EXAMPLES)
@given(argv=sweep_commands)
def test_a_sweep_dry_run_answers_any_input_cleanly_and_the_run_rejects_what_it_rejects(tmp_path, argv):
    root = playground(tmp_path)
    code, _, err = run_and_check(["sweep", "--dry-run", *argv[1:]], root)
    if code == 2:
        run_code, _, run_err = run_and_check(argv, root)
        assert (run_code, without_time(run_err)) == (2, without_time(err))


@settings(SETTINGS, max_examples=MAX_EXAMPLES)
@given(argv=st.one_of(plot_commands, report_commands, rederive_commands))
def test_plot_report_and_rederive_answer_any_input_cleanly(tmp_path, argv):
    root = playground(tmp_path)
    run_and_check(argv, root)


@settings(SETTINGS, max_examples=2 * MAX_EXAMPLES)
@given(argv=path_option_commands)
def test_every_path_option_answers_any_path_cleanly(tmp_path, argv):
    run_and_check(argv, playground(tmp_path))


@settings(SETTINGS, max_examples=MAX_EXAMPLES)
@given(argv=st.one_of(demo_commands, bundle_commands))
def test_demo_and_bundle_reject_bad_input_before_any_work(tmp_path, argv):
    root = playground(tmp_path)
    code, _, err = run_and_check(argv, root)
    assert code == 2, f"{argv} was accepted: it would start real work"


def test_calibrate_answers_any_input_cleanly_without_a_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("with a GPU, calibrate measures it (real work)")
    check = given(argv=command("calibrate", {
        "--gpu": gpu_names, "--matmul-size": numbers, "--copy-mib": numbers, "--repeats": numbers,
    }, ("--json",)))(lambda argv: _calibrate_is_rejected(argv, tmp_path))
    SETTINGS(check)()


def _calibrate_is_rejected(argv: list, root: Path) -> None:
    code, out, err = run_and_check([*argv, "--no-save"], root)
    assert code == 2
    if "--json" in argv:
        assert out.strip().startswith("{") and '"error"' in out
