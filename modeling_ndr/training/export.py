"""A hub-ready folder from a trained checkpoint (`export_model`), with its model card (`build_model_card`).

The folder holds `config.json` (with `auto_map` and `id2label`), `model.safetensors`, the tokenizer files, the
modeling code for `trust_remote_code=True`, and a `README.md` model card rendered from
`modeling_ndr/templates/model_card_template.md` (package data). `eval_results.json` and `run_config.json` are read
from the checkpoint folder or its parent (where `train.py` writes them) and copied along.

`export_model(..., study=...)` runs a study on the model before it is written: `train.py` passes the checkout's
`adaptive_study.export_study`, which exports a model of the paper's CTL task with adaptive steps on (the threshold
chosen on `ood_valid`; `eval_results.json` then holds what the model gives as loaded, with the fixed step count's
results under each split's `fixed_steps`, and `run_config.json` the selection's record under `adaptive_steps`).
"""

import importlib.resources
import json
import os
import re
from collections.abc import Callable

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..modeling_ndr import NDRForSequenceClassification, NDRForTokenClassification
from ..tables import markdown_table, per_token_results
from ..tasks import TOKEN_TASK_NAMES
from ..tasks.ctl import CTL_SYMBOLS, ctl_sample, ctl_tables, ctl_text_in_direction
from ..tasks.ctlpp import CTLPP_FUNCTIONS, CTLPP_SYMBOLS, ctlpp_samples, ctlpp_text, ctlpp_world
from ..tokenization_ndr import NDRTokenizerFast
from . import adaptive
from .atomic import atomic_folder, check_replaceable
from .card_notes import other_seeds, shortfalls
from .errors import read_json
from .presets import LOAD_TASK_KEYWORDS, REPO_ROOT


TEMPLATE = str(importlib.resources.files("modeling_ndr") / "templates" / "model_card_template.md")  # package data
TASK_TITLES = {
    "ctl": "compositional table lookup ({direction})",
    "arithmetic": "simple arithmetic modulo 10",
    "listops": "ListOps (depth-controlled)",
    "ctlpp": "CTL++ (never-seen orders of known functions; variant {variant})",
    "copy": "copy (one output per input symbol)",
    "reverse": "reverse (one output per input symbol)",
    "addition": "integer addition, one output digit per blank",
    "carry": "addition as a carry task, one digit position per token",
}

# The paper's NDR on each task's ood_test (Csordás et al. 2022, Table 1/2: mean of 5 seeds, its GPU recipe: the
# `*_paper` presets); a card of the NDR on a paper's task sets its own number against it.
PAPER_OOD_TEST = {
    ("ctl", "forward"): (1.00, "1.00", "ctl_paper"),
    ("ctl", "backward"): (1.00, "1.00", "ctl_paper"),
    ("arithmetic", None): (0.98, "0.98 ± 0.01", "arithmetic_paper"),
    ("listops", None): (0.99, "0.99 ± 0.01", "listops_paper"),
}


def paper_reference(run_config: dict, eval_results: dict) -> dict | None:
    """What the card says about the paper's result: None for own data, the baselines and runs without ood_test."""
    task = run_config.get("task", {})
    if own_data_name(task) is not None or run_config.get("variant") not in (None, "ndr"):
        return None
    name = task.get("task") or "ctl"
    key = (name, (task.get("direction") or "forward") if name == "ctl" else None)
    if key not in PAPER_OOD_TEST or "ood_test" not in eval_results:
        return None
    value, text, preset = PAPER_OOD_TEST[key]
    ours = eval_results["ood_test"]["accuracy"]
    # more than 5 points below the paper: say plainly that this is not a reproduction
    return {"accuracy": text, "preset": preset, "ours": ours, "short": ours < value - 0.05}


