"""`optgraph import MODEL.gguf` end to end, and what a bad GGUF file gets: one clear error and exit
status 1, never a traceback, an allocation of what a damaged count claims, or a half-written IR."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from optgraph.cli.main import main
from optgraph.errors import OptGraphError
from optgraph.frontends.gguf import from_gguf
from optgraph.reference.interpreter import load_weights, random_inputs, run_reference
from tests.frontends import gguf_models

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = gguf_models.hf_model("llama", num_hidden_layers=1)
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return gguf_models.write_gguf(model, path, "llama")


def _import(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    out = tmp_path / "out.ir"
    status = main(["import", str(path), "-o", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if status:
        assert not out.exists() and not list(tmp_path.glob(".out.ir.*"))  # nothing half-written
    out.unlink(missing_ok=True)
    return status, err


def _damaged(model_file: Path, tmp_path: Path, offset: int, data: bytes) -> Path:
    raw = bytearray(model_file.read_bytes())
    raw[offset : offset + len(data)] = data
    path = tmp_path / "damaged.gguf"
    path.write_bytes(bytes(raw))
    return path


def test_import_then_run_with_the_gguf_file_as_weights(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ir = tmp_path / "tiny.ir"
    argv = ["import", str(model_file), "-o", str(ir), "--cache-len", "16", "--seq", "2"]
    assert main(argv) == 0
    assert "imported" in capsys.readouterr().out
    text = ir.read_text()
    assert "weight %blk.0.attn_q.weight : f32[64,64]" in text
    assert "input %l0.k_cache : f32[1,2,16,16]" in text
    graph, weights = from_gguf(model_file, cache_len=16, seq=2)
    loaded = load_weights(model_file, graph)
    assert loaded.keys() == weights.keys()
    for name, array in weights.items():  # the same arrays, q and k un-permuted both ways
        np.testing.assert_array_equal(loaded[name], array)
    outputs = tmp_path / "out.npz"
    argv = ["run", str(ir), "--weights", str(model_file), "--device", "cpu", "--check"]
    assert main([*argv, "--save-outputs", str(outputs), "-q"]) == 0
    expected = run_reference(graph, random_inputs(graph, seed=0), weights)
    with np.load(outputs) as saved:
        np.testing.assert_allclose(saved["logits"], expected["logits"], rtol=1e-5, atol=1e-5)


def test_not_a_gguf_file(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = _import(_damaged(model_file, tmp_path, 0, b"GGUX"), tmp_path, capsys)
    assert status == 1 and "not a GGUF file (starts with b'GGUX')" in err


def test_a_truncated_file(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for size in (10, 100, model_file.stat().st_size // 2, model_file.stat().st_size - 1):
        path = tmp_path / "cut.gguf"
        path.write_bytes(model_file.read_bytes()[:size])
        status, err = _import(path, tmp_path, capsys)
        assert status == 1 and "truncated" in err, (size, err)


@pytest.mark.parametrize("offset, what", [(8, "tensor count"), (16, "metadata count")])
def test_counts_that_cannot_fit_are_refused_before_reading(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], offset: int, what: str
) -> None:
    path = _damaged(model_file, tmp_path, offset, (1 << 60).to_bytes(8, "little"))
    status, err = _import(path, tmp_path, capsys)
    assert status == 1 and f"{what} 1152921504606846976 cannot fit" in err


def _tensor_field_offset(path: Path, part: int) -> int:
    """Where part `part` of the first tensor's info lies in the file (4: type, 5: offset)."""
    reader = gguf.GGUFReader(path)
    base = reader.data.__array_interface__["data"][0]
    return int(reader.tensors[0].field.parts[part].__array_interface__["data"][0] - base)


def test_a_tensor_offset_past_the_end(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offset = _tensor_field_offset(model_file, 5)
    path = _damaged(model_file, tmp_path, offset, (1 << 40).to_bytes(8, "little"))
    status, err = _import(path, tmp_path, capsys)
    assert status == 1 and "truncated or damaged" in err


def test_a_dimension_of_a_terabyte(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offset = _tensor_field_offset(model_file, 3)  # the dims
    path = _damaged(model_file, tmp_path, offset, (1 << 40).to_bytes(8, "little"))
    status, err = _import(path, tmp_path, capsys)
    assert status == 1 and "damaged" in err


def test_an_unknown_tensor_type(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offset = _tensor_field_offset(model_file, 4)
    path = _damaged(model_file, tmp_path, offset, (977).to_bytes(4, "little"))
    status, err = _import(path, tmp_path, capsys)
    assert status == 1 and "977" in err


def test_random_damage_never_escapes_as_a_traceback(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Derandomized: bytes of the header and metadata overwritten at random."""
    rng = random.Random(0)
    raw = model_file.read_bytes()
    header_end = gguf.GGUFReader(model_file).data_offset
    for _ in range(40):
        damaged = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(4, header_end)] = rng.randrange(256)
        path = tmp_path / "random.gguf"
        path.write_bytes(bytes(damaged))
        status, _ = _import(path, tmp_path, capsys)
        assert status in (0, 1)


def _write(path: Path, arch: str, tensors: dict[str, np.ndarray], **raw: object) -> Path:
    """The sizes of `model_file`'s model, these tensors."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_embedding_length(64)
    w.add_feed_forward_length(96)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-6)
    for name, array in tensors.items():
        w.add_tensor(name, array)
    for name, (data, qtype) in raw.items():  # type: ignore[misc]
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_an_unsupported_architecture(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "g.gguf", "falcon", {"token_embd.weight": np.zeros((4, 64), np.float32)}
    )
    with pytest.raises(
        OptGraphError, match="architecture 'falcon' is not supported; supported: llama"
    ):
        from_gguf(path)


def test_missing_tensors_are_named(model_file: Path, tmp_path: Path) -> None:
    reader = gguf.GGUFReader(model_file)
    tensors = {t.name: np.array(t.data) for t in reader.tensors if "ffn_up" not in t.name}
    path = _write(tmp_path / "m.gguf", "llama", tensors)
    with pytest.raises(OptGraphError, match="tensors missing for a llama model: blk.0.ffn_up"):
        from_gguf(path)


def test_a_tensor_type_optgraph_cannot_read(model_file: Path, tmp_path: Path) -> None:
    reader = gguf.GGUFReader(model_file)
    tensors = {t.name: np.array(t.data) for t in reader.tensors if "ffn_up" not in t.name}
    up = gguf.quants.quantize(np.zeros((96, 64), np.float32), gguf.GGMLQuantizationType.Q5_1)
    path = _write(
        tmp_path / "m.gguf",
        "llama",
        tensors,
        **{"blk.0.ffn_up.weight": (up, gguf.GGMLQuantizationType.Q5_1)},
    )
    with pytest.raises(
        OptGraphError, match=r"'blk.0.ffn_up.weight' has type Q5_1, .*supported: F32, F16, BF16"
    ):
        from_gguf(path)
