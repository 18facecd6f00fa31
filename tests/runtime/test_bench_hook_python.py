"""benchmarks/bench_hook_python.py's exclusive timer: what each label is charged when timed
calls nest, and what a left-out call (a copy, a replayed operator) takes away."""

from __future__ import annotations

from tests.support.benchmarks import load_benchmark


class Clock:
    """A clock that moves only when told: the tests' functions advance it by hand."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_nested_calls_are_charged_their_own_time_only() -> None:
    bench = load_benchmark("bench_hook_python")
    clock = Clock()
    timer = bench.ExclusiveTimer(clock)

    def copy() -> None:  # left out: 7 units, charged to nobody
        clock.now += 7

    def inner() -> str:
        clock.now += 3
        copy_out()
        clock.now += 2
        return "inner"

    def outer() -> str:
        clock.now += 10
        got = timed_inner()
        clock.now += 1
        copy_out()
        return got

    copy_out = timer.wrap("", copy)
    timed_inner = timer.wrap("inner", inner)
    timed_outer = timer.wrap("outer", outer)

    assert timed_outer() == "inner"
    assert timed_outer() == "inner"
    # By hand, per call of outer: its own 10 + 1; inner's own 3 + 2; two copies of 7 left out.
    assert timer.spent == {"outer": 2 * 11, "inner": 2 * 5}
    assert timer.calls == {"outer": 2, "inner": 2}
    assert clock.now == 2 * (11 + 5 + 14)


def test_a_call_that_raises_is_still_charged() -> None:
    bench = load_benchmark("bench_hook_python")
    clock = Clock()
    timer = bench.ExclusiveTimer(clock)

    def fails() -> None:
        clock.now += 4
        raise ValueError("mismatch")

    timed = timer.wrap("fails", fails)
    try:
        timed()
    except ValueError:
        pass
    else:
        raise AssertionError("the wrapped call's error was swallowed")
    assert timer.spent == {"fails": 4} and timer.calls == {"fails": 1}


def test_an_operators_schema_survives_the_wrapping() -> None:
    bench = load_benchmark("bench_hook_python")

    def op() -> None: ...

    op._schema = "aten::relu(Tensor self) -> Tensor"  # type: ignore[attr-defined]
    wrapped = bench.ExclusiveTimer(Clock()).wrap("", op)
    assert wrapped._schema == op._schema
