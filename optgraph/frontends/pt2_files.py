"""A `.pt2` archive (`torch.export.save`) checked before torch reads it, and torch's reading made
quiet, so that a damaged or hostile archive gets one message naming the file.

`torch.export.load` unpickles parts of an archive with Python's full unpickler, which runs
whatever code a pickle names: the sample inputs (`data/sample_inputs/*.pt`) when the restricted
unpickler refuses them, tensors marked `use_pickle` (tensor subclasses), custom and opaque
constants. `check_pickles` refuses such an archive before torch sees it:

    model.pt2:1:1: error: import: model.pt2: member 'archive/data/sample_inputs/model.pt' holds
      pickled Python objects, not only tensors (optgraph does not unpickle them: they could run code)

- every `.pt` member (a `torch.save` file) must load with `torch.load(weights_only=True)`, which
  reads tensors and plain containers only;
- no weight or constant may be pickled (`use_pickle`, `custom_obj_*`, `opaque_obj_*`): optgraph
  imports plain tensors;
- no member claims more bytes than the archive holds for it, or than deflate can make of them
  (a zip bomb would be inflated by this check and by torch's reader alike).

`torch.export.load` also logs an error it recovers from as a warning with its traceback, then
raises a vaguer one ("check the warnings above"); `collected_logs` keeps those records from the
terminal so the message can quote the first error instead.

Complexity: O(members + bytes of the `.pt` members).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import zipfile
from collections.abc import Iterator
from typing import Any

from optgraph.errors import OptGraphError, Span
from optgraph.reference.npz_files import MAX_DEFLATE_RATIO

# Loggers through which torch.export.load reports (they have torch's own stderr handlers).
TORCH_LOGGERS = ("torch.export", "torch._export", "torch._export.serde.serialize")
PICKLED_CONSTANTS = ("custom_obj_", "opaque_obj_")


def _refused(path: str, why: str) -> OptGraphError:
    return OptGraphError(f"import: {path}: {why}", Span(path, 1, 1))


def _unpickles_code(path: str, member: str) -> OptGraphError:
    return _refused(
        path,
        f"member '{member}' holds pickled Python objects, not only tensors (optgraph does not "
        "unpickle them: they could run code)",
    )


def check_pickles(torch: Any, path: str) -> None:
    """Refuse the archive `path` when torch would unpickle anything but tensors from it (see the
    module docstring); an archive zipfile cannot read is left to torch."""
    try:
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                _check_size(path, info, size)
            for info in archive.infolist():
                name = info.filename
                if name.endswith(".pt"):
                    _check_tensor_file(torch, path, name, archive.read(info))
                elif name.endswith(("_weights_config.json", "_constants_config.json")):
                    _check_config(path, name, archive.read(info))
    except (OSError, EOFError, ValueError, NotImplementedError, RuntimeError,
            zipfile.BadZipFile) as err:  # fmt: skip
        # a member zipfile cannot read (torch's reader differs): torch reports the archive
        raise _refused(path, f"not a torch.export program (.pt2): {first_line(err)}") from None


def _check_size(path: str, info: zipfile.ZipInfo, size: int) -> None:
    """A member's size by the zip directory, against the file's `size` bytes: its compressed
    bytes inside the file, and no more than deflate can make of them (`MAX_DEFLATE_RATIO`), so
    neither this check nor torch's reader inflates a bomb."""
    claimed = info.file_size
    bound = info.compress_size * (MAX_DEFLATE_RATIO if info.compress_type else 1)
    if info.header_offset + info.compress_size > size or claimed > max(bound, 1):
        raise _refused(
            path,
            f"member '{info.filename}' claims {claimed} bytes from {info.compress_size} in the "
            f"archive, which holds {size} bytes (damaged, or a zip bomb)",
        )


def _check_tensor_file(torch: Any, path: str, member: str, data: bytes) -> None:
    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception:  # noqa: BLE001 - the restricted unpickler refuses in many ways
        raise _unpickles_code(path, member) from None


def _check_config(path: str, member: str, data: bytes) -> None:
    try:
        entries = json.loads(data).get("config", {})
    except (ValueError, AttributeError, RecursionError):
        return  # not a config torch can read either: it refuses the archive
    if not isinstance(entries, dict):
        return
    for entry in entries.values():
        if not isinstance(entry, dict):
            continue
        stored = entry.get("path_name")
        pickled = bool(entry.get("use_pickle")) or (
            isinstance(stored, str) and stored.startswith(PICKLED_CONSTANTS)
        )
        if pickled:
            folder = os.path.dirname(member)
            raise _unpickles_code(path, f"{folder}/{stored}")


@contextlib.contextmanager
def collected_logs() -> Iterator[list[logging.LogRecord]]:
    """While inside, the records of torch's export loggers are collected, not printed."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    loggers = [logging.getLogger(name) for name in TORCH_LOGGERS]
    saved = [(logger.handlers, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.handlers, logger.propagate = [keep], False
    try:
        yield records
    finally:
        for logger, (handlers, propagate) in zip(loggers, saved):
            logger.handlers, logger.propagate = handlers, propagate


def first_logged_error(records: list[logging.LogRecord]) -> str | None:
    """The first line of the first exception a collected record carries, if any."""
    for record in records:
        if record.exc_info and record.exc_info[1] is not None:
            return first_line(record.exc_info[1])
    return None


REASON = 200  # characters of a library's reason quoted (zipfile's can hold a whole header)


def first_line(err: BaseException) -> str:
    """The first line of `err`'s message (at most `REASON` characters), or its type's name."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line if len(line) <= REASON else line[: REASON - 3] + "..."
