"""A tiny valid `.pt2` archive (`torch.export.save`) and hypothesis strategies that damage one
part of it at a time, knowing the format (tests/bad_input/test_fuzz_pt2.py).

    files = tiny_archive()                  # {member name: bytes} of a Linear, a ReLU, a buffer
    mutant = draw(pt2_mutants(files))       # a Mutant: what was changed, the archive's bytes

A `.pt2` is a zip archive under one folder (`archive/` when saved to a buffer): `models/model.json` (the serialized graph),
`data/weights/model_weights_config.json` and `data/constants/model_constants_config.json` (per
tensor: its member, dtype, sizes, strides, offset, and whether it is pickled), the raw tensors
`data/weights/weight_N`, `data/sample_inputs/model.pt` (a `torch.save` file) and version members.
A mutant removes or replaces a member, changes one value in a JSON member (a key dropped, a
number made huge or negative, a type changed), cuts or extends a tensor's data, replaces a node's
ATen op by another real one, or cuts or changes the archive's bytes; `hostile_pickle` makes the
pickle that runs code which tests put where torch unpickles.
"""

from __future__ import annotations

import functools
import io
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.support.fuzz_checks import HUGE, Mutant

MODEL = "archive/models/model.json"
WEIGHTS_CONFIG = "archive/data/weights/model_weights_config.json"
CONSTANTS_CONFIG = "archive/data/constants/model_constants_config.json"
SAMPLE_INPUTS = "archive/data/sample_inputs/model.pt"


@functools.cache
def tiny_archive() -> dict[str, bytes]:
    """{member: bytes} of y = relu(linear(x)) * scale exported and saved by torch."""
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            self.register_buffer("scale", torch.tensor([2.0, 1.0, 0.5]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.lin(x)) * self.scale

    torch.manual_seed(0)
    program = torch.export.export(Tiny(), (torch.randn(2, 4),))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


class MakesFile:
    """Unpickling this creates the file `path`: what a hostile archive's pickle could do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path(self.path).touch, ())


def hostile_pickle(marker: Path) -> bytes:
    """A `torch.save`-format file whose unpickling creates `marker` (and no tensors)."""
    import torch

    buffer = io.BytesIO()
    torch.save({"x": MakesFile(str(marker))}, buffer)
    return buffer.getvalue()


def plain_pickle(marker: Path) -> bytes:
    """The same as a bare pickle (what `pickle.loads` of an opaque constant reads)."""
    return pickle.dumps(MakesFile(str(marker)))


ODD_VALUES = [None, -1, 0, 2**40, *HUGE[3:], 1.5, "x", "", [], {}, True, [1] * 70]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path of keys and indices into a JSON value (the root excluded)."""
    found = []
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else []
    )
    for key, inner in items:
        found.append((*prefix, key))
        found.extend(_paths(inner, (*prefix, key)))
    return found


def _json_changed(text: bytes, path: tuple[Any, ...], value: Any, drop: bool) -> bytes:
    document = json.loads(text)
    inner = document
    for key in path[:-1]:
        inner = inner[key]
    if drop and isinstance(inner, dict):
        del inner[path[-1]]
    else:
        inner[path[-1]] = value
    return json.dumps(document).encode()


def _json_changes(files: dict[str, bytes], member: str) -> st.SearchStrategy[Mutant]:
    paths = _paths(json.loads(files[member]))
    short = member.rsplit("/", 1)[-1]

    def change(path: tuple[Any, ...], value: Any, drop: bool) -> Mutant:
        shown = "/".join(map(str, path))[-60:]
        what = f"{short}: {shown} {'dropped' if drop else f'= {str(value)[:20]}'}"
        return Mutant(
            what, zipped({**files, member: _json_changed(files[member], path, value, drop)})
        )

    return st.builds(change, st.sampled_from(paths), st.sampled_from(ODD_VALUES), st.booleans())


