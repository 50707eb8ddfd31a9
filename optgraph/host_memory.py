"""How much memory this process may still allocate on the host, and refusing up front what needs
more: a run's values (`cli/run_memory.py`), seeded random inputs and weights
(`reference/random_data.py`), a CUDA program's device memory (`runtime/cuda/memory.py`, with the
device's own figure).

A graph the verifier accepts may still need far more than the machine has (`f32[4,99999999]`
tensors: 1.49 GiB each); the sizes are known from the types before anything is allocated, so the
work is refused at once with both figures instead of growing until the allocator fails:

    check_fits(2_000_000_000, (1 << 30, "MemAvailable in /proc/meminfo"), "random inputs",
               "%x f32[4,99999999] 1.49 GiB")
    -> OptGraphError: random inputs: not enough memory: at least 1.86 GiB needed
       (%x f32[4,99999999] 1.49 GiB), and 1 GiB are available (MemAvailable in /proc/meminfo)

What is available: MemAvailable of /proc/meminfo, lowered by a cgroup's memory limit (v2
`memory.max`, v1 `memory.limit_in_bytes`) less its usage; unknown elsewhere (None: no check).
Every check takes the available figure as an argument, so tests give their own.

A low module beside `errors.py`, so every layer can use it without importing upwards.
"""

from __future__ import annotations

from pathlib import Path

from optgraph.errors import OptGraphError

CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
MEMINFO = Path("/proc/meminfo")

Available = tuple[int, str]  # (bytes, where the figure comes from)


def size_text(nbytes: int) -> str:
    """`nbytes` as `1.49 GiB` (`512 bytes` below a KiB)."""
    value, unit = float(nbytes), ""
    for name in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, name
    return f"{value:.3g} {unit}" if unit else f"{nbytes} bytes"


def available_memory() -> Available | None:
    """(bytes this process may still allocate on the host, where the figure comes from); None:
    unknown."""
    found: list[Available] = []
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append((int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"))
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in (
        (CGROUP_V2 / "memory.max", CGROUP_V2 / "memory.current"),
        (CGROUP_V1 / "memory.limit_in_bytes", CGROUP_V1 / "memory.usage_in_bytes"),
    ):
        try:
            limit_text = limit_file.read_text().strip()
            if limit_text == "max":
                continue
            limit, usage = int(limit_text), int(usage_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if limit < 1 << 60:  # v1 writes a huge number for "no limit"
            found.append((max(limit - usage, 0), f"the cgroup limit {limit_file}"))
    return min(found) if found else None


def check_fits(
    need: int, available: Available | None, what: str, detail: str = "", place: str = ""
) -> None:
    """Raise an `OptGraphError` giving both figures when `need` bytes exceed `available`
    (`what` names the work, `detail` what the figure is made of, `place` where it goes, e.g.
    " on the device"); None: unknown, no check."""
    if available is None or need <= available[0]:
        return
    parts = f" ({detail})" if detail else ""
    raise OptGraphError(
        f"{what}: not enough memory{place}: at least {size_text(need)} needed{parts}, and "
        f"{size_text(available[0])} are available ({available[1]})"
    )
