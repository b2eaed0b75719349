"""The allocated bytes under one directory tree, as `du` counts them (hard
links once, symbolic links not followed), re-walked only when the tree changed.

"Unchanged" is one number per tree (a hash of every directory's path, inode and
mtime), not a copy of the tree, so the agent's memory stays flat however large
the filestore grows; finding it out reads the directories without a stat of any
file. Files added, removed or renamed change their directory; a file rewritten
in place does not, so a tree is walked fully at least every FULL_WALK_S anyway.
A walk pauses PACE_SLEEP_S every PACE_EVERY entries, so it never hogs a core."""

import os
import time

FULL_WALK_S = 6 * 3600
PACE_EVERY, PACE_SLEEP_S = 1000, 0.005
RACY_NS = 2_000_000_000  # a directory changed this close to its walk may change unseen


class Tree:
    """The allocated bytes under one directory, re-walked only when it changed."""

    def __init__(self, path, stop=None):
        self.path, self.stop = path, stop
        self.bytes, self.signature, self.walked_at = None, None, 0.0
        self.walks = 0  # full walks done (tests read it)

    def measure(self):
        """The figure now, or None when the directory does not exist."""
        if not os.path.isdir(self.path):
            self.bytes, self.signature = None, None
            return None
        if (self.signature is None or time.monotonic() - self.walked_at > FULL_WALK_S
                or self._scan(files=False)[1] != self.signature):
            self.bytes, self.signature = self._scan(files=True)
            self.walked_at, self.walks = time.monotonic(), self.walks + 1
        return self.bytes

    def _scan(self, files):
        """(allocated bytes, signature of the directories or None: not to be trusted).
        Without `files`, only directories are looked at: a readdir each, no stat
        of a file (the bytes are then the directories' own)."""
        started_ns = time.time_ns()
        total, signature, seen, count, racy = 0, 0, set(), 0, False
        pending = [self.path]
        while pending:
            path = pending.pop()
            try:
                st = os.stat(path, follow_symlinks=False)
                entries = os.scandir(path)
            except OSError:  # removed meanwhile, or unreadable: not counted
                continue
            total += st.st_blocks * 512
            signature = hash((signature, path, st.st_ino, st.st_mtime_ns))
            # A directory changed within the last seconds may change again unseen
            # (coarse mtimes): the tree is not trusted, so the next pass walks it.
            racy = racy or st.st_mtime_ns >= started_ns - RACY_NS
            with entries:
                for entry in entries:
                    count += 1
                    if count % PACE_EVERY == 0:
                        if self.stop is not None and self.stop.is_set():
                            return self.bytes, None
                        time.sleep(PACE_SLEEP_S)
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                            continue
                        if not files:
                            continue
                        est = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if est.st_nlink > 1:
                        if (est.st_dev, est.st_ino) in seen:
                            continue
                        seen.add((est.st_dev, est.st_ino))
                    total += est.st_blocks * 512
        return total, None if racy else signature
