"""PyTorch in: `from_torch(module_or_exported_program, example_args)` through `torch.export`.

The module is exported (`torch.export.export`, static shapes from the example arguments) and its
ATen graph decomposed to core ATen except for the ops `aten_ops.CONVERTERS` maps directly (linear,
the norms, scaled_dot_product_attention, gelu, silu, conv2d, ...): those are kept whole so they
become optgraph's fast ops. Then each node becomes IR nodes:

- graph inputs take `forward`'s parameter names, in order; outputs keep their order;
- parameters become weights under their real names (`layers.0.attn.q_proj.weight`); with
  `read_parameters=False` their values are not read (only their dtypes and shapes: a module
  whose parameters are placeholders, e.g. zero-stride views, exports the same graph) and the
  caller gives them (`frontends/hf_checkpoint.py`: from a checkpoint, memory-mapped);
- a node whose tensor operands are all constants (buffers, literals, shape arithmetic) is run by
  PyTorch at import and becomes a constant (float64 arithmetic in float64: the IR sees only the
  result, narrowed to float32); constants still read at the end become weights (a buffer keeps
  its name, others are `const.N`);
- raising (`raising.py`) turns norm, GELU and rope patterns into fast ops.

Errors: a dynamic dimension names the value and the dimension; ATen ops with no IR counterpart are
listed together (op, count, nodes), located at the first one's line in the model's source.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from optgraph.errors import OptGraphError, Span
from optgraph.frontends.aten_ops import CONVERTERS
from optgraph.frontends.draft import Draft, in_file
from optgraph.frontends.pt2_files import (
    check_pickles,
    collected_logs,
    first_line,
    first_logged_error,
)
from optgraph.frontends.raising import raise_patterns
from optgraph.frontends.torch_values import (
    Converter,
    TorchContext,
    node_span,
    to_numpy,
    torch_module,
    value_type,
)
from optgraph.ir.graph import AttrValue, Graph

__all__ = ["from_pt2", "from_torch", "load_exported_program"]

_IGNORED = ("aten._assert_tensor_metadata", "aten._assert_scalar", "aten.sym_constrain_range")


def load_exported_program(path: str) -> Any:
    """A `torch.export.save` file; an `OptGraphError` when it is not one, or when torch would
    unpickle anything but tensors from it (`pt2_files.check_pickles`)."""
    torch = torch_module()
    if not zipfile.is_zipfile(path):  # before torch, which logs a traceback for a bad archive
        raise OptGraphError(
            f"import: {path}: not a torch.export program (.pt2): not a zip archive",
            Span(path, 1, 1),
        )
    check_pickles(torch, path)
    with collected_logs() as records:
        try:
            return torch.export.load(path)
        except FileNotFoundError:
            raise OptGraphError(f"import: {path}: no such file") from None
        except Exception as err:  # noqa: BLE001 - torch raises many kinds for a bad archive
            # torch logs the first error and raises a vaguer one ("see the warnings above")
            first = first_logged_error(records) or first_line(err)
            raise OptGraphError(
                f"import: {path}: not a torch.export program (.pt2): {first}",
                Span(path, 1, 1),
            ) from None


def from_pt2(path: str) -> tuple[Graph, dict[str, np.ndarray]]:
    """(graph, weights) of the `.pt2` file `path`; every error names the file."""
    torch = torch_module()
    loaded = load_exported_program(path)
    try:
        program = _decomposed(torch, loaded)
    except Exception as err:  # noqa: BLE001 - a damaged archive's program fails inside torch
        raise OptGraphError(
            f"import: {path}: torch cannot decompose the program it holds (damaged?): "
            f"{first_line(err)}",
            Span(path, 1, 1),
        ) from None
    try:
        return _from_program(torch, program, "model", read_parameters=True)
    except OptGraphError as err:
        raise in_file(err, path) from None


def _export(torch: Any, model: Any, example_args: Sequence[Any] | None) -> Any:
    if isinstance(model, torch.export.ExportedProgram):
        return model
    if example_args is None:
        raise OptGraphError("import: a torch module needs example_args to be exported")
    model.eval()
    try:
        return torch.export.export(model, tuple(example_args))
    except Exception as err:  # noqa: BLE001 - export fails in many ways: report, not crash
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise OptGraphError(f"import: torch.export failed: {first}") from None


def _decomposed(torch: Any, program: Any) -> Any:
    """Core ATen, except for the ops optgraph maps whole (they are its fast ops)."""
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if str(op) in CONVERTERS:
            table.pop(op)
    return program.run_decompositions(table)


def _placeholders(
    program: Any, draft: Draft, context: TorchContext, read_parameters: bool = True
) -> set[str]:
    """Inputs, parameters and buffers of `program` into `draft`; the names of the parameters
    whose values were not read (`read_parameters=False`)."""
    signature = program.graph_signature
    unread: set[str] = set()
    params = dict(signature.inputs_to_parameters)
    buffers = dict(signature.inputs_to_buffers)
    constants = dict(signature.inputs_to_lifted_tensor_constants)
    user_inputs = set(signature.user_inputs)
    for node in program.graph.nodes:
        if node.op != "placeholder":
            continue
        if node.name in params:
            target = params[node.name]
            tensor = program.state_dict[target]
            if read_parameters:
                draft.weights[target] = to_numpy(tensor)
            else:  # typed by an array of no memory: Draft.finish reads dtype and shape only
                empty = np.zeros((), to_numpy(tensor.new_zeros(())).dtype)
                draft.weights[target] = np.broadcast_to(empty, tuple(tensor.shape))
                unread.add(target)
            context.values[node.name] = target
        elif node.name in buffers or node.name in constants:
            target = buffers.get(node.name) or constants[node.name]
            tensor = program.state_dict.get(target)
            if tensor is None:
                tensor = program.constants[target]
            draft.add_constant(target, to_numpy(tensor))
            context.values[node.name] = target
        elif node.name in user_inputs:
            context.values[node.name] = draft.input(node.name, value_type(node))
        else:
            raise OptGraphError(f"import: unsupported input '{node.name}'", node_span(node))
    return unread


def _fold(torch: Any, node: Any, context: TorchContext) -> bool:
    """Run `node` at import when every tensor it reads is a constant; True when it did."""
    tensors = [a for a in node.all_input_nodes]
    if any(context.values.get(a.name) not in context.draft.constants for a in tensors):
        return False
    if str(node.target).startswith(("aten.rand", "aten.normal", "aten.bernoulli")):
        return False

    def constant(arg: Any) -> Any:
        return from_numpy(np.array(context.draft.exact(context.values[arg.name])))

    result = _run(torch, node, constant)
    if not isinstance(result, torch.Tensor):
        return False
    name = context.draft.constant(to_numpy(result), node.name)
    context.values[node.name] = name
    wide = _wide_shadow(torch, node, context, result)
    if wide is not None:
        context.draft.wide[name] = wide
    return True


def _run(torch: Any, node: Any, tensor_of: Callable[[Any], Any], drop: str = "") -> Any:
    """`node`'s target called on its arguments, each fx node given by `tensor_of` (keyword
    `drop` left out)."""

    def value(arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            return tensor_of(arg)
        if isinstance(arg, (list, tuple)):
            return type(arg)(value(a) for a in arg)
        return arg

    kwargs = {k: value(v) for k, v in node.kwargs.items() if k != drop}
    return node.target(*value(node.args), **kwargs)


_NARROW = ("float16", "bfloat16")


def _wide_shadow(torch: Any, node: Any, context: TorchContext, result: Any) -> np.ndarray | None:
    """The float32 value a folded half-precision constant has before its narrowing cast: the
    cast's operand, or the same op run on its operand's shadow (a reshape of the table). None
    when there is none (`Draft.wide`: what the rope raising recognises tables by)."""
    if str(result.dtype).removeprefix("torch.") not in _NARROW:
        return None
    tensors = list(node.all_input_nodes)
    if len(tensors) != 1:
        return None
    source = context.values[tensors[0].name]
    operand = context.draft.constants[source]
    shadow = context.draft.wide.get(source)
    if shadow is None and operand.dtype == np.float32:
        shadow = operand  # the operand is wide: this node is the cast (or narrows as it goes)
    if shadow is None:
        return None
    wide = None
    if operand is not shadow:  # a view or copy of a narrowed table: the same op on its shadow
        wide = _run(torch, node, lambda _: torch.from_numpy(np.array(shadow)), drop="dtype")
    if not isinstance(wide, torch.Tensor) or wide.dtype != torch.float32:
        wide = torch.from_numpy(np.array(shadow))  # the node is the cast itself
    return to_numpy(wide) if tuple(wide.shape) == tuple(result.shape) else None


def from_numpy(array: np.ndarray) -> Any:
    """A torch tensor of `array`; bfloat16 (ml_dtypes, which torch cannot read) by its bits."""
    torch = torch_module()
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _argument_attrs(torch: Any, node: Any) -> dict[str, AttrValue]:
    """The scalar arguments of an fx node by their schema names, defaults filled in (`bins`,
    `descending`, ...), and for a list of tensors its length: what raising reads from a node
    the importer does not map (`raising_moe`'s sort, histc, index_put)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {}
    attrs: dict[str, AttrValue] = {}
    for index, argument in enumerate(schema.arguments):
        if index < len(node.args):
            value = node.args[index]
        elif argument.name in node.kwargs:
            value = node.kwargs[argument.name]
        elif argument.has_default_value():
            value = argument.default_value
        else:
            continue
        if isinstance(value, (bool, int, float)) and not isinstance(value, torch.fx.Node):
            attrs[argument.name] = value
        elif isinstance(value, (list, tuple)) and value:
            if all(isinstance(v, torch.fx.Node) for v in value):
                attrs[argument.name] = len(value)
            elif all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                attrs[argument.name] = tuple(value)
    return attrs


def _unmapped(torch: Any, context: TorchContext, node: Any, target: str) -> None:
    """A node under its ATen name, for `Draft.finish` to report unless raising consumes it; its
    scalar arguments as attributes, and `result` = i for its i-th result of several."""
    operands = [context.name_of(a) for a in node.all_input_nodes]
    val = node.meta.get("val")
    parts = list(val) if isinstance(val, (list, tuple)) else [val]
    attrs = _argument_attrs(torch, node)
    for index, part in enumerate(parts):
        if not hasattr(part, "shape"):
            continue
        name = node.name if index == 0 else f"{node.name}.{index}"
        result = value_type(node, part)
        at = {**attrs, "result": index} if len(parts) > 1 else attrs
        context.draft.node(target, operands, result, at, name=name, span=node_span(node))
        context.values[name if index == 0 else f"{node.name}#{index}"] = name
        context.values.setdefault(f"{node.name}#{index}", name)


def _convert(torch: Any, program: Any, name: str, read_parameters: bool) -> tuple[Draft, set[str]]:
    draft = Draft(name)
    context = TorchContext(draft)
    unread = _placeholders(program, draft, context, read_parameters)
    for node in program.graph.nodes:
        if node.op == "output":
            outputs = node.args[0]
            draft.outputs = [context.output_name(o) for o in outputs]
            continue
        if node.op != "call_function":
            continue
        target = str(node.target)
        if target.startswith(_IGNORED) or _fold(torch, node, context):
            continue
        convert: Converter | None = CONVERTERS.get(target)
        if convert is None and target == "<built-in function getitem>":
            context.values[node.name] = context.values[f"{node.args[0].name}#{node.args[1]}"]
            continue
        if convert is None:
            _unmapped(torch, context, node, target)
            continue
        convert(context, node)
    return draft, unread


def from_torch(
    model: Any, example_args: Sequence[Any] | None = None, *, read_parameters: bool = True
) -> tuple[Graph, dict[str, np.ndarray]]:
    """(graph, weights) of a torch module (exported with `example_args`) or ExportedProgram.

    `read_parameters=False`: the parameters are weights of the graph by name, dtype and shape,
    but their values are neither read nor returned (the weights hold the import's constants
    only); the caller supplies them."""
    torch = torch_module()
    program = _decomposed(torch, _export(torch, model, example_args))
    name = type(model).__name__ if not isinstance(model, torch.export.ExportedProgram) else "model"
    return _from_program(torch, program, name, read_parameters)


def _from_program(
    torch: Any, program: Any, name: str, read_parameters: bool
) -> tuple[Graph, dict[str, np.ndarray]]:
    draft, unread = _convert(torch, program, name, read_parameters)
    raise_patterns(draft)
    graph, weights = draft.finish()
    return graph, {k: v for k, v in weights.items() if k not in unread}
