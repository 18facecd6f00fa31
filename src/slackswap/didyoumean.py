"""The "did you mean" of every name a user types: solvers, catalog instances, workload models,
GPUs, links, commands and the CLI's other choices (`difflib.get_close_matches`)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: object, known: Iterable[str], *, n: int = 3) -> str:
    """``"; did you mean 'solve'?"`` (up to ``n`` close names, compared without regard to case),
    or ``""`` when none is close. Meant to follow ``unknown X 'name'`` in a one-line error."""
    names = list(known)
    by_folded = {k.casefold(): k for k in names}
    close = difflib.get_close_matches(str(name).casefold(), list(by_folded), n=n)
    if not close:
        return ""
    return f"; did you mean {' or '.join(repr(by_folded[c]) for c in close)}?"
