"""Everyday accidents get one clear line or the right behaviour: two runs on one output folder, a run that died holding
it, interrupted exports and builds, half-written checkpoints, and a user's broken data files."""

import errno
import fcntl
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from modeling_ndr.training import atomic
from modeling_ndr.training.errors import UsageError
from ndr_training import locking


REPO = Path(__file__).resolve().parents[2]
# the folder of train.py and its modules (`ndr_training`): a `python -c` child started there imports them as train.py
# does, as siblings
SCRIPTS = REPO / "training"


def dead_pid() -> int:
    """The pid of a process that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def start_holder(folder: Path) -> subprocess.Popen:
    """A process that holds the lock of `folder` until it is killed; returns once the lock is held."""
    code = textwrap.dedent(f"""
        import sys, time
        from ndr_training.locking import lock_output_dir
        with lock_output_dir({str(folder)!r}):
            print("locked", flush=True)
            time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=SCRIPTS)
    assert holder.stdout.readline().strip() == "locked"
    return holder


# ------------------------------------------------------------------------------------------- the output_dir lock


def test_a_second_process_on_a_locked_folder_stops_at_once_naming_the_holder(tmp_path):
    holder = start_holder(tmp_path / "run")
    try:
        code = textwrap.dedent(f"""
            from modeling_ndr.training.errors import exit_on_usage_error
            from ndr_training.locking import lock_output_dir
            def main():
                with lock_output_dir({str(tmp_path / "run")!r}):
                    print("second run got the lock")
            exit_on_usage_error(main)
        """)
        second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=SCRIPTS)
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


