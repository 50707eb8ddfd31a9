"""The NumPy reference interpreter: what every compiled program must compute.

`run_reference(graph, inputs, weights)` checks the given arrays against the graph's inputs and
weights (names, dtypes, shapes: any mismatch is an `InputError`), then evaluates the nodes in issue
order with `evaluate_node`, skipping `record`/`wait`, and returns the outputs by name. Values are
dropped after their last use, so peak memory follows the graph's live set. Cost: O(nodes) kernel
calls.

Numerics: f16 and bf16 ops compute in float32 and round each node's result to its dtype (bf16 is
`ml_dtypes.bfloat16`); a fused node evaluates its body node by node, with the same rounding, so it
means exactly what the unfused nodes meant. Kernels are in `kernels`.

Also here: `.npz`/`.safetensors` loading and saving with checks, and `nmse`; seeded random data
(`random_inputs`/`random_weights`) is `random_data`'s, named here too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import ml_dtypes
import numpy as np

from optgraph.errors import Diagnostic, InputError, VerifyError, did_you_mean
from optgraph.ir.constants import with_constants
from optgraph.ir.graph import Graph, Input, Node, TensorType, Weight
from optgraph.ir.ops import attrs_with_defaults, get_op, infer_type
from optgraph.ir.weight_layout import model_type, stored_array
from optgraph.reference.dequantize import dequantize_operands
from optgraph.reference.kernels import KERNELS, ir_dtype, numpy_dtype
from optgraph.reference.moe import stored_moe
from optgraph.reference.npz_files import read_npz
from optgraph.reference.random_data import random_inputs, random_weights
from optgraph.reference.safetensors_file import read_safetensors

__all__ = [
    "evaluate_node",
    "load_inputs",
    "load_weights",
    "nmse",
    "numpy_dtype",
    "random_inputs",
    "random_weights",
    "run_reference",
    "save_weights",
]

_WIDE = {np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
# Ops that move a quantized value's bytes as they are (the copies passes make of weights).
_MOVES_BYTES = frozenset({"copy", "prefetch"})


def _describe(array: np.ndarray) -> str:
    """An array's dtype and shape spelled like an IR type where possible: `f32[2,4]`."""
    dtype = ir_dtype(array.dtype) or str(array.dtype)
    return f"{dtype}[{','.join(str(d) for d in array.shape)}]"


def _type_of(array: np.ndarray) -> TensorType:
    dtype = ir_dtype(array.dtype)
    if dtype is None:
        raise InputError(f"arrays of dtype {array.dtype} are not supported ({_describe(array)})")
    return TensorType(dtype, tuple(array.shape))


def evaluate_node(
    node: Node, args: Sequence[np.ndarray], types: Sequence[TensorType] | None = None
) -> np.ndarray:
    """The value of one node given its operands' values (never modifies them).

    `types`: the operands' types, needed where one is quantized (its array holds bytes, see
    `reference.dequantize`); without them each type is read off its array."""
    if node.op == "fused":
        if node.body is None:
            raise VerifyError("fused: missing body", node.span)
        env = dict(zip(node.body.params, args))
        env_types = dict(zip(node.body.params, types)) if types is not None else None
        for inner in node.body.nodes:
            inner_args = [env[o] for o in inner.operands]
            if env_types is None:
                env[inner.name] = evaluate_node(inner, inner_args)
                continue
            inner_types = [env_types[o] for o in inner.operands]
            env[inner.name] = evaluate_node(inner, inner_args, inner_types)
            env_types[inner.name] = inner.type or infer_type(inner, inner_types)
        return env[node.body.result]
    opdef = get_op(node.op)
    if opdef is None or node.is_event:
        raise VerifyError(f"{node.op}: cannot be evaluated", node.span)
    result_type = node.type
    if result_type is None:
        result_type = infer_type(node, types or [_type_of(a) for a in args])
    with np.errstate(all="ignore"):
        out = np.asarray(_kernel_value(node, opdef.category, args, types))
        out = out.astype(numpy_dtype(result_type.dtype), copy=False)
    if out.shape != result_type.array_shape:
        raise VerifyError(
            f"{node.op}: computed a {_describe(out)} value but the node is declared {result_type}",
            node.span,
        )
    return out


