"""benchmarks/bench_runtime.py's own measurements: what its columns count."""

from __future__ import annotations

import itertools
import os
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

if os.environ.get("CI"):
    import torch  # CI installs torch: a missing torch there must fail, not skip
else:
    torch = pytest.importorskip("torch")

from tests.support import profiling_factories as pf  # noqa: E402
from tests.support.benchmarks import load_benchmark  # noqa: E402

# It runs the benchmark's own steps (profiling and planning real models): the slow suite's.
pytestmark = pytest.mark.slow


def _bench() -> ModuleType:
    return load_benchmark("bench_runtime")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _bench()


def _cnn_case(bench: ModuleType) -> Any:
    model, img = pf.plain_cnn()
    return bench.Case("CNN", model, (img,), bench._sum)


def test_python_per_saved_tensor_leaves_out_the_replayed_operators_and_the_copies(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clock that moves one unit per reading: every timed call costs 1 and a call with a timed
    # call inside it 3, so what is subtracted is exactly the nested calls' time.
    ticks = itertools.count()
    monkeypatch.setattr(bench, "time", SimpleNamespace(thread_time=lambda: float(next(ticks))))
    case = _cnn_case(bench)
    per_tensor = {}
    for kind in ("keep", "swap", "blocks"):
        step, planned = bench.planned(case, bench.uniform(case.inst, kind), 1.0)
        funcs = {p: r.func for p, r in (planned._learned.replay.records.items()
                                         if planned._learned.replay else [])}  # fmt: skip
        per_tensor[kind] = bench.hook_us_per_saved_tensor(case, step, planned, 2)
        # Everything it wrapped is put back.
        assert bench.FastStep._pack.__name__ == "_pack"
        assert bench.CopyEngine.fetch.__name__ == "fetch"
        assert bench.copies_module.copy_to_host.__name__ == "copy_to_host"
        if planned._learned.replay:
            assert all(r.func is funcs[p] for p, r in planned._learned.replay.records.items())
    hooks, copies, python = per_tensor["keep"]  # hooks that only count
    assert copies == 0 and python == hooks > 0
    hooks, copies, python = per_tensor["swap"]  # copies to the host and back, no replay
    assert 0 < copies < hooks and python == pytest.approx(hooks - copies)
    hooks, copies, python = per_tensor["blocks"]  # replayed convolutions, no copy
    assert copies == 0 and 0 < python < hooks


def test_the_timer_floor_is_what_the_timer_measures_around_hooks_that_do_nothing(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a clock that moves one unit per reading each timed hook call measures exactly 1 s:
    # autograd unpacks each of the CNN's saved tensors once, so the floor is one pack and one
    # unpack per pack, 2 s (2e6 us).
    ticks = itertools.count()
    monkeypatch.setattr(bench, "time", SimpleNamespace(thread_time=lambda: float(next(ticks))))
    assert bench.timer_floor_us_per_pack(_cnn_case(bench), 2) == pytest.approx(2e6)


def test_the_checkpoint_baseline_takes_each_block_with_the_batch_norm_after_it(
    bench: ModuleType,
) -> None:
    # The CNN's blocks are its convolutions, each followed by the batch-norm that saves its
    # output; the stem's (its output overwritten by an in-place ReLU) and the last one's (the
    # pooling's input) are not recomputed by the block plan, so they get no span.
    case = _cnn_case(bench)
    convs = [k for k, m in enumerate(case.model.features) if isinstance(m, torch.nn.Conv2d)]
    assert bench.batch_norm_spans(case) == [("features", k, k + 1) for k in convs[1:-1]]
    model = bench.checkpointed_spans(case, bench.batch_norm_spans(case))
    assert isinstance(model.features[convs[1]], bench._CheckpointedRun)
    assert isinstance(model.features[convs[1] + 1], torch.nn.Identity)
    gpt, x, lf = pf.gpt_dropout()
    assert bench.batch_norm_spans(bench.Case("GPT", gpt, x, lf)) == []


def test_the_warm_protocol_times_each_step_after_an_untimed_one_with_the_collector_off(
    bench: ModuleType,
) -> None:
    # Each context records whether the collector was on as it was entered: the default enters
    # each case once per round with the collector on; --warm twice, off, the second timed.
    import gc
    from contextlib import contextmanager

    entered: dict[str, list[bool]] = {"a": [], "b": []}

    def noting(label: str) -> Any:
        @contextmanager
        def ctx() -> Any:
            entered[label].append(gc.isenabled())
            yield

        return ctx

    case = _cnn_case(bench)
    runs = [("a", noting("a"), None), ("b", noting("b"), None)]
    got = bench.interleaved(case, 2, runs)
    assert entered == {"a": [True] * 3, "b": [True] * 3}  # a warm-up round, then 2 timed
    assert set(got) == {"a", "b"} and all(t > 0 for t, _ in got.values())
    for seen in entered.values():
        seen.clear()
    got = bench.interleaved(case, 2, runs, warm=True)
    assert entered == {"a": [False] * 6, "b": [False] * 6}
    assert gc.isenabled()


def test_the_counting_hooks_count_each_saved_storage_once_until_it_is_freed(
    bench: ModuleType,
) -> None:
    """Keep-all's yardstick measures what the keep-all step counts: every saved storage once
    (the oracle: the distinct storages the same step saves, from hooks of the test's own),
    all live at the end of the forward pass, none after the step; another step is refused."""
    case = _cnn_case(bench)
    step, planned = bench.planned(case, bench.uniform(case.inst, "keep"), 1.0)
    expected = bench.counted_packs(planned._learned)
    counted = [p for p in expected if p[2] >= 0]
    assert counted and len(counted) < len(expected)  # the parameters are not counted

    # Storage pointer -> bytes, of the tensors the step makes and saves (not the parameters,
    # buffers and inputs, which exist before it).
    saved: dict[int, int] = {}
    kept: list[Any] = []  # held until the step ends, so no storage's address is reused in it
    before = [*case.model.parameters(), *case.model.buffers(), *case.inputs]
    made_before = {t.untyped_storage().data_ptr() for t in before}

    def note(t: Any) -> Any:
        s = t.untyped_storage()
        if s.data_ptr() not in made_before:
            saved[s.data_ptr()] = s.nbytes()
        kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(note, lambda t: t):
        case.loss_fn(case.model(*case.inputs)).backward()
    kept.clear()

    hooks = bench.CountingHooks(expected)
    with hooks:
        out = case.loss_fn(case.model(*case.inputs))
        at_end_of_forward = hooks.live_bytes
        out.backward()
    del out
    assert at_end_of_forward == hooks.peak_bytes == sum(saved.values())
    assert hooks.live_bytes == 0 and not hooks.alive

    other = bench.CountingHooks([((1, 2), dtype, n) for _, dtype, n in expected])
    with pytest.raises(RuntimeError, match="pack 0: not the profiled step"), other:
        case.model(*case.inputs)
