"""Progress on long work, one convention for every command, always on stderr.

On a terminal a tqdm bar (jobs done, failures, time left); piped or redirected, one line per
finished job (``[3/15] gpt2-xl 50% slackswap: feasible, 97.5% of ideal, 0.05 s``), so a log
shows what ran as it runs; ``--no-progress`` prints nothing and ``--progress`` forces the bar.
"""

from __future__ import annotations

import argparse
import math
import numbers
import sys
from typing import IO, Any

from slackswap.console import format_percent


def phase(desc: str, what: str, mode: bool | None = None, stream: IO[str] | None = None) -> None:
    """Say on stderr what a command starts that may take a while (``desc: what ...``), unless
    ``mode`` is False (``--no-progress``)."""
    if mode is False:
        return
    out = stream if stream is not None else sys.stderr
    out.write(f"{desc}: {what} ...\n")
    out.flush()


def failed(row: Any) -> bool:
    """Whether a results row (a dict or a pandas row) is a failed job: the solver raised, or
    the job ran out of time without a plan. A search or exact solver that used its whole time
    limit and returned a plan (status ``timeout`` with a step) did not fail."""
    status = row.get("status")
    return status == "error" or (status == "timeout" and not _number(row.get("step_s")))


def why_failed(row: Any) -> str:
    """The one line a failed row's job ended on."""
    error = row.get("error")
    if isinstance(error, str) and error:
        return error.splitlines()[0]
    reason = row.get("reason")
    if isinstance(reason, str) and reason:
        return f"no plan within the time limit: {reason}"
    return "no plan within the time limit"


def failure_summary(rows: list[Any], *, limit: int = 10) -> list[str]:
    """Lines naming the failed jobs among ``rows`` and why (the first ``limit`` of them)."""
    bad = [r for r in rows if failed(r)]
    if not bad:
        return []
    lines = [f"{len(bad)} of {len(rows)} jobs failed:"]
    lines += [f"  {job_name(r)}: {r.get('status')}: {why_failed(r)}" for r in bad[:limit]]
    if len(bad) > limit:
        lines.append(f"  and {len(bad) - limit} more (the results' error column)")
    return lines


def job_name(row: Any) -> str:
    """A job as people name it: ``gpt2-xl 50% cpsat`` (``seed 1`` when not 0)."""
    frac: Any = row.get("budget_fraction")
    budget = format_percent(frac) if _number(frac) else str(row.get("budget", "?"))
    name = f"{row.get('instance', '?')} {budget} {row.get('solver', '?')}"
    seed = row.get("seed")
    if _number(seed) and seed != 0:
        name += f" seed {int(seed)}"
    return name


def add_progress_arguments(p: argparse.ArgumentParser) -> None:
    """``--progress`` / ``--no-progress`` (default: a bar on a terminal, else a line per job)."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="always show a progress bar on stderr (default: a bar on a terminal, "
        "else one line per finished job)",
    )
    group.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="print no progress at all",
    )


def job_line(row: dict[str, Any]) -> str:
    """What one finished job came to, in a few words (percent, seconds)."""
    head = job_name(row)
    status = str(row.get("status", "?"))
    parts = [status]
    if _number(row.get("throughput")):
        parts.append(f"{100 * float(row['throughput']):.1f}% of ideal")
    if row.get("error"):
        parts.append(str(row["error"]).splitlines()[0][:120])
    seconds = row.get("wall_s", row.get("plan_s"))
    if _number(seconds):
        parts.append(f"{seconds:.2f} s")
    return f"{head}: {', '.join(parts)}"


def _number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


class JobProgress:
    """Counts finished jobs out of ``total`` (``done`` of them already, e.g. resumed).

    ``mode``: None (a bar on a terminal, else a line per job), True (a bar), False (nothing).
    Use as a context manager, or call `close`.
    """

    def __init__(
        self,
        total: int,
        *,
        desc: str = "jobs",
        mode: bool | None = None,
        done: int = 0,
        stream: IO[str] | None = None,
    ) -> None:
        self.total, self.done, self.failures, self.desc = total, done, 0, desc
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.kind = "off" if mode is False else "bar" if mode or tty else "lines"
        self.bar: Any = None
        if self.kind == "bar":
            from tqdm.auto import tqdm

            # No monitor thread (it only corrects a bar's refresh rate after a slow update): a
            # process running a second thread cannot safely fork, and the genetic search forks
            # its island workers only when it runs alone (else they become threads, ~1.5x slower).
            tqdm.monitor_interval = 0
            self.bar = tqdm(
                total=total, initial=done, unit="job", desc=desc, file=self.stream,
                dynamic_ncols=True,
            )  # fmt: skip

    def start(self, what: str) -> None:
        """Say what starts (piped: a line; on a terminal the bar's label)."""
        if self.kind == "lines":
            self._print(f"{self.desc}: {what} ...")
        elif self.bar is not None:
            self.bar.set_description_str(f"{self.desc}: {what}", refresh=True)

    def finished(self, row: dict[str, Any]) -> None:
        """One job finished with this results row."""
        self.done += 1
        if failed(row):
            self.failures += 1
        if self.kind == "lines":
            self._print(f"[{self.done}/{self.total}] {job_line(row)}")
        elif self.bar is not None:
            self.bar.set_postfix_str(f"failed={self.failures}", refresh=False)
            self.bar.update(1)

    def _print(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> JobProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
