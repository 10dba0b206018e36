"""Evaluate a trained NDR (an export folder, a checkpoint or a hub id) on any split or file; print accuracy per depth.

    python training/evaluate_model.py outputs/ctl_forward_cpu/export --task ctl --split ood_test
    python training/evaluate_model.py outputs/ctl_forward_cpu/export --task ctl   # iid_test, ood_valid, ood_test
    # and 1,000 new compositions each of 11 and 12 functions (split "deeper"), with 14 fixed steps instead of the
    # adaptive steps the model's config may ask for
    python training/evaluate_model.py outputs/ctl_forward_cpu/export --task ctl --depths 11 12 --adaptive_steps false
    python training/evaluate_model.py MODEL --file my.jsonl --depth_column depth   # csv, json/jsonl or parquet
    python training/evaluate_model.py MODEL --file ood=ood.jsonl --file deeper=deeper.csv --output_json results.json
    python training/evaluate_model.py MODEL --dataset_name org/data --split test
    # ListOps: accuracy per root operator ([MIN, [MAX, [MED, [SM) and depth
    python training/evaluate_model.py hub_cards/models/ndr-listops --task listops --split iid_test --by_first_token
    # a token classifier (NDRForTokenClassification): sequence and character accuracy per length
    python training/evaluate_model.py runs/carry/export --task carry --split test_1000
    python training/evaluate_model.py runs/reverse/export --file long=long.jsonl   # a list of labels per row

Labels are matched to the model's by name (`config.label2id`); a label the model does not know is an error. The
numbers come from the package's `evaluate` metric (`modeling_ndr.metrics.DEPTH_ACCURACY`), and are those `train.py`
reports: `{split: {"accuracy": a, "by_depth": {depth: a}}}` with `--output_json`. Models that choose their own number
of steps (ACT halting, adaptive steps) also get `mean_steps` and `mean_steps_by_depth` per split (a token classifier:
`mean_steps_by_length`), printed as a second table. `--depths` (CTL) adds a split `deeper` of compositions of those
depths, drawn with the function tables of `--task_seed` (`modeling_ndr.tasks.ctl_compositions(depths, n_eval,
seed=task_seed, direction=..., sample_seed=1)`: the same rows on every run). `--by_first_token` also reports accuracy
and sample count per first token of the text and depth (ListOps: per root operator), printed as a table and under
`by_first_token` in each split's `--output_json` entry. Errors are one line (exit status 2).
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

import datasets
import modeling_ndr
from adaptive_study import DEEPER_SPLIT
from modeling_ndr.metrics import load_token_accuracy
from modeling_ndr.tables import markdown_table
from modeling_ndr.tasks import COUPLED_TASKS, SMALLEST_N_TRAIN, TOKEN_TASK_NAMES, ctl_compositions
from modeling_ndr.training import UsageError, exit_on_usage_error, first_line, results_table
from modeling_ndr.training.evaluation import predict
from ndr_training import (
    EVAL_SPLITS,
    DataArguments,
    Source,
    encode,
    label_namer,
    load_dataset_splits,
    load_depth_accuracy,
    read_data_file,
    standard_columns,
    warn_unknown_words,
)
from ndr_training.arguments import CTLPP_FLAGS, task_options
from ndr_training.token_labels import encode_token_task, token_columns, token_metrics
from ndr_training.trainer import nested_results


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="A saved NDR: export folder, checkpoint folder or hub id.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--task",
        choices=modeling_ndr.TASK_NAMES + TOKEN_TASK_NAMES,
        help="One of the paper's tasks, or a token task (copy, reverse, addition, carry: a token classifier).",
    )
    source.add_argument(
        "--file", action="append", help="A data file (csv, json/jsonl, parquet), or NAME=FILE; may be repeated."
    )
    source.add_argument("--dataset_name", help="Anything datasets.load_dataset takes (a hub id, a local folder).")
    parser.add_argument("--dataset_config_name")
    parser.add_argument(
        "--split", action="append", help="Split(s) to evaluate (default: the task's evaluation splits / all)."
    )
    parser.add_argument("--direction", help="CTL (default forward), CTL++ (default backward): forward or backward.")
    parser.add_argument("--task_variant", help="CTL++: alternate, parallel_branch (default), parallel_branch_2stage.")
    parser.add_argument("--function_overlap", type=int, help="CTL++: functions in the overlap group (default 0).")
    parser.add_argument("--symbol_overlap", type=int, help="CTL++: symbols shared by the routes into it (default 8).")
    parser.add_argument("--task_seed", type=int, default=0)
    parser.add_argument("--n_eval", type=int, help="Size of each of the task's evaluation splits (default 1000).")
    parser.add_argument(
        "--depths",
        type=int,
        nargs="+",
        help="CTL: also evaluate a split 'deeper' of n_eval compositions of each of these depths (e.g. 11 12).",
    )
    parser.add_argument("--text_column", default="text")
    parser.add_argument("--label_column", default="label")
    parser.add_argument("--depth_column", help="Column of the depth (the paper's tasks: depth).")
    parser.add_argument(
        "--token_labels", action="store_true", help="A csv's label column holds one label per word (token classifier)."
    )
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--num_steps", type=int, help="Steps of the shared layer (default: the model's).")
    parser.add_argument(
        "--adaptive_steps",
        choices=("true", "false"),
        help="Run adaptive steps, or the fixed step count (default: the model's config.adaptive_steps).",
    )
    parser.add_argument("--adaptive_threshold", type=float, help="With adaptive steps (default: the config's).")
    parser.add_argument("--trust_remote_code", action="store_true", help="Load the model's own code (no package).")
    parser.add_argument(
        "--position_coupling",
        action="store_true",
        help="--task copy, reverse or addition: give the model the coupled positions it trained with (train.py "
        "--position_coupling): a symbol and the blank that answers it share a position. On by itself for a folder "
        "whose run_config.json records that training.",
    )
    parser.add_argument(
        "--by_first_token",
        action="store_true",
        help="Also report accuracy and sample count per first token of the text (the first space-separated word: "
        "the tokenizers split on spaces) and per depth, for each split. In ListOps the first token is the root "
        "operator ([MIN, [MAX, [MED, [SM), so the table shows which operators the model has learned. In "
        "--output_json under each split's 'by_first_token'.",
    )
    parser.add_argument(
        "--unknown_words",
        choices=["error", "unk"],
        default="error",
        help="A word of the data that the model's tokenizer lacks: error (one line naming the words, before any "
        "prediction) or unk (read as [UNK], with a warning).",
    )
    parser.add_argument("--output_json", help="Also write the results here.")
    args = parser.parse_args(argv)
    if args.split and args.file:
        parser.error("--split goes with --task or --dataset_name; name files with --file NAME=FILE")
    if args.depths and args.task != "ctl":
        parser.error("--depths goes with --task ctl")
    ctlpp = [flag for flag in CTLPP_FLAGS if getattr(args, flag) is not None]
    if ctlpp and args.task != "ctlpp":
        parser.error(f"--{ctlpp[0]} goes with --task ctlpp")
    return args


def load_splits(args, per_token: bool = False) -> dict[str, datasets.Dataset]:
    """The splits to evaluate, with columns text, label (and depth); for a token classifier (`per_token`) text, label
    (a list per row) and, for a generated task, length."""
    columns = DataArguments(text_column=args.text_column, label_column=args.label_column)
    if per_token:
        return token_splits(args)
    if args.task:
        options = task_options(args)
        try:
            data = modeling_ndr.load_task(
                args.task, seed=args.task_seed, n_train=SMALLEST_N_TRAIN[args.task], n_eval=args.n_eval, **options
            )
        except ValueError as error:
            raise UsageError(str(error)) from None
        evaluated = [split for split in data if split != "train"] if args.task == "ctlpp" else list(EVAL_SPLITS)
        splits = select(data, args.split or evaluated, f"--task {args.task}")
        if args.depths:
            try:
                rows = ctl_compositions(args.depths, args.n_eval or 1000, seed=args.task_seed, **options)
            except ValueError as error:
                raise UsageError(f"--depths: {error}") from None
            splits[DEEPER_SPLIT] = datasets.Dataset.from_list(rows, features=data["ood_test"].features)
        return splits
    columns.depth_column = args.depth_column
    if args.dataset_name:
        data = load_dataset_splits(args.dataset_name, args.dataset_config_name)
        data = select(data, args.split or list(data), f"--dataset_name {args.dataset_name}")
        return {
            split: standard_columns(dataset, f"split {split!r} of {args.dataset_name}", columns)
            for split, dataset in data.items()
        }
    return file_splits(args, lambda dataset, source: standard_columns(dataset, source, columns))


def file_splits(args, checked) -> dict[str, datasets.Dataset]:
    """Each `--file [NAME=]FILE` read and passed through `checked(dataset, source)` (its column checks: errors name
    the file and line)."""
    splits = {}
    for item in args.file:
        name, equals, path = item.partition("=")
        if not equals:
            name, path = os.path.splitext(os.path.basename(item))[0], item
        if name in splits:
            raise UsageError(f"--file {item}: there is already a split named {name!r}")
        splits[name] = checked(read_data_file("--file", path, "evaluation"), Source(f"--file {path}", path))
    return splits


def token_splits(args) -> dict[str, datasets.Dataset]:
    """A token classifier's splits: a token task's evaluation splits (their `length`: the task's), or files whose
    label column holds one label per word (`token_labels.token_columns`: their length, the word count)."""
    if args.task:
        try:
            # the evaluation splits do not depend on n_train: the smallest train set (a row per length) keeps it quick
            data = modeling_ndr.load_token_task(args.task, seed=args.task_seed, n_train=40, n_eval=args.n_eval)
        except ValueError as error:
            raise UsageError(str(error)) from None
        names = args.split or [name for name in data if name != "train"]
        return {name: split.rename_column("labels", "label") for name, split in select(data, names, "--task").items()}
    if args.dataset_name or not args.file:
        raise UsageError("a token classifier is evaluated on --file or a token --task")
    return file_splits(
        args, lambda dataset, source: token_columns(dataset, source, args.text_column, args.label_column,
                                                    args.token_labels)
    )  # fmt: skip


def token_results(model, tokenizer, splits: dict, args) -> dict:
    """Sequence and character accuracy of a token classifier per split and length (`train.py`'s form)."""
    token_accuracy = load_token_accuracy()
    coupling = args.task if args.position_coupling else None  # as the model trained: train.py --position_coupling
    encoded = encode_token_task(datasets.DatasetDict(splits), tokenizer, model.config.label2id, coupling)
    adaptive_steps = None if args.adaptive_steps is None else args.adaptive_steps == "true"
    results = {}
    for split, dataset in encoded.items():
        predicted = predict(model, tokenizer, dataset, args.batch_size, adaptive_steps, args.num_steps)
        result = token_accuracy.compute(predictions=[row.tolist() for row in predicted.label_ids],
                                        references=dataset["labels"], lengths=dataset["length"])  # fmt: skip
        results[split] = nested_results(token_metrics(result))
        if predicted.model_chose_steps:  # ACT (mean halting step of a row's columns) or adaptive steps (steps run)
            results[split]["mean_steps"] = float(predicted.steps.mean())
            results[split]["mean_steps_by_length"] = mean_by(predicted.steps, dataset["length"])
    return results


def select(data, names: list[str], source: str) -> dict:
    if unknown := [name for name in names if name not in data]:
        raise UsageError(f"{source} has no split {unknown[0]!r}; its splits are {list(data)}")
    return {name: data[name] for name in names}


def load_model(args):
    """The model (a sequence or token classifier, as its config's `architectures` say) and its tokenizer."""
    try:
        config = AutoConfig.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
        per_token = "NDRForTokenClassification" in (config.architectures or [])
        auto = AutoModelForTokenClassification if per_token else AutoModelForSequenceClassification
        model = auto.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
        tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
        if args.unknown_words == "unk" and hasattr(type(tokenizer), "unknown_words"):
            tokenizer.unknown_words = "unk"  # NDRTokenizerFast reads them as [UNK] (others always do)
    except (OSError, ValueError) as error:
        raise UsageError(f"{args.model}: cannot load the model and its tokenizer ({first_line(error)})") from None
    return model.eval(), tokenizer


def check_model_labels(splits: dict, label2id: dict, model_name: str) -> None:
    """Every label of the data must be one of the model's (`config.label2id`): it can predict no other."""
    for split, dataset in splits.items():
        name = label_namer(dataset.features["label"])
        if unknown := sorted({name(value) for value in dataset.unique("label")} - set(label2id)):
            raise UsageError(
                f"{split}: labels {unknown[:5]} are not among the model's labels {list(label2id)[:10]} ({model_name})"
            )


def mean_by(steps: np.ndarray, groups) -> dict[str, float]:
    """`{group: mean of steps}` per value of `groups` (a depth or a length per row), keys as strings."""
    groups = np.asarray(groups)
    return {str(g): float(steps[groups == g].mean()) for g in sorted(set(groups.tolist()))}


def print_steps(results: dict, by: str = "depth") -> None:
    """The steps table, where the model chose its steps (ACT, adaptive steps)."""
    if any("mean_steps" in values for values in results.values()):
        print("\nSteps used (ACT: mean halting step of the real columns; adaptive: steps run):\n")
        print(steps_table(results, by))


def steps_table(results: dict, by: str = "depth") -> str:
    """Mean steps per split and depth (a token task: per length; ACT's ponder steps or adaptive steps), as
    markdown."""
    keys = sorted({int(k) for values in results.values() for k in values.get(f"mean_steps_by_{by}", {})})
    rows = []
    for split, values in results.items():
        by_key = values.get(f"mean_steps_by_{by}", {})
        cells = [f"{by_key[str(k)]:.2f}" if str(k) in by_key else "" for k in keys]
        rows.append([split, f"{values['mean_steps']:.2f}", *cells])
    return markdown_table(rows, ["split", "mean steps", *(f"{by} {k}" for k in keys)])


def first_token_accuracy(depth_accuracy, first_tokens: list[str], predictions, references, depths) -> dict:
    """Accuracy per first token of the text, each also per depth (through the `evaluate` metric, as the split's own
    numbers are): `{token: {"accuracy", "count", "by_depth": {depth: a}, "count_by_depth": {depth: n}}}`, tokens
    sorted, depths as strings (as in the split's `by_depth`); `by_depth` is empty for data without depths."""
    first_tokens, predictions, references = np.asarray(first_tokens), np.asarray(predictions), np.asarray(references)
    depths = None if depths is None else np.asarray(depths)
    by_token = {}
    for token in sorted(set(first_tokens.tolist())):
        selected = first_tokens == token
        result = depth_accuracy.compute(
            predictions=predictions[selected],
            references=references[selected],
            depths=None if depths is None else depths[selected],
        )
        by_token[token] = {
            "accuracy": result["accuracy"],
            "count": int(selected.sum()),
            "by_depth": {str(d): a for d, a in result["by_depth"].items()},
            "count_by_depth": {str(d): n for d, n in result["count_by_depth"].items()},
        }
    return by_token


def first_token_table(results: dict) -> str:
    """Accuracy (samples) per split, first token and depth, as markdown: one row per split and first token."""
    depths = sorted(
        {
            int(d)
            for values in results.values()
            for token in values["by_first_token"].values()
            for d in token["by_depth"]
        }
    )
    rows = []
    for split, values in results.items():
        for token, scores in values["by_first_token"].items():
            cells = [
                f"{scores['by_depth'][str(d)]:.3f} ({scores['count_by_depth'][str(d)]})"
                if str(d) in scores["by_depth"]
                else ""
                for d in depths
            ]
            # a "|" in a token would end its cell
            rows.append([split, token.replace("|", "\\|"), f"{scores['accuracy']:.3f} ({scores['count']})", *cells])
    return markdown_table(rows, ["split", "first token", "all depths", *(f"depth {d}" for d in depths)])


def trained_with_coupling(model: str) -> bool:
    """Whether a saved model folder's `run_config.json` says it trained with `--position_coupling` (a hub id or a
    folder without the record: no)."""
    path = os.path.join(model, "run_config.json")
    try:
        with open(path) as f:
            task = json.load(f).get("task")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(task, dict) and bool(task.get("position_coupling"))


def main(argv: list[str] | None = None) -> dict:
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    model, tokenizer = load_model(args)
    per_token = "NDRForTokenClassification" in (model.config.architectures or [])
    if per_token != (args.task in TOKEN_TASK_NAMES) and args.task:
        raise UsageError(f"--task {args.task}: {args.model} is a {'token' if per_token else 'sequence'} classifier")
    if per_token and not args.position_coupling and trained_with_coupling(args.model):
        args.position_coupling = True
        print(f"{args.model} trained with --position_coupling (its run_config.json): evaluated with coupled positions")
    if args.position_coupling and args.task not in COUPLED_TASKS:
        raise UsageError(f"--position_coupling is defined for --task {' / '.join(COUPLED_TASKS)}, not "
                         f"{'--file' if not args.task else args.task}")  # fmt: skip
    if args.position_coupling and not model.config.reads_position_ids:
        raise UsageError(f"--position_coupling: {args.model} has position_encoding={model.config.position_encoding} "
                         "and relative_key_window=0, which read no position ids")  # fmt: skip
    splits = load_splits(args, per_token)
    warn_unknown_words(datasets.DatasetDict(splits), tokenizer, args.unknown_words)
    if per_token:
        if torch.cuda.is_available():
            model.cuda()
        results = token_results(model, tokenizer, splits, args)
        print(results_table(results))
        print_steps(results, "length")
        if args.output_json:
            with open(args.output_json, "w") as f:
                json.dump(results, f, indent=2)
        return results
    if args.by_first_token:  # every text has a word: the data checks refuse empty texts (the tasks have none)
        first_tokens = {split: [text.split()[0] for text in data["text"]] for split, data in splits.items()}
    if torch.cuda.is_available():
        model.cuda()
    if args.adaptive_threshold is not None:
        model.config.adaptive_threshold = args.adaptive_threshold
    adaptive_steps = None if args.adaptive_steps is None else args.adaptive_steps == "true"
    check_model_labels(splits, model.config.label2id, args.model)
    encoded = encode(datasets.DatasetDict(splits), tokenizer, model.config.label2id)
    depth_accuracy = load_depth_accuracy()
    results = {}
    for split, dataset in encoded.items():
        predicted = predict(model, tokenizer, dataset, args.batch_size, adaptive_steps, args.num_steps)
        steps = predicted.steps if predicted.model_chose_steps else None
        depths = dataset["depth"] if "depth" in dataset.column_names else None
        result = depth_accuracy.compute(predictions=predicted.label_ids, references=dataset["labels"], depths=depths)
        results[split] = {
            "accuracy": result["accuracy"],
            "by_depth": {str(d): a for d, a in result["by_depth"].items()},
        }
        if steps is not None:
            results[split]["mean_steps"] = float(steps.mean())
            if depths is not None:
                results[split]["mean_steps_by_depth"] = mean_by(steps, depths)
        if args.by_first_token:
            results[split]["by_first_token"] = first_token_accuracy(
                depth_accuracy, first_tokens[split], predicted.label_ids, dataset["labels"], depths
            )
    print(results_table(results))
    print_steps(results, "depth")
    if args.by_first_token:
        print("\nAccuracy (samples) per first token of the text (ListOps: the root operator) and depth:\n")
        print(first_token_table(results))
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    exit_on_usage_error(main)
