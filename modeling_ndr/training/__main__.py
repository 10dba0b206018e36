"""`python -m modeling_ndr.training COMMAND ...`: the library's commands, for an installed package as for a checkout.

    python -m modeling_ndr.training export CHECKPOINT_DIR OUT_DIR [--repo_id org/name]   # a hub-ready folder

(`python training/run_in_chunks.py` runs a training in resumable chunks.)
"""

import sys

from .export import main as export_main


COMMANDS = {"export": export_main}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        usage = f"usage: python -m modeling_ndr.training {{{','.join(COMMANDS)}}} ..."
        print(f"{usage}\n{__doc__.strip()}", file=sys.stderr)
        sys.exit(2)
    COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    main()