def test_train_py_refuses_a_folder_a_live_run_holds_before_reading_anything(tmp_path):
    holder = start_holder(tmp_path / "run")
    try:
        start = time.perf_counter()
        second = subprocess.run(
            [sys.executable, str(REPO / "training" / "train.py"), "--preset", "ctl_cpu", "--output_dir",
             str(tmp_path / "run")],
            capture_output=True, text=True, timeout=300, cwd=REPO,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        left = sorted(path.name for path in (tmp_path / "run").iterdir())
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode == 2, second.stderr[-2000:]
    expected = f"train.py: error: --output_dir {tmp_path / 'run'} is in use by process {holder.pid} on host "
    assert second.stderr.strip().splitlines()[-1].startswith(expected), second.stderr[-2000:]
    assert "Traceback" not in second.stderr
    assert left == [locking.LOCK_FILE], "the second run wrote nothing next to the holder's lock"
    # refused before any data is generated: the time is the interpreter's and the imports'
    print(f"second train.py refused in {seconds:.1f} s")


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


def test_a_process_the_run_forked_does_not_keep_the_lock_once_the_run_is_killed(tmp_path, caplog):
    code = textwrap.dedent(f"""
        import os, time
        from ndr_training.locking import lock_output_dir
        with lock_output_dir({str(tmp_path)!r}):
            if os.fork() == 0:  # a data-loader worker, alive while the test takes the folder
                time.sleep(20)
                os._exit(0)
            print("locked", flush=True)
            time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=SCRIPTS)
    assert holder.stdout.readline().strip() == "locked"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with caplog.at_level(logging.WARNING), locking.lock_output_dir(str(tmp_path)):
        pass  # the worker still runs, but filelock closed the lock file in it
    assert f"left behind by process {holder.pid}" in caplog.text


def test_a_live_process_named_in_the_file_keeps_the_folder_even_without_flock(tmp_path, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        start = locking._process_start(holder.pid)
        (tmp_path / locking.LOCK_FILE).write_text(
            json.dumps({"pid": holder.pid, "host": socket.gethostname(), "process_start": start})
        )

        def no_flock(fd, operation):  # a file system where flock always succeeds without locking anything
            return None

        monkeypatch.setattr(fcntl, "flock", no_flock)  # filelock's flock
        with pytest.raises(UsageError, match=f"in use by process {holder.pid}"):
            locking.OutputDirLock(str(tmp_path)).acquire()
    finally:
        holder.kill()
        holder.wait()


def test_without_flock_the_lock_file_s_existence_keeps_the_folder(tmp_path, monkeypatch):
    def flock_not_implemented(fd, operation):  # Lustre mounted without -o flock
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", flock_not_implemented)
    with locking.lock_output_dir(str(tmp_path)):
        assert (tmp_path / locking.LOCK_FILE).exists(), "the lock is the file's existence"
        with pytest.raises(UsageError, match=f"is in use by process {os.getpid()} .*no flock.*delete"):
            locking.OutputDirLock(str(tmp_path)).acquire()
    assert not (tmp_path / locking.LOCK_FILE).exists(), "released: the file is gone"
    with locking.lock_output_dir(str(tmp_path)) as lock:
        assert lock is not None, "the next run gets the folder"


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


# ------------------------------------------------------------------------------------------- a user's data files

ROWS = [
    {"text": "1 2 3", "label": "a", "depth": 1},
    {"text": "4 5", "label": "b", "depth": 2},
    {"text": "6 7 8 9", "label": "a", "depth": 3},
]


def jsonl(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def prepare(train_file: Path, depth: bool = True, **flags):
    """What train.py does with `--train_file` (and evaluation files): read, check, and name the labels."""
    from ndr_training import DataArguments, prepare_own_data

    flags.setdefault("depth_column", "depth" if depth else None)
    return prepare_own_data(DataArguments(train_file=str(train_file), **flags))


def refused(path: Path, content, message: str, **flags) -> str:
    """Write `content` (text or bytes) to `path`, check that preparing it as the training file fails in one line
    matching `message` after the file's name, and return the message."""
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(UsageError) as error:
        prepare(path, **flags)
    text = str(error.value)
    assert "\n" not in text, f"one line: {text}"
    assert text.startswith(f"--train_file {path}"), f"the file is named first: {text}"
    assert re.search(message, text), f"{message!r} not in {text!r}"
    return text


def test_malformed_json_names_its_line_and_column(tmp_path):
    content = jsonl(ROWS[:2]) + '{"text": "6", "label": "a" "depth": 3}\n'
    refused(tmp_path / "t.jsonl", content, r"jsonl line 3, column 28: malformed JSON \(Expecting ',' delimiter\)$")


def test_a_json_array_file_that_does_not_parse_names_its_line(tmp_path):
    content = json.dumps(ROWS, indent=1)[:-3] + ",,]"
    refused(tmp_path / "t.json", content, r"json line \d+, column \d+: malformed JSON")


def test_a_json_line_that_is_not_an_object_is_named(tmp_path):
    refused(tmp_path / "t.jsonl", jsonl(ROWS) + '["6", "a"]\n', r"line 4: expected a JSON object per line")


def test_bytes_that_are_not_utf8_are_named_with_their_line(tmp_path):
    bad = jsonl(ROWS[:1]).encode() + b'{"text": "4 \xff 5", "label": "b", "depth": 2}\n' + jsonl(ROWS[2:]).encode()
    refused(tmp_path / "t.jsonl", bad, r"jsonl line 2: column 'text' holds bytes that are not UTF-8")
    bad_csv = b"text,label,depth\n1 2,a,1\n4 \xff 5,b,2\n6,a,3\n"
    refused(tmp_path / "t.csv", bad_csv, r"csv line 3: bytes that are not UTF-8 \(0xff at byte 3 of the line\)")


def test_a_non_utf8_file_is_one_line_with_exit_status_2_from_train_py(tmp_path):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(jsonl(ROWS).encode() + '{"text": "caf\u00e9 1", "label": "a", "depth": 1}\n'.encode("latin-1"))
    result = subprocess.run(
        [sys.executable, str(REPO / "training" / "train.py"), "--train_file", str(bad), "--depth_column", "depth",
         "--output_dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "UnicodeDecodeError" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"train.py: error: --train_file {bad} line 4: column 'text' holds bytes that are not UTF-8; expected UTF-8 "
        "text (save the file as UTF-8)"
    )
    assert not (tmp_path / "run").exists(), "nothing was written"


TWO = jsonl(ROWS[:2])  # two good lines before the one that is not


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("key.jsonl", TWO + '{"label": "b", "depth": 2}\n', r"line 3: column 'text' is missing \(no such key"),
        ("null.jsonl", TWO + '{"text": "6", "label": null, "depth": 3}\n', r"line 3: column 'label' is null"),
        ("short.csv", "text,label,depth\n1 2,a,1\n4 5\n6,b,3\n", r"line 3: column 'label' is empty \(an empty or"),
        ("field.csv", "text,label,depth\n1 2,a,1\n4 5,b,\n6,b,3\n", r"line 3: column 'depth' is empty"),
        ("blank.jsonl", TWO + '{"text": "  ", "label": "b", "depth": 2}\n', r"line 3: column 'text' holds an empty"),
    ],
)
def test_missing_and_null_values_name_the_line_and_the_column(tmp_path, name, content, message):
    refused(tmp_path / name, content, message)


def test_a_missing_column_lists_the_columns_there_are(tmp_path):
    (tmp_path / "t.jsonl").write_text(jsonl(ROWS))
    with pytest.raises(UsageError, match=r"t.jsonl: no column 'level' \(--depth_column\); its columns are \['text'"):
        prepare(tmp_path / "t.jsonl", depth_column="level")


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "str.jsonl",
            TWO + '{"text": "6", "label": "a", "depth": "three"}\n',
            "line 3: column 'depth' holds \"three\";",
        ),
        ("float.jsonl", TWO + '{"text": "6", "label": "a", "depth": 2.5}\n', "line 3: column 'depth' holds 2.5;"),
        ("str.csv", "text,label,depth\n1 2,a,1\n4 5,b,two\n", "line 3: column 'depth' holds 'two';"),
        ("bool.jsonl", TWO + '{"text": "6", "label": "a", "depth": true}\n', "line 3: column 'depth' holds true;"),
    ],
)
def test_a_depth_that_is_not_an_integer_names_its_line_and_value(tmp_path, name, content, message):
    refused(tmp_path / name, content, re.escape(message + " expected an integer"))


