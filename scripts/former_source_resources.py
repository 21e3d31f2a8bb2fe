#!/usr/bin/env python
"""The compiled-resources table's entries that committed runs of former kernels versions are modelled with,
compiled from the kernels' source at the commit those runs measured.

`scripts/kernel_resources.py --table` compiles a former version's tilings (`tilings.FORMER_DEFAULTS`, keys
``.../<version>``) and the A/B tilings of committed rows (``.../<version>/<tiling>``) from today's kernels
with that version's options. Where the kernels' code changed since without an option to bring it back, the
compiled kernel is not the one that ran: v6's mLSTMexp fused forward at 64/64, L = 128 spills 2,360 bytes per
thread and trip as the grid runs' commit (74441fc) compiles it, 1,692 as today's source compiles v6's
tiling. For each such entry a committed row matches (`structural.compiled_kernels`' rule), the commit of the
run with the most rows using it (`meta.json`'s ``git.commit``); each commit's entries are compiled in a git
worktree at it, with that commit's own launch capture (its `scripts/kernel_resources.py`) and today's SASS
reading (`tflabench.analysis.sass`). Prints each kernel's fields that differ from the table's; ``--write``
replaces them in `tflabench/analysis/compiled_resources.json.gz` (the fields each entry holds) and records
each entry's commit under the table's ``former_sources``:

    python scripts/former_source_resources.py [--runs RUN ...] [--write]

(default: every committed run modelled with a former version's tilings). The commit's tiling class must hold
the entry's tiling: each of its fields is set to the entry's value, and a field the commit's class lacks is
reported (today's kernels read it at that version's value).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
#: the fields of a table entry's kernel record this replaces (those `sass.cubin_resources` and the compile
#: give; the entry's other fields, added by later passes of `kernel_resources.py`, are kept)
COMPILED_FIELDS = ("num_warps", "num_stages", "shared_bytes", "registers", "stack_bytes", "loop_local_bytes",
                   "loop_load_bytes", "instructions", "loop_instructions", "inner_loop_instructions",
                   "top_loops", "tile_loop_waits")


def entry_commits(run_dirs: list[Path]) -> dict[str, str]:
    """{table key: commit} of the former versions' entries (keys with a version suffix) that the modelled
    rows of the runs match, each the commit of the run with the most rows using it."""
    from tflabench.analysis import model_check, structural
    from tflabench.analysis.run_data import load_run

    entries = structural.read_compiled_resources()["entries"]
    by_configuration: dict[str, list[str]] = {}
    for key in entries:
        by_configuration.setdefault("/".join(key.split("/")[:4]), []).append(key)
    rows: dict[str, dict[str, int]] = {}
    for run_dir in run_dirs:
        run = load_run(run_dir)
        commit = run.meta.get("git", {}).get("commit")
        if not commit or model_check.modelled_tilings(run) != "as run":
            continue
        checks, _ = model_check.check_run_rows(run)
        for check in checks:
            if check.algorithm == "reference":
                continue
            problem = check.problem
            dims = f"{problem.head_dim_qk}x{problem.head_dim_v}"
            configuration = f"{check.algorithm}/{problem.variant}/{dims}/L{check.chunk}"
            resolved = structural.modelled_tiling(problem, check.algorithm, check.chunk, check.fields)
            key = next((key for key in by_configuration.get(configuration, [])
                        if structural._compiled_with(entries[key].get("tiling"), resolved)), None)
            if key is not None and len(key.split("/")) > 4:
                counts = rows.setdefault(key, {})
                counts[commit] = counts.get(commit, 0) + 1
    return {key: max(counts, key=counts.get) for key, counts in rows.items()}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _old_tiling_changes(old_default, recorded: dict) -> tuple[list[str], dict]:
    """(``--set`` changes of the commit's default tiling that give the recorded tiling, as the first
    captures parse them, recorded fields the commit's class lacks)."""
    fields = {item.name for item in dataclasses.fields(old_default)}
    changes = [f"{name}={int(value) if isinstance(value, bool) else value}"
               for name, value in recorded.items() if name in fields and value != getattr(old_default, name)]
    return changes, {name: value for name, value in recorded.items() if name not in fields}


def compile_at_commit(worktree: Path, configurations: dict[str, dict]) -> dict[str, dict]:
    """{table key: {"kernels": {kernel: fields}, "absent_fields": {...}}} compiled with the worktree's
    kernels (run in a child process whose ``tflabench`` is the worktree's)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(configurations, file)
    command = [sys.executable, __file__, "--child", file.name, "--worktree", str(worktree)]
    environment = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    try:
        output = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True,
                                env={**environment, "PYTHONPATH": str(worktree)}, cwd=worktree).stdout
    finally:
        os.unlink(file.name)
    return json.loads(output.splitlines()[-1])


def child(configurations_path: str, worktree: Path) -> None:
    """In the worktree's environment: each configuration's launches captured and compiled by the commit's
    own `scripts/kernel_resources.py`, read with today's `sass`; one JSON line on stdout."""
    old = _load("former_kernel_resources", worktree / "scripts" / "kernel_resources.py")
    sass = _load("sass_today", REPOSITORY / "tflabench" / "analysis" / "sass.py")
    results = {}
    for key, entry in json.load(open(configurations_path)).items():
        try:
            results[key] = _compile_entry(old, sass, key, entry)
        except Exception as error:  # noqa: BLE001 - reported; the entry keeps today's compile
            print(key, f"not compiled ({type(error).__name__}: {error})", file=sys.stderr, flush=True)
            continue
        print(key, file=sys.stderr, flush=True)
    print(json.dumps(results))


def _entry_launches(old, key: str, entry: dict) -> tuple[list, list[str], dict]:
    """(the commit's captured launches of one table entry, the ``--set`` changes, the recorded fields the
    commit's tiling class lacks)."""
    from tflabench.kernels.mlstm import fused_chunk, xl_chunk

    algorithm, variant, dims, chunk = key.split("/")[:4]
    dqk, dv = (int(part) for part in dims.split("x"))
    chunk = int(chunk.removeprefix("L"))
    if algorithm == "fused_chunk":
        default = fused_chunk.FusedTiling.default(chunk, dqk, dv, variant=variant)
    else:
        default = xl_chunk.Tiling.default(chunk, dqk, dv, variant=variant, limit=algorithm == "limit_chunk")
    changes, absent = _old_tiling_changes(default, entry["tiling"])
    arguments = argparse.Namespace(dqk=dqk, dv=dv, chunk=chunk, variant=variant, set=changes,
                                   algorithm="fused_chunk" if algorithm == "fused_chunk" else "xl_chunk",
                                   limit=algorithm == "limit_chunk", batch=2, heads=2, seq=None)
    if "tiling" not in inspect.signature(old._launches).parameters:
        return old._launches(arguments), changes, absent
    fields = {item.name for item in dataclasses.fields(default)}  # later captures take the tiling itself
    tiling = dataclasses.replace(default, **{name: value for name, value in entry["tiling"].items()
                                             if name in fields})
    return old._launches(arguments, tiling), changes, absent


def _compile_entry(old, sass, key: str, entry: dict) -> dict:
    """{"kernels": {kernel: fields}, "changes", "absent_fields"} of one table entry, each kernel's first
    launch compiled by the commit's capture ``old`` for sm_90 and read with ``sass``."""
    import triton
    from triton.compiler import ASTSource

    launches, changes, absent = _entry_launches(old, key, entry)
    kernels = {}
    for launch in launches:
        name = launch.kernel.fn.__name__
        if name in kernels:
            continue
        signature, constexprs, attributes = old._compile_arguments(launch)
        compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attributes),
                                  target=old.HOPPER, options=launch.options)
        figures = sass.cubin_resources(compiled.asm["cubin"])
        kernels[name] = {"num_warps": launch.options.get("num_warps", 4),
                         "num_stages": launch.options.get("num_stages", 3),
                         "shared_bytes": compiled.metadata.shared,
                         **{field: value for field, value in figures.items() if field in COMPILED_FIELDS}}
    return {"kernels": kernels, "changes": changes, "absent_fields": absent}


