"""frontends/hf_checkpoint.py: safetensors files read by their headers, tensors as views of one
read-only memory map per file (bf16 too), and every damage a header can carry refused with the
file named: short, an oversized or non-JSON header, an unknown dtype, offsets outside the data or
overlapping, a byte count that disagrees with the shape; an index naming a missing shard or a
tensor its shard lacks; no weights at all (`.bin` pickles named). The fingerprint follows the
config and the tensor table, not the values."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from optgraph.errors import InputError
from optgraph.frontends.hf_checkpoint import open_checkpoint


def _safetensors(path: Path, tensors: dict[str, np.ndarray], header: dict | None = None) -> Path:
    """A safetensors file written by hand (so that a test can write a bad header)."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    names[np.dtype(ml_dtypes.bfloat16)] = "BF16"
    entries, data, offset = {}, b"", 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        entries[name] = {"dtype": names[array.dtype], "shape": list(array.shape),
                         "data_offsets": [offset, offset + len(raw)]}  # fmt: skip
        data += raw
        offset += len(raw)
    text = json.dumps(header if header is not None else entries).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def _checkpoint(root: Path, tensors: dict[str, np.ndarray], **header: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    _safetensors(root / "model.safetensors", tensors, header.get("header"))  # type: ignore[arg-type]
    return root


def test_tensors_are_views_of_the_mapped_file(tmp_path: Path) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = (np.arange(6, dtype=np.float32) / 7).astype(ml_dtypes.bfloat16)
    checkpoint = open_checkpoint(_checkpoint(tmp_path / "c", {"a": a, "b": b}))
    got_a, got_b = checkpoint.array("a"), checkpoint.array("b")
    assert np.array_equal(got_a, a) and got_b.dtype == b.dtype and np.array_equal(got_b, b)
    assert not got_a.flags.writeable  # the file's bytes, read only
    base = got_a
    while getattr(base, "base", None) is not None and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, np.memmap)
    assert checkpoint.tensors["b"].dtype == "bf16" and checkpoint.tensors["a"].shape == (3, 4)


def test_the_fingerprint_follows_the_table_not_the_values(tmp_path: Path) -> None:
    a = np.ones((2, 2), np.float32)
    first = open_checkpoint(_checkpoint(tmp_path / "1", {"a": a})).fingerprint()
    same = open_checkpoint(_checkpoint(tmp_path / "2", {"a": a * 3})).fingerprint()
    other = open_checkpoint(_checkpoint(tmp_path / "3", {"a": np.ones((2, 3), np.float32)}))
    assert first == same != other.fingerprint()


def _entry(offsets: list[int], dtype: str = "F32", shape: list[int] | None = None) -> dict:
    return {"a": {"dtype": dtype, "shape": shape or [2], "data_offsets": offsets}}


@pytest.mark.parametrize(
    "header, message",
    [
        (_entry([0, 8], dtype="F8_E4M3"), "dtype 'F8_E4M3', which optgraph cannot read"),
        (_entry([0, 64]), "outside the data"),
        (_entry([0, 4]), "4 bytes for f32[2] (8 bytes)"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 8]}}, "is not a list of sizes"),
        ({**_entry([0, 8]), "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
         "overlap"),
    ],
)  # fmt: skip
def test_bad_headers_are_refused_naming_the_file(
    tmp_path: Path, header: dict, message: str
) -> None:
    root = _checkpoint(tmp_path / "c", {"a": np.zeros(4, np.float32)}, header=header)
    with pytest.raises(InputError, match="model.safetensors") as err:
        open_checkpoint(root)
    assert message in str(err.value)


def test_cut_and_garbled_files_are_refused(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "c", {"a": np.zeros(4, np.float32)})
    path = root / "model.safetensors"
    data = path.read_bytes()
    for bad, message in (
        (data[:5], "too short for a safetensors header"),
        (struct.pack("<Q", 1 << 40) + data[8:], "exceeds the file"),
        (data[:8] + b"\xff" * (len(data) - 8), "not valid JSON"),
    ):
        path.write_bytes(bad)
        with pytest.raises(InputError, match=message):
            open_checkpoint(root)


def test_index_shards_are_checked(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "config.json").write_text("{}")
    _safetensors(root / "part-1.safetensors", {"a": np.zeros(2, np.float32)})
    _safetensors(root / "part-2.safetensors", {"b": np.zeros(2, np.float32)})
    index = {"weight_map": {"a": "part-1.safetensors", "b": "part-2.safetensors"}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    assert sorted(open_checkpoint(root).tensors) == ["a", "b"]
    index["weight_map"]["b"] = "part-1.safetensors"
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match="puts tensor 'b' in part-1.safetensors, which lacks it"):
        open_checkpoint(root)
    index["weight_map"]["c"] = "part-3.safetensors"
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError, match="lacks: part-3.safetensors"):
        open_checkpoint(root)


def test_a_directory_without_weights_or_config(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    with pytest.raises(InputError, match="no config.json"):
        open_checkpoint(root)
    (root / "config.json").write_text("{}")
    (root / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(InputError, match=r"no .safetensors weights \(pytorch_model.bin"):
        open_checkpoint(root)