def _kernel_value(
    node: Node, category: str, args: Sequence[np.ndarray], types: Sequence[TensorType] | None
) -> np.ndarray:
    """The kernel's value of `node` before rounding to its dtype."""
    if node.op == "moe":
        # Its expert stacks are read as stored: only the experts its tokens select are decoded
        # (a quantized one dequantized, an f16 one widened), never all E.
        operand_types = list(types) if types is not None else [_type_of(a) for a in args]
        return stored_moe(node, args, operand_types, attrs_with_defaults(node))
    if types is not None and node.op not in _MOVES_BYTES and any(t.is_quantized for t in types):
        args = dequantize_operands(node, args, types)
    if category != "data_movement":
        # Row-major operands: NumPy's summation order follows the memory layout, so a reduction
        # of a transposed view would round unlike the same values in a planned (contiguous)
        # buffer. A result depends on its operands' values only.
        args = [np.asarray(a, np.float32 if a.dtype in _WIDE else a.dtype, order="C") for a in args]
    return KERNELS[node.op](node, args, attrs_with_defaults(node))


def _without_sigils(
    given: Mapping[str, np.ndarray],
    declared: Mapping[str, object],
    kind: str,
    source: str,
    diags: list[Diagnostic],
) -> dict[str, np.ndarray]:
    """`given` with a key written as in the IR (`%x`) taken as the value's name (`x`); a value
    given under both spellings is reported."""
    named: dict[str, np.ndarray] = {}
    for key, array in given.items():
        name = key[1:] if key.startswith("%") and key[1:] in declared else key
        if name in named:
            diags.append(
                Diagnostic(f"{kind} '%{name}' given twice in {source} ('{name}', '%{name}')")
            )
            continue
        named[name] = array
    return named


def _check_arrays(
    given: Mapping[str, np.ndarray],
    decls: Sequence[Input] | Sequence[Weight],
    kind: str,
    source: str,
    graph_name: str,
) -> dict[str, np.ndarray]:
    """`given` checked against the declarations: every name present, exact dtype and shape.

    All problems are reported together in one `InputError`.
    """
    diags: list[Diagnostic] = []
    checked: dict[str, np.ndarray] = {}
    declared = {d.name: d for d in decls}
    given = _without_sigils(given, declared, kind, source, diags)
    for decl in decls:
        if decl.name not in given:
            diags.append(
                Diagnostic(f"missing {kind} '%{decl.name}' ({decl.type}) in {source}", decl.span)
            )
            continue
        array = np.asarray(given[decl.name])
        if decl.type.dtype == "bf16" and array.dtype.kind == "V" and array.dtype.itemsize == 2:
            array = array.view(ml_dtypes.bfloat16)  # .npz stores bfloat16 as raw 2-byte records
        expected = model_type(decl) if isinstance(decl, Weight) else decl.type
        if array.dtype != numpy_dtype(expected.dtype) or array.shape != expected.array_shape:
            stored = ""
            if expected.is_quantized:  # its array holds the blocks' bytes
                stored = f" (stored as uint8[{','.join(map(str, expected.array_shape))}])"
            diags.append(
                Diagnostic(
                    f"{kind} '%{decl.name}': expected {expected}{stored}, got "
                    f"{_describe(array)} in {source}",
                    decl.span,
                )
            )
            continue
        checked[decl.name] = array
    for name in given:
        if name not in declared:
            hint = did_you_mean(name, declared, sigil="%")
            diags.append(
                Diagnostic(
                    f"unknown {kind} '{name}' in {source}: graph '{graph_name}' has no such "
                    f"{kind}{hint}"
                )
            )
    if diags:
        raise InputError.from_diagnostics(diags)
    return checked


