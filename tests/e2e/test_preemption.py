"""Time-boxed and preemptible training (`ndr_training.preemption`): a run stopped by `--max_chunk_steps`,
`--max_wall_minutes`, SIGUSR1 or SIGTERM saves a checkpoint and exits with status 75, and a run cut into chunks ends
with the weights of the same run uninterrupted; the depth-balanced samplers resume at any epoch. (The wall-clock limit
in real processes run by the chunk driver: tests/e2e/test_gpu_release.py.)"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from scripts import load_script
from tiny import tiny_train_args
from transformers import TrainerCallback

from ndr_training import EXIT_STOPPED, BalancedSampler, TrainingStopped
from ndr_training.preemption import STOPPED_FILE
from run_in_chunks import output_dir_of, run_in_chunks


REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "training" / "train.py"
# CTL backward, tiny: 512 samples in batches of 32 (16 steps an epoch), balanced depths in length-grouped batches
# (the sampler that must resume at the right epoch), evaluation and checkpoints every 8 steps, at most 2 kept. The best
# checkpoint is the one with the *highest* ood_valid loss, so that it is an early one: it must survive the chunks'
# checkpoints and resumes.
TINY = tiny_train_args(
    n_eval=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, per_device_eval_batch_size=32,
    max_steps=40, eval_steps=8, save_steps=8, logging_steps=8, save_total_limit=2,
    train_sampling_strategy="group_by_length", metric_for_best_model="ood_valid_loss", greater_is_better="true",
    report_to="none", seed=3,
)  # fmt: skip


class SendSignalAt(TrainerCallback):
    """Send `signum` to this process at the end of step `step` (what a scheduler does, at a step we know)."""

    def __init__(self, step: int, signum: int):
        self.step, self.signum = step, signum

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), self.signum)


def with_callback(trainer_class, callback):
    """`trainer_class` with `callback` added after train.py's own callbacks."""

    class TrainerWithCallback(trainer_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(callback)

    return TrainerWithCallback


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def assert_same_weights(a: Path, b: Path, what: str) -> None:
    first, second = weights(a), weights(b)
    assert first.keys() == second.keys(), what
    differing = [name for name in first if not torch.equal(first[name], second[name])]
    assert not differing, f"{what}: {len(differing)} tensors differ, e.g. {differing[:3]}"


def test_a_run_cut_into_chunks_ends_with_the_weights_of_the_uninterrupted_run(tmp_path, monkeypatch):
    train = load_script("training/train.py")
    whole, chunked = tmp_path / "whole", tmp_path / "chunks"
    train.main(TINY + ["--output_dir", str(whole)])

    trainer_class = train.NDRTrainer
    handlers = signal.getsignal(signal.SIGTERM)
    resume = ["--output_dir", str(chunked), "--resume_from_checkpoint", "auto"]
    # four stops, one of each kind, the first in epoch 0 and the others in epochs 1 and 2; SendSignalAt runs after the
    # time box in each step, so the signal sent at step s stops the run at step s + 1
    chunks = [
        (["--max_chunk_steps", "11"], None, 11, "max_chunk_steps"),
        ([], (16, signal.SIGUSR1), 17, "SIGUSR1"),
        ([], (24, signal.SIGTERM), 25, "SIGTERM"),
        (["--max_wall_minutes", "1e-9"], None, 26, "max_wall_minutes"),  # past the limit at the first step
    ]
    for flags, send, step, reason in chunks:
        if send:
            monkeypatch.setattr(train, "NDRTrainer", with_callback(trainer_class, SendSignalAt(*send)))
        with pytest.raises(TrainingStopped) as stopped:
            train.main(TINY + resume + flags)
        monkeypatch.setattr(train, "NDRTrainer", trainer_class)
        assert (stopped.value.step, stopped.value.reason) == (step, reason)
        record = json.loads((chunked / STOPPED_FILE).read_text())
        assert record["step"] == step and record["checkpoint"].endswith(f"checkpoint-{step}")
        assert (chunked / f"checkpoint-{step}" / "trainer_state.json").is_file(), "the stop saves a checkpoint"
        assert signal.getsignal(signal.SIGTERM) is handlers, "the handlers are restored after training"
    train.main(TINY + resume)  # the last chunk finishes: evaluation and export

    assert_same_weights(whole / "checkpoint-40" / "model.safetensors", chunked / "checkpoint-40" / "model.safetensors",
                        "the last step: same data order, RNG states, optimizer and scheduler")  # fmt: skip
    states = [json.loads((run / "trainer_state.json").read_text()) for run in (whole, chunked)]
    assert Path(states[0]["best_model_checkpoint"]).name == Path(states[1]["best_model_checkpoint"]).name
    assert Path(states[0]["best_model_checkpoint"]).name != "checkpoint-40", "the test wants an early best checkpoint"
    assert states[0]["best_metric"] == states[1]["best_metric"]
    assert_same_weights(whole / "model.safetensors", chunked / "model.safetensors", "the selected (best) model")
    evaluations = [[entry for entry in state["log_history"] if "eval_ood_valid_loss" in entry] for state in states]
    assert [e["eval_ood_valid_loss"] for e in evaluations[0]] == [e["eval_ood_valid_loss"] for e in evaluations[1]]
    results = [json.loads((run / "eval_results.json").read_text()) for run in (whole, chunked)]
    assert results[0] == results[1], "the selected model evaluates the same"
    training = json.loads((chunked / "run_config.json").read_text())["training"]
    assert training["chunks"] == 5 and training["steps"] == 40, "the run record counts the chunks' training time"
    assert not (chunked / STOPPED_FILE).exists(), "a finished run leaves no stop record"


def test_a_run_resumed_from_its_final_checkpoint_trains_no_step_more_and_exports_the_same_model(tmp_path):
    """Killed after its last checkpoint (step 40, in the middle of an epoch), during the final evaluation or export,
    and run again with --resume_from_checkpoint auto: it trains nothing (Trainer alone would train step 41) and
    exports the model the uninterrupted run exported."""
    train = load_script("training/train.py")
    run = tmp_path / "run"
    train.main(TINY + ["--output_dir", str(run)])
    exported = weights(run / "export" / "model.safetensors")
    for name in ("export", "model.safetensors", "eval_results.json", "trainer_state.json", "all_results.json"):
        path = run / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()  # what a kill during the export leaves
    train.main(TINY + ["--output_dir", str(run), "--resume_from_checkpoint", "auto"])
    assert json.loads((run / "trainer_state.json").read_text())["global_step"] == 40, "no step past max_steps"
    assert not (run / "checkpoint-41").exists()
    again = weights(run / "export" / "model.safetensors")
    assert all(torch.equal(again[name], exported[name]) for name in exported), "the uninterrupted run's export"


def run_train(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(TRAIN)] + args, capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300, **kwargs)  # fmt: skip


