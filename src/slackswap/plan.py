"""A plan (keep / swap / recompute per saved tensor), its JSON file, and the memory budget."""

from __future__ import annotations

import json
import math
import os
import re
import reprlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from slackswap.errors import ArgumentTypeError, UserError
from slackswap.instance import Instance
from slackswap.textfile import atomic_write_text
from slackswap.userdoc import load_json_file

KEEP = 0
SWAP = 1
RECOMP = 2

ACTION_NAMES = ("keep", "swap", "recomp")
_ACTION_CODES = {"keep": KEEP, "swap": SWAP, "recomp": RECOMP, "recompute": RECOMP}

PLAN_FORMAT = "slackswap-plan"
PLAN_VERSION = 1
DEFAULT_RUNTIME = "barrier-free"


class PlanError(ValueError, UserError):
    """A plan or budget that does not fit its instance or its format (one-line message)."""


def check_actions(instance: Instance, actions: Any) -> np.ndarray:
    """``actions`` as a contiguous int8 array of length n_tensors with values in {0, 1, 2}."""
    try:
        arr = np.asarray(actions)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"actions: not an integer array ({exc})") from None
    if arr.ndim != 1 or arr.shape[0] != instance.n_tensors:
        raise PlanError(
            f"actions: expected {instance.n_tensors} entries (one per saved tensor of "
            f"{instance.name!r}), got shape {arr.shape}"
        )
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(arr == np.round(arr)):
            raise PlanError(
                f"actions: expected integers 0 (keep), 1 (swap), 2 (recomp), got {arr.dtype}"
            )
    bad = np.flatnonzero((arr < 0) | (arr > 2))
    if bad.size:
        i = int(bad[0])
        raise PlanError(
            f"actions[{i}] = {arr[i].item()!r} (tensor {instance.tensor_name[i]!r}): "
            "must be 0 (keep), 1 (swap) or 2 (recomp)"
        )
    return np.ascontiguousarray(arr, dtype=np.int8)


