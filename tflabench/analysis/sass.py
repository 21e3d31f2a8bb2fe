"""What a compiled Triton kernel costs on chip, read from its cubin with the cuobjdump bundled with Triton:
registers per thread, stack (spill) bytes per thread, the local-memory bytes its outermost loop moves
per trip (its register spills' loads and stores, and the loads alone), and its SASS instructions, all of
them and those of its outermost loop's body (what each warp issues once, and once more per further trip).
Used by `scripts/kernel_resources.py` (kernels compiled for sm_90 without a GPU) and by the spill calibration
(`calibrate_blocks.measure_spills`, kernels the JIT compiled on the GPU)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

import triton


def _cuobjdump(cubin: bytes, *flags: str) -> str:
    """cuobjdump's output for the cubin (the binary bundled with Triton's NVIDIA backend)."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        return subprocess.run([tool, *flags, file.name], capture_output=True, text=True, check=True).stdout


def cubin_resources(cubin: bytes) -> dict:
    """{registers, local_bytes, stack_bytes (per thread), loop_local_bytes (per thread and loop trip),
    loop_load_bytes (the part of them its LDL loads move), instructions, loop_instructions,
    inner_loop_instructions (`instruction_counts`), top_loops (`top_loops`), tile_loop_waits
    (`product_waits` of the outermost loop's body)}."""
    usage = _cuobjdump(cubin, "--dump-resource-usage")
    fields = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", usage))
    instructions = _instructions(_cuobjdump(cubin, "-sass"))
    body = _loop_body(instructions)
    return {"registers": int(fields.get("REG", 0)), "local_bytes": int(fields.get("LOCAL", 0)),
            "stack_bytes": int(fields.get("STACK", 0)), "loop_local_bytes": _local_bytes(body),
            "loop_load_bytes": _local_bytes(body, ("LDL",)),
            "instructions": len(instructions), "loop_instructions": len(body),
            "inner_loop_instructions": len(_body(instructions, _inner_loop(instructions))),
            "top_loops": top_loops(instructions), "tile_loop_waits": product_waits(body)}


def _instructions(sass: str) -> list[tuple[int, list[str]]]:
    """(address, words) of each instruction of cuobjdump's SASS listing (addresses in comments)."""
    return [(int(address, 16), text.split()) for address, text in
            re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]


def _opcode(words: list[str]) -> str:
    """The opcode of an instruction's words (after its predicate, if any)."""
    return words[1] if words and words[0].startswith("@") else (words[0] if words else "")


def _loops(instructions: list[tuple[int, list[str]]]) -> list[tuple[int, int]]:
    """(first, last) address of each loop: a range between a backward branch and its target that holds no
    EXIT and does not lie after the kernel's last EXIT. (The retry stubs of tensor-descriptor waits sit
    after the kernel's EXIT and branch back into its body, or to themselves: no loop.)"""
    branch = re.compile(r"BRA(?:\.\w+)*\s+0x([0-9a-f]+)")
    exits = [address for address, words in instructions if _opcode(words).split(".")[0] == "EXIT"]
    loops = [(int(target, 16), address) for address, words in instructions
             for target in branch.findall(" ".join(words)) if int(target, 16) < address]
    last_exit = max(exits, default=None)
    return [(start, end) for start, end in loops if not any(start <= exit <= end for exit in exits)
            and (last_exit is None or start < last_exit)]


def _widest(loops: list[tuple[int, int]]) -> tuple[int, int] | None:
    return max(loops, key=lambda loop: loop[1] - loop[0]) if loops else None


def _outermost_loop(instructions: list[tuple[int, list[str]]]) -> tuple[int, int] | None:
    """(first, last) address of the kernel's outermost loop: the widest of its loops (`_loops`); None
    without one."""
    return _widest(_loops(instructions))


def _contains(outer: tuple[int, int], inner: tuple[int, int]) -> bool:
    """Whether loop ``inner`` lies inside loop ``outer`` (and is not it)."""
    return inner != outer and outer[0] <= inner[0] and inner[1] <= outer[1]


def _inner_loop(instructions: list[tuple[int, list[str]]]) -> tuple[int, int] | None:
    """(first, last) address of the widest loop inside the outermost one (a state recurrence's loop over
    the sub-chunks of a chunk, within its loop over the chunks); None without one."""
    loops = _loops(instructions)
    outer = _widest(loops)
    if outer is None:
        return None
    return _widest([loop for loop in loops if _contains(outer, loop)])


