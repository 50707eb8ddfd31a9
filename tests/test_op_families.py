"""One family name per op in every layer: the op table, the modules of ir, the reference and the
importers, and the headings of docs/ir.md.

`OpDef.family` names the op's family (`op_specs.FAMILIES`). Where a layer splits its ops by
family, the module is named after it: the type rule of a logic op is in `ir/op_rules_logic.py`
(or the general `op_rules.py`), its reference kernel in `reference/logic.py` (or the general
`kernels.py`; an elementwise op's is its declared NumPy function), its converters in
`frontends/aten_logic_ops.py`, and its docs/ir.md row under `### logic`:

    where: family "logic"  ->  op_rules_logic.where, aten_logic_ops, docs "### logic"
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from optgraph.ir.op_elementwise import ELEMENTWISE
from optgraph.ir.op_specs import FAMILIES
from optgraph.ir.ops import OPS
from optgraph.reference.elementwise import semantics
from optgraph.reference.kernels import KERNELS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "optgraph"


def test_every_op_has_a_family_and_every_family_an_op() -> None:
    for name, opdef in OPS.items():
        assert opdef.family in FAMILIES, (name, opdef.family)
    assert {opdef.family for opdef in OPS.values()} == set(FAMILIES)


def test_elementwise_ops_are_arithmetic_or_logic() -> None:
    for name, op in ELEMENTWISE.items():
        assert op.family in ("arithmetic", "logic"), name
        assert OPS[name].family == op.family and OPS[name].category == "elementwise"
    others = {n for n, d in OPS.items() if d.category == "elementwise"} - set(ELEMENTWISE)
    assert not others, f"elementwise ops not declared in ir/op_elementwise.py: {sorted(others)}"


def test_type_rules_live_in_their_family_module() -> None:
    for name, opdef in OPS.items():
        allowed = {"optgraph.ir.op_rules", f"optgraph.ir.op_rules_{opdef.family}"}
        if name == "fused":
            allowed.add("optgraph.ir.ops")  # a region's type is its body's, inferred by the table
        assert opdef.infer.__module__ in allowed, (name, opdef.infer.__module__)


def test_reference_kernels_live_in_their_family_module() -> None:
    for name, kernel in KERNELS.items():
        family = OPS[name].family
        if name in ELEMENTWISE:
            function = semantics(ELEMENTWISE[name].numpy)
            module = getattr(function, "__module__", None) or "numpy"
            assert module in ("optgraph.reference.elementwise", "numpy"), (name, module)
            assert isinstance(function, np.ufunc) or module != "numpy"
            continue
        allowed = {"optgraph.reference.kernels", f"optgraph.reference.{family}"}
        assert kernel.__module__ in allowed, (name, kernel.__module__)


def test_family_modules_are_named_after_families() -> None:
    named = {
        "ir": [p.stem.removeprefix("op_rules_") for p in (PACKAGE / "ir").glob("op_rules_*.py")],
        "reference": [
            p.stem
            for p in (PACKAGE / "reference").glob("*.py")
            # elementwise.py: the semantics the elementwise declarations name, of both of
            # their families (arithmetic, logic)
            # gguf_file.py, gguf_header.py, npz_files.py, safetensors_file.py: the file formats
            # values and weights are read from
            # random_data.py: seeded inputs and weights for runs, of every family's readers
            if p.stem
            not in (
                "__init__",
                "kernels",
                "interpreter",
                "elementwise",
                "gguf_file",
                "gguf_header",
                "npz_files",
                "safetensors_file",
                "random_data",
            )
        ],
        "frontends": [
            m.group(1)
            for p in (PACKAGE / "frontends").glob("*_ops.py")
            if (m := re.fullmatch(r"(?:aten|onnx)_(\w+)_ops", p.stem))
        ],
    }
    for layer, families in named.items():
        odd = sorted(set(families) - set(FAMILIES))
        assert not odd, f"{layer} modules named after no family: {odd} (families: {FAMILIES})"


def test_docs_list_each_op_under_its_family() -> None:
    text = (ROOT / "docs" / "ir.md").read_text()
    heading = None
    seen: dict[str, str] = {}
    for line in text[text.index("## Ops") :].splitlines():
        if line.startswith("### "):
            heading = line.removeprefix("### ").strip()
        elif line.startswith("| ") and not line.startswith(("| op ", "|---")):
            for name in re.sub(r"\(.*?\)", "", line.split("|")[1]).split():
                assert heading is not None, name
                seen[name] = heading
    wrong = {n: (seen.get(n), d.family) for n, d in OPS.items() if seen.get(n) != d.family}
    assert not wrong, f"docs/ir.md heading vs family: {wrong}"
