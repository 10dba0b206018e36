"""One-line user errors: a bad command line, preset, model setting or data file is reported as
`SCRIPT: error: MESSAGE` (exit status 2), without a traceback, before any data is generated or any step trained."""

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