def _read_json(folder: str, name: str) -> dict | None:
    """`name` in the checkpoint folder, else in its parent (where train.py writes it), else None."""
    for candidate in (os.path.join(folder, name), os.path.join(os.path.dirname(os.path.abspath(folder)), name)):
        if (content := read_json(candidate)) is not None:
            return content
    return None


def results_table(eval_results: dict) -> str:
    """Markdown table of each split's accuracy and its accuracy per depth (printed by train.py, used in the card and
    by evaluate_model.py). Depth keys may be strings (as read from JSON) or integers; data without depths gives a
    table of accuracies only."""
    if per_token_results(eval_results):  # a token task: sequence accuracy per length
        return _by_length_table(eval_results)
    by_depth = {split: {int(d): a for d, a in values["by_depth"].items()} for split, values in eval_results.items()}
    depths = sorted({d for values in by_depth.values() for d in values})
    rows = []
    for split, values in eval_results.items():
        cells = [f"{by_depth[split][d]:.3f}" if d in by_depth[split] else "" for d in depths]
        rows.append([split, f"{values['accuracy']:.4f}", *cells])
    return markdown_table(rows, ["split", "accuracy", *(f"depth {d}" for d in depths)])


def _by_length_table(eval_results: dict) -> str:
    """A token task's table: each split's sequence and character accuracy, and its sequence accuracy per length."""
    by_length = {split: {int(n): a for n, a in values.get("by_length", {}).items()} for split, values in
                 eval_results.items()}  # fmt: skip
    lengths = sorted({n for values in by_length.values() for n in values})
    rows = []
    for split, values in eval_results.items():
        cells = [f"{by_length[split][n]:.3f}" if n in by_length[split] else "" for n in lengths]
        rows.append([split, f"{values['accuracy']:.4f}", f"{values.get('character_accuracy', float('nan')):.4f}",
                     *cells])  # fmt: skip
    return markdown_table(rows, ["split", "accuracy", "character accuracy", *(f"length {n}" for n in lengths)])


def data_files(task: dict) -> dict[str, str]:
    """The files of a run's own data by split (`train`, `validation`, `test`, then `--eval_files` names)."""
    files = {"train": task.get("train_file"), "validation": task.get("validation_file"), "test": task.get("test_file")}
    files.update(item.split("=", 1) for item in task.get("eval_files") or () if "=" in item)
    return {split: path for split, path in files.items() if path}


def own_data_name(task: dict) -> str | None:
    """What the card calls a run's own data: `--dataset_name` as given, else its files' names (`train.jsonl,
    ood_test.jsonl`; not their folder, which is often just `data`), or None for the paper's tasks."""
    if task.get("dataset_name"):
        return task["dataset_name"]
    if task.get("train_file"):
        return ", ".join(os.path.basename(path) for path in data_files(task).values())
    return None


def default_model_name(run_config: dict) -> str:
    """`ndr-<task>` (`ndr-ctl-<direction>` for CTL); for your own data `ndr-<dataset>` (`--dataset_name`'s last part)
    or `ndr-<training file's name>` without a split word (`majority_train.jsonl`: `ndr-majority`), else `ndr-own-data`.
    """
    task = run_config.get("task", {})
    if task.get("dataset_name") or task.get("train_file"):
        if task.get("dataset_name"):
            name = task["dataset_name"].rstrip("/").split("/")[-1]
        else:  # the training file's name, less the split words that every data set has (train.jsonl: nothing left)
            words = re.split(r"[^A-Za-z0-9]+", os.path.splitext(os.path.basename(task["train_file"]))[0])
            name = "-".join(word for word in words if word and word.lower() not in ("train", "training", "data"))
        return "ndr-" + (re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "own-data")
    name = task.get("task") or "ctl"
    return f"ndr-{name}-{task.get('direction') or 'forward'}" if name == "ctl" else f"ndr-{name}"


