"""Shared test configuration: hypothesis profiles sized for a 2-core CI machine, and fixtures
more than one test module uses."""

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.support.analysis_toys import registered

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


@pytest.fixture
def toys() -> Iterator[None]:
    """The toy solvers of `tests.support.analysis_toys` registered for the test (a module opts in with
    ``pytestmark = pytest.mark.usefixtures("toys")``)."""
    with registered():
        yield
