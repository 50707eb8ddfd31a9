"""A tiny valid ONNX model and hypothesis strategies that damage one thing in it at a time,
knowing the format (tests/bad_input/test_fuzz_onnx.py).

    model = tiny_model()                       # ModelProto: MatMul, Add, Reshape, Relu; w external
    files = draw(onnx_mutants())               # an OnnxMutant: the model's bytes and its data file

The model reads `x: f32[2,4]`; `w: f32[4,3]` keeps its data in `model.data` beside the model
(external data), `b: f32[3]` and `shape: i64[2]` inline. A mutant changes one thing: a node's
input, output, op type, domain or attributes; a graph output; an initializer's dims, type or data;
the external data's location, offset, length or file; the opsets; an input's type; or the
serialized bytes themselves (cut short, one byte changed); or two or three such changes at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tests.support.fuzz_checks import HUGE

DATA_FILE = "model.data"
W = np.arange(12, dtype=np.float32).reshape(4, 3)
B = np.array([0.5, -1.0, 2.0], dtype=np.float32)


@dataclass(frozen=True)
class OnnxMutant:
    """A damaged model: what was changed (its repr), the `.onnx` bytes and the external data
    file's bytes (None: the file is not there)."""

    what: str
    model: bytes = field(repr=False)
    data: bytes | None = field(repr=False, default=W.tobytes())