def task_description(task: dict) -> tuple[str, str]:
    """(the title of the data, the call or flags that made it) for the model card."""
    if task.get("dataset_name"):
        config = f", {task['dataset_config_name']!r}" if task.get("dataset_config_name") else ""
        return task["dataset_name"], f"load_dataset({task['dataset_name']!r}{config})"
    if task.get("train_file"):
        flags = {"train": "--train_file", "validation": "--validation_file", "test": "--test_file"}
        files = data_files(task)
        named = [f"{flags[split]} {path}" for split, path in files.items() if split in flags]
        extra = [f"{split}={path}" for split, path in files.items() if split not in flags]
        return f"own data ({own_data_name(task)})", " ".join(named + (["--eval_files", *extra] if extra else []))
    task_name = task.get("task") or "ctl"
    names = {**LOAD_TASK_KEYWORDS, "n_train": "n_train", "n_eval": "n_eval"}  # flag -> load_task's keyword
    options = {names[k]: v for k, v in task.items() if k in names and v is not None}
    function = "load_token_task" if task_name in TOKEN_TASK_NAMES else "load_task"
    call = f"{function}({task_name!r}" + "".join(f", {k}={v!r}" for k, v in options.items()) + ")"
    title = TASK_TITLES[task_name].format(direction=task.get("direction") or "forward",
                                          variant=task.get("task_variant") or "parallel_branch")  # fmt: skip
    return title, call


# The fields that tell the variants apart; a card lists those that differ from the NDR.
VARIANT_FIELDS = ("attention_type", "position_encoding", "attention_scores", "metric_tensor", "copy_gate",
                  "normalize_attention", "halting", "adaptive_steps")  # fmt: skip


def variant_description(config, variant: str | None, ignore: tuple[str, ...] = ()) -> str | None:
    """`None` for the NDR itself, else a sentence naming the variant and how its config differs from the NDR's
    (in the fields of `VARIANT_FIELDS`, except those in `ignore`)."""
    defaults = type(config)()
    differences = [
        f"`{f}={getattr(config, f)!r}`"
        for f in VARIANT_FIELDS
        if f not in ignore and getattr(config, f) != getattr(defaults, f)
    ]
    if not differences and variant in (None, "ndr"):
        return None
    name = f"the **{variant}** variant" if variant else "a variant"
    return f"This is {name} of the model: " + (", ".join(differences) or "the NDR's settings") + "."