def _outermost(loops: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The loops among ``loops`` that none of the others holds."""
    return [loop for loop in loops if not any(_contains(other, loop) for other in loops)]


def top_loops(instructions: list[tuple[int, list[str]]]) -> list[list[int]]:
    """[body instructions, instructions of the loops directly inside it] of each loop that no other loop
    holds, widest first: a kernel's tile loops (one per compiled copy: the output kernel's query tiles)
    with the head-dim block loops inside them, and the block loops beside them (the Qbar C blocks before
    the output kernel's key/value loop, the gradient kernels' inter-chunk blocks after their partner loop).
    A head-dim block loop of several trips stays a loop in the SASS (32-wide blocks at 96/96: two and
    three trips), while one of a single trip is folded into the code around it."""
    loops = sorted(set(_loops(instructions)))
    rows = []
    for loop in _outermost(loops):
        nested = _outermost([inner for inner in loops if _contains(loop, inner)])
        inside = sum(len(_body(instructions, inner)) for inner in nested)
        rows.append([len(_body(instructions, loop)), inside])
    return sorted(rows, reverse=True)


def _body(instructions: list[tuple[int, list[str]]], loop: tuple[int, int] | None) -> list[list[str]]:
    """The words of the instructions in ``loop``; none without a loop."""
    return [words for address, words in instructions if loop and loop[0] <= address <= loop[1]]


def _loop_body(instructions: list[tuple[int, list[str]]]) -> list[list[str]]:
    """The words of the instructions in the outermost loop (`_outermost_loop`); none without a loop."""
    return _body(instructions, _outermost_loop(instructions))


def instruction_counts(sass: str) -> tuple[int, int, int]:
    """(SASS instructions of the kernel, those in its outermost loop's body, `_outermost_loop`, those in
    the widest loop inside that one, `_inner_loop`). A warp of a program whose loop makes n trips issues
    about instructions + (n - 1) x loop_instructions: within 0.9-1.4 % of what Nsight Compute counted for
    mLSTMexp's state recurrence and output kernels at 16 x 96/160 and 16 x 128/128, L = 64 and 128
    (results/perf-log.md), where a chunk is one sub-chunk; with an inner loop of m trips per outer trip,
    instructions + (n - 1) x (loop_instructions - inner) + (n m - 1) x inner
    (`structural.issued_instructions`); a kernel of several loops side by side (dQ: its partner tiles, and
    its value blocks twice) needs each loop's trips."""
    instructions = _instructions(sass)
    inner = _body(instructions, _inner_loop(instructions))
    return len(instructions), len(_loop_body(instructions)), len(inner)


def product_waits(body: list[list[str]]) -> int:
    """The waits for every outstanding warpgroup product (``WARPGROUP.DEPBAR.LE gsb0, 0x0``) among
    ``body``: in a tile loop, how often per trip its warps stop until all the products they issued are
    done. 1 in the output kernel's key/value loop at 64/128-128/128; 3-7 where its Dqk blocks are 32 wide
    or masked 128-wide blocks make several trips (Dqk 144-512; results/perf-log.md)."""
    return sum(1 for words in body if _opcode(words).startswith("WARPGROUP.DEPBAR")
               and "".join(words[1:]).endswith("gsb0,0x0"))


def loop_local_bytes(sass: str) -> int:
    """Bytes per thread that the local-memory loads and stores (LDL, STL: register spills) move in one trip
    of the kernel's outermost loop (`_outermost_loop`)."""
    return _local_bytes(_loop_body(_instructions(sass)))


def _local_bytes(body: list[list[str]], opcodes: tuple[str, ...] = ("LDL", "STL")) -> int:
    """Bytes per thread the local-memory instructions of ``opcodes`` (LDL loads, STL stores) among ``body``
    move (4 unless .64 or .128 wide)."""
    moved = 0
    for words in body:
        opcode = _opcode(words)
        if opcode.split(".")[0] in opcodes:
            width = re.search(r"\.(64|128)\b", opcode)
            moved += int(width.group(1)) // 8 if width else 4
    return moved
