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


#: Bytes of a document the structure scan (`json_members`) looks at in one go: its numpy
#: temporaries take about 20 bytes per byte scanned, so about 80 MB at most.
_SCAN_CHUNK = 4 << 20
_WHITESPACE = b" \t\r\n"


def json_members(raw: bytes) -> tuple[list[tuple[str, int, int]], int] | None:
    """The members of the JSON object ``raw`` holds, without building any value: each key with
    the byte span [start, end) of its value, in file order, and the deepest nesting; or None
    when ``raw`` is not one object that looks well formed at its top level (the full parser
    then says what is wrong).

    A reader can then refuse a missing field, or parse one member at a time, before a large
    document is materialised. The scan goes through the text in chunks of `_SCAN_CHUNK` bytes
    (bounded temporaries whatever the size): a chunk deep inside a value is reduced to its
    brackets by the byte operations of `json_depth`; only a chunk that reaches the top level is
    read byte by byte for the offsets of its keys. Only brackets, quotes, colons and commas are
    looked at, so a bad token inside a value is left to the parser of that value.
    """
    first = len(raw) - len(raw.lstrip(_WHITESPACE))
    if first >= len(raw) or raw[first] != ord("{"):
        return None
    state = _ScanState()
    start = first
    while start < len(raw) and state.end_at is None:
        stop = min(len(raw), start + _SCAN_CHUNK)
        while stop < len(raw) and raw[stop - 1] == ord("\\"):
            stop += 1  # never cut a run of backslashes: whether a quote is escaped needs it all
        if not state.reduced_chunk(raw, start, stop) and not state.exact_chunk(raw, start, stop):
            return None
        start = stop
    end_at = state.end_at
    if end_at is None or raw[end_at] != ord("}") or raw[end_at + 1 :].strip(_WHITESPACE):
        return None
    members = _members(raw, first, end_at, state.tokens)
    return None if members is None else (members, state.deepest)


class _ScanState:
    """Where `json_members` stands between chunks: inside a string or not, the depth, the
    deepest so far, the top level's token offsets and its closing brace once found."""

    def __init__(self) -> None:
        self.inside = False
        self.depth = 0
        self.deepest = 0
        self.end_at: int | None = None
        self.tokens: list[np.ndarray] = []  # offsets of the top level's quotes, colons, commas

    def reduced_chunk(self, raw: bytes, start: int, stop: int) -> bool:
        """Scan ``raw[start:stop]`` by its brackets alone; False (nothing changed) when it
        reaches the top level (depth 1 or less), where offsets are needed."""
        if self.depth <= 1:
            return False
        chunk = raw[start:stop]
        if b"\\" in chunk:
            chunk = _ESCAPE.sub(b"", chunk)
        kept = (b'"' if self.inside else b"") + chunk.translate(None, _NOT_STRUCTURE)
        kept = _STRING.sub(b"", kept.replace(b'""', b""))
        cut = kept.find(b'"')  # a string still open at the chunk's end
        inside = cut >= 0
        if inside:
            kept = kept[:cut]
        codes = np.frombuffer(kept, dtype=np.uint8)
        step = (codes == ord("[")).astype(np.int32) + (codes == ord("{"))
        step -= (codes == ord("]")).astype(np.int32) + (codes == ord("}"))
        level = np.cumsum(step) + self.depth
        if level.size and int(level.min()) <= 1:
            return False
        if level.size:
            self.deepest = max(self.deepest, int(level.max()))
            self.depth = int(level[-1])
        self.inside = inside
        return True

    def exact_chunk(self, raw: bytes, start: int, stop: int) -> bool:
        """Scan ``raw[start:stop]`` byte by byte, keeping the top level's token offsets;
        False when the brackets close more than they opened."""
        c = np.frombuffer(raw, dtype=np.uint8, count=stop - start, offset=start)
        quote = c == ord('"')
        if raw.find(b'\\"', start, stop) >= 0:  # escaped quotes: an odd run of backslashes
            slash = c == ord("\\")
            last_other = np.maximum.accumulate(np.where(slash, -1, np.arange(c.size)))
            q = np.flatnonzero(quote[1:]) + 1
            run = q - 1 - last_other[q - 1]
            quote[q[run % 2 == 1]] = False
        inside = (np.cumsum(quote, dtype=np.int64) + self.inside) % 2 == 1
        outside = ~inside & ~quote
        step = ((c == ord("{")) | (c == ord("["))).astype(np.int32)
        step -= (c == ord("}")) | (c == ord("]"))
        step[~outside] = 0
        level = np.cumsum(step, dtype=np.int64) + self.depth
        if not level.size:
            return True
        if int(level.min()) < 0:
            return False
        self.deepest = max(self.deepest, int(level.max()))
        marks = (quote | (outside & ((c == ord(":")) | (c == ord(","))))) & (level == 1)
        closed = np.flatnonzero((level == 0) & (step != 0))
        if closed.size:
            self.end_at = start + int(closed[0])
            marks[int(closed[0]) :] = False
        self.tokens.append(np.flatnonzero(marks) + start)
        self.depth = int(level[-1])
        self.inside = (int(np.count_nonzero(quote)) + self.inside) % 2 == 1
        return True


