"""Documents from users (JSON and YAML text): parsed with bounds, refused in one line.

Instance, plan, sweep and results files and ``--option`` values all go through here, so that no
text makes a reader recurse without end, convert an integer of thousands of digits, or expand a
few YAML aliases into billions of nodes. The bounds:

- nesting: at most `MAX_DEPTH` lists and objects inside each other (a file here needs four);
- integers: at most `MAX_INT_DIGITS` digits (a 64-bit integer has 19);
- YAML: at most `MAX_YAML_NODES` nodes once its aliases are expanded, and no alias inside
  itself (a recursive document).

Files are read by `slackswap.textfile.read_user_text` (regular files only, a size bound).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from slackswap.errors import UserError
from slackswap.textfile import read_user_text

MAX_DEPTH = 64
MAX_INT_DIGITS = 40
MAX_YAML_NODES = 100_000

_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_STRING = re.compile(rb'"[^"]*"')


class _Refused(Exception):
    """A bound broken while parsing; its message is the reason, the caller names the source."""


def _int_parser(max_digits: int) -> Any:
    def parse(text: str) -> int:
        digits = len(text.lstrip("-"))
        if digits > max_digits:
            raise _Refused(f"an integer of {digits:,} digits (at most {max_digits})")
        return int(text)

    return parse


_int = _int_parser(MAX_INT_DIGITS)


def json_depth(text: str) -> int:
    """How deeply lists and objects nest in JSON ``text`` (0 for a scalar), without recursion.

    Escapes are dropped first (none opens a string or nests), then every byte but brackets and
    quotes, then the strings (now only quotes and brackets): what is left is short, and NumPy
    counts it. A 16 MB instance file takes tens of milliseconds."""
    raw = text.encode("utf-8", "surrogatepass")
    if b"\\" in raw:
        raw = _ESCAPE.sub(b"", raw)
    raw = raw.translate(None, _NOT_STRUCTURE)
    # Two quotes side by side close a string and open the next, or hold an empty one: either
    # way dropping them loses no bracket (most strings go here, before the slower regex).
    raw = _STRING.sub(b"", raw.replace(b'""', b""))
    codes = np.frombuffer(raw, dtype=np.uint8)
    step = (codes == ord("[")).astype(np.int32) + (codes == ord("{"))
    step -= (codes == ord("]")).astype(np.int32) + (codes == ord("}"))
    return int(np.cumsum(step).max(initial=0))


def parse_json(
    text: str,
    source: str,
    error: type[Exception] = UserError,
    *,
    max_depth: int = MAX_DEPTH,
    max_int_digits: int = MAX_INT_DIGITS,
) -> Any:
    """The value of JSON ``text``; bad JSON or a broken bound raises ``error`` with one line
    that starts with ``source`` (a file name, or ``--option KEY``). A reader that checks its
    fields itself, naming each, may raise the bounds (never past Python's own)."""
    depth = json_depth(text)
    if depth > max_depth:
        raise error(f"{source}: nested too deeply ({depth:,} levels; at most {max_depth})")
    try:
        return json.loads(text, parse_int=_int_parser(max_int_digits))
    except json.JSONDecodeError as exc:
        raise error(
            f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except (_Refused, RecursionError, ValueError) as exc:
        raise error(f"{source}: not readable JSON ({exc})") from None


def parse_option_value(text: str, source: str) -> Any:
    """A ``KEY=VALUE`` option's value: JSON where it parses (``3``, ``true``, ``[1, 2]``), else
    the text itself (``production``); a broken bound is refused (`UserError`)."""
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise UserError(f"{source}: nested too deeply ({depth:,} levels; at most {MAX_DEPTH})")
    try:
        return json.loads(text, parse_int=_int)
    except json.JSONDecodeError:
        return text
    except _Refused as exc:
        raise UserError(f"{source}: {exc}") from None
    except (RecursionError, ValueError) as exc:
        raise UserError(f"{source}: not a readable value ({exc})") from None


def load_json_file(
    path: str | os.PathLike[str], kind: str, error: type[Exception] = UserError
) -> Any:
    """`parse_json` of the file ``path`` as `read_user_text` reads it (``kind``: "a plan file")."""
    return parse_json(read_user_text(path, kind, error), str(path), error)


def parse_yaml(text: str, source: str, error: type[Exception] = UserError) -> Any:
    """The value of YAML ``text`` (safe tags only), within the bounds in the module docstring."""
    try:
        import yaml
    except ModuleNotFoundError:
        raise error(f"{source}: YAML files need PyYAML (pip install pyyaml)") from None
    # libyaml's loader where built: fast. Older libyaml builds (PyYAML 6.0's wheels) do not
    # bound nesting, and no loader bounds alias expansion: the node graph is measured first.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure_yaml(node)
        value = loader.construct_document(node)
    except _Refused as exc:
        raise error(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise error(f"{source}: invalid YAML ({str(exc).splitlines()[0]})") from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise error(f"{source}: not readable YAML ({exc})") from None
    finally:
        loader.dispose()
    check_ints(value, source, error)
    return value


def _measure_yaml(root: Any) -> None:
    """Refuse a node graph too deep, recursive, or of too many nodes once aliases expand.

    Aliases make the graph a DAG whose expansion may be exponential: each node's expanded size
    is computed once (memoised by identity), depth first without recursion."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        kids = list(_children(node))
        if node.tag.endswith(":int") and len(node.value) > MAX_INT_DIGITS + 1:
            raise _Refused(
                f"an integer of {len(node.value):,} characters (at most {MAX_INT_DIGITS} digits)"
            )
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0) if kids else 0
            if size[key] > MAX_YAML_NODES:
                raise _Refused(
                    f"more than {MAX_YAML_NODES:,} values once its aliases are expanded "
                    "(anchors repeated too often)"
                )
            if depth[key] > MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep")
            continue
        if key in size:
            continue
        if key in on_path:
            raise _Refused("an alias inside its own anchor (a recursive document)")
        if len(on_path) > MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep")
        on_path.add(key)
        stack.append((node, True))
        for k in kids:
            if id(k) in on_path:
                raise _Refused("an alias inside its own anchor (a recursive document)")
            if id(k) not in size:
                stack.append((k, False))


def _children(node: Any) -> Iterable[Any]:
    value = node.value
    if isinstance(value, list):
        for item in value:
            if isinstance(item, tuple):  # a mapping's (key, value) pair
                yield from item
            else:
                yield item


def _check_ints(value: Any) -> None:
    """Refuse integers of more than `MAX_INT_DIGITS` digits anywhere in ``value`` (bounded in
    size by the caller)."""
    stack = [value]
    limit = 10**MAX_INT_DIGITS
    while stack:
        v = stack.pop()
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= limit:
            raise UserError(f"an integer of more than {MAX_INT_DIGITS} digits")
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def check_ints(value: Any, source: str, error: type[Exception] = UserError) -> None:
    """`_check_ints` with the message starting with ``source``."""
    try:
        _check_ints(value)
    except UserError as exc:
        raise error(f"{source}: {exc}") from None


def unknown_keys(keys: Iterable[Any], known: Iterable[Any]) -> list[Any]:
    """The keys not in ``known``, in the document's order: keys of any type (``1``, ``None``,
    ``"b"``) are named as they are, never sorted against each other."""
    allowed = set(known)
    out = []
    for k in keys:
        try:
            if k in allowed:
                continue
        except TypeError:  # an unhashable key is unknown too
            pass
        out.append(k)
    return out
