"""Folders written whole or not at all: an export, a release folder or a dataset repository is written into a
temporary sibling (`.NAME.tmp-PID`) and renamed into place, so an interruption (an exception, Ctrl-C, `kill -9`, a
full disk) leaves the old folder or the new one, never half of one.

Replacing an existing folder takes two renames (old aside to `.NAME.old-PID`, new in), then the old copy is deleted.
The next write to the same place tidies up after an interrupted one, with a warning: a half-written `.NAME.tmp-PID`
is deleted; a swap cut between its two renames is finished (the new folder was complete before the swap began); a
left-over old copy is deleted. Leftovers of a process that is still running (another write in progress) are left
alone.

    with atomic_folder("outputs/run/export") as staging:
        model.save_pretrained(staging)        # outputs/run/export is untouched until the block ends without error
"""

import contextlib
import fnmatch
import logging
import os
import re
import shutil
from collections.abc import Iterator, Sequence

from .errors import UsageError


logger = logging.getLogger(__name__)


def process_running(pid: int) -> bool:
    """Whether a process `pid` runs on this host (one of another user counts); False for a pid that is not a positive
    int."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    return True


def _siblings(path: str) -> tuple[str, str]:
    path = os.path.abspath(path)
    return os.path.dirname(path), os.path.basename(path)


def temporary_sibling(path: str, kind: str = "tmp", pid: int | None = None) -> str:
    """The hidden sibling `.NAME.KIND-PID` of `path` (same folder, so a rename moves no data).

    Args:
        path: the folder being written.
        kind: `tmp` (the new folder being written) or `old` (the replaced folder, until deleted).
        pid: the writing process (default: this one).

    Returns:
        The sibling's path.
    """
    parent, name = _siblings(path)
    return os.path.join(parent, f".{name}.{kind}-{os.getpid() if pid is None else pid}")


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.remove(path)


def clean_leftovers(path: str) -> list[str]:
    """Tidy up after interrupted writes of `path` by processes that are no longer running (see the module's text).

    Args:
        path: the folder whose siblings are checked.

    Returns:
        The leftovers that were dealt with (deleted, restored or moved into place), for tests and logs.
    """
    parent, name = _siblings(path)
    if not os.path.isdir(parent):
        return []
    pattern = re.compile(rf"\.{re.escape(name)}\.(tmp|old)-(\d+)")
    by_pid: dict[int, dict[str, str]] = {}
    for entry in os.listdir(parent):
        if match := pattern.fullmatch(entry):
            by_pid.setdefault(int(match[2]), {})[match[1]] = os.path.join(parent, entry)
    handled = []
    for pid, left in sorted(by_pid.items()):
        if pid != os.getpid() and process_running(pid):
            logger.warning("%s: left alone, process %d (still running) is writing it", ", ".join(left.values()), pid)
            continue
        old, new = left.get("old"), left.get("tmp")
        if old and not os.path.exists(path):
            if new:  # cut between the swap's two renames: the new folder was complete before the swap began
                os.rename(new, path)
                logger.warning("%s: finished replacing it with %s, left complete by an interrupted write", path, new)
                new = None
            else:
                os.rename(old, path)
                logger.warning("%s: restored the previous folder from %s (an interrupted write)", path, old)
                old = None
        if old:
            _remove(old)
            logger.warning("%s: deleted the previous copy %s that an interrupted write left", path, old)
        if new:
            _remove(new)
            logger.warning("%s: deleted %s, half-written by an interrupted write", path, new)
        handled += list(left.values())
    return handled


def unexpected_files(path: str, expected: Sequence[str]) -> list[str]:
    """The files under `path` that match none of the `expected` patterns.

    Args:
        path: a folder.
        expected: `fnmatch` patterns of paths relative to `path` (`*` also matches `/`), e.g. `data/*.parquet`.

    Returns:
        The unexpected relative paths, sorted.
    """
    found = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for file in sorted(files):
            relative = os.path.relpath(os.path.join(root, file), path)
            if not any(fnmatch.fnmatch(relative, pattern) for pattern in expected):
                found.append(relative)
    return found


def check_replaceable(path: str, expected: Sequence[str] | None = None, flag: str | None = None) -> None:
    """Check that `path` can be replaced by a new folder: it does not exist, or is a folder holding only files a write
    of this kind makes (so a folder of yours, such as a git clone, is never deleted).

    Args:
        path: the folder to be written.
        expected: `fnmatch` patterns of the files the folder may hold; None to allow any.
        flag: the words that name the folder in an error (default: the path alone).

    Returns:
        None; a one-line `UsageError` if the folder must not be replaced.
    """
    name = f"{flag} {path}" if flag else path
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise UsageError(f"{name}: a file is in the way (expected a folder or nothing)")
    if expected is not None and (others := unexpected_files(path, expected)):
        raise UsageError(
            f"{name}: the folder holds files this command does not write ({', '.join(others[:5])}"
            f"{' ...' if len(others) > 5 else ''}), and writing replaces the whole folder: choose a new or empty one"
        )


def replace_folder(new: str, path: str) -> None:
    """Move the complete folder `new` to `path`, replacing what is there (old aside, new in, old deleted).

    Args:
        new: a complete folder, a sibling of `path` (same file system).
        path: where it goes.
    """
    if not os.path.lexists(path):
        os.rename(new, path)
        return
    old = temporary_sibling(path, "old")
    _remove(old)
    os.rename(path, old)
    try:
        os.rename(new, path)
    except BaseException:
        os.rename(old, path)
        raise
    _remove(old)


@contextlib.contextmanager
def atomic_folder(path: str, expected: Sequence[str] | None = None, flag: str | None = None) -> Iterator[str]:
    """Write the folder `path` whole or not at all: the body writes into the yielded temporary sibling, which replaces
    `path` when the body ends without an error; an error (or an interruption) leaves `path` as it was.

    Args:
        path: the folder to write (its parent is created if missing).
        expected: `fnmatch` patterns of the files an existing `path` may hold (`check_replaceable`); None: any.
        flag: the words that name the folder in an error.

    Returns:
        A context manager yielding the empty temporary folder to write into.
    """
    check_replaceable(path, expected, flag)
    parent, _ = _siblings(path)
    os.makedirs(parent, exist_ok=True)
    clean_leftovers(path)
    staging = temporary_sibling(path)
    _remove(staging)
    os.makedirs(staging)
    try:
        yield staging
    except BaseException:
        _remove(staging)
        raise
    replace_folder(staging, path)
