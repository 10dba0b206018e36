"""One run per output folder: `train.py` locks its `output_dir` before it reads a checkpoint or writes anything, so a
second run started on the same folder stops at once, in one line naming the folder and the run that holds it, instead
of writing checkpoints, logs and the export into the first run's folder.

The lock is `filelock.FileLock` (an `flock` on `output_dir/.ndr-run.lock`): the kernel releases it when the holding
process ends, however it ends (`kill -9` included), so a lock can never outlive its run. The file also holds the
holder's pid, host and start time, for the message; a file left behind by a run that died (`kill -9`, a lost node) is
taken over with a warning, and a live process on this host named in it keeps the folder even where `flock` succeeds
without locking. On file systems without `flock` the lock is `filelock.SoftFileLock`, the file's existence:
filelock takes over a file left by an ended process of this host, and a run on another host keeps the folder until
its lock file is deleted.
"""

import contextlib
import datetime
import errno
import json
import logging
import os
import socket
from collections.abc import Iterator

import filelock

from modeling_ndr.training.atomic import process_running
from modeling_ndr.training.errors import UsageError


logger = logging.getLogger(__name__)
LOCK_FILE = ".ndr-run.lock"
# flock's answers on a file system that has no file locks (Lustre without -o flock, NFS without a lock daemon)
NO_FLOCK = (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP)
# How long a contender tries before it gives up: long enough to ride out a holder's release (it unlinks the file, then
# unlocks it; filelock then tries the new file), short enough that a busy folder is refused at once.
RETRY_SECONDS = 0.2


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (Linux `/proc`), to tell it from a later process that
    got the same pid; None where it cannot be read (another system, or no such process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name (field 2) may hold spaces and brackets: count fields after its closing bracket
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def process_alive(pid: int, start: str | None = None) -> bool:
    """Whether process `pid` runs on this host (and, if `start` is given and readable, is the one that started then).

    Args:
        pid: a process id.
        start: the process's start time as `_process_start` reads it, or None to check the pid alone.

    Returns:
        True if the process exists (a process of another user counts as alive).
    """
    if not process_running(pid):
        return False
    now = _process_start(pid)
    return start is None or now is None or now == start


def _holder_text(holder: dict) -> str:
    """`process 1234 on host gpu-3 (started 2026-11-24 10:02:11)` from a lock file's contents."""
    started = f" (started {holder['started']})" if holder.get("started") else ""
    return f"process {holder.get('pid', '?')} on host {holder.get('host', '?')}{started}"


def _read_holder(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", errors="replace")
    try:
        holder = json.loads(text) if text.strip() else {}
    except ValueError:
        holder = {}
    return holder if isinstance(holder, dict) else {}


def _read_holder_file(path: str) -> dict:
    """The holder recorded in the lock file at `path` ({} if there is none yet, or no file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return {}
    try:
        return _read_holder(fd)
    finally:
        os.close(fd)


class OutputDirLock:
    """The lock of one run on its output folder (use `lock_output_dir`, a context manager).

    Args:
        output_dir: the run's output folder (created if missing; removed again on release if the run left it empty).
        flag: the words that name the folder in an error, e.g. `--output_dir`.
    """

    def __init__(self, output_dir: str, flag: str = "--output_dir"):
        self.output_dir = output_dir
        self.flag = flag
        self.path = os.path.join(output_dir, LOCK_FILE)
        self.fd: int | None = None  # the lock file's descriptor while a native lock is held (filelock's)
        self.created_dir = False
        self._lock: filelock.BaseFileLock | None = None

    def acquire(self) -> "OutputDirLock":
        """Take the lock, or raise a one-line `UsageError` naming the folder and the process that holds it."""
        if not os.path.isdir(self.output_dir):
            try:
                os.makedirs(self.output_dir)
                self.created_dir = True
            except FileExistsError:
                pass
            except OSError as error:
                raise UsageError(f"{self.flag} {self.output_dir}: cannot create it ({error.strerror})") from None
        try:
            self._lock = self._flock()
        except UsageError:
            self._remove_dir_if_we_made_it()
            raise
        return self

    def _flock(self) -> filelock.BaseFileLock:
        lock = filelock.FileLock(self.path, timeout=RETRY_SECONDS, thread_local=False, on_acquired=self._claim)
        try:
            lock.acquire(poll_interval=RETRY_SECONDS / 10)
        except filelock.Timeout:
            holder = _read_holder_file(self.path)
            raise UsageError(self._busy_message(holder)) from None
        except OSError as error:
            if error.errno in NO_FLOCK:
                return self._soft_lock(error)
            raise UsageError(f"{self.flag} {self.output_dir}: cannot write a lock file there ({error})") from None
        return lock

    def _claim(self, fd: int) -> None:
        """filelock's `on_acquired`, with the locked file: check the holder it names, if any, then name this run."""
        holder = _read_holder(fd)
        if holder:
            self._check_left_behind(holder)  # raising here makes filelock give the lock up again
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(sep=" ", timespec="seconds"),
            "process_start": _process_start(os.getpid()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        os.fsync(fd)
        self.fd = fd

    def _soft_lock(self, error: OSError) -> filelock.SoftFileLock:
        """Where the file system has no `flock` (`error`): the existence of the lock file (`filelock.SoftFileLock`),
        which records its own holder."""
        with contextlib.suppress(OSError):
            if os.path.getsize(self.path) == 0:
                os.unlink(self.path)  # the empty file the flock attempt created
        lock = filelock.SoftFileLock(self.path, timeout=RETRY_SECONDS, thread_local=False)
        try:
            lock.acquire(poll_interval=RETRY_SECONDS / 10)
        except filelock.Timeout:
            raise UsageError(
                f"{self.flag} {self.output_dir} is in use by process {lock.pid} (this file system has no flock: "
                f"{error.strerror}); if that run is gone, delete {self.path}"
            ) from None
        return lock

    def _check_left_behind(self, holder: dict) -> None:
        """A lock file that names a process although we got the lock: take it over, unless that process is alive on
        this host (where `flock` succeeds without locking anything)."""
        pid, same_host = holder.get("pid"), holder.get("host") == socket.gethostname()
        if same_host and process_alive(pid, holder.get("process_start")) and pid != os.getpid():
            raise UsageError(self._busy_message(holder))
        logger.warning(
            "%s %s: taking over the lock left behind by %s, which is no longer running (a run that was killed or "
            "crashed); its checkpoints stay, and --resume_from_checkpoint auto resumes from them",
            self.flag, self.output_dir, _holder_text(holder),
        )  # fmt: skip

    def _busy_message(self, holder: dict) -> str:
        # (a process the holder forked, a data-loader worker, does not keep the lock: filelock closes the lock file in
        # a forked child)
        holder_text = _holder_text(holder) if holder else "another process (no pid recorded yet)"
        return (
            f"{self.flag} {self.output_dir} is in use by {holder_text}: wait for that run to end, stop it, or choose "
            "another --output_dir"
        )

    def _remove_dir_if_we_made_it(self) -> None:
        if self.created_dir:
            with contextlib.suppress(OSError):
                os.rmdir(self.output_dir)  # only if the run left it empty

    def release(self) -> None:
        """Delete the lock file and release the lock (a no-op if not held)."""
        if self._lock is None:
            return
        if self.fd is not None:
            # Unlink before unlocking, so a run waiting for the folder never keeps a lock on a file that is going away
            # (filelock retries on the file at the path). A soft lock deletes its file itself.
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self._lock.release()
        self._lock = self.fd = None
        self._remove_dir_if_we_made_it()


@contextlib.contextmanager
def lock_output_dir(
    output_dir: str, enabled: bool = True, flag: str = "--output_dir"
) -> Iterator[OutputDirLock | None]:
    """Hold the lock of `output_dir` for the body of a `with` block; released when the block ends, normally or by an
    exception (and by the kernel if the process dies).

    Under DDP only the processes that write the folder take the lock (`enabled=training_args.should_save`): the other
    ranks share the run's folder with their main process and must not fail on its lock.

    Args:
        output_dir: the run's output folder.
        enabled: False to take no lock (the non-main ranks of a distributed run).
        flag: the words that name the folder in an error.

    Returns:
        A context manager yielding the held `OutputDirLock` (None when not enabled). Entering it raises a one-line
        `UsageError` if a live run holds the folder.
    """
    if not enabled:
        yield None
        return
    lock = OutputDirLock(output_dir, flag).acquire()
    try:
        yield lock
    finally:
        lock.release()
