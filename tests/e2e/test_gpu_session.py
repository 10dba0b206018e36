"""`make gpu-session` (hub_cards/gpu_session.py): which release it continues, how it keeps to its budget whatever a
step does, how it packs what it keeps into at most 8 files of at most 16 MiB, and its dry run on the CPU end to end
(the same steps at tiny sizes, a tiny preset in place of the GPU one, temporary folders in place of hub_cards/models/).
"""

import datetime
import json
import os
import subprocess
import sys
import tarfile
import time
import types
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import leaves_the_cpu_kernel_unbuilt
from scripts import REPO, load_script

import gpu_session_plan as plan


session = load_script("hub_cards/gpu_session.py")
MIB = 2**20


def write_release(models: Path, task: str, ood_test: float | None) -> Path:
    folder = models / f"ndr-{task}"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    if ood_test is not None:
        (folder / "eval_results.json").write_text(json.dumps({"ood_test": {"accuracy": ood_test}}))
    return folder


def wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel of a package `name` (an empty module)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{file},,\n" for file in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in files.items():
            archive.writestr(file, text)
    return path


def tar_members(out: Path, name: str) -> dict[str, bytes]:
    """The files of the tar `name` in `out`, joined from its parts if it was split."""
    parts = sorted(out.glob(f"{name}.part-*")) or [out / name]
    joined = out.parent / f"joined-{name}"
    joined.write_bytes(b"".join(part.read_bytes() for part in parts))
    with tarfile.open(joined) as tar:
        return {member.name: tar.extractfile(member).read() for member in tar.getmembers() if member.isfile()}


def test_the_release_furthest_below_its_ood_test_target_is_continued(tmp_path):
    write_release(tmp_path, "ctl-forward", 0.995)  # above its 0.99
    write_release(tmp_path, "ctl-backward", 0.7)  # 0.29 below
    write_release(tmp_path, "arithmetic", 0.465)  # 0.485 below its 0.95
    write_release(tmp_path, "listops", 0.5)  # 0.45 below its 0.95
    task, gaps = session.furthest_release(str(tmp_path))
    assert task == "arithmetic", f"arithmetic is furthest from its target: {gaps}"
    assert gaps == pytest.approx({"ctl-forward": -0.005, "ctl-backward": 0.29, "arithmetic": 0.485, "listops": 0.45})


def test_a_release_without_results_counts_as_untrained(tmp_path):
    for task in ("ctl-forward", "ctl-backward", "arithmetic"):
        write_release(tmp_path, task, 0.5)
    write_release(tmp_path, "listops", None)
    assert session.furthest_release(str(tmp_path))[0] == "listops", "no eval_results.json: as far as can be"


def test_no_release_is_continued_once_every_one_has_reached_its_target(tmp_path):
    for task, target in session.TARGETS.items():
        write_release(tmp_path, task, target)
    assert session.furthest_release(str(tmp_path))[0] is None, "a release at its target needs no more training"


def test_the_targets_name_every_release_of_make_gpu_release():
    releases = load_script("hub_cards/make_model_repos.py").GPU_RELEASES
    assert set(session.TARGETS) == set(releases), "every GPU release has a target, and only they"


def test_a_step_past_its_time_limit_is_stopped(tmp_path):
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    result = session.run_step("hang", command, str(tmp_path / "hang.log"), limit=1, grace=2)
    assert result["status"] == "timed out", result
    assert result["seconds"] < 10, "stopped at its limit (plus the grace period), not after the sleep"