def run_reference(
    graph: Graph, inputs: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Evaluate `graph` in issue order; the outputs by name, in the graph's output order."""
    env: dict[str, np.ndarray] = {}
    env.update(_check_arrays(inputs, graph.inputs, "input", "the given inputs", graph.name))
    given = with_constants(graph, weights)  # a constant not given: the graph's own value
    checked = _check_arrays(given, graph.weights, "weight", "the given weights", graph.name)
    env.update((w.name, stored_array(w, checked[w.name])) for w in graph.weights)
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.nodes):
        for operand in node.operands:
            last_use[operand] = index
    keep = set(graph.output_names())
    types = graph.value_types()
    for index, node in enumerate(graph.nodes):
        if node.is_event:
            continue
        operand_types = [types[o] for o in node.operands]
        env[node.name] = evaluate_node(node, [env[o] for o in node.operands], operand_types)
        for operand in set(node.operands):
            if last_use[operand] == index and operand not in keep:
                del env[operand]
    return {name: np.array(env[name], copy=True) for name in graph.output_names()}


def nmse(actual: np.ndarray, expected: np.ndarray) -> float:
    """Normalized mean squared error sum((a - e)²) / sum(e²), in float64 (0 when both are 0)."""
    a = np.asarray(actual).astype(np.float64)
    e = np.asarray(expected).astype(np.float64)
    err = float(np.sum((a - e) ** 2))
    norm = float(np.sum(e**2))
    if norm == 0.0:
        return 0.0 if err == 0.0 else math.inf
    return err / norm


# -- files -------------------------------------------------------------------------------------


def _read_arrays(path: str | Path, kind: str, suffixes: Sequence[str]) -> dict[str, np.ndarray]:
    path = Path(path)
    if path.suffix not in suffixes:
        expected = " or ".join(suffixes)
        raise InputError(f"{kind} file '{path}' has an unsupported extension (expected {expected})")
    if not path.is_file():
        raise InputError(f"{kind} file '{path}' not found")
    if path.suffix == ".safetensors":  # its header checked against the file first
        return read_safetensors(path, f"cannot read {kind} file")
    return read_npz(path, kind)  # each member's header checked against the file first


def load_weights(path: str | Path, graph: Graph) -> dict[str, np.ndarray]:
    """The weights of `graph` from a `.npz`, `.safetensors` or `.gguf` file (a GGUF tensor by
    its name, memory-mapped: `gguf_file.GGUFFile.array`), checked name by name."""
    if Path(path).suffix == ".gguf":
        from optgraph.reference.gguf_file import open_gguf

        gguf = open_gguf(path)
        arrays = {w.name: gguf.array(w.name) for w in graph.weights if w.name in gguf.tensors}
        arrays = with_constants(graph, arrays)
        return _check_arrays(arrays, graph.weights, "weight", f"file '{path}'", graph.name)
    arrays = with_constants(graph, _read_arrays(path, "weights", (".npz", ".safetensors")))
    return _check_arrays(arrays, graph.weights, "weight", f"file '{path}'", graph.name)


def load_inputs(path: str | Path, graph: Graph) -> dict[str, np.ndarray]:
    """The inputs of `graph` from a `.npz` file, checked name by name."""
    arrays = _read_arrays(path, "inputs", (".npz",))
    return _check_arrays(arrays, graph.inputs, "input", f"file '{path}'", graph.name)


def save_weights(path: str | Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays to a `.npz` or `.safetensors` file (chosen by the extension)."""
    path = Path(path)
    contiguous = {name: np.require(a, requirements="C") for name, a in arrays.items()}
    if path.suffix == ".npz":
        np.savez(path, **contiguous)  # type: ignore[arg-type]
    elif path.suffix == ".safetensors":
        from safetensors.numpy import save_file

        save_file(contiguous, str(path))
    else:
        raise InputError(
            f"weights file '{path}' has an unsupported extension (expected .npz or .safetensors)"
        )
