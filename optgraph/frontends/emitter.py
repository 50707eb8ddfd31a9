"""`Emitter`: how an importer adds the IR nodes of one imported op, so that lowerings written
once serve both importers (`gathers.py`, `topk.py`, `integer_clamp.py`, `conv1d_group_norm.py`).

    em.step(op, operands, result, attrs) -> name   an intermediate node (torch types it with
                                                   `result`; ONNX infers it with the op table)
    em.last(op, operands, attrs) -> name           the op's own result, typed as the model says
    em.constant(array, hint) -> name               a constant folded at import

The torch importer's is `torch_values.NodeEmitter`, the ONNX one's `onnx_context.OnnxEmitter`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from optgraph.ir.graph import AttrValue, TensorType


class Emitter(Protocol):
    """How an importer adds the nodes of one imported op."""

    def step(self, op: str, operands: list[str], result: TensorType,
             attrs: dict[str, AttrValue] | None = None) -> str: ...  # fmt: skip

    def last(self, op: str, operands: list[str], attrs: dict[str, AttrValue] | None = None) -> str:
        """The op's own result (typed as the source model says)."""
        ...

    def constant(self, array: np.ndarray, hint: str) -> str: ...
