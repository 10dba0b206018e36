"""One-line user errors: a bad command line, preset, model setting or data file is reported as
`SCRIPT: error: MESSAGE` (exit status 2), without a traceback, before any data is generated or any step trained; the
one JSON reader (`read_json`), which names a file that does not parse."""

import json
import os
import sys
from collections.abc import Callable
from typing import Any


class UsageError(ValueError):
    """A bad command line, preset, model setting or data file: reported in one line, without a traceback."""


def first_line(error: BaseException) -> str:
    """The first line of the innermost cause of `error` (the part a reader can act on), shortened to 200 characters.

    Args:
        error: the exception, possibly raised from or during another one.

    Returns:
        The first line of the innermost exception's message, or its type name if the message is empty.
    """
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


def exit_on_usage_error(main: Callable[[], Any]) -> Any:
    """Run a script's `main()`; a `UsageError` is printed as `SCRIPT: error: MESSAGE` and exits with status 2.

    Args:
        main: the script's entry point, called without arguments (it reads `sys.argv`).

    Returns:
        What `main()` returns.
    """
    try:
        return main()
    except UsageError as error:
        print(f"{os.path.basename(sys.argv[0])}: error: {error}", file=sys.stderr)
        sys.exit(2)


def read_json(path: str):
    """A JSON file's content; None if there is no such file. A file that is there but does not parse (cut short, or
    not JSON) is a `UsageError` naming it, never taken for a missing one. The one JSON reader of the training code and
    the release tooling.

    Args:
        path: the file.

    Returns:
        What the file holds, or None.
    """
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, NotADirectoryError):  # (a path through a file: no such file either)
        return None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{path}: not a readable JSON file ({error})") from None