def test_sigusr1_stops_a_running_process_with_a_checkpoint_and_exit_75(tmp_path):
    output_dir = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = TINY + ["--max_steps", "100000", "--output_dir", str(output_dir)]
    process = subprocess.Popen([sys.executable, str(TRAIN)] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env, cwd=REPO)  # fmt: skip
    lines = []
    try:
        for line in process.stdout:  # the handlers are installed when training begins
            lines.append(line)
            if "stops with a checkpoint" in line:
                break
        time.sleep(1.0)  # some steps
        process.send_signal(signal.SIGUSR1)
        out, _ = process.communicate(timeout=120)
    finally:
        process.kill()
    text = "".join(lines) + (out or "")
    assert process.returncode == EXIT_STOPPED, text[-3000:]
    record = json.loads((output_dir / STOPPED_FILE).read_text())
    assert record["reason"] == "SIGUSR1" and 1 <= record["step"] < 100000
    state = json.loads((output_dir / f"checkpoint-{record['step']}" / "trainer_state.json").read_text())
    assert state["global_step"] == record["step"]
    assert "resume with the same command and --resume_from_checkpoint auto" in text


def test_two_processes_stop_at_the_same_step_when_only_one_gets_the_signal(tmp_path):
    """gloo DDP on the CPU: SIGUSR1 reaches rank 1 only; the all-reduced stop flag makes rank 0 stop at the same step,
    so both save their RNG state into one checkpoint, and rank 0 writes the stop record (the launcher exits 1 when
    its processes exit 75: stopped.json tells a stop from a failure)."""
    output_dir = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533"]
    args = TINY + ["--max_steps", "100000", "--per_device_train_batch_size", "16", "--use_cpu",
                   "--ddp_find_unused_parameters", "false", "--output_dir", str(output_dir)]  # fmt: skip
    launcher = subprocess.Popen(torchrun + [str(TRAIN)] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, cwd=REPO)  # fmt: skip
    lines = []
    try:
        # the first logged loss (step 8) comes after both processes trained a step together (DDP's all-reduce), so
        # both have installed their signal handlers (on_train_begin); only the main process logs
        for line in launcher.stdout:
            lines.append(line)
            if "'loss'" in line:
                break
        time.sleep(1.0)
        rank_one = [pid for pid in children(launcher.pid) if environment(pid).get("RANK") == "1"]
        assert len(rank_one) == 1, "".join(lines)[-3000:]
        os.kill(rank_one[0], signal.SIGUSR1)
        out, _ = launcher.communicate(timeout=180)
    finally:
        launcher.kill()
    text = "".join(lines) + (out or "")
    record = json.loads((output_dir / STOPPED_FILE).read_text())
    assert record["reason"] == "SIGUSR1", "rank 0 stopped for the signal that only rank 1 received"
    checkpoint = output_dir / f"checkpoint-{record['step']}"
    assert (checkpoint / "rng_state_0.pth").is_file() and (checkpoint / "rng_state_1.pth").is_file(), text[-3000:]
    stops = [line for line in text.splitlines() if "stopping at step" in line]
    assert len(stops) == 2 and all(f"stopping at step {record['step']} (SIGUSR1)" in line for line in stops), stops


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == pid:
                found.append(int(entry))
    return found


