"""`berthctl shell`: a shell in an environment's ERP container, `odoo shell` on its
database, or one command, over the control plane's WebSocket (docs/shell.md).

On a terminal it is interactive (raw mode, the window's size followed); with input
or output redirected, plain pipes: input to its end, error output to stderr. The
exit code is the command's, as with ssh; 255 when the session ended without one."""

import json
import os
import signal
import ssl
import sys
import threading

import click

from berthctl.commands import ID
from berthctl.errors import SERVER, CliError

INPUT, OUTPUT, ERROR = 0, 1, 2
NO_EXIT_CODE = 255  # as ssh says a connection lost


@click.command("shell", context_settings={"ignore_unknown_options": True})
@click.argument("env_id", type=ID)
@click.option("--odoo", is_flag=True, help="`odoo shell` on the environment's database.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def shell(state, env_id, odoo, command):
    """A shell in the environment's ERP container, or COMMAND (after `--`)."""
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    opened = state.client.post(f"/environments/{env_id}/shell-sessions", {
        "odoo": odoo, "command": list(command) or None, "tty": tty})
    raise SystemExit(Session(state.client.url, opened, tty).run())


class Session:
    def __init__(self, url, opened, tty):
        self.url = url.replace("http", "ws", 1) + opened["stream_path"]
        self.ticket, self.tty = opened["ticket"], tty
        self.exit_code, self.error = None, None

    def _size(self):
        try:
            size = os.get_terminal_size(sys.stdout.fileno())
            return {"rows": size.lines, "cols": size.columns}
        except OSError:
            return {}

    def run(self):
        from websockets.exceptions import ConnectionClosed
        from websockets.sync.client import connect

        context = ssl.create_default_context() if self.url.startswith("wss") else None
        try:
            ws = connect(self.url, ssl=context, open_timeout=30, max_size=None)
        except (OSError, ValueError) as exc:
            raise CliError(f"The shell's stream could not be opened: {exc}", SERVER) from None
        with ws:
            ws.send(json.dumps({"ticket": self.ticket, **(self._size() if self.tty else {})}))
            with _raw(self.tty):
                if self.tty:
                    signal.signal(signal.SIGWINCH, lambda *_: self._resize(ws))
                threading.Thread(target=self._pump_input, args=(ws,), daemon=True).start()
                try:
                    for message in ws:
                        self._received(message)
                except ConnectionClosed:
                    pass
        if self.error is not None:
            click.echo(f"berthctl: {self.error['message']} ({self.error['code']})", err=True)
        return NO_EXIT_CODE if self.exit_code is None else self.exit_code & 0xFF

    def _received(self, message):
        if isinstance(message, bytes):
            out = sys.stderr if message[:1] == bytes([ERROR]) else sys.stdout
            out.buffer.write(message[1:])
            out.buffer.flush()
            return
        said = json.loads(message)
        if said.get("type") == "exit":
            self.exit_code = said.get("exit_code")
        elif said.get("type") == "error":
            self.error = said

    def _resize(self, ws):
        try:
            ws.send(json.dumps({"type": "resize", **self._size()}))
        except Exception:  # the stream is ending
            pass

    def _pump_input(self, ws):
        """Standard input to the session, as it comes; its end said (pipes only)."""
        fd = sys.stdin.fileno()
        try:
            while True:
                data = os.read(fd, 4096)
                if not data:
                    if not self.tty:
                        ws.send(json.dumps({"type": "eof"}))
                    return
                ws.send(bytes([INPUT]) + data)
        except Exception:  # the stream ended under us
            return


class _raw:
    """The terminal in raw mode while the session runs (keys go as typed: Ctrl-C to
    the remote side), restored after whatever happens."""

    def __init__(self, on):
        self.on, self.saved = on, None

    def __enter__(self):
        if self.on:
            import termios
            import tty

            self.saved = termios.tcgetattr(sys.stdin.fileno())
            tty.setraw(sys.stdin.fileno())
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self.saved)


COMMANDS = [shell]