def test_a_release_larger_than_a_file_is_split_into_parts_that_join_to_it(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "logs").mkdir(parents=True)
    (work / "logs" / "tests.log").write_text("3 passed")
    out.mkdir()
    release = write_release(tmp_path / "models", "listops", 0.5)
    (release / "last-checkpoint").mkdir()
    optimizer = os.urandom(20 * MIB)
    (release / "last-checkpoint" / "optimizer.pt").write_bytes(optimizer)
    packed = session.pack(str(out), str(work), str(release))
    names = ["session.tar.gz", "release-ndr-listops.tar.part-000", "release-ndr-listops.tar.part-001"]
    assert packed["files"] == [*names, "session.json"] and not packed["left_out"], packed
    assert sorted(os.listdir(out)) == sorted(names)
    assert max((out / name).stat().st_size for name in names) <= 16 * MIB
    members = tar_members(out, "release-ndr-listops.tar")
    assert members["ndr-listops/last-checkpoint/optimizer.pt"] == optimizer, "the parts join to the release's tar"
    assert tar_members(out, "session.tar.gz")["session/logs/tests.log"] == b"3 passed"


def test_a_release_that_does_not_fit_is_packed_without_its_last_checkpoint(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    release = write_release(tmp_path / "models", "listops", 0.5)
    (release / "last-checkpoint").mkdir()
    (release / "last-checkpoint" / "optimizer.pt").write_bytes(os.urandom(20 * MIB))
    packed = session.pack(str(out), str(work), str(release), max_files=3)  # 2 parts + session.* would be 4
    assert packed["files"] == ["session.tar.gz", "release-ndr-listops.tar", "session.json"], packed
    assert "ndr-listops/last-checkpoint/" in packed["left_out"][0]
    assert set(tar_members(out, "release-ndr-listops.tar")) == {
        "ndr-listops/config.json",
        "ndr-listops/eval_results.json",
    }, "the release's small files still come back"


def test_the_session_ends_within_its_budget_whatever_a_step_does(tmp_path, monkeypatch):
    """The steps' commands are faked (a release that writes a 20 MiB checkpoint, a failing test run, a benchmark that
    hangs); the orchestration, the time limits and the packing are the real ones."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    models = tmp_path / "models"
    for task, ood_test in (("ctl-forward", 1.0), ("ctl-backward", 1.0), ("arithmetic", 0.9), ("listops", 0.2)):
        write_release(models, task, ood_test)
    checkpoint = models / "ndr-listops" / "last-checkpoint"
    write = "import os, sys; os.makedirs(sys.argv[1]); open(sys.argv[2], 'wb').write(os.urandom(20 << 20))"
    fakes = {
        "release": lambda argv: [sys.executable, "-c", write, str(checkpoint), str(checkpoint / "optimizer.pt")],
        "tests": lambda argv: [sys.executable, "-c", "raise SystemExit(1)"],
        "attention": lambda argv: [sys.executable, "-c", "print('measured')"],
        "training_step": lambda argv: [sys.executable, "-c", "import time; time.sleep(600)"],
    }
    args = types.SimpleNamespace(out=str(tmp_path / "out"), work_dir=str(tmp_path / "work"), minutes=0.35,
                                 release_args=f"--models_dir {models}", task=None, steps=list(session.SHARES),
                                 wheels=str(tmp_path / "no-wheels"), dry_run=True,
                                 datasets_cache=str(tmp_path / "datasets"))  # fmt: skip
    record = session.run_session(args, fakes)
    assert [step["name"] for step in record["steps"]] == ["install", "release", "tests", "attention", "training_step"]
    statuses = {step["name"]: step["status"] for step in record["steps"]}
    assert statuses == {"install": "nothing to do", "release": "passed", "tests": "failed", "attention": "passed",
                        "training_step": "timed out"}, record["steps"]  # fmt: skip
    assert record["within_budget"] and record["seconds"] <= 21, f"{record['seconds']} s of a 21 s budget"
    out = Path(args.out)
    assert len(os.listdir(out)) <= 8 and max(f.stat().st_size for f in out.iterdir()) <= 16 * MIB
    assert "ndr-listops/last-checkpoint/optimizer.pt" in tar_members(out, "release-ndr-listops.tar"), "kept"
    assert json.loads((out / "session.json").read_text())["steps"] == record["steps"]


@pytest.fixture(scope="module", params=["1", "0"], ids=["native-bf16-cpu", "no-bf16-cpu"])
def dry_run(tmp_path_factory, request) -> types.SimpleNamespace:
    """`make gpu-session NO_CUDA=1` once on a CPU with native bf16 and once on one without (the release's
    `precision: auto` trains bf16 on the first), every step, its folders temporary; what the tests below look at."""
    tmp_path = tmp_path_factory.mktemp("dry-run")
    models = tmp_path / "models"
    for task, ood_test in (("ctl-forward", 0.5), ("ctl-backward", 0.995), ("arithmetic", 0.96), ("listops", 0.85)):
        write_release(models, task, ood_test)  # ctl-forward is furthest from its target (0.49 below)
    wheels = tmp_path / "whl"
    wheel(wheels, "ndr_session_probe", "0.1")
    present = wheel(wheels, "numpy", "0.0.1")  # numpy is installed: the image's is kept, this one never installed
    out, work, cache = tmp_path / "out", tmp_path / "work", tmp_path / "datasets"
    release_args = f"--preset tiny_gpu_release_test --outputs_dir {tmp_path / 'outputs'} --models_dir {models}"
    result = subprocess.run(
        ["make", "--no-print-directory", "gpu-session", f"OUT={out}", "MINUTES=8", "NO_CUDA=1",
         f"PYTHON={sys.executable}", f"GPU_RELEASE_ARGS={release_args}",
         f"GPU_SESSION_ARGS=--work_dir {work} --wheels {wheels} --datasets_cache {cache}"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS="1", NDR_CPU_NATIVE_BF16=request.param),
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    record = json.loads((out / "session.json").read_text())
    return types.SimpleNamespace(output=output, record=record, steps={step["name"]: step for step in record["steps"]},
                                 out=out, models=models, cache=cache, present=present)  # fmt: skip


def test_make_gpu_session_dry_run_runs_every_step_into_at_most_8_files(dry_run):
    record, steps, out, models = dry_run.record, dry_run.steps, dry_run.out, dry_run.models
    names = [step["name"] for step in record["steps"]]
    deferred = steps["release"].get("deferred_behind", [])  # steps that ran while the data was being made
    after = [name for name in ("tests", "attention", "training_step") if name not in deferred]
    assert names == ["install", *deferred, "data", "release", *after], (
        "the release trains first once its data is made; the tests and benchmarks beside the data or after it"
    )
    assert [step["status"] for step in record["steps"]] == ["passed"] * 6, dry_run.output[-4000:]
    assert steps["install"]["installed"] == ["ndr_session_probe-0.1-py3-none-any.whl"]
    assert steps["install"]["already_installed"] == [dry_run.present.name]
    assert steps["release"]["task"] == "ctl-forward", steps["release"]
    speed = steps["release"]["speed"]
    assert speed["steps"] > 0 and speed["samples_per_second"] > 0 and speed["seconds_per_step"] > 0, (
        f"what the chunk trained, and how fast, comes back in session.json: {speed}"
    )
    assert record["within_budget"] and record["seconds"] <= 480
    began = steps["release"]["training_began_share"]
    assert began is not None and began <= 0.25, (
        f"the release trains from the window's first quarter: began {steps['release']['training_began_s']} s into "
        f"{record['minutes']} minutes, after {[name for name in names if names.index(name) < names.index('release')]}"
    )
    files = sorted(out.iterdir())
    assert len(files) <= 8 and max(f.stat().st_size for f in files) <= 16 * MIB, files
    kept = tar_members(out, "session.tar.gz")
    for name in ("tests/junit.xml", "bench/attention.json", "bench/training_step.json", "logs/release.log"):
        assert f"session/{name}" in kept, f"{name} comes back: {sorted(kept)}"
    release = models / "ndr-ctl-forward"
    released = {f"ndr-ctl-forward/{path.relative_to(release)}" for path in release.rglob("*") if path.is_file()}
    assert "ndr-ctl-forward/model.safetensors" in released, "make gpu-release wrote the release"
    assert set(tar_members(out, "release-ndr-ctl-forward.tar")) == released, "all of the release comes back"


def test_the_release_reads_the_data_that_the_data_step_prepared_and_makes_none(dry_run):
    data = dry_run.steps["data"]
    assert data["preset"] == "tiny_gpu_release_test", "the release's preset (--release_args' --preset)"
    prepared = data["cache_files"]
    assert prepared and data["written"] == len(prepared), f"a fresh cache: the data step made every file: {data}"
    now = {file: (dry_run.cache / file).stat().st_mtime_ns for file in prepared if (dry_run.cache / file).is_file()}
    assert now == prepared, "the release wrote none of the data step's files again"
    # (the cache was empty before the data step: the files the release read and did not write are the data step's)
    release_log = tar_members(dry_run.out, "session.tar.gz")["session/logs/release.log"].decode()
    assert f"0 of the {len(prepared)} files it is read from were written now" in release_log, (
        f"the release's train.py made no data of its own: {release_log[-3000:]}"
    )


def test_when_the_release_began_to_train_is_read_from_its_log_against_the_window_s_start(tmp_path):
    log = tmp_path / "release.log"
    log.write_text(
        "2026-12-06 10:00:05,000 INFO ndr.train: kernel ready after 0.1 s; training\n"
        "noise 2026-12-06 10:00:06,000 INFO ndr_training.preemption: chunk 9 of this run\n"
        "2026-12-06 10:01:30,250 INFO ndr_training.preemption: chunk 3 of this run from step 700: stops with a ...\n"
        "2026-12-06 10:02:00,000 INFO ndr_training.preemption: chunk 4 of this run from step 900: later\n"
    )  # fmt: skip
    started = datetime.datetime(2026, 12, 6, 10, 0, 0).timestamp()
    assert plan.training_began(str(log), started) == 90.2, "the first line that begins training, from the start"
    log.write_text("2026-12-06 10:00:05,000 INFO ndr.train: preparing the data\n")
    assert plan.training_began(str(log), started) is None, "a release stopped before it trained"
    assert plan.training_began(str(tmp_path / "none.log"), started) is None


def session_args(tmp_path: Path, steps: list[str], **overrides) -> types.SimpleNamespace:
    """`main`'s arguments for a session on a GPU (not a dry run), its folders in `tmp_path`."""
    values = dict(out=str(tmp_path / "out"), work_dir=str(tmp_path / "work"), minutes=25, release_args="",
                  task=None, steps=steps, wheels=str(tmp_path / "no-wheels"), dry_run=False,
                  models_copy=str(tmp_path / "models-copy"), datasets_cache=str(tmp_path / "datasets"))  # fmt: skip
    return types.SimpleNamespace(**{**values, **overrides})


def test_each_step_gets_its_share_of_the_time_left_and_the_last_step_all_of_it():
    budget = session.Budget(600, started=time.monotonic() - 100)  # 100 s spent, 30 s kept for packing: 470 s left
    assert budget.wall_started == pytest.approx(time.time() - 100, abs=1), "the logs are read against the start"
    assert budget.limit(0.3, 0.6) == pytest.approx(235, abs=1), "tests, then attention and training_step: half"
    assert budget.limit(0.2, 0.2) == pytest.approx(470, abs=1), "the last step gets all that is left"
    assert budget.limit(0.01, 1.0) == pytest.approx(plan.MIN_LIMIT_SECONDS), "at least a minute"


def test_the_tests_step_runs_the_triton_kernels_tests_with_the_cuda_tests(tmp_path):
    [tests] = session.session_steps(session_args(tmp_path, ["tests"]), str(tmp_path), str(tmp_path / "site"), True)
    command = tests.command(600) + [
        "--collect-only",
        "-qq",
        "tests/unit/test_gpu.py",
        "tests/unit/test_geometric_triton.py",
    ]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    collected = {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}
    assert collected == {"tests/unit/test_gpu.py", "tests/unit/test_geometric_triton.py"}, (
        f"the Triton kernels run compiled only on a GPU: {result.stdout[-2000:]}"
    )


def test_the_release_is_trained_in_a_copy_that_the_next_session_on_the_machine_keeps(tmp_path):
    args = session_args(tmp_path, ["release"], task="listops")
    [release] = session.session_steps(args, str(tmp_path), str(tmp_path / "site"), True)
    command = release.command(600)
    copy = Path(args.models_copy) / "ndr-listops"
    assert command[1:4] == ["hub_cards/make_model_repos.py", "--gpu", "listops"], "make gpu-release's script, no make"
    assert command[command.index("--models_dir") + 1] == args.models_copy, command
    assert (copy / "config.json").read_bytes() == (REPO / "hub_cards/models/ndr-listops/config.json").read_bytes()
    trained = copy / "last-checkpoint" / "trained-here"  # what the first session's training left
    trained.parent.mkdir(exist_ok=True)  # (the release may carry its line already)
    trained.write_text("step 100")
    [release] = session.session_steps(args, str(tmp_path), str(tmp_path / "site"), True)
    release.command(600)
    assert trained.read_text() == "step 100" and release.note["copied_from"] is None, "the line trains on"


def test_the_gpu_presets_are_those_a_release_without_a_line_starts():
    releases = load_script("hub_cards/make_model_repos.py").GPU_RELEASES
    assert plan.GPU_PRESETS == {task: release.preset for task, (_, release) in releases.items()}, (
        "the data step prepares the data of the preset make gpu-release starts a new line of"
    )


def test_the_data_step_prepares_the_data_of_the_preset_the_release_trains(tmp_path):
    release = write_release(tmp_path, "listops", 0.5)
    options = session.release_options
    assert session.release_preset("listops", str(release), options([])) == "listops_gpu", "no line: the GPU preset"
    (release / "last-checkpoint").mkdir()
    line = {"recipe": {"preset": "listops_cpu_continue"}}
    (release / "last-checkpoint" / "continuation.json").write_text(json.dumps(line))
    assert session.release_preset("listops", str(release), options([])) == "listops_cpu_continue", (
        "a line trains on with its own recipe, whatever device started it"
    )
    assert session.release_preset("listops", str(release), options(["--switch_recipe"])) == "listops_gpu"
    given = options(["--models_dir", str(tmp_path), "--preset", "tiny_gpu_release_test"])
    assert session.release_preset("listops", str(release), given) == "tiny_gpu_release_test", "--preset wins"


def test_the_data_step_runs_on_the_cpu_into_the_cache_the_release_reads(tmp_path):
    write_release(tmp_path / "models", "listops", 0.5)  # no line
    args = session_args(tmp_path, ["data", "release"], task="listops", release_args=f"--models_dir {tmp_path}/models")
    data, release = session.session_steps(args, str(tmp_path), str(tmp_path / "site"), True)
    assert data.env["CUDA_VISIBLE_DEVICES"] == "", "the benchmarks measure the GPU meanwhile"
    assert data.env["HF_DATASETS_CACHE"] == release.env["HF_DATASETS_CACHE"] == args.datasets_cache
    command = data.command(600)
    assert command[1:] == ["training/train.py", "--preset", "listops_gpu", "--prepare_data_only", "true",
                           "--output_dir", str(tmp_path / "data"), "--disable_tqdm", "true"], command  # fmt: skip


def fake_data_step(ready: Path) -> list[str]:
    """A data step that takes 4 s, then writes `ready`."""
    return [sys.executable, "-c", f"import time; time.sleep(4); open({str(ready)!r}, 'w').close()"]


def test_the_release_waits_for_the_data_step_that_runs_beside_the_steps_before_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    models, ready, seen = tmp_path / "models", tmp_path / "data-ready", tmp_path / "seen-by-tests"
    write_release(models, "listops", 0.2)
    exists = f"__import__('os').path.exists({str(ready)!r})"
    fakes = {
        "data": lambda argv: fake_data_step(ready),
        "tests": lambda argv: [sys.executable, "-c", f"open({str(seen)!r}, 'w').write(str({exists}))"],
        "release": lambda argv: [sys.executable, "-c", f"raise SystemExit(not {exists})"],
    }
    args = session_args(tmp_path, ["install", "data", "tests", "release"], minutes=1, task="listops", dry_run=True,
                        release_args=f"--models_dir {models}")  # fmt: skip
    record = session.run_session(args, fakes)
    statuses = {step["name"]: step["status"] for step in record["steps"]}
    assert statuses == {"install": "nothing to do", "tests": "passed", "data": "passed", "release": "passed"}, (
        f"the release started once the data was ready: {record['steps']}"
    )
    assert seen.read_text() == "False", "the tests ran while the data step was still preparing"


def test_while_the_data_is_being_made_the_tests_run_first_and_the_release_after_them(tmp_path, monkeypatch):
    """On a fresh machine ListOps' data takes minutes of the CPU (186 s on an H100 machine, 2026-11-27): the release,
    which cannot train before it, is deferred behind the GPU's tests, and starts once the data is ready."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    models, ready, seen = tmp_path / "models", tmp_path / "data-ready", tmp_path / "seen-by-tests"
    write_release(models, "listops", 0.2)
    exists = f"__import__('os').path.exists({str(ready)!r})"
    order = tmp_path / "order"
    mark = f"open({str(order)!r}, 'a').write('{{}} ')"
    tests = f"{mark.format('tests')}; open({str(seen)!r}, 'w').write(str({exists}))"
    fakes = {
        "data": lambda argv: fake_data_step(ready),
        "tests": lambda argv: [sys.executable, "-c", tests],
        "release": lambda argv: [sys.executable, "-c", f"{mark.format('release')}; raise SystemExit(not {exists})"],
    }
    args = session_args(tmp_path, ["install", "data", "release", "tests"], minutes=1, task="listops", dry_run=True,
                        release_args=f"--models_dir {models}")  # fmt: skip
    record = session.run_session(args, fakes)
    steps = {step["name"]: step for step in record["steps"]}
    assert order.read_text().split() == ["tests", "release"], "the tests ran beside the data, the release after them"
    assert seen.read_text() == "False", "the tests ran while the data step was still preparing"
    assert steps["release"]["status"] == "passed" and steps["release"]["deferred_behind"] == ["tests"], steps
    assert steps["data"]["status"] == "passed", "the data step was waited for, not stopped"


def test_a_failed_tests_traceback_is_written_as_it_happens_when_asked(tmp_path, monkeypatch):
    import conftest

    report = types.SimpleNamespace(failed=True, nodeid="tests/unit/test_gpu.py::test_x[none]", when="call",
                                   longreprtext="AssertionError: CUDA syncs in one step: ['copy']")  # fmt: skip
    monkeypatch.delenv("NDR_TEST_FAILURES_LOG", raising=False)
    conftest.pytest_runtest_logreport(report)  # not asked: nothing written anywhere
    log = tmp_path / "failures.txt"
    monkeypatch.setenv("NDR_TEST_FAILURES_LOG", str(log))
    conftest.pytest_runtest_logreport(types.SimpleNamespace(**{**vars(report), "failed": False}))
    assert not log.exists(), "a passed test writes nothing"
    conftest.pytest_runtest_logreport(report)
    assert "test_x[none] (call)" in log.read_text() and "CUDA syncs in one step" in log.read_text()


def test_a_command_without_the_release_waits_for_the_data_step_at_its_end(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    models, ready = tmp_path / "models", tmp_path / "data-ready"
    write_release(models, "listops", 0.2)
    fakes = {"data": lambda argv: fake_data_step(ready), "tests": lambda argv: [sys.executable, "-c", "pass"]}
    args = session_args(tmp_path, ["install", "data", "tests"], minutes=1, task="listops", dry_run=True,
                        release_args=f"--models_dir {models}")  # fmt: skip
    record = session.run_session(args, fakes)
    assert record["steps"][-1]["name"] == "data" and record["steps"][-1]["status"] == "passed", record["steps"]
    assert ready.exists(), "the data is kept for the next command on the machine, not cut off by the session's end"


def test_a_hung_data_step_is_stopped_so_that_the_release_trains_in_its_time(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    models, release_started = tmp_path / "models", tmp_path / "release-started"
    write_release(models, "listops", 0.2)
    when = f"import time; open({str(release_started)!r}, 'w').write(str(time.monotonic()))"
    fakes = {
        "data": lambda argv: [sys.executable, "-c", "import time; time.sleep(600)"],  # (a blocking pyarrow/fsspec)
        "tests": lambda argv: [sys.executable, "-c", "pass"],
        "release": lambda argv: [sys.executable, "-c", when],
    }
    args = session_args(tmp_path, ["install", "data", "tests", "release"], minutes=0.5, task="listops", dry_run=True,
                        release_args=f"--models_dir {models}")  # fmt: skip
    budget = session.Budget(args.minutes * 60)
    record = session.run_session(args, fakes)
    steps = {step["name"]: step for step in record["steps"]}
    assert steps["release"]["status"] == "passed", f"the release trained in the time left: {steps}"
    cap = session.DATA_WAIT_SHARE * (budget.seconds - budget.reserve)  # the time left only shrinks
    waited = float(release_started.read_text()) - budget.started
    assert waited <= cap + 5, f"the release started {waited:.1f} s in, the wait is at most {cap:.1f} s: {steps}"
    data = steps["data"]
    assert data["status"] == "timed out" and "so that the release trains" in data.get("stopped", ""), (
        f"the record says the data step was stopped and why: {data}"
    )


def test_a_benchmark_contender_that_fails_to_compile_leaves_the_others_measured_and_saved(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    bench = load_script("benchmarks/gpu.py")

    class FailsToCompile(torch.nn.Module):
        def __init__(self, model, **options):
            super().__init__()
            self.model = model  # its parameters, as torch.compile's module has them

        def forward(self, *args, **kwargs):
            raise RuntimeError("the compiler failed")

    monkeypatch.setattr(bench.torch, "compile", FailsToCompile)
    path = tmp_path / "bench.json"
    bench.main(["--device", "cpu", "--tiny", "--repeats", "1", "--seq", "13", "--presets", "ctl_gpu", "--json",
                str(path)])  # fmt: skip
    saved = json.loads(path.read_text())
    [attention], [step] = saved["attention"], saved["training_step"]
    assert attention["geometric (ms)"] != "n/a" and attention["SDPA flash (ms)"] != "n/a", attention
    assert "compiled: the compiler failed" in attention["failed"], attention
    assert step["eager samples/s"] and step["failed"] == "compiled: the compiler failed", step
    assert "compiled samples/s" not in step, step


def test_the_steps_do_not_spend_the_gpus_time_building_the_cpu_kernel():
    """The session's tests step runs `-m "gpu or triton"`: on the GPU machine their CPU side never builds the kernel,
    while the CPU suite's own tests of the kernel run wherever they run."""
    assert leaves_the_cpu_kernel_unbuilt({"gpu"}, cuda=True) and leaves_the_cpu_kernel_unbuilt({"triton"}, cuda=True)
    assert not leaves_the_cpu_kernel_unbuilt({"gpu"}, cuda=False), "without a GPU (NDR_TEST_DEVICE=cpu): as asked"
    assert not leaves_the_cpu_kernel_unbuilt(set(), cuda=True), "the CPU suite on a GPU machine tests the kernel"
