"""The batch runner: rows per job, failures as rows, the wall-clock guard, joblib and Dask agree."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time

import pandas as pd
import pytest

from slackswap.analysis import runner
from slackswap.analysis.execute import execute
from slackswap.analysis.jobs import SolverSpec, Sweep, ref_from_grid_point, ref_from_instance
from slackswap.analysis.results import TIMING_COLUMNS, read_results
from slackswap.analysis.runner import run_sweep
from slackswap.instances.catalog import build_model
from tests.support.analysis_toys import ToyBoom, ToyKeep, ToyRecompute, ToySleep, ToySleepOn
from tests.support.interrupts import interrupted_as_it_ends


def small_sweep(**kw) -> Sweep:
    refs = [
        ref_from_grid_point({"model": "gpt2-xl", "layers": 2, "seq": 128, "batch": 1}),
        ref_from_instance(build_model("bert-large", layers=1, seq=64, batch=1, name="bert-tiny")),
    ]
    solvers = [SolverSpec.of_object(ToyKeep()), SolverSpec.of_object(ToyRecompute())]
    return Sweep(refs, ["1", "0.7"], solvers, seeds=[0, 1], **kw)


def comparable(df: pd.DataFrame) -> pd.DataFrame:
    """Rows without timing columns, in job-id order (backends finish jobs in any order)."""
    return df.drop(columns=list(TIMING_COLUMNS)).sort_values("job_id").reset_index(drop=True)


@pytest.fixture(scope="module")
def sequential() -> pd.DataFrame:
    return run_sweep(small_sweep(), progress=False)


def test_sequential_sweep_one_row_per_job(sequential: pd.DataFrame, tmp_path) -> None:
    df = sequential
    assert len(df) == 2 * 2 * 2 * 2 and df["job_id"].is_unique
    assert set(df["instance"]) == {"gpt2-xl@a100-pcie4,layers=2,seq=128,batch=1", "bert-tiny"}
    keep_full = df[(df["solver"] == "toy-keep") & (df["budget"] == "1")]
    assert (keep_full["status"] == "feasible").all()
    assert keep_full["throughput"].tolist() == pytest.approx([1.0] * 4)
    keep_low = df[(df["solver"] == "toy-keep") & (df["budget"] == "0.7")]
    assert (keep_low["status"] == "infeasible").all() and keep_low["step_s"].isna().all()
    rec = df[df["solver"] == "toy-recompute"]
    assert (rec["recompute_s"].dropna() > 0).any()
    assert (df["n_tensors"] > 0).all() and (df["instance_peak_bytes"] > 0).all()


def test_results_file_matches_returned_rows(sequential: pd.DataFrame, tmp_path) -> None:
    path = tmp_path / "r.csv"
    df = run_sweep(small_sweep(), results=path, progress=False)
    pd.testing.assert_frame_equal(comparable(read_results(path)), comparable(df))
    pd.testing.assert_frame_equal(comparable(df), comparable(sequential))  # deterministic


def test_failures_become_rows_and_the_sweep_goes_on(tmp_path) -> None:
    # The runner's warm-up of each solver is under the jobs' guard too: the sleeping solver's
    # 30 s never run to their end, neither in the warm-up nor in its job.
    ToySleep.finished = 0
    inst = build_model("gpt2-xl", layers=1, seq=64, batch=1)
    sweep = Sweep(
        [ref_from_instance(inst)],
        ["1"],
        [
            SolverSpec.of_object(ToyBoom()),
            SolverSpec.of_object(ToySleep(seconds=30)),
            SolverSpec.of_object(ToyKeep()),
        ],
        job_timeout=0.5,
    )
    df = run_sweep(sweep, results=tmp_path / "r.parquet", progress=False)
    by = df.set_index("solver")
    assert by.loc["toy-boom", "status"] == "error"
    assert "RuntimeError: toy solver failure" in by.loc["toy-boom", "error"]
    assert by.loc["toy-sleep(seconds=30)", "status"] == "timeout"
    assert "wall-clock guard" in by.loc["toy-sleep(seconds=30)", "error"]
    assert by.loc["toy-sleep(seconds=30)", "wall_s"] < 5
    assert by.loc["toy-keep", "status"] == "feasible"
    assert len(read_results(tmp_path / "r.parquet")) == 3
    assert ToySleep.finished == 0


def test_guard_outside_the_main_thread_abandons_the_job() -> None:
    inst = build_model("gpt2-xl", layers=1, seq=64, batch=1)
    sweep = Sweep([ref_from_instance(inst)], ["1"], [SolverSpec.of_object(ToySleep(seconds=3))])
    job = sweep.jobs()[0]
    job = type(job)(**{**job.__dict__, "job_timeout": 0.3})
    box: dict = {}
    th = threading.Thread(target=lambda: box.update(row=execute(job)))
    th.start()
    th.join(10)
    assert box["row"]["status"] == "timeout" and "abandoned" in box["row"]["error"]


def test_resume_skips_jobs_already_in_the_file(tmp_path) -> None:
    path = tmp_path / "r.csv"
    sweep = small_sweep()
    first = run_sweep(sweep.jobs()[:5], results=path, progress=False)
    assert len(first) == 5
    seen: list[str] = []
    df = run_sweep(
        sweep, results=path, resume=True, progress=False, on_row=lambda r: seen.append(r["job_id"])
    )
    assert len(df) == 16 and df["job_id"].is_unique
    assert sorted(seen) == sorted(df["job_id"])  # resumed rows are reported too
    on_disk = read_results(path)
    assert len(on_disk) == 16 and on_disk["job_id"].is_unique
    # the first five rows are the originals, not reruns
    pd.testing.assert_frame_equal(on_disk.head(5), read_results(path).head(5))
    assert list(on_disk["job_id"].head(5)) == list(first["job_id"])


def test_joblib_workers_give_the_same_rows(sequential: pd.DataFrame) -> None:
    df = run_sweep(small_sweep(), jobs=2, progress=False)
    pd.testing.assert_frame_equal(comparable(df), comparable(sequential))


def test_dask_local_cluster_gives_the_same_rows(sequential: pd.DataFrame) -> None:
    distributed = pytest.importorskip("dask.distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        df = run_sweep(small_sweep(), backend="dask", client=client, progress=False)
    pd.testing.assert_frame_equal(comparable(df), comparable(sequential))


@pytest.mark.slow
def test_dask_worker_processes_give_the_same_rows(sequential: pd.DataFrame) -> None:
    df = run_sweep(small_sweep(), backend="dask", jobs=2, progress=False)
    pd.testing.assert_frame_equal(comparable(df), comparable(sequential))


@pytest.mark.slow  # fresh loky workers load the simulator: about a minute beside xdist's workers
def test_guard_stops_a_job_in_a_joblib_worker() -> None:
    inst = build_model("gpt2-xl", layers=1, seq=64, batch=1)
    sweep = Sweep(
        [ref_from_instance(inst)],
        ["1", "0.9"],
        [SolverSpec.of_object(ToySleep(seconds=60))],
        job_timeout=3.0,  # leaves a fresh worker time to load the compiled simulator
    )
    df = run_sweep(sweep, jobs=2, progress=False)
    assert (df["status"] == "timeout").all()
    assert df["error"].str.contains("was stopped").all()  # the signal timer, not a thread
    assert (df["wall_s"] < 10).all()


def test_first_job_of_a_solver_is_warmed_up_untimed() -> None:
    """The warm-up solve is not recorded: planning time is the timed solve alone."""
    from slackswap.analysis import warmup

    inst = build_model("gpt2-xl", layers=1, seq=64, batch=1)
    solver = ToyKeep(delay_s=0.3)
    sweep = Sweep([ref_from_instance(inst)], ["1"], [SolverSpec.of_object(solver)])
    warmup._warm.discard(repr(solver))
    row = execute(sweep.jobs()[0])
    assert repr(solver) in warmup._warm
    assert 0.3 <= row["plan_s"] < 0.55 <= row["wall_s"]  # two solves ran, one was timed


def test_a_sweep_stopped_early_says_nothing_of_joblibs_cancelled_tasks(recwarn) -> None:
    """A sweep that stops while workers still run (a Ctrl-C, a full disk: here ``on_row``
    raises) stops them without joblib's warning about cancelled tasks: the command's own
    message says what happened, and a Ctrl-C's one line must be the last."""
    inst = build_model("gpt2-xl", layers=1, seq=64, batch=1, name="slow-here")
    slow = ToySleepOn(name="slow-here", seconds=60)
    sweep = Sweep(
        [ref_from_instance(inst)],
        ["1", "0.9"],
        [SolverSpec.of_object(ToyKeep()), SolverSpec.of_object(slow)],
    )

    def stop(row) -> None:
        raise _Stop

    t0 = time.perf_counter()
    with pytest.raises(_Stop):
        run_sweep(sweep, jobs=2, progress=False, on_row=stop)
    # the first row came and the sweep stopped without waiting for the sleeping jobs
    assert time.perf_counter() - t0 < 40
    assert not [w for w in recwarn if "joblib" in str(w.filename)], [str(w) for w in recwarn]


@pytest.mark.parametrize("backend", ["joblib", "dask"])
def test_a_ctrl_c_held_while_workers_start_stops_them_and_says_nothing_more(
    recwarn, monkeypatch, backend
) -> None:
    """A Ctrl-C during `spawning` is held and raised as the block ends, when the workers have
    started (and joblib has dispatched its first tasks): they are stopped then, not left to
    the collector, whose close of joblib's rows warned of the cancelled tasks after the
    command's one line."""
    if backend == "dask":
        pytest.importorskip("dask.distributed")
    inst = build_model("gpt2-xl", layers=1, seq=64, batch=1, name="slow-here")
    slow = ToySleepOn(name="slow-here", seconds=60)
    sweep = Sweep([ref_from_instance(inst)], ["1", "0.9"], [SolverSpec.of_object(slow)])

    monkeypatch.setattr(runner, "spawning", interrupted_as_it_ends)
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, jobs=2, progress=False, backend=backend)
    assert multiprocessing.active_children() == []
    gc.collect()  # what the interpreter's exit would collect
    assert time.perf_counter() - t0 < 40  # the sleeping jobs were not waited for
    assert not [w for w in recwarn if "joblib" in str(w.filename)], [str(w) for w in recwarn]


class _Stop(Exception):
    pass