def _member_changes(files: dict[str, bytes]) -> st.SearchStrategy[Mutant]:
    names = sorted(files)
    junk = [b"", b"\0" * 7, b"not json", b"{}", b"[]", b"null", b'{"config": 5}', b"PK\x03\x04"]

    def removed(name: str) -> Mutant:
        return Mutant(f"{name} removed", zipped({k: v for k, v in files.items() if k != name}))

    def replaced(name: str, data: bytes) -> Mutant:
        return Mutant(f"{name} = {data[:12]!r}", zipped({**files, name: data}))

    def resized(name: str, delta: int) -> Mutant:
        data = files[name]
        data = data[:delta] if delta < 0 else data + bytes(delta)
        return Mutant(f"{name} {delta:+d} bytes", zipped({**files, name: data}))

    weights = [n for n in names if "/weights/weight_" in n]
    return st.one_of(
        st.sampled_from(names).map(removed),
        st.builds(replaced, st.sampled_from(names), st.sampled_from(junk)),
        st.builds(resized, st.sampled_from(weights), st.sampled_from([-48, -4, -1, 1, 4, 4096])),
        st.just(Mutant("an extra member", zipped({**files, "archive/extra/x": b"x"}))),
        st.just(Mutant("renamed folder", zipped({"n" + k[1:]: v for k, v in files.items()}))),
    )


TARGETS = [b"torch.ops.aten.relu.default", b"torch.ops.aten.mul.Tensor",
           b"torch.ops.aten.linear.default"]  # fmt: skip
OTHER_OPS = ["erfinv.default", "mm.default", "add.Tensor", "view.default", "sum.dim_IntList",
             "permute.default", "softmax.int", "cat.default", "relu.default", "mul.Scalar",
             "index_select.default", "embedding.default", "layer_norm.default"]  # fmt: skip


def _op_changes(files: dict[str, bytes]) -> st.SearchStrategy[Mutant]:
    """A node's ATen op replaced by another real one: torch deserializes a program whose
    arguments do not fit the op, or one optgraph does not map."""
    text = files[MODEL]

    def change(target: bytes, other: str) -> Mutant:
        changed = text.replace(target, f"torch.ops.aten.{other}".encode(), 1)
        what = f"{target.decode().rsplit('.', 2)[-2]} made {other}"
        return Mutant(what, zipped({**files, MODEL: changed}))

    return st.builds(change, st.sampled_from(TARGETS), st.sampled_from(OTHER_OPS))


def _byte_changes(files: dict[str, bytes]) -> st.SearchStrategy[Mutant]:
    raw = zipped(files)
    cut = st.integers(0, len(raw) - 1).map(lambda n: Mutant(f"cut to {n} bytes", raw[:n]))
    flip = st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)).map(
        lambda p: Mutant(f"byte {p[0]} = {p[1]}", raw[: p[0]] + bytes([p[1]]) + raw[p[0] + 1 :])
    )
    return cut | flip


def _zip_field_changes(files: dict[str, bytes]) -> st.SearchStrategy[Mutant]:
    """One field of one member's local or central zip header changed (`fuzz_npz.LOCAL`)."""
    from tests.support.fuzz_npz import CENTRAL, FIELD_VALUES, LOCAL, patch_field

    raw = zipped(files)

    def change(central: bool, field: str, which: int, value: int) -> Mutant:
        central = central or field not in LOCAL  # the offset is the central directory's
        table, signature = (CENTRAL, b"PK\x01\x02") if central else (LOCAL, b"PK\x03\x04")
        at, fmt = table[field]
        patched = patch_field(raw, signature, which, at, fmt, value)
        where = "central" if central else "local"
        return Mutant(f"{where} header {which} {field} = {value}", patched or raw)

    return st.builds(
        change,
        st.booleans(),
        st.sampled_from(sorted(CENTRAL)),
        st.integers(0, len(files) - 1),
        st.sampled_from([*FIELD_VALUES, 2**32 - 4]),
    )


def pt2_mutants(files: dict[str, bytes]) -> st.SearchStrategy[Mutant]:
    """The tiny archive `files` with one thing changed (see the module docstring)."""
    return st.one_of(
        _json_changes(files, MODEL),
        _json_changes(files, WEIGHTS_CONFIG),
        _member_changes(files),
        _op_changes(files),
        _zip_field_changes(files),
        _byte_changes(files),
    )
