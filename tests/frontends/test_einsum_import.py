"""ONNX Einsum lowered to sums, transposes, reshapes and batched products (onnx_einsum.py): the
forms exporters write, against onnx's evaluator and, through torch.onnx.export, PyTorch; what
it does not take refused by name."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import optgraph as og
from optgraph.errors import OptGraphError
from tests.frontends.numerics import assert_matches, ops_of


def _model(equation: str, shapes: list[tuple[int, ...]], dtype: int = TensorProto.FLOAT) -> Any:
    names = [f"x{i}" for i in range(len(shapes))]
    graph = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], equation=equation)], "g",
        [helper.make_tensor_value_info(n, dtype, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", dtype, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


EQUATIONS = [
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)], 1),  # attention scores
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)], 1),  # attention output
    ("bchw,bkhw->bck", [(1, 2, 4, 6), (1, 3, 4, 6)], 1),
    ("nhwpqc->nchpwq", [(1, 2, 3, 2, 2, 4)], 0),  # diffusers' unpatchify
    ("...n,d->...nd", [(2, 5), (3,)], 1),  # an outer product (rope angles)
    ("i,j->ij", [(3,), (4,)], 1),
    ("ij,jk", [(3, 4), (4, 5)], 1),  # implicit output: ik
    ("ij->", [(3, 4)], 0),
    ("i,i", [(5,), (5,)], 1),  # implicit: a scalar
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], 1),  # broadcast batch axes
    ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 6)], 2),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)], 1),
    ("ij,ij->i", [(3, 4), (3, 4)], 1),
    ("bij->bj", [(2, 3, 4)], 0),
]


@pytest.mark.parametrize(("equation", "shapes", "products"), EQUATIONS)
def test_einsum_matches_the_reference_evaluator(
    equation: str, shapes: list[tuple[int, ...]], products: int
) -> None:
    model = _model(equation, shapes)
    rng = np.random.default_rng(0)
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    want = ReferenceEvaluator(model).run(None, feeds)
    graph, weights = og.from_onnx(model)
    assert_matches(graph, weights, feeds, [np.asarray(w) for w in want])
    assert ops_of(graph).count("matmul") == products


def test_integer_einsum_is_exact() -> None:
    model = _model("ij,jk->ik", [(3, 4), (4, 2)], TensorProto.INT64)
    a, b = np.arange(12).reshape(3, 4), np.arange(8).reshape(4, 2) - 3
    graph, weights = og.from_onnx(model)
    got = og.compile(graph, target="cpu").run({"x0": a, "x1": b}, weights)["y"]
    assert np.array_equal(got, a @ b)


@pytest.mark.parametrize(
    ("equation", "shapes", "message"),
    [
        ("ii->i", [(3, 3)], "repeats a letter"),
        ("ij->k", [(3, 4)], "has one no input has"),
        ("ij,jk->ik", [(3, 4), (5, 2)], "letter 'j' has sizes 4 and 5"),
        ("ij,jk->ik", [(3, 1), (4, 2)], "summed over sizes that differ"),
        ("ijk->ij", [(3, 4)], "does not match an input of rank 2"),
    ],
)
def test_equations_it_does_not_take_are_refused_by_name(
    equation: str, shapes: list[tuple[int, ...]], message: str
) -> None:
    with pytest.raises(OptGraphError, match=message):
        og.from_onnx(_model(equation, shapes))


def test_torch_einsum_through_the_onnx_exporter_matches_pytorch() -> None:
    torch = pytest.importorskip("torch", reason="needs PyTorch")

    class Einsums(torch.nn.Module):
        def forward(self, x: Any, q: Any, k: Any) -> Any:
            patches = torch.einsum("nhwpqc->nchpwq", x)  # SD3's unpatchify
            scores = torch.einsum("bhqd,bhkd->bhqk", q, k)
            return patches.reshape(1, 3, 8, 8), scores.softmax(-1)

    torch.manual_seed(0)
    args = (torch.randn(1, 4, 4, 2, 2, 3), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 8))
    with torch.no_grad():
        want = [t.numpy() for t in Einsums()(*args)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        program = torch.onnx.export(Einsums(), args, dynamo=True)
    assert "Einsum" in {n.op_type for n in program.model_proto.graph.node}
    graph, weights = og.from_onnx(program.model_proto)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, want)