def test_whole_numbers_written_as_floats_or_text_are_integer_depths(tmp_path):
    (tmp_path / "t.jsonl").write_text(jsonl(ROWS[:2]) + '{"text": "6", "label": "a", "depth": 3.0}\n')
    data, _, _ = prepare(tmp_path / "t.jsonl")
    assert data["train"]["depth"] == [1, 2, 3] and data["train"].features["depth"].dtype == "int64"


@pytest.mark.parametrize(
    "content, shown",
    [
        (TWO + '{"text": "6", "label": 1.5, "depth": 3}\n', "1.5"),  # with names: a JSON column
        ('{"text": "6", "label": 1, "depth": 3}\n{"text": "7", "label": 1.5, "depth": 3}\n', "1.5"),  # numbers
    ],
)
def test_labels_that_are_not_one_class_are_refused_naming_single_label_classification(tmp_path, content, shown):
    message = refused(tmp_path / "t.jsonl", content, re.escape(f": column 'label' holds {shown}; expected one class"))
    assert "train.py trains single-label classification" in message


def test_a_list_of_labels_is_a_token_task_and_one_of_another_length_says_no_multi_label(tmp_path):
    content = '{"text": "6", "label": [0, 1]}\n{"text": "7", "label": [1]}\n'
    message = refused(
        tmp_path / "t.jsonl", content, re.escape("line 1: 2 labels for 1 words; expected one label per"), depth=False
    )
    assert "train.py trains no multi-label classification" in message, message


def test_a_token_task_with_a_depth_column_is_refused_naming_the_flag(tmp_path):
    content = '{"text": "6 7", "label": [0, 1], "depth": 3}\n{"text": "7", "label": [1], "depth": 3}\n'
    message = refused(tmp_path / "t.jsonl", content, re.escape(": --depth_column is for one label per text"))
    assert "one label per word" in message, message


def test_whole_number_labels_are_classes_however_they_are_written(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        '{"text": "6", "label": 1.0}\n{"text": "7", "label": 10}\n{"text": "8", "label": 2}\n'
    )
    _, _, label_names = prepare(tmp_path / "t.jsonl", depth=False)
    assert label_names == ["1", "2", "10"], "1.0 is class 1, and numbers sort as numbers"


