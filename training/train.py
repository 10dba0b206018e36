"""Train a Neural Data Router with the Hugging Face Trainer: on one of the paper's tasks, or on your own data.

    python training/train.py --preset ctl_cpu --direction backward --output_dir outputs/ctl-backward
    python training/train.py --preset ctl_cpu --config_overrides "hidden_size=64,gate_dropout=0.2"
    accelerate launch training/train.py --preset listops_paper --output_dir outputs/listops   # several GPUs
    # your own data (csv, json/jsonl or parquet; or --dataset_name with anything `datasets.load_dataset` takes)
    python training/train.py --train_file train.jsonl --eval_files ood_valid=ood_valid.jsonl ood_test=ood_test.jsonl \
        --depth_column depth --output_dir outputs/mine
    # fine-tune a trained NDR on it: new words are added to its tokenizer, a different label set gets a new head
    python training/train.py --model_name_or_path outputs/ctl_forward_cpu/export --train_file train.jsonl ...

`--preset NAME` reads `configuration/NAME.yaml` (a preset with `base: OTHER` starts from preset OTHER's values); any
flag on the command line overrides the preset. Without `--preset`, your data trains with the `own_data` preset (a
small NDR, 400 steps) and fine-tuning with `own_data_finetune` (its training flags, learning rate 3e-4); a new model
on one of the paper's tasks needs a preset or `--max_steps`: a command that would train no step is refused. Every
`TrainingArguments` flag works. Model fields are set with `--config_overrides "field=value,..."` (any `NDRConfig`
field, as in transformers' `run_clm.py`) or, for the fields that had flags before, with those flags.

The paper's tasks are evaluated on `iid_test`, `ood_valid` and `ood_test`, and the best checkpoint is the one with the
highest `ood_valid` accuracy (the latest on ties, as in the paper). Your own data is evaluated on every split besides
`train` (`--validation_file` is `validation`, `--test_file` is `test`, `--eval_files NAME=FILE` is `NAME`), and
`--metric_for_best_model` can name any of them (`NAME_accuracy`). Accuracy and accuracy per depth come from the
`evaluate` metric that ships with the package (`modeling_ndr.metrics.DEPTH_ACCURACY`). The run writes
`eval_results.json` and a hub-ready `export/` folder; with `--push_to_hub` that folder (with its model card) is
pushed once, at the end, to `--hub_model_id` (else the output folder's name in your namespace) with `--hub_token` and
`--hub_private_repo`; checkpoints go to the Hub only with `--hub_strategy checkpoint` (into `last-checkpoint/`) or
`all_checkpoints`.

A bad command line, preset, model setting or data file is reported in one line before any data is generated or any
step is trained (exit status 2).
"""

import contextlib
import gc
import json
import logging
import os
import sys
import time

import huggingface_hub
import torch
import transformers
from accelerate import PartialState
from transformers import DataCollatorWithPadding, set_seed

import datasets
import modeling_ndr
from adaptive_study import export_study, export_summary
from modeling_ndr.geometric_ndr import attention_kernel, cpu_kernel_available
from modeling_ndr.metrics import load_token_accuracy
from modeling_ndr.position_coupling import BLANK, COUPLING_WORDS
from modeling_ndr.tasks import TOKEN_SPLIT_NAMES, TOKEN_TASK_NAMES
from modeling_ndr.training import (
    UsageError,
    exit_on_usage_error,
    export_model,
    read_variant,
    resolve_checkpoint,
    results_table,
)
from modeling_ndr.training.atomic import check_replaceable
from modeling_ndr.training.export import EXPORT_FILES
from ndr_training import (
    EXIT_STOPPED,
    NDRTrainer,
    TimeBoxCallback,
    TrainingStopped,
    apply_total_batch_size,
    build_tokenizer_and_model,
    check_best_metric,
    check_data_arguments,
    check_resume,
    check_training_steps,
    config_values,
    describe_precision,
    encode,
    evaluate_splits,
    flags_on_command_line,
    load_depth_accuracy,
    metrics_function,
    parse_arguments,
    prepare_own_data,
    restored_optimizer_settings,
    run_record,
    training_record,
    warn_unknown_words,
    write_run_config,
)
from ndr_training.arguments import task_options
from ndr_training.checkpoints import saves_optimizer_states
from ndr_training.data import cache_files, check_encoded
from ndr_training.devices import gpu_preset_on_cpu, precision_note
from ndr_training.locking import lock_output_dir
from ndr_training.preemption import RunFinished, finish_resumed_run
from ndr_training.sampling import resolve_sample_shares
from ndr_training.schedules import PonderWeightSchedule
from ndr_training.stopping import StopAtAccuracy, parse_stop_at_accuracy
from ndr_training.token_labels import (
    DataCollatorForTokenClassificationWithPositions,
    encode_token_task,
    is_token_task,
    token_metrics_function,
)
from ndr_training.trainer import add_first_token_column, first_token_metric_names, task_eval_splits
from ndr_training.weight_average import WeightAverage


