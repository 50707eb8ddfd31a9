"""optgraph: a graph-optimization compiler toolkit for GPU inference.

The small public API::

    import optgraph as og
    g = og.parse_file("model.ir")
    text = og.print_graph(g)
"""

from optgraph.errors import OptGraphError, Span
from optgraph.ir.graph import Graph
from optgraph.ir.parser import parse, parse_file
from optgraph.ir.printer import print_graph

__all__ = ["Graph", "OptGraphError", "Span", "parse", "parse_file", "print_graph"]
