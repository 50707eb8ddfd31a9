"""How many examples a property test runs, by the hypothesis profile loaded in tests/conftest.py.

Tests that set their own count write `@settings(max_examples=examples(40))`: 40 in the default
(`dev`) and `ci` profiles, whose own count is `SAMPLE`; proportionally more under
`HYPOTHESIS_PROFILE=fuzz` (5000 / 60, about 83 times as many), so the long fuzzing session
reaches every property test, not only those that leave the count to the profile.
"""

from __future__ import annotations

from hypothesis import settings

SAMPLE = 60  # max_examples of the `dev` and `ci` profiles


def examples(count: int) -> int:
    return max(1, count * settings.default.max_examples // SAMPLE)