def differences(entry: dict, compiled: dict) -> list[str]:
    """One line per kernel field whose compiled value differs from the entry's (and per kernel one of the
    two lacks)."""
    lines = []
    for name in sorted(set(entry["kernels"]) | set(compiled["kernels"])):
        mine, theirs = entry["kernels"].get(name), compiled["kernels"].get(name)
        if mine is None or theirs is None:
            lines.append(f"  {name}: {'only at the commit' if mine is None else 'not at the commit'}")
            continue
        changed = {field: (mine.get(field), theirs[field]) for field in theirs
                   if field != "top_loops" and mine.get(field, theirs[field]) != theirs[field]}
        if changed:
            moved = ", ".join(f"{field} {a} -> {b}" for field, (a, b) in changed.items())
            lines.append(f"  {name}: {moved}")
    return lines


def write(commits: dict[str, str], compiled: dict[str, dict], path: Path | None = None) -> None:
    """Replace the compiled fields of the entries' kernels in the table (the fields and kernels each entry
    holds: an entry compiled without instruction counts keeps none) and record the commit and the entries
    under ``former_sources`` ({key: commit})."""
    from tflabench.analysis import structural

    kernel_resources = _load("kernel_resources", REPOSITORY / "scripts" / "kernel_resources.py")
    path = path or structural.COMPILED_RESOURCES_PATH
    table = structural.read_compiled_resources(path)
    for key, result in compiled.items():
        for name, fields in result["kernels"].items():
            record = table["entries"][key]["kernels"].get(name)
            if record is not None:
                record.update({field: value for field, value in fields.items() if field in record})
    table.setdefault("former_sources", {}).update({key: commits[key] for key in compiled})
    kernel_resources._write_table(path, table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", type=Path, help="run folders (default: every committed run)")
    parser.add_argument("--shard", default="0/1", help="I/N: compile the I-th of N shares of the commits")
    parser.add_argument("--save", type=Path, help="write the compiled entries to this JSON file")
    parser.add_argument("--apply", nargs="+", type=Path, help="write saved entries into the table")
    parser.add_argument("--write", action="store_true", help="replace the table's fields")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--worktree", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.worktree)
        return
    if args.apply:
        saved = {key: value for path in args.apply for key, value in json.loads(path.read_text()).items()}
        write({key: value["commit"] for key, value in saved.items()}, saved)
        return
    from tflabench.analysis import structural
    from tflabench.analysis.run_data import committed_run_dirs

    run_dirs = ([path.resolve() for path in args.runs] if args.runs
                else committed_run_dirs(REPOSITORY / "results"))
    commits = entry_commits(run_dirs)
    entries = structural.read_compiled_resources()["entries"]
    index, shares = (int(part) for part in args.shard.split("/"))
    compiled = {}
    for commit in _share(commits, index, shares):
        keys = sorted(key for key, at in commits.items() if at == commit)
        print(f"# {commit}: {len(keys)} entries", flush=True)
        compiled.update({key: {**result, "commit": commit} for key, result in
                         _compile_at(commit, {key: entries[key] for key in keys}).items()})
    for key in sorted(compiled):
        result = compiled[key]
        changes, absent = " ".join(result["changes"]) or "nothing", result["absent_fields"] or "none"
        print(key, f"at {commits[key]} (set {changes}; absent at the commit: {absent})")
        print("\n".join(differences(entries[key], result)) or "  the same")
    if args.save:
        args.save.write_text(json.dumps(compiled, indent=1, sort_keys=True) + "\n")
    if args.write:
        write(commits, compiled)


def _share(commits: dict[str, str], index: int, shares: int) -> list[str]:
    """The commits of share ``index`` of ``shares``: the commits by falling entry count dealt to the share
    with the fewest entries so far."""
    counts = collections.Counter(commits.values())
    dealt: list[list[str]] = [[] for _ in range(shares)]
    for commit in sorted(counts, key=lambda commit: (-counts[commit], commit)):
        min(dealt, key=lambda share: sum(counts[item] for item in share)).append(commit)
    return sorted(dealt[index])


def _compile_at(commit: str, entries: dict[str, dict]) -> dict[str, dict]:
    """`compile_at_commit` in a temporary git worktree at ``commit``."""
    with tempfile.TemporaryDirectory() as folder:
        worktree = Path(folder) / "source"
        subprocess.run(["git", "-C", str(REPOSITORY), "worktree", "add", "--detach", str(worktree), commit],
                       check=True, capture_output=True)
        try:
            return compile_at_commit(worktree, entries)
        finally:
            subprocess.run(["git", "-C", str(REPOSITORY), "worktree", "remove", "--force", str(worktree)],
                           check=True)


if __name__ == "__main__":
    main()