def _external(tensor: TensorProto, location: str, offset: int, length: int) -> None:
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def tiny_model() -> onnx.ModelProto:
    """y = relu(reshape(x @ w + b, shape)); w's data in `DATA_FILE` (offset 0, 48 bytes)."""
    w = numpy_helper.from_array(W, "w")
    _external(w, DATA_FILE, 0, W.nbytes)
    inits = [
        w,
        numpy_helper.from_array(B, "b"),
        numpy_helper.from_array(np.array([3, 2], dtype=np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["a"], name="add"),
        helper.make_node("Reshape", ["a", "shape"], ["r"], name="reshape", allowzero=0),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])
    graph = helper.make_graph(nodes, "tiny", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def expected_output(x: np.ndarray) -> np.ndarray:
    return np.maximum((x @ W + B).reshape(3, 2), 0)


Change = Callable[[onnx.ModelProto], None]
NAMES = ["x", "w", "b", "shape", "h", "a", "r", "y", "", "nowhere", "y" * 500, "%x", "\x00"]
OP_TYPES = ["Frobnicate", "", "relu", "Loop", "If", "Scan", "Constant", "Shape", "Identity",
            "MatMul", "Gemm", "Softmax", "Conv", "Gather", "Cast", "Split", "Concat",
            "ConstantOfShape", "Range", "TopK", "Einsum"]  # fmt: skip
DOMAINS = ["", "ai.onnx", "ai.onnx.ml", "com.microsoft", "made.up", "ai.onnx.preview.training"]
VERSIONS = [0, 1, 6, 12, 21, 22, 99, -1, *HUGE[:4]]
DATA_TYPES = [0, 1, 2, 6, 7, 8, 9, 10, 11, 13, 14, 16, 17, 19, 21, 22, 23, 40, 999, -5]
DIMS = [[], [0], [12], [3, 4], [4, 3, 1], [-1, 3], [4, -3], [2**31, 3], [2**62, 2**62],
        [2**63 - 1], [1] * 40, [1] * 70, [48]]  # fmt: skip


def _attribute_values() -> st.SearchStrategy[object]:
    tensor = numpy_helper.from_array(np.array([1.0], np.float32), "t")
    graph = helper.make_graph([], "sub", [], [])
    return st.sampled_from(
        [
            0,
            1,
            -1,
            2**62,
            1.5,
            float("nan"),
            "s",
            b"\xff\xfe",
            [1, 2],
            [1.0, 2.5],
            ["a", "b"],
            tensor,
            graph,
            [2**63 - 1] * 3,
        ]
    )


def _node_changes(model: onnx.ModelProto) -> st.SearchStrategy[tuple[str, Change]]:
    count = len(model.graph.node)
    index = st.integers(0, count - 1)

    def set_input(i: int, slot: int, name: str) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            inputs = m.graph.node[i].input
            if slot < len(inputs):
                inputs[slot] = name
            else:
                inputs.append(name)

        return f"node {i} input {slot} = {name[:20]!r}", change

    def set_output(i: int, slot: int, name: str) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            outputs = m.graph.node[i].output
            if slot < len(outputs):
                outputs[slot] = name
            else:
                outputs.append(name)

        return f"node {i} output {slot} = {name[:20]!r}", change

    def set_op(i: int, op: str, domain: str | None) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            m.graph.node[i].op_type = op
            if domain is not None:
                m.graph.node[i].domain = domain

        return f"node {i} op {op!r} domain {domain!r}", change

    def set_attribute(i: int, key: str, value: object) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            node = m.graph.node[i]
            kept = [a for a in node.attribute if a.name != key]
            del node.attribute[:]
            node.attribute.extend([*kept, helper.make_attribute(key, value)])

        return f"node {i} attribute {key}={str(value)[:30]!r}", change

    def drop_node(i: int) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            del m.graph.node[i]

        return f"node {i} removed", change

    def swap(i: int, j: int) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            nodes = list(m.graph.node)
            nodes[i], nodes[j] = nodes[j], nodes[i]
            del m.graph.node[:]
            m.graph.node.extend(nodes)

        return f"nodes {i} and {j} swapped", change

    def duplicate(i: int) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            m.graph.node.append(m.graph.node[i])

        return f"node {i} repeated at the end", change

    keys = st.sampled_from(["allowzero", "transA", "alpha", "axis", "to", "value", "perm", ""])
    return st.one_of(
        st.builds(set_input, index, st.integers(0, 3), st.sampled_from(NAMES)),
        st.builds(set_output, index, st.integers(0, 2), st.sampled_from(NAMES)),
        st.builds(set_op, index, st.sampled_from(OP_TYPES), st.sampled_from([None, *DOMAINS])),
        st.builds(set_attribute, index, keys, _attribute_values()),
        st.builds(drop_node, index),
        st.builds(swap, index, index),
        st.builds(duplicate, index),
    )


def _initializer_changes(model: onnx.ModelProto) -> st.SearchStrategy[tuple[str, Change]]:
    index = st.integers(0, len(model.graph.initializer) - 1)

    def set_dims(i: int, dims: list[int]) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            del m.graph.initializer[i].dims[:]
            m.graph.initializer[i].dims.extend(dims)

        return f"initializer {i} dims {dims[:4]}{'...' if len(dims) > 4 else ''}", change

    def set_type(i: int, data_type: int) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            m.graph.initializer[i].data_type = data_type

        return f"initializer {i} data_type {data_type}", change

    def resize_data(i: int, delta: int) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            tensor = m.graph.initializer[i]
            raw = tensor.raw_data
            tensor.raw_data = raw[:delta] if delta < 0 else raw + b"\x01" * delta

        return f"initializer {i} raw_data {delta:+d} bytes", change

    def typed_fields(i: int) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            tensor = m.graph.initializer[i]
            tensor.ClearField("raw_data")
            tensor.float_data.extend([1.0, 2.0])  # fewer than the dims say

        return f"initializer {i} float_data of 2 values", change

    def rename(i: int, name: str) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            m.graph.initializer[i].name = name

        return f"initializer {i} named {name[:20]!r}", change

    return st.one_of(
        st.builds(set_dims, index, st.sampled_from(DIMS)),
        st.builds(set_type, index, st.sampled_from(DATA_TYPES)),
        st.builds(resize_data, index, st.sampled_from([-1, -4, -12, -1000, 1, 4, 4096])),
        st.builds(typed_fields, index),
        st.builds(rename, index, st.sampled_from(NAMES)),
    )


def _external_changes() -> st.SearchStrategy[tuple[str, Change]]:
    def set_entry(key: str, value: str) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            entries = m.graph.initializer[0].external_data
            kept = [(e.key, e.value) for e in entries if e.key != key]
            del entries[:]
            for k, v in [*kept, (key, value)]:
                entry = entries.add()
                entry.key, entry.value = k, v

        return f"external {key}={value[:30]!r}", change

    def inline_too() -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            m.graph.initializer[0].raw_data = W.tobytes()

        return "external and raw_data both", change

    locations = ["../model.data", "/etc/passwd", "/dev/zero", "sub/../model.data", "missing.bin",
                 "", ".", "model.data\x00x", "~/model.data", "../../../../../../dev/urandom",
                 "a" * 5000]  # fmt: skip
    numbers = ["-1", "0", "4", "48", "49", "4096", "x", "1e3", "", *map(str, HUGE)]
    return st.one_of(
        st.builds(set_entry, st.just("location"), st.sampled_from(locations)),
        st.builds(set_entry, st.sampled_from(["offset", "length"]), st.sampled_from(numbers)),
        st.builds(set_entry, st.sampled_from(["checksum", "basepath", "other"]), st.just("x")),
        st.builds(inline_too),
    )


def _graph_changes() -> st.SearchStrategy[tuple[str, Change]]:
    def set_output(name: str) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            m.graph.output[0].name = name

        return f"graph output {name[:20]!r}", change

    def drop_outputs() -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            del m.graph.output[:]

        return "no graph outputs", change

    def opset(domain: str, version: int) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            del m.opset_import[:]
            m.opset_import.append(helper.make_opsetid(domain, version))

        return f"opset {domain!r} {version}", change

    def ir_version(version: int) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            m.ir_version = version

        return f"ir_version {version}", change

    def input_type(elem: int, dims: list[int]) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            tensor = m.graph.input[0].type.tensor_type
            tensor.elem_type = elem
            del tensor.shape.dim[:]
            for d in dims:
                tensor.shape.dim.add().dim_value = d

        return f"input elem_type {elem} dims {dims[:4]}", change

    def input_not_tensor() -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            m.graph.input[0].type.sequence_type.elem_type.tensor_type.elem_type = 1

        return "input is a sequence", change

    def input_twice() -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            m.graph.input.append(m.graph.input[0])

        return "input listed twice", change

    return st.one_of(
        st.builds(set_output, st.sampled_from(NAMES)),
        st.builds(drop_outputs),
        st.builds(opset, st.sampled_from(DOMAINS), st.sampled_from(VERSIONS)),
        st.builds(ir_version, st.sampled_from([0, 1, 3, 10, 99, 2**62])),
        st.builds(input_type, st.sampled_from(DATA_TYPES), st.sampled_from(DIMS)),
        st.builds(input_not_tensor),
        st.builds(input_twice),
    )


GROWING = {"ConstantOfShape": ["n"], "Expand": ["b", "n"], "Tile": ["b", "n"],
           "Range": ["zero", "n0", "one"]}  # fmt: skip
COUNTS = [[3], [0], [-1], [2**31], [2**20, 2**20], [2**62], [2**63 - 1], [1] * 70]


def _growing_node() -> st.SearchStrategy[tuple[str, Change]]:
    """A node whose operands are all constants, so folded at import, whose result's size comes
    from an initializer's values (`n`): a few bytes in the file that may ask for terabytes."""

    def grow(op: str, counts: list[int]) -> tuple[str, Change]:
        def change(m: onnx.ModelProto) -> None:
            values = np.array(counts, dtype=np.int64)
            for name, array in (
                ("n", values),
                ("n0", values[:1].reshape(())),
                ("zero", np.array(0, np.int64)),
                ("one", np.array(1, np.int64)),
            ):
                m.graph.initializer.append(numpy_helper.from_array(array, name))  # fmt: skip
            m.graph.node.append(helper.make_node(op, GROWING[op], ["g"], name="grow"))
            m.graph.output.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, None))

        return f"{op} of {counts[:3]}", change

    return st.builds(grow, st.sampled_from(sorted(GROWING)), st.sampled_from(COUNTS))


