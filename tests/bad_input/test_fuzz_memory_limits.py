"""Files that claim far more than they hold are refused before anything is allocated: each case runs
`optgraph` as its own process under an address-space limit (RLIMIT_AS) of 3 GiB, well above what
an import of the tiny models needs and well below what the file claims (4 GiB or more). Had the
reader allocated the claim, the process would have met the limit (a `MemoryError`, "not enough
memory", or an import that degrades quietly); it exits 1 with the reader's own message instead.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.support import fuzz_npz as fn

LIMIT = 3 << 30  # bytes of address space: a tiny import needs under 2 GiB, torch's included
CLAIM = 2**31  # f32 elements: 8 GiB


def _optgraph(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    return subprocess.run(
        [sys.executable, "-m", "optgraph", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_memory,
        check=False,
    )


def _refused(result: subprocess.CompletedProcess[str], path: Path, *words: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr, result.stderr
    assert "not enough memory" not in result.stderr, result.stderr
    assert path.name in result.stderr and all(w in result.stderr for w in words), result.stderr


@pytest.mark.parametrize("compressed", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_an_npz_member_claiming_8_gib(tmp_path: Path, compressed: bool) -> None:
    path = tmp_path / "x.npz"
    member = fn.npy_header("<f4", False, (CLAIM,)) + bytes(64)
    path.write_bytes(fn.npz_bytes({**fn.members(), "x.npy": member}, compressed))
    model = tmp_path / "g.ir"
    model.write_text(fn.graph_reading("input"))
    result = _optgraph(
        ["run", str(model), "--device", "cpu", "-q", "--inputs", str(path)], tmp_path
    )
    _refused(result, path, "member 'x' is corrupt", "(8 GiB)")


def _onnx_constant_of_shape(folder: Path) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    from tests.support import fuzz_onnx as fo

    model = fo.tiny_model()
    model.graph.initializer.append(numpy_helper.from_array(np.array([CLAIM], np.int64), "n"))
    model.graph.node.append(helper.make_node("ConstantOfShape", ["n"], ["g"], name="grow"))
    model.graph.output.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, None))
    return _saved(folder, model)


def _onnx_initializer_dims(folder: Path) -> Path:
    from tests.support import fuzz_onnx as fo

    model = fo.tiny_model()
    bias = model.graph.initializer[1]
    del bias.dims[:]
    bias.dims.extend([CLAIM])
    return _saved(folder, model)


def _onnx_external_length(folder: Path) -> Path:
    from tests.support import fuzz_onnx as fo

    model = fo.tiny_model()
    weight = model.graph.initializer[0]
    del weight.dims[:]
    weight.dims.extend([CLAIM])
    for entry in weight.external_data:
        if entry.key == "length":
            entry.value = str(CLAIM * 4)
    return _saved(folder, model)


def _saved(folder: Path, model: object) -> Path:
    from tests.support import fuzz_onnx as fo

    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())  # type: ignore[attr-defined]
    (folder / fo.DATA_FILE).write_bytes(fo.W.tobytes())
    return path


ONNX_CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "ConstantOfShape of 8 GiB": (_onnx_constant_of_shape, "when folded at import"),
    "initializer dims of 8 GiB": (_onnx_initializer_dims, "initializer 'b'"),
    "external data of 8 GiB": (_onnx_external_length, "initializer 'w'"),
}


# Each case starts a process (about 1.5 s): the default run takes the one that failed before.
@pytest.mark.parametrize(
    "case",
    [c if c == "ConstantOfShape of 8 GiB" else pytest.param(c, marks=pytest.mark.slow)
     for c in sorted(ONNX_CASES)],
)  # fmt: skip
def test_an_onnx_model_claiming_8_gib(tmp_path: Path, case: str) -> None:
    pytest.importorskip("onnx")
    make, words = ONNX_CASES[case]
    path = make(tmp_path)
    result = _optgraph(["import", str(path), "-o", str(tmp_path / "m.ir")], tmp_path)
    _refused(result, path, words)
    assert not (tmp_path / "m.ir").exists()


@pytest.mark.slow  # torch's own bounds check refuses it (the zip entry case below failed)
def test_a_pt2_weight_claiming_8_gib(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from tests.support import fuzz_pt2 as fp

    files = fp.tiny_archive()
    config = json.loads(files[fp.WEIGHTS_CONFIG])
    config["config"]["lin.weight"]["tensor_meta"]["sizes"] = [{"as_int": CLAIM}, {"as_int": 1}]
    path = tmp_path / "m.pt2"
    path.write_bytes(fp.zipped({**files, fp.WEIGHTS_CONFIG: json.dumps(config).encode()}))
    result = _optgraph(["import", str(path), "-o", str(tmp_path / "m.ir")], tmp_path)
    _refused(result, path, "not a torch.export program")


def test_a_pt2_member_whose_zip_entry_claims_4_gib(tmp_path: Path) -> None:
    """torch's reader allocates the size a member's zip entry claims before inflating it: a
    3.7 KB archive asked for 4 GiB ("DefaultCPUAllocator: can't allocate memory" under the
    limit, logged with a traceback)."""
    pytest.importorskip("torch")
    import io
    import zipfile

    from tests.support import fuzz_pt2 as fp

    files = fp.tiny_archive()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    raw: bytes | None = buffer.getvalue()
    which = next(i for i, name in enumerate(files) if name.endswith("weight_0"))
    for signature, table in ((b"PK\x01\x02", fn.CENTRAL), (b"PK\x03\x04", fn.LOCAL)):
        at, fmt = table["size"]
        assert raw is not None
        raw = fn.patch_field(raw, signature, which, at, fmt, 2**32 - 4)
    assert raw is not None
    path = tmp_path / "m.pt2"
    path.write_bytes(raw)
    result = _optgraph(["import", str(path), "-o", str(tmp_path / "m.ir")], tmp_path)
    _refused(result, path, "claims 4294967292 bytes", "zip bomb")