logger = logging.getLogger("ndr.train")


def main(argv: list[str] | None = None) -> dict:
    # ---- arguments: the preset's values are the defaults, flags override them; every check before any data is made
    argv = sys.argv[1:] if argv is None else argv
    data_args, model_args, run_args, training_args, preset = parse_arguments(argv)
    # one run per output folder: a second run started on it stops here, in one line naming the run that holds it
    # (under DDP the main process holds it for all ranks)
    with lock_output_dir(training_args.output_dir, enabled=training_args.should_save):
        results = run(argv, data_args, model_args, run_args, training_args, preset)
    leave_process_group()
    return results


def leave_process_group() -> None:
    """Destroy the process group (under DDP) once nothing else holds it.

    `run` has returned, so its Trainer is unreachable; collecting it here frees DDP's `Reducer` while the process
    group's registry still holds the group. Otherwise the Reducer, freed with the GIL held after the group is
    destroyed, drops the last reference to the gloo group, whose destructor then waits for its worker threads while
    one of them may need the GIL to release a finished collective's tensors (a hang seen once in CI, 2026-12-07).
    Released from the registry instead, the group is destroyed by its Python object, whose destructor releases the
    GIL first (pytorch#154976)."""
    gc.collect()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        PartialState().destroy_process_group()  # what Accelerator.end_training does (not under a forked launch)


def headline(export_dir: str, results: dict, steps: int, precision: str, task: str | None = None) -> str:
    """The run's last split (ood_test for the paper's tasks; for CTL++ its variant's split of never-seen orders, the
    first after iid_test) as the exported model scores it as loaded (with adaptive steps where the export chose them:
    its own `eval_results.json`, in float32), with the fixed-step figure beside."""
    split = list(results)[1] if task == "ctlpp" and len(results) > 1 else list(results)[-1]
    trainer_figure = f"{results[split]['accuracy']:.4f} as Trainer evaluated the selected checkpoint ({steps} steps"
    try:
        with open(os.path.join(export_dir, "eval_results.json")) as f:
            loaded = json.load(f).get(split) or {}
    except (OSError, ValueError):
        loaded = {}
    fixed = loaded.get("fixed_steps")
    if not fixed:  # the export runs the fixed steps of training: its accuracy is the Trainer's
        return f"{split} accuracy of the exported model as loaded: {trainer_figure}, {precision})"
    return (
        f"{split} accuracy of the exported model as loaded: {loaded['accuracy']:.4f} (adaptive steps, "
        f"{loaded['mean_steps']:.1f} on average, float32); with the {fixed['num_steps']} fixed steps of training: "
        f"{fixed['accuracy']:.4f} (float32), {trainer_figure}, {precision})"
    )