def test_a_label_seen_only_in_an_evaluation_file_names_the_file_and_line(tmp_path):
    (tmp_path / "train.jsonl").write_text(jsonl(ROWS))
    (tmp_path / "eval.jsonl").write_text(jsonl(ROWS) + jsonl([{"text": "1", "label": "c", "depth": 1}]))
    with pytest.raises(UsageError, match=re.escape(
        f"--validation_file {tmp_path / 'eval.jsonl'}: labels ['c'] never occur in the training data (the first at "
        "line 4), whose labels are ['a', 'b']"
    )):  # fmt: skip
        prepare(tmp_path / "train.jsonl", validation_file=str(tmp_path / "eval.jsonl"))


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.jsonl", "", ": the file is empty"),
        ("header.csv", "text,label,depth\n", ": the file holds no rows"),
        ("blank.jsonl", "\n\n\r\n", ": the file holds no rows"),
        ("array.json", "[]", ": the file holds no rows"),
    ],
)
def test_an_empty_split_is_refused(tmp_path, name, content, message):
    refused(tmp_path / name, content, re.escape(message))


def test_an_empty_dataset_split_is_refused():
    import datasets
    from ndr_training import DataArguments, standard_columns

    empty = datasets.Dataset.from_dict({"text": [], "label": []})
    with pytest.raises(UsageError, match="split 'test' of --dataset_name d: the split is empty"):
        standard_columns(empty, "split 'test' of --dataset_name d", DataArguments())


def test_a_class_label_of_minus_one_is_a_split_without_answers(tmp_path):
    import datasets
    from ndr_training import DataArguments, standard_columns

    features = datasets.Features(text=datasets.Value("string"), label=datasets.ClassLabel(names=["no", "yes"]))
    split = datasets.Dataset.from_dict({"text": ["a b", "b a"], "label": [1, -1]}, features=features)
    with pytest.raises(
        UsageError, match=r"split 'test' of --dataset_name glue row 1: column 'label' holds -1 \(no class"
    ):
        standard_columns(split, "split 'test' of --dataset_name glue", DataArguments())


def test_parquet_rows_are_named_by_their_index(tmp_path):
    import datasets

    rows = ROWS[:2] + [{"text": "6", "label": None, "depth": 3}]
    datasets.Dataset.from_list(rows).to_parquet(tmp_path / "t.parquet")
    with pytest.raises(UsageError, match=r"t.parquet row 2: column 'label' has no value"):
        prepare(tmp_path / "t.parquet")


def test_a_value_of_another_type_after_the_reader_s_first_block_is_found(tmp_path):
    # the csv reader fixes column types on its first 10,000 rows (pandas on pieces of ~1 MB), and a later odd value
    # used to stop it with a cast error
    lines = [f"{i % 7} {i % 5},{'ab'[i % 2]},{i % 4}" for i in range(300_000)]
    (tmp_path / "t.csv").write_text("text,label,depth\n" + "\n".join(lines) + "\n9 9,a,x\n")
    refused(tmp_path / "t.csv", (tmp_path / "t.csv").read_bytes(), re.escape("line 300002: column 'depth' holds 'x'"))


def test_harmless_variants_read_as_the_plain_file(tmp_path):
    (tmp_path / "plain.jsonl").write_text(jsonl(ROWS))
    plain, _, plain_labels = prepare(tmp_path / "plain.jsonl")
    crlf_bom_blank = b"\xef\xbb\xbf" + jsonl(ROWS).replace("\n", "\r\n").encode() + b"\r\n\n  \n"
    extra_columns = jsonl([{**row, "notes": {"free": ["form"]}, "id": i} for i, row in enumerate(ROWS)])
    csv_text = "\ufeffid,text,label,depth,notes\r\n" + "".join(
        f'{i},{row["text"]},{row["label"]},{row["depth"]},"a, b"\r\n' for i, row in enumerate(ROWS)
    ) + "\r\n\r\n"  # fmt: skip
    for name, content in [("bom.jsonl", crlf_bom_blank), ("extra.jsonl", extra_columns), ("all.csv", csv_text)]:
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        data, _, labels = prepare(path)
        assert data["train"].to_list() == plain["train"].to_list() and labels == plain_labels, name


def test_words_pandas_would_read_as_missing_stay_text_in_a_csv(tmp_path):
    (tmp_path / "t.csv").write_text("text,label\nNA 1,None\nnull 2,NA\nnan 3,None\n")
    data, _, labels = prepare(tmp_path / "t.csv", depth=False)
    assert data["train"]["text"] == ["NA 1", "null 2", "nan 3"] and labels == ["NA", "None"]


