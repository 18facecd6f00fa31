"""Shared test configuration: hypothesis profiles sized for a 2-core CI machine, and fixtures
more than one test module uses."""

import signal
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.support.analysis_toys import registered

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


def _take_ctrl_c() -> None:
    """Let SIGINT in when the suite was started with it ignored.

    A shell without job control starts a background command (``cmd &`` in a script) with
    SIGINT ignored. Python then leaves it ignored, and so do the processes the tests start.
    The tests that send Ctrl-C (tests/core/test_interrupts.py,
    tests/solvers/exact/test_exact_interrupt.py) would then fail because of how the suite was
    launched, not because of the code. So this puts back Python's default handler, in every
    process the suite runs (the workers load this file too). The commands those tests start
    inherit a handled signal as the default disposition, as from a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_take_ctrl_c()


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


@pytest.fixture(autouse=True)
def _compiled_code_loaded_before_a_wall_clock_bound(request: pytest.FixtureRequest) -> None:
    """Before a test that bounds a solve's wall-clock time (``wallclock``), every registered
    solver's numba code is loaded (or compiled), once per process, as the command line does
    before it times a solve: loading one part takes about 0.3 s here, which would otherwise
    fall inside whichever such test ran first in the process (CI once failed ``ga-random`` at
    0.843 s under a 0.5 s limit, the first solve in its process that ran the repair kernel;
    compiling that kernel here puts the same solve at 0.852 s)."""
    if request.node.get_closest_marker("wallclock") is None:
        return
    from slackswap.analysis.warmup import warm_up
    from slackswap.solvers import REGISTRY

    warm_up(list(REGISTRY.names()), say=None)


@pytest.fixture
def toys() -> Iterator[None]:
    """The toy solvers of `tests.support.analysis_toys` registered for the test (a module opts in with
    ``pytestmark = pytest.mark.usefixtures("toys")``)."""
    with registered():
        yield
