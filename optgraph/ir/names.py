"""Fresh value, node and event names for passes that add them.

fresh_name("x.d1", {"x.d1"}, "_") -> "x.d1_1"   (and "x.d1_1" is now taken)
fresh_name("h2d0", {"h2d0"}, "")  -> "h2d01"
"""

from __future__ import annotations


def fresh_name(base: str, taken: set[str], separator: str = "_") -> str:
    """`base`, or the first of `base{separator}1`, `base{separator}2`, ... not in `taken`; the
    name returned is added to `taken`. Each pass keeps its own separator, so the names it
    writes (and the compiled artifacts' names) stay as they were."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{separator}{k}", k + 1
    taken.add(name)
    return name
