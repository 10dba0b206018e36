"""Convert a checkpoint of the paper's official code (github.com/RobertCsordas/ndr) into a hub-ready ndr folder.

    python training/convert_official_checkpoint.py save/ctl_ndr/checkpoint/model-30000.pth outputs/ndr-official-ctl

CHECKPOINT is a `model-<iteration>.pth` written by the official code; it is read with `torch.load(weights_only=True)`,
so no code in it runs. The variants ndr has (`ndr_geometric`, `geometric_transformer`, `universal`,
`relative_universal` and their `act_*` forms) on the tasks `ctl_trafo_classifier`, `simple_arithmetic_trafo` and
`listops_trafo` convert; OUTPUT_DIR then holds `config.json` (with `auto_map`), `model.safetensors`, the modeling
code, a tokenizer with the official vocabulary's ids, a model card naming the source and `conversion.json`
(`modeling_ndr.training.official`). Anything else is one line on stderr, exit status 2, and nothing is written.
"""

import argparse
import sys

from modeling_ndr.training.errors import exit_on_usage_error
from official import convert_official_checkpoint


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="model-<iteration>.pth written by the official code")
    parser.add_argument("output_dir", help="the folder to write (a new or empty one, or an earlier conversion)")
    parser.add_argument("--repo_id", default=None, help="Hub id used in the model card's snippets (org/name).")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    out_dir = convert_official_checkpoint(args.checkpoint, args.output_dir, repo_id=args.repo_id)
    print(out_dir)
    return out_dir


if __name__ == "__main__":
    exit_on_usage_error(main)
