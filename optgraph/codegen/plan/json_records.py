"""Frozen dataclass records as JSON-ready data and text, fast enough for a 100k-node model.

`asdict` deep-copies every leaf. For a 100k-node model's CUDA plan and program (hundreds of
thousands of steps and buffers) those copies took most of `optgraph compile -o`'s time. The
records here hold only immutable leaves (str, int, float, bool, None), so the leaves are shared
and the containers are rebuilt as `asdict` rebuilds them (a tuple stays a tuple, a list a list):

    json_data(Location("arena", "", 64))  ->  {"space": "arena", "key": "", "offset": 64}

Complexity: linear in the size of the record tree.
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from typing import Any

_NAMES: dict[type, tuple[str, ...]] = {}


def json_data(record: Any) -> Any:
    """`dataclasses.asdict(record)` for records of immutable leaves (the same dict)."""
    if is_dataclass(record) and not isinstance(record, type):
        names = _NAMES.get(type(record))
        if names is None:
            names = _NAMES[type(record)] = tuple(f.name for f in fields(record))
        return {name: json_data(getattr(record, name)) for name in names}
    if isinstance(record, (list, tuple)):
        return type(record)(json_data(v) for v in record)
    if isinstance(record, dict):
        return {json_data(k): json_data(v) for k, v in record.items()}
    return record


def json_record(record: object) -> dict[str, Any]:
    """`json_data` of one dataclass record: its fields as a dict."""
    data = json_data(record)
    if not isinstance(data, dict):
        raise TypeError(f"json_record: {type(record).__name__} is not a dataclass record")
    return data


def json_text(data: dict[str, Any]) -> str:
    """`data` as JSON text, one line a top-level entry, and one line a record where an entry is a
    list or dict of records: readable line by line, and written by the json module's C encoder
    (an indented `json.dumps` goes through its Python encoder: minutes of CPU on the plan of a
    100k-node model):

        {"graph": "g", "steps": [{...}, {...}]}  ->  {
                                                       "graph": "g",
                                                       "steps": [
                                                        {...},
                                                        {...}
                                                       ]
                                                      }
    """
    lines = ["{"]
    entries = list(data.items())
    for k, (key, value) in enumerate(entries):
        comma = "," if k + 1 < len(entries) else ""
        head = f" {json.dumps(key)}: "
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], (dict, list)):
            items = [f"  {json.dumps(item)}" for item in value]
            lines += [head + "[", ",\n".join(items), f" ]{comma}"]
        elif isinstance(value, dict) and value and isinstance(next(iter(value.values())), dict):
            items = [f"  {json.dumps(name)}: {json.dumps(item)}" for name, item in value.items()]
            lines += [head + "{", ",\n".join(items), f" }}{comma}"]
        else:
            lines.append(f"{head}{json.dumps(value)}{comma}")
    return "\n".join([*lines, "}"]) + "\n"
