"""Files kept in parts: a file larger than a limit is stored as `NAME.part-000`, `NAME.part-001`, ... and joined again
when it is read. A release's `last-checkpoint/` keeps its files this way (the machines that hand back a GPU session's
files take at most 16 MiB each, and so does the repository's own size rule for committed files), and a GPU session
packs its results the same way: `cat NAME.part-* > NAME` joins them by hand.

Standard library only: `hub_cards/gpu_session.py` imports it before anything is installed.
"""

import os
import re
import shutil


MAX_FILE_BYTES = 16 * 2**20  # the largest file kept whole
PART = ".part-"


def part_name(name: str, index: int) -> str:
    """The name of part `index` of the file `name` (`NAME.part-000`)."""
    return f"{name}{PART}{index:03d}"


def write_in_parts(source: str, target_dir: str, name: str, max_bytes: int = MAX_FILE_BYTES) -> list[str]:
    """Move the file `source` into `target_dir` as `name`, or, if it is larger than `max_bytes`, as parts of at most
    `max_bytes` each (the file itself is removed). Returns the names written, in order."""
    if os.path.getsize(source) <= max_bytes:
        shutil.move(source, os.path.join(target_dir, name))
        return [name]
    parts = []
    with open(source, "rb") as whole:
        while block := whole.read(max_bytes):
            parts.append(part_name(name, len(parts)))
            with open(os.path.join(target_dir, parts[-1]), "wb") as part:
                part.write(block)
    os.remove(source)
    return parts


def split_large_files(folder: str, max_bytes: int = MAX_FILE_BYTES) -> list[str]:
    """Store every file of `folder` larger than `max_bytes` as parts (`write_in_parts`), in place.

    Args:
        folder: a checkpoint folder.
        max_bytes: the largest part.

    Returns:
        The names of the files that were split.
    """
    split = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.path.getsize(path) > max_bytes:
            write_in_parts(path, folder, name, max_bytes)
            split.append(name)
    return split


def join_split_files(folder: str) -> list[str]:
    """Join the parts that `split_large_files` wrote back into their files (the parts are removed).

    Args:
        folder: a checkpoint folder.

    Returns:
        The names of the files that were joined.
    """
    parts: dict[str, list[str]] = {}
    for name in os.listdir(folder):
        if match := re.fullmatch(rf"(.+){re.escape(PART)}(\d{{3}})", name):
            parts.setdefault(match[1], []).append(name)
    for name, pieces in parts.items():  # a lost part: nothing is joined
        if missing := [part_name(name, i) for i in range(len(pieces)) if part_name(name, i) not in pieces]:
            raise ValueError(f"{missing[0]} is missing (a part of a file kept in parts)")
    for name, pieces in parts.items():
        with open(os.path.join(folder, name), "wb") as target:
            for piece in sorted(pieces):
                with open(os.path.join(folder, piece), "rb") as source:
                    shutil.copyfileobj(source, target)
        for piece in pieces:
            os.remove(os.path.join(folder, piece))
    return sorted(parts)
