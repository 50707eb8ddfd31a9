"""runtime/cuda/staged_upload.py on the fake CuPy: arrays larger than a slot, arrays sharing a
slot, several fill threads and one, every byte where it belongs; a slot is refilled only after
the event behind its copies completed; an error inside the block still waits for the copies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from optgraph.runtime.cuda import staged_upload
from optgraph.runtime.cuda.staged_upload import StagedUpload
from tests.support.fake_cupy import fake_cupy


@pytest.mark.parametrize("threads", [1, 4])
def test_every_array_lands_at_its_address(monkeypatch: Any, threads: int) -> None:
    monkeypatch.setattr(staged_upload, "PIECE_BYTES", 64)
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 255, n, dtype=np.uint8) for n in (5, 3000, 1, 700, 1024, 4096, 0, 33)]
    arrays.append(rng.standard_normal((17, 9)).astype(np.float16).T)  # not C-contiguous
    with fake_cupy(monkeypatch) as fake:
        import cupy

        total = sum(a.nbytes for a in arrays)
        device = fake.alloc(total)
        with StagedUpload(cupy, cupy.cuda.get_current_stream(), 1024, 2, threads) as up:
            offset = 0
            for a in arrays:
                up.copy(device.ptr + offset, a)
                offset += a.nbytes
        assert up.bytes_copied == total
        offset = 0
        for a in arrays:
            got = device.bytes(offset, a.nbytes)
            assert got.tobytes() == np.ascontiguousarray(a).tobytes()
            offset += a.nbytes


def test_a_slot_is_refilled_only_after_its_copies(monkeypatch: Any) -> None:
    waited: list[int] = []
    with fake_cupy(monkeypatch) as fake:
        import cupy

        class Event(cupy.cuda.Event):  # type: ignore[name-defined,misc]
            def synchronize(self) -> None:
                waited.append(self.ptr)

        monkeypatch.setattr(cupy.cuda, "Event", Event)
        device = fake.alloc(10 * 256)
        data = (np.arange(10 * 256) % 251).astype(np.uint8)
        with StagedUpload(cupy, cupy.cuda.get_current_stream(), 256, 2, 1) as up:
            up.copy(device.ptr, data)
        # 10 slot fills over 2 slots: fills 3..10 each waited for the fill 2 before
        assert len(waited) == 8
        assert device.bytes(0, data.size).tobytes() == data.tobytes()


def test_an_error_inside_the_block_still_waits_for_the_copies(monkeypatch: Any) -> None:
    with fake_cupy(monkeypatch) as fake:
        import cupy

        synced: list[bool] = []
        stream = cupy.cuda.get_current_stream()
        monkeypatch.setattr(stream, "synchronize", lambda: synced.append(True))
        device = fake.alloc(16)
        with pytest.raises(ValueError), StagedUpload(cupy, stream, 64, 2, 1) as up:
            up.copy(device.ptr, np.ones(16, np.uint8))
            raise ValueError("bad weight")
        assert synced == [True]


def test_a_small_model_pins_no_more_than_its_weights(monkeypatch: Any) -> None:
    import optgraph as og
    from tests.runtime.test_device_transpose_fake import GRAPH

    with fake_cupy(monkeypatch) as fake:
        import cupy

        pinned: list[int] = []
        plain = fake.alloc_pinned

        def alloc_pinned(nbytes: int) -> bytearray:
            pinned.append(nbytes)
            return plain(nbytes)

        monkeypatch.setattr(cupy.cuda, "alloc_pinned_memory", alloc_pinned)
        program = og.compile(og.parse(GRAPH), target="cuda")
        rng = np.random.default_rng(0)
        w = rng.standard_normal((32, 64)).astype(np.float16)
        v = rng.standard_normal(32).astype(np.float16)
        program.run({"x": np.ones((1, 64), np.float16)}, {"w": w, "v": v})
        weight_bytes = w.nbytes + v.nbytes
        assert pinned and max(pinned) <= max(weight_bytes, 4096)  # slots, staging: small
        assert staged_upload.SLOT_BYTES not in pinned
