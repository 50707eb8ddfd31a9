"""The verifier: every problem reported, in issue order, each located; cycles told from misordering."""

from __future__ import annotations

import pytest

import optgraph as og
from optgraph.errors import VerifyError


def diagnostics(text: str) -> list[str]:
    """`line:col: message` of every diagnostic verify reports for `text` (which must parse)."""
    with pytest.raises(VerifyError) as info:
        og.verify(og.parse(text))
    out = []
    for d in info.value.diagnostics:
        where = f"{d.span.line}:{d.span.col}: " if d.span is not None else ""
        out.append(where + d.message)
    return out


def graph(*lines: str, outputs: str = "%y") -> str:
    body = "".join(f"  {line}\n" for line in lines)
    return f"graph g {{\n  input %x : f32[2]\n{body}  output {outputs}\n}}\n"


def test_three_errors_give_three_diagnostics() -> None:
    text = graph(
        "%a = neg(%x) : f32[3]",
        "%b = exp(%nope) : f32[2]",
        "%y = frob(%x) : f32[2]",
    )
    assert diagnostics(text) == [
        "3:8: neg: declared type f32[3] but the operands give f32[2]",
        "4:12: use of undefined value '%nope'",
        "5:8: unknown op 'frob'",
    ]


def test_cycles_and_misordering_are_told_apart() -> None:
    text = graph(
        "%s = neg(%s) : f32[2]",
        "%a = add(%x, %c) : f32[2]",
        "%b = neg(%a) : f32[2]",
        "%c = exp(%b) : f32[2]",
        "%d = neg(%e) : f32[2]",
        "%e = neg(%x) : f32[2]",
        "%p = add(%q, %q) : f32[2]",
        "%q = neg(%p) : f32[2]",
        "%y = add(%c, %d) : f32[2]",
        outputs="%y, %s, %q",
    )
    assert diagnostics(text) == [
        "3:12: cycle: %s -> %s",
        "4:16: cycle: %a -> %c -> %b -> %a",
        "7:12: '%e' is used before it is defined (nodes must be in issue order)",
        "9:12: cycle: %p -> %q -> %p",  # one diagnostic per loop, not one per use
    ]


def test_long_reversed_chain_is_reported_in_linear_time() -> None:
    n = 3000
    lines = [f"%v{i} = neg(%v{i - 1}) : f32[2]" for i in range(n - 1, 0, -1)]
    lines.append("%v0 = neg(%x) : f32[2]")
    found = diagnostics(graph(*lines, outputs=f"%v{n - 1}"))
    assert len(found) == n - 1
    assert all("used before it is defined" in d for d in found)


def test_many_typos_get_suggestions_only_for_the_first_few() -> None:
    lines = [f"%v{i} = neg(%x) : f32[2]" for i in range(30)]
    lines += [f"%w{i} = neg(%v{i}x) : f32[2]" for i in range(30)]
    found = diagnostics(graph(*lines, outputs="%v0"))
    assert len(found) == 30
    assert sum("did you mean" in d for d in found) == 10


def test_events_redefinitions_and_outputs() -> None:
    text = graph(
        "wait ^e0",
        "record ^e1",
        "record ^e1",
        "%y = neg(%x) : f32[2]",
        "%y = exp(%x) : f32[2]",
        outputs="%y, %y, %zz",
    )
    assert diagnostics(text) == [
        "3:8: wait on event '^e0' before it is recorded",
        "5:10: event '^e1' is recorded twice",
        "7:8: redefinition of '%y'",
        "8:14: output '%y' is listed twice",
        "8:18: output '%zz' is not defined",
    ]


def test_missing_output_points_at_the_last_declaration() -> None:
    text = "graph g {\n  input %x : f32[2]\n  %a = neg(%x) : f32[2]\n}\n"
    assert diagnostics(text) == [
        "3:8: graph 'g' has no output (add 'output %name' after this line)"
    ]
    assert diagnostics("graph g {\n}\n") == ["graph 'g' has no output"]


def test_well_formed_graph_passes() -> None:
    og.verify(og.parse(graph("%a = neg(%x) : f32[2]", "%y = add(%a, %x) : f32[2]")))
