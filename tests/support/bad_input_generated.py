"""Bad model files too big or too binary to commit, made at test time (see tests/test_bad_input.py).

Each entry of `GENERATED` is a file name and a function returning the file's bytes; the expected
first diagnostic of each is in `tests/bad_input/expected.txt` like every committed bad input.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

_HEAD = b"graph g {\n  input %x : f32[2,3]\n"


def _garbage(size: int) -> bytes:
    """Deterministic pseudo-random bytes (sha256 in counter mode: the same on every platform)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(counter.to_bytes(8, "little")).digest()
        counter += 1
    return bytes(out[:size])


GENERATED: dict[str, Callable[[], bytes]] = {
    "gen_binary_garbage.ir": lambda: _garbage(4096),
    "gen_png_header.ir": lambda: b"\x89PNG\r\n\x1a\n" + bytes(64),
    "gen_invalid_utf8.ir": lambda: _HEAD + b"  # caf\xe9 au lait\n  output %x\n}\n",
    "gen_nul_byte.ir": lambda: _HEAD + b"  %a = neg(%x) : f32[2,3]\x00\n  output %a\n}\n",
    "gen_deep_parens.ir": lambda: _HEAD + b"  %a = neg" + b"(" * 100_000 + b"\n}\n",
    "gen_deep_brackets.ir": lambda: _HEAD + b"  %a = neg(%x) : f32" + b"[" * 100_000 + b"\n}\n",
    "gen_deep_braces.ir": lambda: b"graph g " + b"{" * 100_000 + b"\n",
    "gen_long_line.ir": lambda: (
        _HEAD + b"  %a = add(" + b"%x, " * 250_000 + b"%x) : f32[2,3] $\n  output %a\n}\n"
    ),
    "gen_many_errors_one_line.ir": lambda: (
        _HEAD + b"  output " + b", ".join(b"%%u%d" % i for i in range(20_000)) + b"\n}\n"
    ),
}
