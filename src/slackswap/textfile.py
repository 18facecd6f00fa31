"""Files from and to users: one reader and one writer, each with one wording for what fails.

Reading: only regular files are read (a device, FIFO or socket is refused before it is opened,
so ``/dev/zero`` or a FIFO never fills memory or blocks), and at most `MAX_INPUT_BYTES`.

Writing (`write_output`, every command's output file): a path is checked before any work
(`check_output_path`: name and path lengths, a parent that is or can be a directory). Then

- a regular file, or a new path, is written through a temporary file and a rename: never
  half-written;
- a symbolic link is followed: its target is written (atomically, as above), the link stays;
- a character device or a FIFO (``/dev/null``, ``/dev/stdout`` on a terminal or a pipe, a named
  pipe with a reader) is written in place and stays what it is; a FIFO that no process reads is
  refused rather than waited on;
- a socket or a block device is refused.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from slackswap.errors import UserError

#: Largest file a reader takes (bytes): a 50,000-operator instance file is about 20 MB.
MAX_INPUT_BYTES = 256 * 2**20
#: Fallbacks where the file system does not say (Linux's NAME_MAX and PATH_MAX, in bytes).
_NAME_MAX = 255
_PATH_MAX = 4096


def node_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a character device", "a FIFO", ...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def read_user_bytes(
    path: str | os.PathLike[str],
    kind: str,
    error: type[Exception] = UserError,
    max_bytes: int = MAX_INPUT_BYTES,
) -> bytes:
    """The bytes of the regular file ``path`` (at most ``max_bytes``); anything else raises
    ``error`` with one line naming the file (``kind`` says what it should have been)."""
    p = shown(path, most=10_000)
    try:
        # Non-blocking: a FIFO that stands at the path (even one swapped in after a check)
        # opens at once instead of waiting for a writer; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except IsADirectoryError:
        raise error(f"{p}: is a directory, not {kind}") from None
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{p}: is a directory, not {kind}")
        if not stat.S_ISREG(st.st_mode):
            raise error(
                f"{p}: is {node_kind(st.st_mode)}, not {kind} (only regular files are read)"
            )
        if st.st_size > max_bytes:
            raise error(f"{p}: {st.st_size:,} bytes; {kind} holds at most {max_bytes:,} bytes")
        # One read of the size fstat gave (plus a byte, to see a file that grew): the file's
        # bytes land in one buffer, never in pieces joined into a second copy.
        first = os.read(fd, st.st_size + 1)
        chunks, size = [first], len(first)
        while first and size <= max_bytes:
            chunk = os.read(fd, min(1 << 24, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        raw = first if len(chunks) == 1 else b"".join(chunks)
    except OSError as exc:
        raise error(f"{p}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:  # grew while read
        raise error(f"{p}: more than {max_bytes:,} bytes; {kind} holds at most that")
    return raw


def read_user_text(
    path: str | os.PathLike[str],
    kind: str,
    error: type[Exception] = UserError,
    max_bytes: int = MAX_INPUT_BYTES,
) -> str:
    """The UTF-8 text of the regular file ``path``, as `read_user_bytes` reads it; bytes that
    are not UTF-8 raise ``error`` with one line naming the file."""
    raw = read_user_bytes(path, kind, error, max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{shown(path, most=10_000)}: not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x})"
        ) from None


def check_output_path(
    path: str | os.PathLike[str], name: str = "", *, beside_bytes: int = 0
) -> Path:
    """Refuse, with one line, an output path that cannot be created: a name or path longer
    than the file system allows, or a parent that is not a directory. Folders that do not
    exist yet are fine (the writers make them). ``name`` is the option (``-o``) for messages;
    ``beside_bytes`` is how much longer than the file's name the names of the files a writer
    keeps beside it are (a lock, a journal)."""
    p = Path(path)
    what = f"{name} {shown(p)}" if name else shown(p)
    try:
        raw = os.fsencode(p)
    except UnicodeEncodeError as exc:  # a lone surrogate from Python (argv cannot hold one)
        raise UserError(
            f"{what}: a file name cannot hold {exc.object[exc.start]!r} (not encodable)"
        ) from None
    if b"\0" in raw:
        raise UserError(f"{what}: a file name cannot hold a NUL character")
    existing = p.parent
    while not _lexists(existing) and existing != existing.parent:
        existing = existing.parent
    name_max, path_max = _limits(existing)
    absolute = os.fsencode(os.path.abspath(p))
    if len(absolute) >= path_max:
        raise UserError(
            f"{what}: the path is {len(absolute):,} bytes long; this system allows {path_max - 1:,}"
        )
    for i, part in enumerate(p.parts):
        size = len(os.fsencode(part))
        if i == len(p.parts) - 1 and size <= name_max < size + beside_bytes:
            raise UserError(
                f"{what}: the name is {size} bytes long; this system allows {name_max}, and "
                f"the files kept beside it {beside_bytes} bytes more"
            )
        if size > name_max:
            short = part if len(part) <= 40 else part[:37] + "..."
            raise UserError(
                f"{what}: the name {short!r} is {size} bytes long; this system allows {name_max}"
            )
    if _lexists(existing) and not existing.is_dir():
        raise UserError(f"{what}: {existing} is not a directory")
    return p


def shown(path: str | os.PathLike[str], most: int = 120) -> str:
    """``path`` for a one-line message: control characters escaped (a newline as ``\\n``), a
    long one keeps its start and its end."""
    text = os.fspath(path)
    text = one_line(text if isinstance(text, str) else os.fsdecode(text))
    return text if len(text) <= most else f"{text[: most // 2]}...{text[-(most // 2 - 3) :]}"


def one_line(text: str) -> str:
    """``text`` with line breaks and other unprintable characters escaped as Python writes
    them: a message that names a file called ``a\\nb`` stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _lexists(p: Path) -> bool:
    try:
        os.lstat(p)
    except OSError:
        return False
    return True


