"""Everyday accidents get one clear line or the right behaviour: two runs on one output folder, a run that died holding
it, interrupted exports and builds, half-written checkpoints, and a user's broken data files."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from modeling_ndr.training import atomic, locking
from modeling_ndr.training.errors import UsageError


REPO = Path(__file__).resolve().parents[1]


def dead_pid() -> int:
    """The pid of a process that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def start_holder(folder: Path) -> subprocess.Popen:
    """A process that holds the lock of `folder` until it is killed; returns once the lock is held."""
    code = textwrap.dedent(f"""
        import sys, time
        from modeling_ndr.training.locking import lock_output_dir
        with lock_output_dir({str(folder)!r}):
            print("locked", flush=True)
            time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert holder.stdout.readline().strip() == "locked"
    return holder


# ------------------------------------------------------------------------------------------- the output_dir lock


def test_a_second_process_on_a_locked_folder_stops_at_once_naming_the_holder(tmp_path):
    holder = start_holder(tmp_path / "run")
    try:
        code = textwrap.dedent(f"""
            from modeling_ndr.training.errors import exit_on_usage_error
            from modeling_ndr.training.locking import lock_output_dir
            def main():
                with lock_output_dir({str(tmp_path / "run")!r}):
                    print("second run got the lock")
            exit_on_usage_error(main)
        """)
        second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 2, second.stderr
    assert "second run got the lock" not in second.stdout
    message = second.stderr.strip()
    assert "\n" not in message, "one line"
    assert f"--output_dir {tmp_path / 'run'} is in use by process {holder.pid} on host {socket.gethostname()}" in (
        message
    ), message
    assert "(started 20" in message, "the holder's start time is named"


def test_the_lock_file_names_the_holder_and_the_lock_is_exclusive_within_a_process(tmp_path):
    with locking.lock_output_dir(str(tmp_path)):
        holder = json.loads((tmp_path / locking.LOCK_FILE).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        with pytest.raises(UsageError, match=f"is in use by process {os.getpid()}"):
            locking.OutputDirLock(str(tmp_path)).acquire()


def test_a_lock_left_by_a_process_that_died_is_taken_over_with_a_warning(tmp_path, caplog):
    pid = dead_pid()
    (tmp_path / locking.LOCK_FILE).write_text(
        json.dumps({"pid": pid, "host": socket.gethostname(), "started": "2026-01-01 00:00:00+00:00"})
    )
    with caplog.at_level(logging.WARNING), locking.lock_output_dir(str(tmp_path)):
        assert json.loads((tmp_path / locking.LOCK_FILE).read_text())["pid"] == os.getpid()
    assert f"taking over the lock left behind by process {pid} on host {socket.gethostname()}" in caplog.text


def test_a_killed_holder_releases_the_lock(tmp_path, caplog):
    holder = start_holder(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with caplog.at_level(logging.WARNING), locking.lock_output_dir(str(tmp_path)):
        pass
    assert f"left behind by process {holder.pid}" in caplog.text, "kill -9 leaves the file: taken over, with a warning"


def test_a_live_process_named_in_the_file_keeps_the_folder_even_without_flock(tmp_path, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        start = locking._process_start(holder.pid)
        (tmp_path / locking.LOCK_FILE).write_text(
            json.dumps({"pid": holder.pid, "host": socket.gethostname(), "process_start": start})
        )

        def no_flock(fd, operation):  # a file system where flock always succeeds without locking anything
            return None

        monkeypatch.setattr(locking.fcntl, "flock", no_flock)
        with pytest.raises(UsageError, match=f"in use by process {holder.pid}"):
            locking.OutputDirLock(str(tmp_path)).acquire()
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_released_when_the_run_ends_normally_or_by_an_exception(tmp_path):
    with locking.lock_output_dir(str(tmp_path)):
        pass
    assert not (tmp_path / locking.LOCK_FILE).exists(), "the lock file is removed at the end"
    with pytest.raises(RuntimeError, match="boom"), locking.lock_output_dir(str(tmp_path)):
        raise RuntimeError("boom")
    assert not (tmp_path / locking.LOCK_FILE).exists()
    with locking.lock_output_dir(str(tmp_path)) as lock:
        assert lock.fd is not None, "a new run gets the folder"


def test_a_folder_the_lock_created_is_removed_if_the_run_wrote_nothing(tmp_path):
    with pytest.raises(UsageError), locking.lock_output_dir(str(tmp_path / "new")):
        raise UsageError("a bad data file")
    assert not (tmp_path / "new").exists(), "a run refused before writing anything leaves no empty folder"


def test_ranks_that_do_not_save_take_no_lock(tmp_path):
    with locking.lock_output_dir(str(tmp_path)):
        with locking.lock_output_dir(str(tmp_path), enabled=False) as lock:
            assert lock is None, "a non-main DDP rank shares its main process's folder"


# ------------------------------------------------------------------------------------- folders written whole


def write_folder(path: Path, text: str) -> None:
    (path / "sub").mkdir(parents=True, exist_ok=True)
    (path / "a.txt").write_text(text)
    (path / "sub" / "b.txt").write_text(text)


def folder_contents(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_text() for p in sorted(path.rglob("*")) if p.is_file()}


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def test_a_completed_write_replaces_the_folder_and_leaves_no_temporary_sibling(tmp_path):
    target = tmp_path / "export"
    write_folder(target, "old")
    (target / "only-in-old.txt").write_text("old")
    with atomic.atomic_folder(str(target)) as staging:
        assert Path(staging).parent == tmp_path and Path(staging).name == f".export.tmp-{os.getpid()}"
        write_folder(Path(staging), "new")
    assert folder_contents(target) == {"a.txt": "new", "sub/b.txt": "new"}, "the new folder, and only it"
    assert siblings(target) == []


def test_a_write_interrupted_by_an_exception_leaves_the_old_folder_intact(tmp_path):
    target = tmp_path / "export"
    write_folder(target, "old")
    with pytest.raises(RuntimeError, match="disk full"), atomic.atomic_folder(str(target)) as staging:
        (Path(staging) / "a.txt").write_text("new")
        raise RuntimeError("disk full")
    assert folder_contents(target) == {"a.txt": "old", "sub/b.txt": "old"}
    assert siblings(target) == [], "the half-written folder is deleted"


def test_a_first_write_interrupted_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic.atomic_folder(str(tmp_path / "new")) as staging:
        (Path(staging) / "a.txt").write_text("new")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_a_write_killed_midway_leaves_the_old_folder_and_the_next_write_tidies_up(tmp_path, caplog):
    target = tmp_path / "release"
    write_folder(target, "old")
    code = textwrap.dedent(f"""
        import os, time
        from modeling_ndr.training.atomic import atomic_folder
        with atomic_folder({str(target)!r}) as staging:
            open(os.path.join(staging, "a.txt"), "w").write("half")
            print("writing", flush=True)
            time.sleep(600)
    """)
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert writer.stdout.readline().strip() == "writing"
    assert siblings(target) == [f".release.tmp-{writer.pid}"], "a write in progress goes to a hidden sibling"
    assert atomic.clean_leftovers(str(target)) == [], "a running writer's folder is left alone"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert folder_contents(target) == {"a.txt": "old", "sub/b.txt": "old"}, "kill -9 leaves the old folder whole"
    with caplog.at_level(logging.WARNING), atomic.atomic_folder(str(target)) as staging:
        write_folder(Path(staging), "new")
    assert f"deleted {tmp_path / f'.release.tmp-{writer.pid}'}, half-written by an interrupted write" in caplog.text
    assert folder_contents(target) == {"a.txt": "new", "sub/b.txt": "new"} and siblings(target) == []


def test_a_swap_cut_between_its_two_renames_is_finished_next_time(tmp_path, caplog):
    target, pid = tmp_path / "ndr-ctl", dead_pid()
    write_folder(tmp_path / f".ndr-ctl.old-{pid}", "old")  # the old folder moved aside...
    write_folder(tmp_path / f".ndr-ctl.tmp-{pid}", "new")  # ...the complete new one not yet moved in
    with caplog.at_level(logging.WARNING):
        atomic.clean_leftovers(str(target))
    assert folder_contents(target) == {"a.txt": "new", "sub/b.txt": "new"} and siblings(target) == []
    assert "finished replacing it" in caplog.text


def test_a_swap_cut_before_the_new_folder_was_complete_restores_the_old_one(tmp_path):
    target, pid = tmp_path / "ndr-ctl", dead_pid()
    write_folder(tmp_path / f".ndr-ctl.old-{pid}", "old")
    atomic.clean_leftovers(str(target))
    assert folder_contents(target) == {"a.txt": "old", "sub/b.txt": "old"} and siblings(target) == []


def test_a_folder_with_files_the_command_does_not_write_is_never_replaced(tmp_path):
    target = tmp_path / "export"
    write_folder(target, "old")
    (target / ".git").mkdir()
    (target / ".git" / "HEAD").write_text("ref")
    with pytest.raises(UsageError, match=r"--export_dir .*export: the folder holds files this command does not write "
                       r"\(.git/HEAD\)"):  # fmt: skip
        with atomic.atomic_folder(str(target), expected=["*.txt"], flag="--export_dir"):
            pass
    assert (target / ".git" / "HEAD").read_text() == "ref"
    with atomic.atomic_folder(str(target / "sub"), expected=["*.txt"]) as staging:
        write_folder(Path(staging), "new")
    assert (target / "sub" / "a.txt").read_text() == "new", "a folder of expected files is replaced"


def test_a_busy_folder_is_refused_without_waiting(tmp_path):
    with locking.lock_output_dir(str(tmp_path)):
        start = time.perf_counter()
        with pytest.raises(UsageError):
            locking.OutputDirLock(str(tmp_path)).acquire()
        assert time.perf_counter() - start < 1.0, "a busy folder is refused without waiting"
