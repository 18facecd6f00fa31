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


def pytest_configure(config: pytest.Config) -> None:
    """On a fresh clone (numba's cache empty), with the suite spread over workers: compile the
    simulator and the planner once, here, before the workers start. Each worker would
    otherwise compile them at once on its first simulation (tens of CPU seconds each, on the
    same cores); they load them from the cache instead. One process (``-n0``) compiles as it
    goes, as a user's first run does."""
    if getattr(config, "workerinput", None) is not None or not config.getoption(
        "numprocesses", default=None
    ):
        return
    from slackswap.analysis.warmup import stale_parts, warm_up

    if stale_parts(unknown=False):
        warm_up([], say=None)


@pytest.fixture
def toys() -> Iterator[None]:
    """The toy solvers of `tests.support.analysis_toys` registered for the test (a module opts in with
    ``pytestmark = pytest.mark.usefixtures("toys")``)."""
    with registered():
        yield