def environment(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = f.read().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in items if b"=" in item)


@pytest.mark.parametrize("grouped", [False, True], ids=["balanced", "balanced+grouped"])
def test_the_balanced_sampler_draws_any_epoch_as_the_uninterrupted_sequence_does(grouped):
    """Epoch e of a fresh sampler (a resumed run: Trainer calls set_epoch(e)) is the e-th epoch of one that drew
    every epoch; and the first epochs are the draws of the sampler before resumption existed (WeightedRandomSampler),
    so runs of the released presets keep their data order."""
    generator = torch.Generator().manual_seed(0)
    weights = torch.rand(300, dtype=torch.double, generator=generator)
    lengths = torch.randint(3, 50, (300,), generator=generator).tolist() if grouped else None
    sequential = BalancedSampler(weights, seed=7, lengths=lengths, batch_size=8)
    epochs = [list(sequential) for _ in range(4)]
    for epoch in (3, 1, 2):
        resumed = BalancedSampler(weights, seed=7, lengths=lengths, batch_size=8)
        resumed.set_epoch(epoch)
        assert list(resumed) == epochs[epoch], f"epoch {epoch} drawn by a fresh sampler"
    if not grouped:
        old = torch.utils.data.WeightedRandomSampler(weights, 300, generator=torch.Generator().manual_seed(7))
        assert [list(old) for _ in range(2)] == epochs[:2]


def test_the_chunk_driver_stops_on_a_failure_and_when_a_chunk_makes_no_progress(tmp_path):
    """A stand-in for train.py runs a plan, one item per chunk: `sN` stops at step N (exit 75 and a stop record),
    `lN` stops at step N under a launcher (exit 1 and a stop record), a number exits with that status."""
    script = tmp_path / "fake_train.py"
    script.write_text(
        "import json, os, sys\n"
        "out = sys.argv[sys.argv.index('--output_dir') + 1]\n"
        "chunk = len(os.listdir(out))\n"
        "open(os.path.join(out, f'chunk{chunk}'), 'w').close()\n"
        "plan = sys.argv[sys.argv.index('--plan') + 1].split(',')[chunk]\n"
        "if plan[0] in 'sl':\n"
        f"    record = open(os.path.join(out, '{STOPPED_FILE}'), 'w')\n"
        "    json.dump({'step': int(plan[1:]), 'reason': 'max_wall_minutes'}, record)\n"
        "    sys.exit(75 if plan[0] == 's' else 1)\n"
        "sys.exit(int(plan))\n"
    )

    def drive(plan: str) -> int:
        out = tmp_path / plan.replace(",", "_")
        out.mkdir()
        command = [sys.executable, str(script), "--plan", plan, "--output_dir", str(out)]
        return run_in_chunks(command, chunk_minutes=1, stdout=subprocess.DEVNULL)

    assert output_dir_of(["train.py", "--output_dir", "a"]) == "a" == output_dir_of(["train.py", "--output_dir=a"])
    assert drive("s1,s2,0") == 0
    assert drive("s1,l2,0") == 0, "a launcher's exit 1 after a stop record is a stop"
    assert drive("s1,3") == 3, "a failing chunk's exit status is the driver's"
    assert drive("s1,s1") == 1, "no progress: the driver gives up instead of looping"


@pytest.mark.parametrize("status, requeued, exit_status", [(75, True, 0), (0, False, 0), (1, False, 1)])
def test_the_slurm_script_requeues_a_run_that_stopped_with_75(status, requeued, exit_status, tmp_path):
    """training/slurm/train_ndr.sbatch with stand-ins for srun, scontrol and python: the processes get their rank
    from SLURM, train.py resumes with --resume_from_checkpoint auto, and exit 75 requeues the job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "log"
    stand_ins = {
        # srun: run the task command once, as task 1 on its node
        "srun": 'while [ "${1#--}" != "$1" ]; do shift; done\nSLURM_PROCID=1 SLURM_LOCALID=1 exec "$@"',
        "scontrol": f'if [ "$1" = show ]; then echo node7; else echo "scontrol $*" >> {log}; fi',
        "python": 'echo "RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE MASTER_ADDR=$MASTER_ADDR $*"'
        f" >> {log}\nexit {status}",
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON="python", SLURM_JOB_ID="4242",
               SLURM_NTASKS="2", SLURM_JOB_NODELIST="node[7-8]")  # fmt: skip
    script = REPO / "training" / "slurm" / "train_ndr.sbatch"
    result = subprocess.run(["bash", str(script), "ctl_gpu", "outputs/x", "--seed", "3"], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == exit_status, result.stdout + result.stderr
    lines = log.read_text().splitlines()
    assert lines[0] == (
        "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 MASTER_ADDR=node7 training/train.py --preset ctl_gpu "
        "--output_dir outputs/x --resume_from_checkpoint auto --disable_tqdm true --seed 3"
    )
    assert ("scontrol requeue 4242" in lines) == requeued