def selection_note(raw, training_args) -> str | None:
    """Your data with depths, its checkpoint not selected on anything: the paper's protocol selects on a held-out split
    deeper than training and reports a deeper one still. ndr cannot tell which of your splits is held out for that, so
    it says so, naming the split that looks like one (the shallowest of those whose depths all exceed training's)."""
    if "depth" not in raw["train"].column_names or training_args.load_best_model_at_end:
        return None
    trained = max(raw["train"]["depth"])
    deeper = {split: min(rows["depth"]) for split, rows in raw.items() if split != "train" and len(rows)}
    deeper = sorted((depth, split) for split, depth in deeper.items() if depth > trained)
    if not deeper:
        return None
    flags = (f"--eval_strategy steps --eval_steps {training_args.save_steps} --load_best_model_at_end "
             f"--metric_for_best_model {deeper[0][1]}_accuracy")  # fmt: skip
    return (
        f"your data has splits deeper than its training depths (up to {trained}: {', '.join(s for _, s in deeper)}) "
        "and this run exports its last checkpoint; the paper selects the checkpoint on a held-out deeper split and "
        f"reports a deeper one. To do so here: {flags}"
        + ("" if len(deeper) > 1 else " (with one deeper split only, its accuracy is then a selected one: add one)")
    )


def ponder_schedule(config, run_args) -> list:
    """ACT models with --ponder_warmup_loss or --ponder_warmup_steps: the callback that warms up the ponder weight."""
    if config.halting != "act" or (run_args.ponder_warmup_loss is None and not run_args.ponder_warmup_steps):
        return []
    return [PonderWeightSchedule(None, run_args.ponder_warmup_loss, run_args.ponder_warmup_steps)]