def test_texts_longer_than_model_max_length_are_kept_whole_and_said(tmp_path, caplog):
    from modeling_ndr import build_tokenizer
    from ndr_training import encode

    rows = ROWS + [{"text": " ".join(["7"] * 600), "label": "b", "depth": 4}]
    (tmp_path / "t.jsonl").write_text(jsonl(rows))
    data, sources, label_names = prepare(tmp_path / "t.jsonl")
    tokenizer = build_tokenizer(texts=data["train"]["text"])
    with caplog.at_level(logging.WARNING):
        encoded = encode(data, tokenizer, {name: i for i, name in enumerate(label_names)}, sources)
    assert len(encoded["train"][3]["input_ids"]) == 602, "not truncated: the answer may depend on every token"
    assert (
        f"--train_file {tmp_path / 't.jsonl'}: 1 texts are longer than the tokenizer's model_max_length of 512 tokens "
        "([BOS] and [EOS] included; the longest has 602, the first is at line 4)"
    ) in caplog.text
    assert "indexing errors" not in caplog.text, "transformers' warning (wrong for this model) is not shown"


# ---------------------------------------------------------------------------------------- half-written checkpoints

TINY_RUN = [
    "--hidden_size", "16", "--intermediate_size", "16", "--num_attention_heads", "1", "--num_hidden_layers", "2",
    "--per_device_train_batch_size", "4", "--learning_rate", "3e-3", "--eval_strategy", "no", "--save_steps", "2",
    "--use_cpu", "true", "--disable_tqdm", "true", "--report_to", "none", "--seed", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def train_script():
    from scripts import load_script

    return load_script("training/train.py", "ndr_train_reliability")


@pytest.fixture(scope="module")
def checkpointed_run(train_script, tmp_path_factory):
    """A real tiny run of 4 steps with checkpoints at steps 2 and 4."""
    folder = tmp_path_factory.mktemp("checkpoints")
    rows = [{"text": f"{a} {b}", "label": str((a + b) % 2)} for a in range(4) for b in range(4)]
    (folder / "train.jsonl").write_text(jsonl(rows))
    argv = ["--train_file", str(folder / "train.jsonl"), "--max_steps", "4", "--output_dir", str(folder / "run")]
    train_script.main(argv + TINY_RUN)
    assert not (folder / "run" / locking.LOCK_FILE).exists(), "the run's lock is released when it ends"
    return folder


@pytest.fixture
def run_copy(checkpointed_run, tmp_path):
    """A copy of the tiny run to break."""
    import shutil

    shutil.copytree(checkpointed_run / "run", tmp_path / "run")
    return tmp_path / "run"


def half_write(checkpoint: Path, how: str) -> None:
    """What a crash while `Trainer._save_checkpoint` writes leaves (it writes trainer_state.json last)."""
    if how == "weights removed":
        (checkpoint / "model.safetensors").unlink()
    elif how == "weights truncated":
        data = (checkpoint / "model.safetensors").read_bytes()
        (checkpoint / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif how == "optimizer truncated":
        data = (checkpoint / "optimizer.pt").read_bytes()
        (checkpoint / "optimizer.pt").write_bytes(data[: len(data) // 3])
    elif how == "no scheduler, no state":
        (checkpoint / "scheduler.pt").unlink()
        (checkpoint / "trainer_state.json").unlink()


HALF_WRITTEN = {
    "weights removed": "model.safetensors is missing",
    "weights truncated": "model.safetensors cannot be read",
    "optimizer truncated": "optimizer.pt cannot be read",
    "no scheduler, no state": "trainer_state.json is missing",
}


def test_a_real_checkpoint_is_complete(checkpointed_run):
    from ndr_training.checkpoints import checkpoint_problem

    for step in (2, 4):
        assert checkpoint_problem(str(checkpointed_run / "run" / f"checkpoint-{step}")) is None


@pytest.mark.parametrize("how", HALF_WRITTEN)
def test_resume_auto_skips_a_half_written_checkpoint_naming_it(run_copy, how, caplog):
    from ndr_training import check_resume

    half_write(run_copy / "checkpoint-4", how)
    with caplog.at_level(logging.WARNING):
        assert check_resume("auto", str(run_copy)) == str(run_copy / "checkpoint-2")
    assert f"skipping {run_copy / 'checkpoint-4'}, an incomplete checkpoint ({HALF_WRITTEN[how]}" in caplog.text


@pytest.mark.parametrize("how", HALF_WRITTEN)
def test_an_explicit_half_written_checkpoint_is_a_one_line_error(run_copy, how):
    from ndr_training import check_resume

    half_write(run_copy / "checkpoint-4", how)
    with pytest.raises(UsageError) as error:
        check_resume(str(run_copy / "checkpoint-4"), str(run_copy))
    assert str(error.value).startswith(f"--resume_from_checkpoint {run_copy / 'checkpoint-4'}: {HALF_WRITTEN[how]}")
    assert "\n" not in str(error.value)


def test_resume_auto_starts_afresh_when_no_checkpoint_is_complete(run_copy, caplog):
    from ndr_training import check_resume

    half_write(run_copy / "checkpoint-4", "weights removed")
    half_write(run_copy / "checkpoint-2", "optimizer truncated")
    with caplog.at_level(logging.WARNING):
        assert check_resume("auto", str(run_copy)) is None
    assert "checkpoint-4" in caplog.text and "checkpoint-2" in caplog.text, "both are named"


def test_a_run_resumed_past_a_half_written_checkpoint_trains_on_from_the_last_complete_one(
    train_script, checkpointed_run, run_copy, caplog
):
    half_write(run_copy / "checkpoint-4", "weights truncated")
    argv = ["--train_file", str(checkpointed_run / "train.jsonl"), "--max_steps", "6", "--output_dir", str(run_copy)]
    with caplog.at_level(logging.INFO):
        train_script.main(argv + TINY_RUN + ["--resume_from_checkpoint", "auto"])
    assert f"resuming from {run_copy / 'checkpoint-2'}" in caplog.text
    assert "optimizer keeps" not in caplog.text, "resumed with the settings it was trained with: no warning"
    state = json.loads((run_copy / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    from ndr_training.checkpoints import checkpoint_problem

    assert checkpoint_problem(str(run_copy / "checkpoint-4")) is None, "step 4 was trained and saved again, whole"


def test_a_learning_rate_or_weight_decay_given_on_resume_is_named_as_not_applied(
    train_script, checkpointed_run, run_copy, caplog
):
    import torch

    argv = ["--train_file", str(checkpointed_run / "train.jsonl"), "--max_steps", "6", "--output_dir", str(run_copy)]
    changed = ["--learning_rate", "1e-3", "--weight_decay", "0.05", "--resume_from_checkpoint", "auto"]
    with caplog.at_level(logging.WARNING):
        train_script.main(argv + TINY_RUN + changed)  # the later --learning_rate wins over TINY_RUN's 3e-3
    checkpoint = run_copy / "checkpoint-4"
    assert (
        f"--resume_from_checkpoint {checkpoint}: --learning_rate 0.001 (the checkpoint's optimizer keeps 0.003)"
        in (caplog.text)
    )
    assert "--weight_decay 0.05 (the checkpoint's optimizer keeps 0.01)" in caplog.text
    assert f"(--model_name_or_path {checkpoint})" in caplog.text
    # what the warning says: the Trainer trained on with the checkpoint's settings, not the ones given
    groups = torch.load(run_copy / "checkpoint-6" / "optimizer.pt", weights_only=True)["param_groups"]
    assert groups[0]["initial_lr"] == pytest.approx(3e-3) and groups[0]["weight_decay"] == pytest.approx(0.01)


def test_problem_types_train_py_does_not_train_are_refused_before_training(train_script, checkpointed_run, tmp_path):
    argv = ["--train_file", str(checkpointed_run / "train.jsonl"), "--max_steps", "1", "--output_dir", str(tmp_path)]
    with pytest.raises(UsageError, match="--config_overrides problem_type='regression': train.py trains single-label"):
        train_script.main(argv + TINY_RUN + ["--config_overrides", "problem_type=regression"])


def test_overwrite_output_dir_is_refused_saying_why(train_script, tmp_path):
    with pytest.raises(UsageError, match="--overwrite_output_dir is gone from transformers 5, and train.py never "):
        train_script.main(["--preset", "ctl_cpu", "--output_dir", str(tmp_path), "--overwrite_output_dir"])


# ------------------------------------------------------------------- exports, releases, dataset repositories


def folder_bytes(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_an_interrupted_export_leaves_the_previous_export_whole(run_copy, monkeypatch):
    from modeling_ndr.training import export

    before = folder_bytes(run_copy / "export")
    assert "model.safetensors" in before and "README.md" in before

    def card_fails(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C after the weights were written

    monkeypatch.setattr(export, "build_model_card", card_fails)
    with pytest.raises(KeyboardInterrupt):
        export.export_model(str(run_copy), str(run_copy / "export"))
    assert folder_bytes(run_copy / "export") == before, "the old export, byte for byte"
    assert not [p.name for p in run_copy.iterdir() if p.name.startswith(".export.")], "no half-written sibling left"


def test_a_completed_export_replaces_the_previous_one(run_copy):
    from modeling_ndr.training import export

    (run_copy / "export" / "stale.json").write_text("{}")  # a file an older export wrote and this one does not
    export.export_model(str(run_copy), str(run_copy / "export"), repo_id="me/new-name")
    assert not (run_copy / "export" / "stale.json").exists(), "the new export alone"
    assert "me/new-name" in (run_copy / "export" / "README.md").read_text()


def test_an_export_never_replaces_a_folder_of_yours(train_script, checkpointed_run, run_copy, tmp_path):
    from modeling_ndr.training import export

    clone = tmp_path / "my-hub-clone"
    (clone / ".git").mkdir(parents=True)
    (clone / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    with pytest.raises(
        UsageError, match=r"my-hub-clone: the folder holds files this command does not write \(.git/HEAD"
    ):
        export.export_model(str(run_copy), str(clone))
    argv = ["--train_file", str(checkpointed_run / "train.jsonl"), "--max_steps", "1", "--export_dir", str(clone)]
    with pytest.raises(UsageError, match=r"--export_dir .*my-hub-clone: the folder holds files"):
        train_script.main(argv + ["--output_dir", str(tmp_path / "run")] + TINY_RUN)
    assert not (tmp_path / "run" / "checkpoint-1").exists(), "refused before training"
    assert (clone / ".git" / "HEAD").exists()


def test_an_interrupted_release_build_leaves_the_previous_release(run_copy, tmp_path):
    from scripts import load_script

    make_model_repos = load_script("hub_cards/make_model_repos.py", "ndr_make_model_repos_reliability")
    models = tmp_path / "models"
    make_model_repos._copy_release("ndr-tiny", str(run_copy), "org", str(models))
    before = folder_bytes(models / "ndr-tiny")
    with pytest.raises(SystemExit, match="over the 0 MB budget"):  # a failure after every file was copied
        make_model_repos._copy_release("ndr-tiny", str(run_copy), "other-org", str(models), max_bytes=1)
    assert folder_bytes(models / "ndr-tiny") == before and sorted(p.name for p in models.iterdir()) == ["ndr-tiny"]


def test_an_interrupted_dataset_build_leaves_the_previous_repository(tmp_path, monkeypatch):
    from scripts import load_script

    make_dataset_repos = load_script("hub_cards/make_dataset_repos.py", "ndr_make_dataset_repos_reliability")
    sizes = {"n_train": 300, "n_eval": 40, "cache_dir": str(tmp_path / "cache")}
    folder = Path(make_dataset_repos.write_repo("listops", str(tmp_path / "repos"), **sizes))
    before = folder_bytes(folder)

    def card_fails(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(make_dataset_repos, "write_card", card_fails)
    with pytest.raises(OSError, match="No space left"):
        make_dataset_repos.write_repo("listops", str(tmp_path / "repos"), seed=1, **sizes)
    assert folder_bytes(folder) == before, "the previous splits and card, not a mix of seeds"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["ndr-listops"]


def test_evaluate_model_names_the_line_of_a_bad_row(tmp_path):
    from scripts import load_script

    evaluate_model = load_script("training/evaluate_model.py", "ndr_evaluate_model_reliability")
    (tmp_path / "e.jsonl").write_text('{"text": "1 2", "label": "a"}\n\n{"text": "3", "label": null}\n')
    model = str(REPO / "hub_cards" / "models" / "ndr-ctl-forward")
    with pytest.raises(UsageError, match=r"--file .*e.jsonl line 3: column 'label' is null"):
        evaluate_model.main([model, "--file", str(tmp_path / "e.jsonl")])