def build_model_card(model, eval_results: dict, run_config: dict, repo_id: str) -> ModelCard:
    task = run_config.get("task", {})
    title, task_call = task_description(task)
    # your files are no Hub dataset: the card's metadata names the Hub dataset only where one was given
    hub_dataset = task.get("dataset_name") if own_data_name(task) else default_model_name(run_config)
    dataset_name = hub_dataset or os.path.basename(task["train_file"])

    per_token = per_token_results(eval_results)
    pipeline_tag = "token-classification" if per_token else "text-classification"

    def result(split: str, accuracy: float, **metric) -> EvalResult:
        return EvalResult(task_type=pipeline_tag, dataset_type=dataset_name, dataset_name=title,
                          dataset_split=split, metric_type="accuracy", metric_value=accuracy, **metric)  # fmt: skip

    results = [result(split, values["accuracy"]) for split, values in eval_results.items()]
    results += [  # per depth: the same split, told apart by the metric's config
        result(split, accuracy, metric_name=f"accuracy at depth {depth}", metric_config=f"depth={depth}")
        for split, values in eval_results.items()
        for depth, accuracy in sorted(values["by_depth"].items(), key=lambda item: int(item[0]))
    ]
    results += [  # a model that runs adaptive steps as loaded: the fixed step count's accuracy too
        result(
            split,
            fixed["accuracy"],
            metric_name=f"{fixed['num_steps']} fixed steps",
            metric_config=f"fixed_steps={fixed['num_steps']}",
        )
        for split, values in eval_results.items()
        if (fixed := values.get("fixed_steps"))
    ]
    card_data = ModelCardData(
        model_name=repo_id.split("/")[-1],
        library_name="transformers",
        license="mit",
        pipeline_tag=pipeline_tag,
        tags=["ndr", "neural-data-router", "systematic-generalization", "length-generalization"]
        + ([task["task"]] if task.get("task") else [])
        + ([f"variant-{run_config['variant']}"] if run_config.get("variant") else []),
        datasets=[hub_dataset] if hub_dataset else None,
        metrics=["accuracy"],
        eval_results=results,
    )
    config = model.config
    num_steps = config.eval_num_hidden_layers or config.num_hidden_layers
    split_rows = [
        {
            "split": split,
            "accuracy": values["accuracy"],
            "depths": ", ".join(sorted(values["by_depth"], key=int)) or "–",
            "mean_steps": values.get("mean_steps"),
            "fixed": values.get("fixed_steps"),
        }
        for split, values in eval_results.items()
    ]
    example = run_config.get("example") or {"text": "", "label": ""}
    # a token model's example: the words it answers (the others' labels are None) and their answers
    answered = [i for i, label in enumerate(example["label"]) if label is not None] if per_token else []
    task_name = None if own_data_name(task) or not task else task.get("task") or "ctl"
    adaptive_card = adaptive.card_values(config, run_config, eval_results)
    return ModelCard.from_template(
        card_data,
        template_path=TEMPLATE,
        model_name=card_data.model_name,
        repo_id=repo_id,
        task_description=title,
        # adaptive steps chosen by the export are described in the card's results, not as a variant
        variant=variant_description(config, run_config.get("variant"), ("adaptive_steps",) if adaptive_card else ()),
        num_steps=num_steps,
        split_rows=split_rows,
        depth_table=results_table(eval_results),
        task_call=task_call,
        task_seed=task.get("task_seed") or 0,
        own_data=own_data_name(task) is not None,
        selection_metric=run_config.get("metric_for_best_model"),
        preset=run_config.get("preset") or "none (command-line arguments)",
        ndr_version=run_config.get("ndr_version"),
        commit=run_config.get("commit"),
        recorded_in=run_config.get("recorded_in"),
        seed=run_config.get("seed"),
        config=config,
        num_parameters=f"{model.num_parameters():,}",
        training=run_config.get("training"),
        machine=run_config.get("machine") or "an unrecorded machine",
        processes=run_config.get("processes") or 1,
        precision=run_config.get("precision"),
        command=training_command(run_config),
        paper=paper_reference(run_config, eval_results),
        continuation=run_config.get("continuation"),
        paper_budget=(run_config.get("continuation") or {}).get("paper_samples"),
        cooldown=run_config.get("cooldown"),
        adaptive=adaptive_card,
        example_text=example["text"],
        example_label=example["label"],
        example_answered=answered if per_token and len(answered) < len(example["label"]) else None,
        example_answer=[example["label"][i] for i in answered] if per_token else example["label"],
        task_name=task_name,
        ctl_examples=ctl_examples(task)
        if task_name == "ctl"
        else ctlpp_examples(task)
        if task_name == "ctlpp"
        else [],
        ctlpp_groups=ctlpp_groups(task) if task_name == "ctlpp" else "",
        shortfalls=shortfalls(eval_results) if task_name == "ctlpp" else None,
        other_seeds=other_seeds(run_config, eval_results),
        direction=task.get("direction") or ("backward" if task_name == "ctlpp" else "forward"),
        per_token=per_token,
    )


def ctl_examples(task: dict) -> list[tuple[str, str]]:
    """Three compositions of a CTL run's task (the functions of its `task_seed`, its direction), with their answers,
    for the card's "Input and output"."""
    tables = ctl_tables(task.get("task_seed") or 0)
    examples = []
    for symbol, functions in (("101", "d"), ("000", "a b"), ("110", "c a b")):
        text, value = ctl_sample(tables, int(symbol, 2), tuple(functions.split()))
        examples.append((ctl_text_in_direction(text, task.get("direction") or "forward"), CTL_SYMBOLS[value]))
    return examples