def _members(
    raw: bytes, first: int, end_at: int, tokens: list[np.ndarray]
) -> list[tuple[str, int, int]] | None:
    """The top level's ``"key": value, ...`` read from its token offsets; None if malformed."""
    marks = np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.int64)
    members: list[tuple[str, int, int]] = []
    i, n = 0, marks.size
    while i < n:
        if i + 2 >= n or raw[marks[i]] != ord('"') or raw[marks[i + 1]] != ord('"'):
            return None
        k0, k1, colon = int(marks[i]), int(marks[i + 1]), int(marks[i + 2])
        if raw[colon] != ord(":") or raw[k1 + 1 : colon].strip(_WHITESPACE):
            return None
        try:
            key = json.loads(raw[k0 : k1 + 1])
        except ValueError:
            return None
        if not isinstance(key, str):
            return None
        j = i + 3
        while j < n and raw[marks[j]] != ord(","):
            j += 1  # a string value's quotes: the value's own
        members.append((key, colon + 1, int(marks[j]) if j < n else end_at))
        i = j + 1
    if not members and raw[first + 1 : end_at].strip(_WHITESPACE):
        return None
    return members


_SPACE = re.compile(r"[ \t\r\n]*")


def _skip_space(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]


def json_opens_list(text: str, start: int, end: int) -> bool:
    """Whether the JSON value at ``text[start:end]`` is a list (its first character is ``[``)."""
    i = _skip_space(text, start)
    return i < end and text[i] == "["


def json_value_at(
    text: str,
    start: int,
    end: int,
    source: str,
    error: type[Exception] = UserError,
    *,
    max_int_digits: int = MAX_INT_DIGITS,
) -> Any:
    """The one JSON value at ``text[start:end]`` (a member `json_members` found), parsed in
    place: errors name ``source`` and the line and column in the whole text."""
    try:
        value, stop = json.JSONDecoder(parse_int=_int_parser(max_int_digits)).raw_decode(
            text, _skip_space(text, start)
        )
    except json.JSONDecodeError as exc:
        raise error(
            f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except (_Refused, RecursionError, ValueError) as exc:
        raise error(f"{source}: not readable JSON ({exc})") from None
    if _skip_space(text, stop) != end:
        line = text.count("\n", 0, stop) + 1
        raise error(f"{source}: not valid JSON (line {line}: more than one value in a field)")
    return value


def iter_json_array(
    text: str,
    start: int,
    end: int,
    source: str,
    where: str,
    error: type[Exception] = UserError,
    *,
    max_int_digits: int = MAX_INT_DIGITS,
) -> Iterable[Any]:
    """The items of the JSON array at ``text[start:end]`` one at a time, each parsed as it is
    reached (a reader checks each before the next is built); bad JSON raises ``error`` with
    one line naming ``source``, line and column; not an array yields nothing and returns."""
    decoder = json.JSONDecoder(parse_int=_int_parser(max_int_digits))
    i = _skip_space(text, start)
    if i >= end or text[i] != "[":
        return
    i = _skip_space(text, i + 1)
    if i < end and text[i] == "]":
        return
    while True:
        try:
            item, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise error(
                f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
        except (_Refused, RecursionError, ValueError) as exc:
            raise error(f"{source}: not readable JSON ({exc})") from None
        yield item
        i = _skip_space(text, i)
        if i < end and text[i] == ",":
            i = _skip_space(text, i + 1)
            continue
        if i < end and text[i] == "]":
            return
        line = text.count("\n", 0, i) + 1
        raise error(f"{source}: not valid JSON (line {line}: {where} is not a closed list)")
