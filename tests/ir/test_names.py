"""`ir/names.fresh_name`: the first free name of a base, in each pass's own style."""

from __future__ import annotations

from optgraph.ir.names import fresh_name


def test_the_base_when_free_else_the_first_free_numbered_name() -> None:
    taken = {"x.d1", "x.d1_1"}
    assert fresh_name("y", taken) == "y" and "y" in taken
    assert fresh_name("x.d1", taken) == "x.d1_2"
    assert fresh_name("x.d1", taken) == "x.d1_3"  # the name returned is taken from then on
    assert fresh_name("h2d0", {"h2d0"}, "") == "h2d01"
    assert fresh_name("p0", {"p0"}, ".") == "p0.1"