def task_world(task: dict):
    """The CTL++ task a run trained on (`ctlpp_world`), from the `task` entry of its `run_config.json`."""
    options = {keyword: task[flag] for flag, keyword in LOAD_TASK_KEYWORDS.items() if task.get(flag) is not None}
    options.pop("direction", None)
    return ctlpp_world(task.get("task_seed") or 0, **options)


def ctlpp_examples(task: dict) -> list[tuple[str, str]]:
    """Three CTL++ compositions of a run's task (its seed's functions, its direction) with their answers: the first
    of its training pattern, then two of its first test split."""
    world = task_world(task)
    direction = task.get("direction") or "backward"
    train, (test, test_depths) = world.splits["train"][0], list(world.splits.values())[2]
    deeper = next(depth for depth in test_depths[1:] if world.count(test, depth) > 0)  # 2-stage: even depths only
    examples = []
    for pattern, depth, index in ((train, 2, 0), (test, 2, 0), (test, deeper, 5)):
        symbol, functions = ctlpp_samples(world, pattern, depth)[index]
        examples.append((ctlpp_text(symbol, functions, direction), CTLPP_SYMBOLS[world.apply(symbol, functions)]))
    return examples


def ctlpp_groups(task: dict) -> str:
    """The groups of a CTL++ run's functions, for its card: `a: a b c ...; b: ...`."""
    world = task_world(task)
    return "; ".join(f"{group}: {' '.join(CTLPP_FUNCTIONS[f] for f in members)}"
                     for group, members in world.groups.items() if members)  # fmt: skip


def head_class(folder: str) -> type:
    """The class a checkpoint or export was trained as: `NDRForTokenClassification` (one label per token) where its
    `config.json`'s `architectures` says so, else `NDRForSequenceClassification` (one label per text)."""
    architectures = (read_json(os.path.join(folder, "config.json")) or {}).get("architectures") or []
    return NDRForTokenClassification if "NDRForTokenClassification" in architectures else NDRForSequenceClassification


TOKENIZER_FILE = "tokenizer.json"
# what an export folder holds (config, tokenizer and results files, weights, modeling code, the card): an existing
# folder holding anything else (a git clone, your notes) is not replaced by an export
EXPORT_FILES = ("*.json", "*.safetensors", "*.py", "*.md")


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), folder]) == folder


def training_command(run_config: dict) -> str:
    """The command that trained a run, as a user would type it (train.py's arguments; the launcher if several
    processes ran)."""
    argv = [str(arg) for arg in run_config.get("command") or []]
    if not argv:
        return "not recorded"
    script = "training/train.py" if argv[0].endswith("train.py") else argv[0]
    # paths inside this checkout (make release passes absolute ones) as a user in their own clone would type them
    argv = [os.path.relpath(arg, REPO_ROOT) if os.path.isabs(arg) and _inside(arg, REPO_ROOT) else arg for arg in argv]
    processes = run_config.get("processes") or 1
    launcher = "python "
    if processes > 1 and "--use_cpu" in argv:  # gloo on the CPU, as make demo launches it (see README)
        launcher = (f"ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes {processes} "
                    "--num_machines 1 --mixed_precision no --dynamo_backend no ")  # fmt: skip
    elif processes > 1:  # GPUs: the project's accelerate config (the preset or the flags set the precision)
        config = os.path.join("configuration", "accelerate", "multi_gpu.yaml")
        launcher = f"accelerate launch --config_file {config} --num_processes {processes} "
    return launcher + " ".join([script, *argv[1:]])


