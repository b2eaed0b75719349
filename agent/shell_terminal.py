"""`berth-agent shell` over SSH (agent/over_ssh.py): a shell session's exec
(agent/shell.py) on this process's own streams, the SSH session's terminal or its
pipes."""

import os
import select
import signal
import termios
import threading

from agent.shell import CHUNK, ShellExec

CANNOT_START = 125  # `berth-agent shell`'s exit code when the exec did not start (as docker's)


def on_terminal(docker, environment_id, cmd, tty, stdin=0, stdout=1, stderr=2):
    """`berth-agent shell` over SSH: the exec's streams on this process's own, until
    the command ends; its exit code. With a terminal (an SSH session's), that
    terminal in raw mode meanwhile, its size given to the exec and followed
    (SIGWINCH); without, the error output apart and standard input's end passed on.
    The SSH session's end (SIGHUP, SIGTERM, or the reader of our output gone) hangs
    the exec up: nothing it started outlives the session."""
    from tty import setraw

    seen = {"hung": False, "resized": False}

    def on_signal(signum, _frame):  # only flags: the work is done below, not in a handler
        seen["resized" if signum == signal.SIGWINCH else "hung"] = True

    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGWINCH):
        signal.signal(sig, on_signal)
    terminal = tty and os.isatty(stdin)
    saved = termios.tcgetattr(stdin) if terminal else None
    if terminal:
        # Keys (^C included) go to the exec as typed, its output unchanged; set now,
        # what is typed meanwhile is kept (not flushed) and waits for the exec.
        setraw(stdin, termios.TCSANOW)
    try:
        return _pump(docker, environment_id, cmd, tty, terminal, seen, stdin, stdout, stderr)
    finally:
        if terminal:
            try:
                termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
            except termios.error:
                pass  # the terminal is gone


def _pump(docker, environment_id, cmd, tty, terminal, seen, stdin, stdout, stderr):

    try:
        session = ShellExec(docker, environment_id, cmd, tty, *_size(stdin, terminal))
    except Exception as exc:  # the container is not running, no engine, ...
        end = "\r\n" if terminal else "\n"  # a raw terminal adds no carriage return
        os.write(stderr, f"berth-agent shell: {exc}{end}".encode())
        return CANNOT_START
    finished = threading.Event()
    size, size_lock = [_size(stdin, terminal)], threading.Lock()

    def follow_size():
        with size_lock:
            now = _size(stdin, terminal)
            if now != size[0]:
                size[0] = now
                session.resize(*now)

    def copy_out():
        try:
            for is_err, data in session.output():
                _write_all(stderr if is_err else stdout, data)
        except OSError:  # our output's reader is gone
            seen["hung"] = True
        finally:
            finished.set()

    def copy_in():
        while True:
            try:
                data = os.read(stdin, CHUNK)
            except OSError:
                data = b""
            if not data:
                if terminal:
                    seen["hung"] = True  # a terminal ends only when the session does
                else:
                    session.eof()
                return
            if terminal:
                # sshd sets a new size before it writes what was sent after it: taken
                # here, it is the exec's before those bytes are (SIGWINCH may come later).
                follow_size()
            session.write(data)

    def watch():
        """The session's end as our output sees it: its reader closed (a pipe's
        POLLERR, a socket's or a terminal's POLLHUP), even while nothing is written."""
        poller = select.poll()
        poller.register(stdout, 0)  # errors and hang-ups are reported whatever the mask
        while not finished.is_set():
            if any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(1000)):
                seen["hung"] = True
                return

    for work in (copy_out, copy_in, watch):
        threading.Thread(target=work, name="berth-shell", daemon=True).start()
    while not finished.wait(0.1) and not seen["hung"]:
        if seen["resized"]:
            seen["resized"] = False
            follow_size()
    if not finished.is_set():
        session.hang_up()
        return 128 + signal.SIGHUP
    code = session.exit_code()
    session.close()
    return 255 if code is None else code


def _size(fd, terminal):
    """(rows, cols) of the terminal `fd`; (0, 0) without one."""
    if not terminal:
        return 0, 0
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 0, 0
    return size.lines, size.columns


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