def run(argv: list[str], data_args, model_args, run_args, training_args, preset: dict) -> dict:
    """The run once its output folder is locked: the remaining checks, data, model, training, evaluation, export."""
    # stops the run with a checkpoint (exit 75) after --max_wall_minutes counted from here, or on SIGTERM/SIGUSR1
    time_box = TimeBoxCallback(run_args.max_wall_minutes, run_args.max_chunk_steps)
    # INFO from the main process only (with several processes every line came once per process), warnings from all
    level = logging.INFO if training_args.should_log else logging.WARNING
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=level)
    transformers.utils.logging.set_verbosity(training_args.get_process_log_level())
    if training_args.disable_tqdm:  # Trainer's bars, and those of loading, saving and mapping the data
        transformers.utils.logging.disable_progress_bar()
        huggingface_hub.utils.disable_progress_bars()
        datasets.disable_progress_bars()
    if training_args.device.type == "cpu":  # pinned memory only speeds up copies to a GPU (torch warns without one)
        training_args.dataloader_pin_memory = False
    given = flags_on_command_line(argv)
    if run_args.preset and "preset" not in given:  # implied: own_data or own_data_finetune (presets.default_preset)
        logger.info(
            "no --preset: %s trains with the preset %s (configuration/%s.yaml); flags override its values",
            "fine-tuning" if model_args.model_name_or_path else "your data", run_args.preset, run_args.preset,
        )  # fmt: skip
    if note := gpu_preset_on_cpu(run_args.preset, data_args.task):
        logger.warning(note)
    apply_total_batch_size(training_args, run_args.total_batch_size, given)
    check_data_arguments(data_args, given, preset)
    check_training_steps(training_args, data_args, given, preset)  # a run that would train no step stops here
    variant = read_variant(run_args.variant, data_args.task, run_args.preset)  # task: None for your own data
    values = config_values(model_args, variant, given)  # a bad variant or override: reported before any file is read
    if model_args.model_name_or_path:
        resolve_checkpoint(model_args.model_name_or_path)
    if run_args.torch_threads:
        torch.set_num_threads(run_args.torch_threads)
    resume = check_resume(
        training_args.resume_from_checkpoint, training_args.output_dir, saves_optimizer_states(training_args)
    )
    for setting in restored_optimizer_settings(resume, training_args):
        logger.warning(
            "--resume_from_checkpoint %s: %s; the Trainer restores the optimizer's state, settings included. For "
            "other settings, start from its weights with a new optimizer (--model_name_or_path %s)", resume, setting,
            resume,
        )  # fmt: skip
    if run_args.export_dir:  # an export replaces its folder: one of yours (a clone) is refused now, not after training
        check_replaceable(run_args.export_dir, EXPORT_FILES, "--export_dir")

    # ---- the labels: your own files (read and checked now), or the task's
    sources = None  # what names each split of your own data in a message (a file, and its lines)
    per_token = False  # your own token task: one label per word (NDRForTokenClassification)
    if data_args.own_data:
        with training_args.main_process_first(desc="read the data files"):
            raw, sources, label_names = prepare_own_data(data_args)
        eval_splits = [split for split in raw if split != "train"]
        texts = raw["train"]["text"]
        per_token = is_token_task(raw)
    else:  # a token task (copy, reverse, addition, carry: one label per token) has a split per evaluation length
        raw, label_names, texts = None, modeling_ndr.task_label_names(data_args.task), None
        per_token = data_args.task in TOKEN_TASK_NAMES
        eval_splits = [s for s in TOKEN_SPLIT_NAMES[data_args.task] if s != "train"] if per_token else \
            task_eval_splits(data_args)  # fmt: skip
    check_best_metric(training_args, list(eval_splits), given)
    if raw is not None and (note := selection_note(raw, training_args)):
        logger.warning(note)
    stop_at_accuracy = []  # --stop_at_accuracy SPLIT=ACCURACY: training ends at the first evaluation reaching it
    if run_args.stop_at_accuracy:
        stop_at_accuracy = [StopAtAccuracy(*parse_stop_at_accuracy(run_args.stop_at_accuracy, list(eval_splits)))]
    try:  # WeightAverage checks the decay: its ValueError is the one-line error, before any data is made
        weight_average = [WeightAverage(run_args.ema_decay, resume)] if run_args.ema_decay is not None else []
    except ValueError as error:
        raise UsageError(str(error)) from None

    # ---- the model: new, or a checkpoint adapted to the data's words and labels
    set_seed(training_args.seed)
    tokenizer, model = build_tokenizer_and_model(data_args, model_args, label_names, texts, values, per_token)
    if model_args.attn_implementation is not None:  # checked by transformers; never saved with the model
        model.set_attn_implementation(model_args.attn_implementation)
    if data_args.position_coupling and not model.config.reads_position_ids:
        raise UsageError(
            "--position_coupling gives position ids, which position_encoding=absolute and relative position keys "
            f"read; this model has position_encoding={model.config.position_encoding} and relative_key_window=0 "
            "(--config_overrides relative_key_window=1, or position_encoding=absolute)"
        )
    if data_args.position_coupling:  # and where no ids are given (the pipeline, a release), the model computes them
        model.config.position_coupling = data_args.task
        model.config.position_coupling_token_ids = {
            word: tokenizer.convert_tokens_to_ids(word) for word in (*COUPLING_WORDS[data_args.task], BLANK)
        }
    elif model.config.position_coupling not in (None, data_args.task):  # a coupled release fine-tuned on other rows
        coupled = model.config.position_coupling
        logger.warning("%s computed %s's coupled positions (config.position_coupling); this run's data is not %s "
                       "rows, so it trains with each token's index as its position (--position_coupling couples a "
                       "copy, reverse or addition task)", model_args.model_name_or_path, coupled, coupled)  # fmt: skip
        model.config.position_coupling = model.config.position_coupling_token_ids = None

    # ---- the data: the task generated (once, then cached), tokenized
    data_started = time.time()
    with training_args.main_process_first(desc="generate and tokenize the data"):
        if raw is None:
            options = task_options(data_args)
            load = modeling_ndr.load_token_task if per_token else modeling_ndr.load_task
            try:
                raw = load(
                    data_args.task, seed=data_args.task_seed, n_train=data_args.n_train, n_eval=data_args.n_eval,
                    **options,
                )  # fmt: skip
            except ValueError as error:
                raise UsageError(str(error)) from None
        else:
            warn_unknown_words(raw, tokenizer, data_args.unknown_words)
        reading = getattr(tokenizer, "reading_unknown_words", None)  # a tokenizer of the package (not an old one)
        with reading() if reading and data_args.unknown_words == "unk" else contextlib.nullcontext():
            if per_token:  # labels lined up with the tokens, -100 where nothing is scored; each row's length
                data = encode_token_task(
                    raw, tokenizer, model.config.label2id,
                    position_coupling=data_args.task if data_args.position_coupling else None,
                    max_position_offset=data_args.max_position_offset, seed=data_args.task_seed,
                )  # fmt: skip
            else:
                data = encode(raw, tokenizer, model.config.label2id, sources)
        check_encoded(data, model.config, sources)  # a training step on a GPU checks no input values
    files = cache_files(raw, data)
    written = [path for path in files if os.path.getmtime(path) >= data_started]  # the others were in the cache
    logger.info("data ready after %.1f s: %d of the %d files it is read from were written now, the others read from "
                "the datasets cache", time.time() - data_started, len(written), len(files))  # fmt: skip
    if run_args.prepare_data_only:  # (make gpu-session's data step: the release's run reads these files)
        if training_args.should_save:
            os.makedirs(training_args.output_dir, exist_ok=True)
            with open(os.path.join(training_args.output_dir, "data_files.json"), "w") as f:
                json.dump({"cache_files": files, "written": written}, f, indent=2)
        print(f"prepared the data ({len(written)} of {len(files)} cache files written); no step trained")
        return {}
    with training_args.main_process_first(desc="load the evaluate metric"):
        metric = load_token_accuracy() if per_token else load_depth_accuracy()
    compute_metrics = token_metrics_function(metric) if per_token else metrics_function(metric)
    logger.info("model: %s parameters, config %s", f"{model.num_parameters():,}", model.config.to_diff_dict())

    # ---- the trainer: the depth (and the first token) travel to compute_metrics, not to the model
    has_depth = "depth" in data["train"].column_names
    training_args.label_names = ["labels", "depth"] if has_depth else ["labels", "length"] if per_token else ["labels"]
    if data_args.eval_by_first_token:  # ListOps' curves per root operator (--eval_by_first_token)
        if not has_depth:
            raise UsageError("--eval_by_first_token needs depths (your data: --depth_column)")
        data = add_first_token_column(data)
        training_args.label_names.append("first_token")
        compute_metrics = metrics_function(metric, first_token_metric_names(tokenizer))
    sample_shares = resolve_sample_shares(data_args.sample_shares, tokenizer, data["train"])
    trainer = NDRTrainer(
        model=model,
        args=training_args,
        train_dataset=data["train"],
        eval_dataset={split: data[split] for split in eval_splits} or None,
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassificationWithPositions(tokenizer)
        if per_token
        else DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics,
        balance_depths=data_args.balance_depths,
        balance_operators=data_args.balance_operators,
        sample_shares=sample_shares,
        keep_tied_best=run_args.keep_tied_best,
        callbacks=[time_box, *ponder_schedule(model.config, run_args), *stop_at_accuracy, *weight_average],
    )
    total_batch = training_args.train_batch_size * training_args.gradient_accumulation_steps * training_args.world_size
    logger.info(
        "processes: %d, total train batch size: %d (%d per device x %d accumulation steps), %s",
        training_args.world_size, total_batch, training_args.per_device_train_batch_size,
        training_args.gradient_accumulation_steps, describe_precision(training_args),
    )  # fmt: skip
    if training_args.should_save and (note := precision_note(run_args.precision, training_args)):
        print(note)
    if training_args.should_save and training_args.torch_compile and training_args.device.type == "cpu":
        print("torch.compile on a CPU: make bench measured the compiled step at 0.62-0.84x eager's speed at the "
              "CPU presets' sizes on a native-bf16 Xeon, after 1-3 minutes of compiling (docs/results/performance.md; "
              "make bench measures yours); the presets train eager")  # fmt: skip

    # ---- the run's record, written before training (and again after it, with what training took)
    run_config = {}
    if training_args.should_save:
        os.makedirs(training_args.output_dir, exist_ok=True)
        if per_token:  # a short training row (an evaluation row may be a thousand tokens), for the card's example
            rows = data["train"].select(range(min(200, len(data["train"]))))["input_ids"]
            example = data["train"][min(range(len(rows)), key=lambda i: (abs(len(rows[i]) - 12), i))]
        else:
            example = data[eval_splits[-1] if eval_splits else "train"][0]
        labels = example["labels"]
        example = {
            "text": tokenizer.decode(example["input_ids"], skip_special_tokens=True),
            "label": [None if i == -100 else model.config.id2label[i] for i in labels[1:-1]]
            if per_token
            else model.config.id2label.get(labels, str(labels)),
        }
        tokenizer.init_kwargs["input_example"] = example["text"]  # quoted when a text holds unknown words
        run_config = run_record(data_args, model_args, run_args, training_args, preset, values, example)
        write_run_config(training_args.output_dir, run_config)

    # ---- training (check_training_steps made sure there is something to train)
    kernel = attention_kernel(model.config._attn_implementation)
    if model.config.attention_type == "geometric" and training_args.device.type == "cpu" and kernel == "auto":
        # loaded here rather than silently inside the first step: compiled on a machine's first run, then cached
        logger.info("loading the geometric-attention CPU kernel (its first build on a machine takes a minute or more)")
        started = time.perf_counter()
        if cpu_kernel_available():  # else the library has said why, and the PyTorch path computes the same weights
            logger.info("kernel ready after %.1f s; training", time.perf_counter() - started)
    try:
        train_result = trainer.train(resume_from_checkpoint=resume)
    except RunFinished as finished:  # resumed at its last step (killed during its evaluation or export)
        logger.info("%s: evaluating and exporting the finished run", finished)
        train_result = finish_resumed_run(trainer, time_box)
    time_box.raise_if_stopped()  # stopped before the last step: the checkpoint is saved, nothing else to do
    trainer.log_metrics("train", train_result.metrics)
    trainer.save_metrics("train", train_result.metrics)
    trainer.save_state()
    if training_args.should_save:
        run_config["training"] = training_record(train_result.metrics, train_result.global_step)
        if time_box.chunks > 1:  # trained in resumed chunks: the training time of all of them
            run_config["training"].update(seconds=round(time_box.training_seconds, 1), chunks=time_box.chunks)
        write_run_config(training_args.output_dir, run_config)

    # ---- evaluation of the selected model on every split, and the hub-ready export
    results = evaluate_splits(trainer, data, eval_splits)
    export_dir = run_args.export_dir or os.path.join(training_args.output_dir, "export")
    if training_args.should_save:
        with open(os.path.join(training_args.output_dir, "eval_results.json"), "w") as f:
            json.dump(results, f, indent=2)
        trainer.save_model(training_args.output_dir)  # the selected (best) model; never pushed (NDRTrainer)
        # the card's snippets name the repository the export goes to (Trainer resolved it when it was built)
        repo_id = trainer.hub_model_id if training_args.push_to_hub else None
        export_model(training_args.output_dir, export_dir, results, run_config, repo_id, study=export_study)
        if results:  # first what a user of the export gets, then the Trainer's table per depth
            steps = model.config.eval_num_hidden_layers or model.config.num_hidden_layers
            print("\n" + headline(export_dir, results, steps, describe_precision(training_args), data_args.task))
            print("\n" + results_table(results) + "\n")
        print(f"trained in {describe_precision(training_args)} on {run_config.get('machine', training_args.device)}")
        if (adaptive_summary := export_summary(export_dir)) is not None:  # CTL: fixed against adaptive steps
            print("\n" + adaptive_summary + "\n")
        print(f"exported hub-ready model: {os.path.abspath(export_dir)}")
    if training_args.push_to_hub and training_args.should_save:
        # the export with ndr's card, once (Trainer would push output_dir and its own card; see NDRTrainer)
        trainer.push_to_hub(commit_message="Upload the NDR export (training/train.py)", export_dir=export_dir)
        print(f"pushed {os.path.abspath(export_dir)} to https://huggingface.co/{trainer.hub_model_id}")
    # the other processes wait for the main one's export (and push), then all leave the process group together
    # (main, once the Trainer is freed): a process that exits while the main one still exports can abort in the
    # process group's teardown ("terminate called without an active exception"), and the launcher then kills the main
    # process before its export is written
    trainer.accelerator.wait_for_everyone()
    return results


if __name__ == "__main__":
    try:
        exit_on_usage_error(main)
    except TrainingStopped as stop:  # status 75: run the same command with --resume_from_checkpoint auto
        print(f"{os.path.basename(sys.argv[0])}: {stop}", file=sys.stderr)
        sys.exit(EXIT_STOPPED)