def export_model(
    checkpoint_dir: str,
    out_dir: str,
    eval_results: dict | None = None,
    run_config: dict | None = None,
    repo_id: str | None = None,
    study: Callable | None = None,
) -> str:
    """Write the hub-ready folder `out_dir` from `checkpoint_dir`; returns `out_dir`.

    Args:
        checkpoint_dir: a folder with `config.json`, `model.safetensors` and the tokenizer.
        out_dir: the folder to write.
        eval_results: the run's results (default: `eval_results.json` of the checkpoint folder or its parent).
        run_config: the run's record (default: `run_config.json` there).
        repo_id: the hub id the card's snippets use.
        study: `study(model, tokenizer, run_config)`, run before the folder is written; it may change
            `model.config` and return `{"results": eval_results or None, "selection": record}` (None: nothing to
            add); the record goes into `run_config.json` under `adaptive_steps`, the results replace the run's. None
            exports the config as trained.
    """
    if not os.path.isdir(checkpoint_dir):
        raise FileNotFoundError(f"{checkpoint_dir}: no such checkpoint folder")
    check_replaceable(out_dir, EXPORT_FILES)  # before any work: a folder of yours is never replaced
    for name in ("config.json", "model.safetensors", TOKENIZER_FILE):
        if not os.path.isfile(os.path.join(checkpoint_dir, name)):
            hint = " (train.py saves the tokenizer with every checkpoint)" if name == TOKENIZER_FILE else ""
            raise FileNotFoundError(f"{checkpoint_dir}: {name} is missing{hint}")
    eval_results = eval_results or _read_json(checkpoint_dir, "eval_results.json")
    run_config = run_config or _read_json(checkpoint_dir, "run_config.json") or {}
    if eval_results is None:
        raise FileNotFoundError(f"no eval_results.json in {checkpoint_dir} or its parent: evaluate before exporting")
    if "training" not in run_config and (train_results := _read_json(checkpoint_dir, "train_results.json")):
        state = _read_json(checkpoint_dir, "trainer_state.json") or {}  # runs that predate run_config["training"]
        training = {"seconds": train_results["train_runtime"], "steps": state.get("global_step"), "finished": None}
        run_config = {**run_config, "training": training}
    model = head_class(checkpoint_dir).from_pretrained(checkpoint_dir)
    tokenizer = NDRTokenizerFast.from_pretrained(checkpoint_dir)  # saves as PreTrainedTokenizerFast
    if study is not None and (found := study(model, tokenizer, run_config)) is not None:
        run_config = {**run_config, "adaptive_steps": found["selection"]}
        eval_results = found["results"] or eval_results  # None: fixed steps kept, the run's own results stand
    repo_id = repo_id or run_config.get("hub_model_id") or f"your-org/{default_model_name(run_config)}"
    # written into a hidden sibling and renamed into place: an interrupted export leaves the previous one whole
    with atomic_folder(out_dir, EXPORT_FILES) as staging:
        model.save_pretrained(staging)  # weights, config with auto_map, and the modeling code
        tokenizer.save_pretrained(staging)
        build_model_card(model, eval_results, run_config, repo_id).save(os.path.join(staging, "README.md"))
        with open(os.path.join(staging, "eval_results.json"), "w") as f:
            json.dump(eval_results, f, indent=2)
        with open(os.path.join(staging, "run_config.json"), "w") as f:
            json.dump(run_config, f, indent=2, default=str)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    """`python -m modeling_ndr.training export CHECKPOINT_DIR OUT_DIR [--repo_id org/name]`: the hub-ready folder of
    any checkpoint (`export_model`); a bad folder is one line and exit 2."""
    import argparse

    description = "Write a hub-ready folder (weights, config, tokenizer, modeling code, card) from a checkpoint."
    parser = argparse.ArgumentParser(prog="python -m modeling_ndr.training export", description=description)
    parser.add_argument("checkpoint_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--repo_id", default=None, help="Hub id used in the model card's snippets (org/name).")
    args = parser.parse_args(argv)
    try:
        print(export_model(args.checkpoint_dir, args.out_dir, repo_id=args.repo_id))
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
