"""An unpacked filestore put on the disk before it is swapped in.

`flush` is what makes it certain: every file and directory under a path fsync'd,
many at once (the filesystem's journal commits them together). Not syncfs(2),
which would also wait for every other write on the filesystem: the database
loading beside it, and on a shared server the other environments'.

`Early` starts that work while tar is still unpacking: each file tar has moved
past is fsync'd on a few threads, so that the disk writes the first files while
the last ones unpack. Left alone, the kernel holds a gigabyte of written files in
memory until the final flush, which then waited seconds for all of it (the
benchmark's restore: 3.1 s after a 6.6 s unpack). It is best effort: a name it
cannot find, or one it had no room to queue, is left to `flush`."""

import contextlib
import os
import queue
import shutil
import stat
import threading

THREADS = 16  # fsyncs at once: a journal commit carries many
QUEUED = 10_000  # names waiting for a thread; past that, left to the final flush


def _sync(path, directories=False):
    """fsync `path` if it is a regular file (or, with `directories`, a directory);
    links are not followed, and nothing else is opened (a FIFO's open waits for a
    writer, a device's may do anything)."""
    kind = stat.S_IFMT(os.lstat(path).st_mode)
    if kind != stat.S_IFREG and not (directories and kind == stat.S_IFDIR):
        return
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if stat.S_IFMT(os.fstat(fd).st_mode) == kind:  # still what lstat saw
            os.fsync(fd)
    finally:
        os.close(fd)


def flush(path):
    """The files and directories under `path` on disk."""
    from concurrent.futures import ThreadPoolExecutor

    names, dirs = [], [str(path)]
    while dirs:  # regular files and directories only
        names.append(dirs.pop())
        with os.scandir(names[-1]) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    dirs.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    names.append(entry.path)
    with ThreadPoolExecutor(THREADS, thread_name_prefix="berth-flush") as pool:
        for _ in pool.map(lambda name: _sync(name, directories=True), names):
            pass


class Early:
    """fsync, on THREADS threads, each member tar reports finished (`finished`, its
    name as listed: relative to `root`); `close()` when tar is done."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.names = queue.Queue(QUEUED)
        self.threads = [threading.Thread(target=self._work, name="berth-flush", daemon=True)
                        for _ in range(THREADS)]
        for thread in self.threads:
            thread.start()

    def finished(self, name):
        if not name.endswith(b"/"):  # a directory's own entries come later
            with contextlib.suppress(queue.Full):
                self.names.put_nowait(name)

    def _work(self):
        while (name := self.names.get()) is not None:
            path = os.path.normpath(os.path.join(self.root, os.fsdecode(name)))
            if path.startswith(self.root + os.sep):  # never a file outside it
                with contextlib.suppress(OSError, ValueError):
                    _sync(path)

    def close(self):
        """Drop what is still queued (the final flush does it), let the fsyncs under
        way end."""
        with contextlib.suppress(queue.Empty):
            while True:
                self.names.get_nowait()
        for _ in self.threads:
            self.names.put(None)
        for thread in self.threads:
            thread.join()


def new_filestore(env_dir):
    """An empty filestore.new beside the live filestore, owned and permitted as it
    is (the ERP's user writes into it), as the environment's folder is when there is
    none."""
    new, live = env_dir / "filestore.new", env_dir / "filestore"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir()
    st = os.stat(live) if live.exists() else None
    owner = st or os.stat(env_dir)
    os.chown(new, owner.st_uid, owner.st_gid)
    os.chmod(new, st.st_mode & 0o7777 if st else 0o755)
    return new