class Plan:
    """One action per saved tensor of an instance (tensor order), for one runtime.

    ``actions`` is a read-only int8 array: 0 keep, 1 swap, 2 recomp. Plans compare equal by
    (instance content hash, runtime, actions).
    """

    __slots__ = ("instance", "actions", "runtime", "_hash")

    def __init__(self, instance: Instance, actions: Any, runtime: str = DEFAULT_RUNTIME):
        arr = check_actions(instance, actions)
        if arr is actions or np.shares_memory(arr, np.asarray(actions)):
            arr = arr.copy()
        arr.setflags(write=False)
        if not isinstance(runtime, str) or not runtime:
            raise ArgumentTypeError(
                f"runtime: expected a runtime name (`slackswap runtimes`), got {runtime!r}"
            )
        self.instance = instance
        self.actions = arr
        self.runtime = runtime
        self._hash: str | None = None

    @classmethod
    def keep_all(cls, instance: Instance, runtime: str = DEFAULT_RUNTIME) -> Plan:
        """The plan that keeps every tensor (the ideal step when the budget is at least P)."""
        return cls(instance, np.zeros(instance.n_tensors, dtype=np.int8), runtime)

    @property
    def instance_hash(self) -> str:
        if self._hash is None:
            self._hash = self.instance.content_hash
        return self._hash

    def _bytes_of(self, action: int) -> int:
        return int(self.instance.tensor_bytes[self.actions == action].sum())

    @property
    def keep_bytes(self) -> int:
        return self._bytes_of(KEEP)

    @property
    def swap_bytes(self) -> int:
        return self._bytes_of(SWAP)

    @property
    def recompute_bytes(self) -> int:
        return self._bytes_of(RECOMP)

    def counts(self) -> dict[str, int]:
        """Number of tensors per action name."""
        return {n: int(np.count_nonzero(self.actions == k)) for k, n in enumerate(ACTION_NAMES)}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        return (
            self.runtime == other.runtime
            and self.instance_hash == other.instance_hash
            and np.array_equal(self.actions, other.actions)
        )

    def __hash__(self) -> int:
        return hash((self.instance_hash, self.runtime, self.actions.tobytes()))

    def __repr__(self) -> str:
        c = self.counts()
        return (
            f"Plan({self.instance.name!r}, keep={c['keep']}, swap={c['swap']}, "
            f"recomp={c['recomp']}, runtime={self.runtime!r})"
        )

    # ----- files ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        names = self.instance.tensor_name
        return {
            "format": PLAN_FORMAT,
            "version": PLAN_VERSION,
            "instance": self.instance.name,
            "instance_hash": self.instance_hash,
            "runtime": self.runtime,
            "summary": {
                "keep_bytes": self.keep_bytes,
                "swap_bytes": self.swap_bytes,
                "recompute_bytes": self.recompute_bytes,
                **self.counts(),
            },
            "actions": {names[i]: ACTION_NAMES[int(a)] for i, a in enumerate(self.actions)},
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan as JSON, atomically: instance name and content hash, tensors by name."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, d: Any, instance: Instance, source: str = "<dict>") -> Plan:
        """A plan from its JSON form; refuses a plan made for another instance."""
        if not isinstance(d, dict) or d.get("format") != PLAN_FORMAT:
            raise PlanError(f"{source}: not a slackswap plan file (format != {PLAN_FORMAT!r})")
        if d.get("version") != PLAN_VERSION:
            raise PlanError(f"{source}: version = {d.get('version')!r}: expected {PLAN_VERSION}")
        h = d.get("instance_hash")
        if h != instance.content_hash:
            raise PlanError(
                f"{source}: plan made for instance {d.get('instance')!r} (hash {str(h)[:12]}), "
                f"not for {instance.name!r} (hash {instance.content_hash[:12]})"
            )
        runtime = d.get("runtime", DEFAULT_RUNTIME)
        if not isinstance(runtime, str):
            raise PlanError(f"{source}: runtime = {runtime!r}: expected a runtime name")
        acts = d.get("actions")
        if not isinstance(acts, dict):
            raise PlanError(f"{source}: actions: expected an object tensor name -> action")
        index = instance.tensor_index
        arr = np.full(instance.n_tensors, -1, dtype=np.int8)
        for name, a in acts.items():
            i = index.get(name)
            if i is None:
                raise PlanError(f"{source}: actions[{name!r}]: no saved tensor of that name")
            code = _ACTION_CODES.get(a) if isinstance(a, str) else None
            if code is None:
                raise PlanError(
                    f"{source}: actions[{name!r}] = {a!r}: expected keep, swap or recomp"
                )
            arr[i] = code
        missing = np.flatnonzero(arr < 0)
        if missing.size:
            raise PlanError(
                f"{source}: actions: no action for tensor {instance.tensor_name[int(missing[0])]!r}"
                f" ({missing.size} missing)"
            )
        return cls(instance, arr, runtime)

    @classmethod
    def load(cls, path: str | os.PathLike[str], instance: Instance) -> Plan:
        """Read a plan file written by `save` for ``instance``."""
        if not os.path.lexists(path):
            raise PlanError(f"{path}: no such plan file")
        d = load_json_file(path, "a plan file", PlanError)
        return cls.from_dict(d, instance, source=str(path))


_UNITS = {
    "B": 1.0,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KIB": 2.0**10,
    "MIB": 2.0**20,
    "GIB": 2.0**30,
    "TIB": 2.0**40,
}
_BYTES_RE = re.compile(r"^\s*([0-9.eE+\-]+)\s*([KMGT]I?B|B)\s*$", re.IGNORECASE)
#: The largest budget in bytes (2**53, 9.0 PB: far above any device, exact as a float and
#: an int64, so every results row can be read back).
MAX_BUDGET_BYTES = 2**53
#: Every form a budget takes, for the messages that refuse one.
BUDGET_FORMS = (
    "a fraction of P up to 1 (0.5), a percentage (50%, or 150% above P) "
    "or bytes (11GB, 11e9B, 16GiB)"
)
_EXPECTED = f"expected {BUDGET_FORMS}"
_POSITIVE = f"must be > 0 and finite: {BUDGET_FORMS}"
#: The smallest fraction of P a budget may be: P is at most 2**53 bytes (the instance checks),
#: so a smaller fraction is less than one byte of every instance.
MIN_BUDGET_FRACTION = 2.0**-53
_BELOW_ONE_BYTE = "is less than one byte (a budget holds at least 1 byte)"
#: A bare number above 1 is refused rather than read as a multiple of P: ``--budget 50`` means 50%
#: or 50 GB far more often than 50 P, and 50 P fits anything, so the mistake would pass unseen.
_BARE_ABOVE_ONE = f"a bare number above 1 is not a budget: write {BUDGET_FORMS}"


def _as_float(value: Any) -> float:
    """``float(value)``, with an integer too large for a float (``10**400``) as infinity: the
    checks that follow then refuse it as not finite, in the budget's own words."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def budget_too_big(nbytes: float) -> str:
    """Why a budget of ``nbytes`` is refused (the common wording)."""
    return f"{nbytes:.3g} bytes is more than any device holds (at most {MAX_BUDGET_BYTES:.3g})"


@dataclass(frozen=True)
class Budget:
    """The device-memory budget M: a fraction of the instance's no-swap peak P, or bytes."""

    kind: str  # "fraction" or "bytes"
    value: float

    def __post_init__(self) -> None:
        if self.kind not in ("fraction", "bytes"):
            raise PlanError(f"budget kind {self.kind!r}: expected 'fraction' or 'bytes'")
        if isinstance(self.value, bool) or not isinstance(
            self.value, int | float | np.integer | np.floating
        ):
            raise PlanError(f"budget {reprlib.repr(self.value)}: {_EXPECTED}")
        v = _as_float(self.value)
        if not math.isfinite(v) or v <= 0:
            raise PlanError(f"budget {reprlib.repr(self.value)}: {_POSITIVE}")
        if self.kind == "bytes" and v > MAX_BUDGET_BYTES:
            raise PlanError(f"budget {reprlib.repr(self.value)}: {budget_too_big(v)}")
        if self.kind == "bytes" and v < 1:
            raise PlanError(f"budget {self.value!r} bytes {_BELOW_ONE_BYTE}")
        if self.kind == "fraction" and v < MIN_BUDGET_FRACTION:
            raise PlanError(
                f"budget {self.value!r}: {_BELOW_ONE_BYTE} of any instance "
                f"(a fraction of P is at least {MIN_BUDGET_FRACTION:.3g})"
            )
        object.__setattr__(self, "value", v)

    @classmethod
    def fraction(cls, f: float) -> Budget:
        """A share of P (0.5 = half the no-swap peak)."""
        return cls("fraction", f)

    @classmethod
    def bytes(cls, b: float) -> Budget:
        return cls("bytes", b)

    @classmethod
    def parse(cls, spec: Budget | float | int | str) -> Budget:
        """``0.5``, ``"0.5"``, ``"50%"`` (fractions of P) or ``"11GB"``, ``"11e9B"`` (bytes).

        A bare number (``0.5``, ``"0.5"``) is a fraction of P and at most 1: ``50`` or ``"50"`` is
        refused (write ``"50%"``, ``0.5`` or ``"50GB"``), an int included (it is not bytes
        either). A budget above P is written as a percentage (``"150%"``) or
        ``Budget.fraction(1.5)``.
        """
        if isinstance(spec, Budget):
            return spec
        if isinstance(spec, int | float | np.integer | np.floating) and not isinstance(spec, bool):
            value = _as_float(spec)
            shown = f"{spec:g}" if math.isfinite(value) else reprlib.repr(spec)
            return cls._bare_fraction(value, shown if value > 1 else spec)
        if not isinstance(spec, str):
            raise PlanError(f"budget {reprlib.repr(spec)}: {_EXPECTED}")
        s = spec.strip()
        m = _BYTES_RE.match(s)
        try:
            if s.endswith("%"):
                kind, value = "fraction", float(s[:-1]) / 100.0
            elif m:
                kind, value = "bytes", float(m.group(1)) * _UNITS[m.group(2).upper()]
            else:
                kind, value = "bare", float(s)
        except ValueError:
            raise PlanError(f"budget {spec!r}: {_EXPECTED}") from None
        if kind == "bare":
            return cls._bare_fraction(value, s if value > 1 else spec)
        return cls._checked(kind, value, spec)

    @classmethod
    def _bare_fraction(cls, value: float, spec: object) -> Budget:
        """A number without a unit: a fraction of P, refused above 1 (see `parse`)."""
        if math.isfinite(value) and value > 1:
            raise PlanError(f"{spec}: {_BARE_ABOVE_ONE}")
        return cls._checked("fraction", value, spec)

    @classmethod
    def _checked(cls, kind: str, value: float, spec: object) -> Budget:
        """A budget whose errors name the value as the user wrote it (``'50%'``, ``'1e30GB'``)."""
        if not math.isfinite(value) or value <= 0:
            raise PlanError(f"budget {spec!r}: {_POSITIVE}")
        if kind == "bytes" and value > MAX_BUDGET_BYTES:
            raise PlanError(f"budget {spec!r}: {budget_too_big(value)}")
        if kind == "bytes" and value < 1:
            raise PlanError(f"budget {spec!r}: {value:.3g} bytes {_BELOW_ONE_BYTE}")
        if kind == "fraction" and value < MIN_BUDGET_FRACTION:
            raise PlanError(
                f"budget {spec!r}: {_BELOW_ONE_BYTE} of any instance "
                f"(a fraction of P is at least {MIN_BUDGET_FRACTION:.3g})"
            )
        return cls(kind, value)

    def bytes_for(self, instance: Instance) -> int:
        """The budget in bytes for ``instance`` (a fraction is taken of its peak P, rounded down)."""
        if self.kind == "bytes":
            return int(math.floor(self.value))
        nbytes = self.value * instance.peak_bytes
        if nbytes > MAX_BUDGET_BYTES:
            raise PlanError(f"budget {self.value:g} of {instance.name}: {budget_too_big(nbytes)}")
        return int(math.floor(nbytes))

    def fraction_of(self, instance: Instance) -> float:
        """The budget as a share of ``instance``'s peak P."""
        if self.kind == "fraction":
            return self.value
        return self.value / instance.peak_bytes if instance.peak_bytes else math.inf

    def __str__(self) -> str:
        if self.kind == "fraction":
            return f"{self.value * 100:g}%"
        return f"{self.value / 1e9:g}GB"
