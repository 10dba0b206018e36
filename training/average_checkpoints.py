"""Average the weights of several checkpoints of one run into a model folder (checkpoint averaging, as fairseq's
`average_checkpoints.py`; Izmailov et al.'s SWA takes the same mean along a constant learning rate).

    python training/average_checkpoints.py outputs/listops/checkpoint-19000 outputs/listops/checkpoint-20000 \
        outputs/listops/checkpoint-21000 --output_dir outputs/listops/averaged
    python training/evaluate_model.py outputs/listops/averaged --task listops --split ood_test

Each input is a folder that `from_pretrained` loads (a checkpoint, an export). The output folder gets the uniform mean
of every floating-point tensor (computed in float64, stored in the first model's dtype), and the configuration and
tokenizer of the **last** input. The inputs must hold the same tensors with the same shapes (one run, or runs of one
architecture): anything else is a one-line error naming the first folder and tensor that differ (exit status 2).
Integer tensors (none in an NDR today) must agree and are copied.

Averaging helps where a constant learning rate leaves the weights bouncing around a basin: their mean sits nearer its
centre. It does not help across runs from different initialisations (their units are not aligned).
"""

import argparse
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

from modeling_ndr.training import UsageError, exit_on_usage_error


WEIGHTS = "model.safetensors"
# what a model folder holds besides its weights, copied from the last input when present
FOLDER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def average_state_dicts(state_dicts: list[dict[str, torch.Tensor]], names: list[str]) -> dict[str, torch.Tensor]:
    """The uniform mean of `state_dicts` (float tensors; others must be equal). `names` label them in errors."""
    if not state_dicts:
        raise UsageError("average_checkpoints: give at least one checkpoint")
    first, first_name = state_dicts[0], names[0]
    for other, name in zip(state_dicts[1:], names[1:]):
        if other.keys() != first.keys():
            differ = sorted(other.keys() ^ first.keys())[0]
            raise UsageError(f"{name}: tensor {differ!r} is in only one of it and {first_name}; cannot average")
        for key, tensor in other.items():
            if tensor.shape != first[key].shape:
                raise UsageError(
                    f"{name}: tensor {key!r} has shape {tuple(tensor.shape)}, {first_name} {tuple(first[key].shape)}"
                )
    averaged = {}
    for key, tensor in first.items():
        if tensor.is_floating_point():
            total = sum(state[key].double() for state in state_dicts)
            averaged[key] = (total / len(state_dicts)).to(tensor.dtype)
        else:
            for other, name in zip(state_dicts[1:], names[1:]):
                if not torch.equal(other[key], tensor):
                    raise UsageError(f"{name}: integer tensor {key!r} differs from {first_name}'s; cannot average")
            averaged[key] = tensor.clone()
    return averaged


def average_checkpoints(folders: list[str], output_dir: str) -> str:
    """Write the mean of `folders`' weights, with the last folder's config and tokenizer, to `output_dir`."""
    for folder in folders:
        if not os.path.isfile(os.path.join(folder, WEIGHTS)):
            raise UsageError(f"{folder}: no {WEIGHTS} (give checkpoint or model folders)")
    if os.path.abspath(output_dir) in {os.path.abspath(folder) for folder in folders}:
        raise UsageError(f"--output_dir {output_dir} is one of the inputs; write the average to a new folder")
    averaged = average_state_dicts([load_file(os.path.join(f, WEIGHTS)) for f in folders], folders)
    os.makedirs(output_dir, exist_ok=True)
    for name in FOLDER_FILES:
        if os.path.isfile(os.path.join(folders[-1], name)):
            shutil.copyfile(os.path.join(folders[-1], name), os.path.join(output_dir, name))
    save_file(averaged, os.path.join(output_dir, WEIGHTS), metadata={"format": "pt"})
    return output_dir


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", help="Model or checkpoint folders of one architecture.")
    parser.add_argument("--output_dir", required=True, help="Where the averaged model is written.")
    args = parser.parse_args()
    path = average_checkpoints(args.checkpoints, args.output_dir)
    print(f"averaged {len(args.checkpoints)} checkpoints into {path}")


if __name__ == "__main__":
    exit_on_usage_error(main)
