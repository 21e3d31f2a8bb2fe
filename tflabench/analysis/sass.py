"""What a compiled Triton kernel costs on chip, read from its cubin with the cuobjdump bundled with Triton:
registers per thread, stack (spill) bytes per thread, and the local-memory bytes its outermost loop moves
per trip (its register spills' loads and stores). Used by `scripts/kernel_resources.py` (kernels compiled
for sm_90 without a GPU) and by the spill calibration (`calibrate_blocks.measure_spills`, kernels the JIT
compiled on the GPU)."""

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
    """{registers, local_bytes, stack_bytes (per thread), loop_local_bytes (per thread and loop trip)}."""
    usage = _cuobjdump(cubin, "--dump-resource-usage")
    fields = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", usage))
    return {"registers": int(fields.get("REG", 0)), "local_bytes": int(fields.get("LOCAL", 0)),
            "stack_bytes": int(fields.get("STACK", 0)), "loop_local_bytes": loop_local_bytes(
                _cuobjdump(cubin, "-sass"))}


def loop_local_bytes(sass: str) -> int:
    """Bytes per thread that the local-memory loads and stores (LDL, STL: register spills) move in one trip
    of the kernel's outermost loop: the widest range between a backward branch and its target (cuobjdump's
    SASS listing, addresses in comments)."""
    instructions = [(int(address, 16), text.split()) for address, text in
                    re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    branch = re.compile(r"BRA(?:\.\w+)*\s+0x([0-9a-f]+)")
    loops = [(int(target, 16), address) for address, words in instructions
             for target in branch.findall(" ".join(words)) if int(target, 16) < address]
    if not loops:
        return 0
    start, end = max(loops, key=lambda loop: loop[1] - loop[0])
    moved = 0
    for address, words in instructions:
        opcode = words[1] if words and words[0].startswith("@") else (words[0] if words else "")
        if start <= address <= end and opcode.split(".")[0] in ("LDL", "STL"):
            width = re.search(r"\.(64|128)\b", opcode)
            moved += int(width.group(1)) // 8 if width else 4
    return moved