def _data_file_changes() -> st.SearchStrategy[OnnxMutant]:
    model = tiny_model().SerializeToString()
    data = W.tobytes()
    return st.one_of(
        st.just(OnnxMutant("no data file", model, None)),
        st.integers(0, len(data) - 1).map(
            lambda n: OnnxMutant(f"data file cut to {n} bytes", model, data[:n])
        ),
        st.just(OnnxMutant("data file longer", model, data + b"\0" * 100)),
    )


def _byte_changes() -> st.SearchStrategy[OnnxMutant]:
    model = tiny_model().SerializeToString()
    end = len(model)
    cut = st.integers(0, end - 1).map(lambda n: OnnxMutant(f"cut to {n} bytes", model[:n]))
    flip = st.tuples(st.integers(0, end - 1), st.integers(0, 255)).map(
        lambda p: OnnxMutant(
            f"byte {p[0]} = {p[1]}", model[: p[0]] + bytes([p[1]]) + model[p[0] + 1 :]
        )
    )
    return cut | flip


def _changed(pair: tuple[str, Change]) -> OnnxMutant:
    what, change = pair
    model = tiny_model()
    change(model)
    return OnnxMutant(what, model.SerializeToString())


def _all_changed(pairs: list[tuple[str, Change]]) -> OnnxMutant:
    """Several changes in turn (one that no longer applies, an index past the end, is skipped)."""
    model = tiny_model()
    done = []
    for what, change in pairs:
        try:
            change(model)
        except (IndexError, ValueError, TypeError):
            continue
        done.append(what)
    return OnnxMutant("; ".join(done) or "unchanged", model.SerializeToString())


def onnx_mutants() -> st.SearchStrategy[OnnxMutant]:
    """The tiny model with one thing changed (see the module docstring)."""
    model = tiny_model()
    structural = st.one_of(
        _node_changes(model),
        _initializer_changes(model),
        _external_changes(),
        _graph_changes(),
        _growing_node(),
    )
    stacked = st.lists(structural, min_size=2, max_size=3).map(_all_changed)
    return st.one_of(structural.map(_changed), stacked, _data_file_changes(), _byte_changes())
