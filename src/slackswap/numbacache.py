"""Where numba caches slackswap's compiled functions: one cache per user, shared by every checkout
and install whose sources are the same, rather than a ``__pycache__`` per checkout.

numba keys its disk cache by the source file's path (``NUMBA_CACHE_DIR``) or keeps it beside
the file (``__pycache__``), so a second checkout of the same version compiled everything again
(tens of seconds of CPU). `install` puts one more cache locator in front of numba's own: for a
function of slackswap it names the directory

    <user cache dir>/slackswap/numba/<version>/numba-<numba version>/<sources hash>/

where the hash covers the function's module and every slackswap module it imports, directly or
not (a compiled function inlines the functions and constants it calls). Same sources, same
directory, whatever the checkout; an edit of any of those files makes a new one. The user cache
dir is ``$SLACKSWAP_CACHE_DIR``, else ``$XDG_CACHE_HOME`` or ``~/.cache`` (``~/Library/Caches``
on macOS, ``%LOCALAPPDATA%`` on Windows).

numba's own rules still hold where the user set them: with ``NUMBA_CACHE_DIR`` or
``NUMBA_CACHE_LOCATOR_CLASSES`` set, or where the directory cannot be written, or with a numba
whose cache internals differ from those this was written against (0.59 to 0.68), the cache is
numba's (beside the sources). `describe` says which, for the first run's message.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

from slackswap import __version__

_PACKAGE = Path(__file__).resolve().parent
_IMPORT = re.compile(r"^\s*(?:from|import)\s+(slackswap(?:\.\w+)*)", re.MULTILINE)

_installed: bool | None = None


def user_cache_dir() -> Path:
    """The directory for slackswap's caches (see the module docstring)."""
    own = os.environ.get("SLACKSWAP_CACHE_DIR")
    if own:
        return Path(own)
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = str(Path.home() / "Library" / "Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "slackswap"


def shared_root() -> Path:
    """The shared numba cache of this slackswap version and this numba (one folder per sources
    hash below). numba keeps one index per function and drops an index another numba version
    wrote, so two environments with different numbas (a project's main one and one at its
    declared minimum versions, say) sharing a folder would each compile again after the other
    ran."""
    return user_cache_dir() / "numba" / __version__ / f"numba-{_numba_version()}"


def _numba_version() -> str:
    numba = sys.modules.get("numba")
    if numba is not None:
        return str(numba.__version__)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("numba")
    except PackageNotFoundError:
        return "unknown"


def _module_file(name: str) -> Path | None:
    parts = name.split(".")[1:]
    for candidate in (_PACKAGE.joinpath(*parts).with_suffix(".py"),
                      _PACKAGE.joinpath(*parts, "__init__.py")):  # fmt: skip
        if candidate.is_file():
            return candidate
    return None


@cache
def sources_hash(py_file: str) -> str:
    """SHA-256 (hex, 20 digits) of ``py_file`` and every slackswap module it imports, directly
    or not, by relative path and content."""
    todo, seen = [Path(py_file).resolve()], set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for name in _IMPORT.findall(f.read_text(encoding="utf-8")):
            dep = _module_file(name)
            if dep is not None:
                todo.append(dep.resolve())
    h = hashlib.sha256()
    for f in sorted(seen):
        h.update(str(f.relative_to(_PACKAGE)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:20]


def _locator_class(base: type) -> type:
    class SharedLocator(base):  # type: ignore[misc, valid-type]
        """numba cache locator: slackswap's functions go to the shared, content-keyed cache."""

        def __init__(self, py_func: Any, py_file: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._stamp = sources_hash(py_file)
            self._cache_path = str(shared_root() / self._stamp)

        def ensure_cache_path(self) -> None:
            os.makedirs(self._cache_path, exist_ok=True)
            with open(os.path.join(self._cache_path, ".write-test"), "w"):
                pass

        def get_cache_path(self) -> str:
            return self._cache_path

        def get_source_stamp(self) -> str:
            return self._stamp  # the sources' content: the same in every checkout

        def get_disambiguator(self) -> str:
            return str(self._lineno)

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            try:
                inside = Path(py_file).resolve().is_relative_to(_PACKAGE)
            except OSError:
                return None
            if not inside or not getattr(py_func, "__module__", "").startswith("slackswap."):
                return None
            try:
                locator = cls(py_func, py_file)
                locator.ensure_cache_path()
            except OSError:  # no home, a read-only cache dir: numba's own locators
                return None
            return locator

    return SharedLocator


def install() -> bool:
    """Put the shared locator first in numba's list, once per process; whether it is in use.
    Call before any ``@njit(cache=True)`` function of slackswap is defined."""
    global _installed
    if _installed is not None:
        return _installed
    _installed = False
    if os.environ.get("NUMBA_CACHE_DIR") or os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES"):
        return False  # the user's choice
    try:
        from numba.core import caching

        impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")  # noqa: B009
        locators = impl._locator_classes
        base = caching._CacheLocator
    except (ImportError, AttributeError):  # another numba's internals: its own cache
        return False
    if not isinstance(locators, list):
        return False
    locators.insert(0, _locator_class(base))
    _installed = True
    return True


def describe() -> str:
    """Where the compiled code is cached, in words, for the first run's message."""
    if install():
        home = str(Path.home())
        root = str(shared_root())
        shown = "~" + root[len(home) :] if root.startswith(home + os.sep) else root
        return f"cached in {shown} for every checkout of these sources"
    if os.environ.get("NUMBA_CACHE_DIR"):
        return "cached in NUMBA_CACHE_DIR for this checkout"
    return "cached beside the sources, for this checkout"
