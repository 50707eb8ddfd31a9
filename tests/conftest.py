"""Shared pytest setup: the `--update-fixtures` option and hypothesis profiles.

python -m pytest -q                   every kind of check; property tests and sweeps sampled
pytest --update-fixtures              rewrite every fixture's expectation with what the pass produced
CI=true pytest                        use the derandomized `ci` hypothesis profile
pytest -m slow                        the long sweeps the default run leaves out (pyproject addopts)
HYPOTHESIS_PROFILE=fuzz pytest        long fuzzing: every property test with ~83x its examples
                                      (tests/support/property_examples.py)
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
# Long fuzzing sessions by hand: HYPOTHESIS_PROFILE=fuzz pytest tests/ir/test_fuzz.py
settings.register_profile(
    "fuzz", deadline=None, max_examples=5000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        default=False,
        help="rewrite the expectations of tests/fixtures/*/*.ir with the actual results",
    )
    parser.addoption(
        "--random-graphs",
        type=int,
        default=None,
        metavar="N",
        help="gpu: random graphs the differential test runs (default: the hypothesis profile's)",
    )


@pytest.fixture
def update_fixtures(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-fixtures"))


@pytest.fixture
def random_graph_count(request: pytest.FixtureRequest) -> int | None:
    value = request.config.getoption("--random-graphs")
    return None if value is None else int(value)
