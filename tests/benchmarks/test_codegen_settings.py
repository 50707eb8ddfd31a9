"""Every codegen setting a GPU benchmark switches names a module and a value that exist.

The decode-launch variants (`bench_decode_launches.SETTINGS`) and the head-to-head suite's
setting variants (`head_to_head_variants.codegen_settings_variant`) set module attributes under
`optgraph.codegen` by name, so a module moved or a setting renamed would otherwise show only on
the GPU machine, as a row that fails to build.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from tests.benchmarks.test_gpu_benchmarks_on_fake_cupy import benchmarks

__all__ = ["benchmarks"]  # the fixture, used by name


def _missing(settings: set[tuple[str, str]]) -> list[str]:
    missing = []
    for module, name in sorted(settings):
        try:
            found = hasattr(importlib.import_module(f"optgraph.codegen.{module}"), name)
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(f"optgraph.codegen.{module}.{name}")
    return missing


def test_decode_launch_settings_exist(benchmarks: Any) -> None:
    bench = benchmarks("bench_decode_launches")
    settings = set(bench.SETTINGS.values())
    assert settings
    assert not _missing(settings)


def test_head_to_head_setting_variants_exist(
    benchmarks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    variants = benchmarks("harness.head_to_head_variants")
    settings: set[tuple[str, str]] = set()

    def record(build_fused: Any, values: dict[tuple[str, str], Any]) -> Any:
        settings.update(values)
        return build_fused

    monkeypatch.setattr(variants, "codegen_settings_variant", record)
    benchmarks("harness.head_to_head").suite_variants()
    assert ("kernels.attention.variants", "WIDE_DECODE") in settings
    assert not _missing(settings)
