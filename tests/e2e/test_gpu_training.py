"""Training on GPUs: `train.py` in bf16 on one GPU, `accelerate launch --config_file
configuration/accelerate/multi_gpu.yaml` on every visible GPU with an evaluation that counts each sample once, and the
time box with resumption on a GPU. Those carry the `gpu` marker and skip without CUDA (`make test-gpu` runs them);
their CPU twins run the same helpers with gloo processes, plus the arithmetic of `--total_batch_size` and what
`--precision` stands for on each kind of machine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_preemption import assert_same_weights
from transformers import DataCollatorWithPadding, TrainingArguments

import modeling_ndr
from modeling_ndr import NDRForSequenceClassification
from modeling_ndr.tokenization_ndr import NDRTokenizerFast
from modeling_ndr.training import UsageError, read_preset
from ndr_training import (
    EXIT_STOPPED,
    NDRTrainer,
    apply_total_batch_size,
    cpu_has_native_bf16,
    describe_precision,
    encode,
    load_depth_accuracy,
    metrics_function,
    parse_arguments,
    per_device_batch_size,
    precision_defaults,
)
from ndr_training.devices import gpu_preset_on_cpu


REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "training" / "train.py"
CUDA = torch.cuda.is_available()
# A short CTL run; the evaluation splits hold 37 samples, which no number of processes x 8 divides, so a padded
# evaluation batch would show in the counts.
N_EVAL = 37
SHORT = [
    "--task", "ctl", "--direction", "forward", "--n_train", "256", "--n_eval", str(N_EVAL), "--task_seed", "0",
    "--hidden_size", "16", "--intermediate_size", "32", "--num_attention_heads", "1", "--num_hidden_layers", "2",
    "--max_steps", "4", "--eval_steps", "2", "--save_steps", "2", "--logging_steps", "1",
    "--per_device_eval_batch_size", "8", "--total_batch_size", "32", "--eval_strategy", "steps",
    "--load_best_model_at_end", "true", "--metric_for_best_model", "ood_valid_accuracy", "--learning_rate", "1e-3",
    "--ddp_find_unused_parameters", "false", "--report_to", "none", "--disable_tqdm", "true", "--seed", "1",
]  # fmt: skip
SPLITS = ("iid_test", "ood_valid", "ood_test")


def run(command: list[str], env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)


def single_process_evaluation(run_dir: Path, split: str, device: str) -> dict:
    """The run's saved model evaluated on `split` by one process, with the run's evaluation batch size and precision
    (bf16 autocast on a GPU that has it, as `--precision auto` chose)."""
    tokenizer = NDRTokenizerFast.from_pretrained(run_dir)
    model = NDRForSequenceClassification.from_pretrained(run_dir)
    raw = modeling_ndr.load_task("ctl", direction="forward", seed=0, n_train=256, n_eval=N_EVAL)
    data = encode(raw, tokenizer, model.config.label2id)
    args = TrainingArguments(
        output_dir=str(run_dir / "single"), per_device_eval_batch_size=8, report_to="none",
        label_names=["labels", "depth"], use_cpu=device == "cpu",
        bf16=device == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False),
    )  # fmt: skip
    trainer = NDRTrainer(model=model, args=args, data_collator=DataCollatorWithPadding(tokenizer),
                         compute_metrics=metrics_function(load_depth_accuracy()))  # fmt: skip
    return trainer.evaluate(data[split], metric_key_prefix=split)


def assert_every_eval_sample_counted_once(run_dir: Path, device: str) -> None:
    """The run's evaluation (`<split>_results.json`, written by the main process from the gathered predictions) scored
    each sample exactly once: the counts are the split's, and accuracy and accuracy per depth are what one process
    computes on the same model: exactly on the CPU; on a GPU within one sample, since the batch that accelerate pads
    to even length is padded to another length, and bf16 kernels of other shapes may flip a near tie."""
    raw = modeling_ndr.load_task("ctl", direction="forward", seed=0, n_train=256, n_eval=N_EVAL)
    for split in SPLITS:
        saved = json.loads((run_dir / f"{split}_results.json").read_text())
        depths = raw[split]["depth"]
        expected_counts = {f"{split}_count_depth_{d}": depths.count(d) for d in set(depths)}
        assert saved[f"{split}_count"] == N_EVAL, f"{split}: {saved[f'{split}_count']} samples scored, not {N_EVAL}"
        assert {k: v for k, v in saved.items() if "_count_depth_" in k} == expected_counts, split
        single = single_process_evaluation(run_dir, split, device)
        for key, value in saved.items():
            if "_count" in key:
                assert single[key] == value, f"{key}: {value} samples from the processes, {single[key]} from one"
            elif "accuracy" in key:
                count = saved[key.replace("accuracy", "count")]
                tolerance = 0 if device == "cpu" else 1.001 / count
                assert abs(single[key] - value) <= tolerance, f"{key}: {value} from the processes, {single[key]} alone"


# ----------------------------------------------------------------------------------------------- CPU (the twins)


@pytest.mark.parametrize("processes", [1, 2, 3, 4, 8])
def test_total_batch_size_sets_the_per_device_batch_from_the_processes(processes):
    if 512 % processes:
        with pytest.raises(UsageError, match="does not divide into 3 process"):
            per_device_batch_size(512, processes)
        return
    assert per_device_batch_size(512, processes) * processes == 512
    assert per_device_batch_size(512, processes, accumulation_steps=2) * processes * 2 == 512


def test_total_batch_size_gives_way_to_a_per_device_batch_on_the_command_line():
    class Args:
        world_size, gradient_accumulation_steps, per_device_train_batch_size = 4, 2, 8

    args = Args()
    apply_total_batch_size(args, 512, given=set())
    assert args.per_device_train_batch_size == 64, "512 = 64 per device x 2 accumulation steps x 4 processes"
    args.per_device_train_batch_size = 8
    apply_total_batch_size(args, 512, given={"per_device_train_batch_size"})
    assert args.per_device_train_batch_size == 8, "a per-device batch on the command line wins over a preset's total"
    with pytest.raises(UsageError, match="not both"):
        apply_total_batch_size(args, 512, given={"per_device_train_batch_size", "total_batch_size"})


@pytest.mark.parametrize(
    "cuda, bf16, precision, expected",
    [
        (True, True, "auto", {"bf16": True, "fp16": False, "tf32": True}),
        (True, False, "auto", {"bf16": False, "fp16": False, "tf32": True}),  # a GPU without bf16 trains in fp32
        (True, False, "fp16", {"bf16": False, "fp16": True, "tf32": True}),
    ],
)
def test_precision_auto_is_bf16_only_where_the_gpu_has_it(cuda, bf16, precision, expected, native_bf16, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: bf16)
    monkeypatch.setattr("ndr_training.devices._tf32_available", lambda: cuda)
    assert precision_defaults(precision, use_cpu=False, given=set()) == expected, "the GPU decides, not the CPU"
    assert precision_defaults(precision, use_cpu=False, given={"fp16"}) == {}, "--bf16/--fp16 given win"
    expected_on_cpu = {"bf16": native_bf16, "fp16": False}
    assert precision_defaults("auto", use_cpu=True, given=set()) == expected_on_cpu, "--use_cpu: the CPU decides"
    with pytest.raises(UsageError, match="--precision 'half'"):
        precision_defaults("half", use_cpu=False, given=set())


@pytest.mark.parametrize("use_cpu", [True, False])
def test_precision_auto_on_the_cpu_is_bf16_only_where_the_cpu_has_native_bf16(use_cpu, native_bf16, monkeypatch):
    """On a machine without a GPU the CPU trains, `--use_cpu` or not; bf16 there needs `use_cpu` in TrainingArguments
    (transformers refuses bf16 without a GPU otherwise), so it is set with it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    expected = {"bf16": native_bf16, "fp16": False, **({"use_cpu": True} if native_bf16 and not use_cpu else {})}
    assert precision_defaults("auto", use_cpu=use_cpu, given=set()) == expected, "emulated bf16 is slower than fp32"
    assert precision_defaults("fp32", use_cpu=use_cpu, given=set()) == {"bf16": False, "fp16": False}, "fp32 asked"
    bf16 = {"bf16": True, "fp16": False, **({} if use_cpu else {"use_cpu": True})}
    assert precision_defaults("bf16", use_cpu=use_cpu, given=set()) == bf16, "bf16 asked for: emulated if need be"
    assert precision_defaults("auto", use_cpu=use_cpu, given={"bf16"}) == {}, "--bf16 on the command line wins"
    with pytest.raises(UsageError, match="--precision fp16 needs a GPU"):
        precision_defaults("fp16", use_cpu=use_cpu, given=set())
    if not use_cpu:
        with pytest.raises(UsageError, match="drop --use_cpu false"):  # our line, not transformers'
            precision_defaults("bf16", use_cpu=False, given={"use_cpu"})