def _limits(directory: Path) -> tuple[int, int]:
    """(longest name, longest path) in bytes on the file system that holds ``directory``."""
    try:
        name_max = os.pathconf(directory, "PC_NAME_MAX")
        path_max = os.pathconf(directory, "PC_PATH_MAX")
    except (OSError, ValueError):
        return _NAME_MAX, _PATH_MAX
    return (name_max if name_max > 0 else _NAME_MAX), (path_max if path_max > 0 else _PATH_MAX)


def is_stream(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (its symbolic links followed) is a character device or a FIFO: written in
    place, nothing in it is replaced."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def refuse_unwritable_node(path: str | os.PathLike[str], name: str = "") -> None:
    """Refuse a socket or a block device at ``path`` (links followed): never written."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return
    if stat.S_ISSOCK(mode) or stat.S_ISBLK(mode):
        what = f"{name} {path}" if name else str(path)
        raise UserError(f"{what}: is {node_kind(mode)}; slackswap writes files, not to it")


def replace_target(path: str | os.PathLike[str]) -> Path:
    """The file an atomic rewrite of ``path`` replaces: ``path`` itself, or, when it is a
    symbolic link, the file it points to (the link is kept)."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def write_output(path: str | os.PathLike[str], data: str | bytes, name: str = "") -> None:
    """Write ``data`` (text as UTF-8) to ``path`` as the module docstring says: atomically to a
    regular file (a link's target), in place to a device or FIFO. Failures are one `UserError`
    line naming the path (``name`` is the option, e.g. ``-o``)."""
    p = check_output_path(path, name)
    what = f"{name} {shown(p)}" if name else shown(p)
    blob = data.encode("utf-8") if isinstance(data, str) else data
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        mode = None  # a new file (or a link to one not made yet)
    except OSError as exc:
        raise UserError(f"{what}: cannot write ({exc.strerror})") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise UserError(f"{what}: is a directory; name a file")
    if mode is not None and not stat.S_ISREG(mode):
        _write_in_place(p, mode, blob, what)
        return
    try:
        _atomic_write(replace_target(p), blob)
    except OSError as exc:
        raise UserError(f"{what}: cannot write ({exc.strerror})") from None


def _write_in_place(p: Path, mode: int, blob: bytes, what: str) -> None:
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        raise UserError(f"{what}: is {node_kind(mode)}; slackswap writes files, not to it")
    flags = os.O_WRONLY | (os.O_NONBLOCK if stat.S_ISFIFO(mode) else 0)
    try:
        fd = os.open(p, flags)  # no O_TRUNC, no O_CREAT: the node stays what it is
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UserError(
                f"{what}: a FIFO that no process is reading; start the reader first"
            ) from None
        raise UserError(f"{what}: cannot write ({exc.strerror})") from None
    try:
        os.set_blocking(fd, True)  # a reader is there: wait for it, as a pipe does
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise UserError(f"{what}: cannot write ({exc.strerror})") from None
    finally:
        os.close(fd)


def _atomic_write(path: Path, blob: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A short prefix: the temporary name must fit where the file's own name just fits.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:40]}.", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` with `write_output` (kept for the Python API's callers)."""
    write_output(path, text)
