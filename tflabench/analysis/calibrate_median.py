"""One calibration from several: the median of every measured figure over calibrations of one GPU model.

A calibration (`tflabench calibrate`) is a draw of one machine: over five H200s of one pool the token read
rate spread over 3.83-4.16 TB/s and the launch time over 10.5-17.6 us (results/calibration-repeats/).
`median_calibration` takes calibrations of the same GPU key made by the same calibration code (the same
figures and tile entries) and gives the median of each measured figure, so that the model's inputs are
those of a typical machine of the pool rather than of the one that happened to be calibrated.

What counts as measured: every float. Integers, strings and booleans (tile shapes, warps, SM count, L2 size,
compiled spill bytes) name what was measured and must agree, and so must lists of them (the shape of the walk
``blocks.issue`` times). Lists of tile entries (``blocks.dot``, ``blocks.walk``) are matched by those naming
fields, in any order.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from tflabench.errors import InputError

#: top-level fields rewritten rather than merged: what the result is made from
_DESCRIBED = ("source", "provenance")


def median_calibration(records: Sequence[dict], names: Sequence[str], command: str) -> dict:
    """The calibration whose every measured figure is the median of ``records`` (parsed calibration files,
    two or more, of one GPU key; ``names``: their file names, for messages and the provenance); ``source``
    says what it is made of and ``provenance`` lists each input's (``command``: the one that merged them)."""
    if len(records) < 2:
        raise InputError(f"a median needs two or more calibrations, got {len(records)}")
    measured = [_measured(record, name) for record, name in zip(records, names, strict=True)]
    keys = {record["gpu"] for record in measured}
    if len(keys) != 1:
        raise InputError(f"the calibrations are of different GPUs: {', '.join(sorted(map(str, keys)))}")
    merged = _merge(measured, names, "")
    merged["source"] = f"median of {len(records)} calibrations ({', '.join(names)})"
    merged["provenance"] = {
        "command": command,
        "median_of": [{"file": name, **record.get("provenance", {})}
                      for name, record in zip(names, records, strict=True)],
    }
    return merged


def _measured(record: dict, name: str) -> dict:
    if not isinstance(record, dict) or "gpu" not in record or "flops" not in record:
        raise InputError(f"{name} is not a calibration file (no gpu and flops fields)")
    return {key: value for key, value in record.items() if key not in _DESCRIBED}


def _merge(values: list, names: Sequence[str], path: str):
    """The median of floats, the common value of naming fields (and of lists of them), recursively through
    objects and lists of entries."""
    first = values[0]
    if isinstance(first, float) and all(_is_float(value) for value in values):
        return statistics.median(float(value) for value in values)
    if isinstance(first, dict) and all(isinstance(value, dict) for value in values):
        return _merge_objects(values, names, path)
    if all(isinstance(value, list) and all(isinstance(entry, dict) for entry in value) for value in values):
        return _merge_entries(values, names, path)
    if any(value != first or type(value) is not type(first) for value in values):
        raise InputError(f"the calibrations differ in {path or 'their top level'}: "
                         + ", ".join(f"{name}: {value!r}" for name, value in zip(names, values, strict=True)))
    return first


def _is_float(value) -> bool:
    return isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool))


def _merge_objects(objects: list[dict], names: Sequence[str], path: str) -> dict:
    fields = set(objects[0])
    for name, other in zip(names, objects, strict=True):
        if set(other) != fields:
            missing = sorted(fields.symmetric_difference(other))
            where = path or "their top level"
            raise InputError(f"the calibrations do not measure the same figures in {where} ({name}: "
                             f"{', '.join(missing)}): make them with the same tflabench")
    return {field: _merge([obj[field] for obj in objects], names, f"{path}.{field}".lstrip("."))
            for field in objects[0]}


def _merge_entries(lists: list[list], names: Sequence[str], path: str) -> list:
    """Entries matched by their naming fields (every field that is not a float), in the order of the first
    calibration's list."""
    by_name = [{_entry_name(entry): entry for entry in entries} for entries in lists]
    order = [_entry_name(entry) for entry in lists[0]]
    for name, entries in zip(names, by_name, strict=True):
        if set(entries) != set(order) or len(entries) != len(lists[0]):
            raise InputError(f"the calibrations do not measure the same entries in {path} ({name}): make "
                             "them with the same tflabench")
    return [_merge([entries[key] for entries in by_name], names, f"{path}[{dict(key)}]") for key in order]


def _entry_name(entry) -> tuple:
    if not isinstance(entry, dict):
        return (("value", repr(entry)),)
    return tuple(sorted((key, value) for key, value in entry.items() if not isinstance(value, float)))
