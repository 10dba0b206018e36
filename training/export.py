"""Write a hub-ready folder from a trained checkpoint (`modeling_ndr.training.export_model`).

    python training/export.py CHECKPOINT_DIR OUT_DIR [--repo_id org/name]

The folder holds `config.json` (with `auto_map` and `id2label`), `model.safetensors`, the tokenizer files, the
modeling code for `trust_remote_code=True`, and a `README.md` model card rendered from
`modeling_ndr/templates/model_card_template.md` (package data). `eval_results.json` and `run_config.json` are read
from the checkpoint folder or its parent (where `train.py` writes them) and copied along.
"""

import argparse

from modeling_ndr.training.export import export_model


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--repo_id", default=None, help="Hub id used in the model card's snippets (org/name).")
    args = parser.parse_args()
    try:
        print(export_model(args.checkpoint_dir, args.out_dir, repo_id=args.repo_id))
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")


if __name__ == "__main__":
    main()