@pytest.mark.parametrize("preset", ["ctl_gpu", "listops_paper", "ctl_cpu"])
def test_a_gpu_preset_without_a_gpu_trains_on_the_cpu_in_what_the_cpu_runs(preset, native_bf16, tmp_path, monkeypatch):
    """A GPU preset on a machine without a GPU parses (never transformers' "Your setup doesn't support bf16/gpu"),
    trains on the CPU in bf16 only where the CPU has it natively, and the log names the CPU preset instead."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    *_, training_args, _ = parse_arguments(["--preset", preset, "--output_dir", str(tmp_path)])
    assert training_args.bf16 == native_bf16 and not training_args.fp16, describe_precision(training_args)
    assert training_args.device.type == "cpu"
    note = gpu_preset_on_cpu(preset, preset.split("_")[0])
    if preset == "ctl_cpu":
        assert note is None, "a CPU preset on a CPU: nothing to say"
    else:
        assert f"--preset {preset} is sized for a GPU" in note and "--preset ctl_cpu" in note.replace("listops", "ctl")


def test_the_environment_can_say_what_the_cpu_has(monkeypatch):
    monkeypatch.setattr("ndr_training.devices.cpu_reports_native_bf16", lambda: False)
    monkeypatch.setenv("NDR_CPU_NATIVE_BF16", "1")
    assert cpu_has_native_bf16(), "1: native bf16, whatever the CPU reports"
    monkeypatch.setenv("NDR_CPU_NATIVE_BF16", "yes")
    with pytest.raises(UsageError, match="NDR_CPU_NATIVE_BF16='yes'"):
        cpu_has_native_bf16()


@pytest.mark.parametrize("avx512_bf16, amx", [(True, False), (False, True), (False, False)])
def test_native_bf16_is_avx512_bf16_or_amx(avx512_bf16, amx, monkeypatch):
    monkeypatch.delenv("NDR_CPU_NATIVE_BF16")  # what the CPU itself reports
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert cpu_has_native_bf16() == (avx512_bf16 or amx), "oneDNN computes bf16 in hardware with either"


def test_cpu_presets_ask_for_the_precision_this_cpu_trains_fastest_in():
    """`precision: auto` in every CPU preset: bf16 where the CPU has it, fp32 (today's path) elsewhere."""
    for name in ("ctl_cpu", "ctl_cpu_long", "arithmetic_cpu", "listops_cpu", "ctl_backward_bos_cpu"):
        assert read_preset(name, None).get("precision") == "auto", f"{name} trains in fp32 even where bf16 is native"


def test_two_cpu_processes_train_with_the_total_batch_and_count_every_eval_sample_once(tmp_path):
    """The CPU twin of the multi-GPU test: two gloo processes, `--total_batch_size 32` (16 per process), evaluation
    splits of 37 samples in batches of 8 per process."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29541"]
    result = run(torchrun + [str(TRAIN)] + SHORT + ["--use_cpu", "--output_dir", str(tmp_path / "run")])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "processes: 2, total train batch size: 32 (16 per device x 1 accumulation steps)" in result.stderr
    assert_every_eval_sample_counted_once(tmp_path / "run", "cpu")


def test_a_bf16_run_on_the_cpu_resumes_to_the_weights_of_the_uninterrupted_run(tmp_path, native_bf16):
    """`--precision auto` on a CPU with native bf16 (and fp32 on one without): a run stopped after 5 steps and resumed
    ends with the weights of the run that was not stopped, bit for bit. (bf16 without native support is emulated:
    slow, but these are a few steps of a tiny model.)"""
    args = SHORT + ["--max_steps", "8", "--eval_steps", "4", "--save_steps", "4", "--precision", "auto"]
    whole = run([sys.executable, str(TRAIN)] + args + ["--output_dir", str(tmp_path / "whole")])
    assert whole.returncode == 0, whole.stderr[-3000:]
    trained_in = "bf16 autocast" if native_bf16 else "fp32"
    assert f"trained in {trained_in} on " in whole.stdout, "the final summary names the precision"
    has = "has" if native_bf16 else "has no"
    assert f"training in {trained_in} (--precision auto: this CPU {has} native bf16" in whole.stdout, (
        "said at the start"
    )
    assert json.loads((tmp_path / "whole" / "run_config.json").read_text())["precision"] == trained_in
    chunked = ["--output_dir", str(tmp_path / "chunks"), "--resume_from_checkpoint", "auto"]
    first = run([sys.executable, str(TRAIN)] + args + chunked + ["--max_chunk_steps", "5"])
    assert first.returncode == EXIT_STOPPED, first.stderr[-3000:]
    second = run([sys.executable, str(TRAIN)] + args + chunked)
    assert second.returncode == 0, second.stderr[-3000:]
    assert_same_weights(tmp_path / "whole" / "checkpoint-8" / "model.safetensors",
                        tmp_path / "chunks" / "checkpoint-8" / "model.safetensors", f"in {trained_in}")  # fmt: skip


# ---------------------------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (make test-gpu on a GPU machine)")
def test_a_short_bf16_run_on_one_gpu(tmp_path):
    result = run([sys.executable, str(TRAIN)] + SHORT + ["--precision", "bf16", "--output_dir", str(tmp_path / "run")],
                 env={"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "processes: 1, total train batch size: 32 (32 per device" in result.stderr
    assert "bf16 autocast" in result.stderr, "bf16 autocast was asked for"
    run_config = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert torch.cuda.get_device_name() in run_config["machine"], "the record names the GPU"
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) == 4 and all(loss == loss and loss < 10 for loss in losses), losses  # finite, sane
    weights = NDRForSequenceClassification.from_pretrained(tmp_path / "run")
    assert all(p.dtype == torch.float32 for p in weights.parameters()), "autocast keeps float32 master weights"


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 or more CUDA GPUs")
def test_accelerate_multi_gpu_config_counts_every_eval_sample_once(tmp_path):
    processes = torch.cuda.device_count()
    launch = [os.path.join(os.path.dirname(sys.executable), "accelerate"), "launch", "--config_file",
              str(REPO / "configuration" / "accelerate" / "multi_gpu.yaml"), "--num_processes", str(processes),
              "--main_process_port", "29543"]  # fmt: skip
    result = run(launch + [str(TRAIN)] + SHORT + ["--precision", "auto", "--output_dir", str(tmp_path / "run")])
    assert result.returncode == 0, result.stderr[-3000:]
    per_device = 32 // processes if 32 % processes == 0 else None
    if per_device:
        assert f"processes: {processes}, total train batch size: 32 ({per_device} per device" in result.stderr
    assert_every_eval_sample_counted_once(tmp_path / "run", "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (make test-gpu on a GPU machine)")
def test_time_box_stops_with_a_checkpoint_and_resumes_on_a_gpu(tmp_path):
    """The stop and the resume on CUDA: exit 75 at the step asked for, then the rest. CUDA kernels need not be
    bitwise deterministic (atomic adds), so the weights are compared with a tolerance."""
    args = SHORT + ["--max_steps", "12", "--precision", "bf16"]
    whole = run([sys.executable, str(TRAIN)] + args + ["--output_dir", str(tmp_path / "whole")])
    assert whole.returncode == 0, whole.stderr[-3000:]
    chunked = ["--output_dir", str(tmp_path / "chunks"), "--resume_from_checkpoint", "auto"]
    first = run([sys.executable, str(TRAIN)] + args + chunked + ["--max_chunk_steps", "5"])
    assert first.returncode == EXIT_STOPPED, first.stderr[-3000:]
    assert (tmp_path / "chunks" / "checkpoint-5").is_dir()
    second = run([sys.executable, str(TRAIN)] + args + chunked)
    assert second.returncode == 0, second.stderr[-3000:]
    try:
        assert_same_weights(tmp_path / "whole" / "checkpoint-12" / "model.safetensors",
                            tmp_path / "chunks" / "checkpoint-12" / "model.safetensors", "on CUDA")  # fmt: skip
    except AssertionError:
        from safetensors.torch import load_file

        a = load_file(str(tmp_path / "whole" / "checkpoint-12" / "model.safetensors"))
        b = load_file(str(tmp_path / "chunks" / "checkpoint-12" / "model.safetensors"))
        worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
        assert worst < 1e-3, f"chunked and uninterrupted weights differ by up to {worst} on CUDA"


def test_the_gpu_benchmark_runs_its_code_on_the_cpu_and_skips_without_cuda():
    """`benchmarks/gpu.py --device cpu --tiny`: the attention-op and training-step code paths (eager and compiled,
    with dynamo's eager backend: inductor would compile for a minute) at tiny sizes, and the tables they print."""
    bench = REPO / "benchmarks" / "gpu.py"
    result = run([sys.executable, str(bench), "--device", "cpu", "--tiny", "--compile-backend", "eager",
                  "--repeats", "1", "--seq", "13", "--presets", "ctl_gpu,listops_gpu"])  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| N | geometric (ms) | SDPA flash (ms) | geometric / flash |" in result.stdout, result.stdout[-3000:]
    assert "| ctl_gpu (tiny) | 8 x " in result.stdout and "| listops_gpu (tiny) | 8 x " in result.stdout
    assert "compiled speed-up" in result.stdout and "their minutes, eager" in result.stdout
    if not CUDA:
        skipped = run([sys.executable, str(bench)])
        assert skipped.returncode == 0 and "GPU benchmarks skipped: no CUDA device" in skipped.stdout


def test_the_card_command_of_a_multi_gpu_run_names_the_accelerate_config():
    from modeling_ndr.training.export import training_command

    run_config = {"command": ["training/train.py", "--preset", "listops_gpu"], "processes": 4}
    assert training_command(run_config) == (
        "accelerate launch --config_file configuration/accelerate/multi_gpu.yaml --num_processes 4 "
        "training/train.py --preset listops_gpu"
    )
