"""A TCP proxy in front of a real server (storage, the control plane's HTTP), to
make a network fault at a chosen moment: `trip(after, mode)` lets `after` more
bytes through towards the server, then either cuts every connection and refuses
new ones (`cut`: the storage is unreachable) or stops forwarding, holding the
connections open (`stall`: a transfer hangs). `heal()` makes it pass again."""

import socket
import threading

from tests.support.services import free_port


class TcpProxy:
    def __init__(self, target_port, host="127.0.0.1"):
        self.target = (host, target_port)
        self.port = free_port()
        self.listener = socket.create_server((host, self.port))
        self.lock = threading.Lock()
        self.flowing = threading.Event()
        self.flowing.set()
        self.mode, self.budget, self.sent, self.conns = None, None, 0, set()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def trip(self, after, mode="cut"):
        with self.lock:
            self.budget, self.mode = self.sent + after, mode

    def heal(self):
        with self.lock:
            self.budget, self.mode = None, None
        self.flowing.set()

    @property
    def tripped(self):
        return not self.flowing.is_set()

    def close(self):
        self.closed = True
        self.listener.close()
        self.flowing.set()
        self._drop_all()

    # --- inside -----------------------------------------------------------------

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.tripped and self.mode == "cut":
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False),
                             daemon=True).start()

    def _pump(self, src, dst, upward):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upward:
                    data = self._count(data)
                self.flowing.wait()
                if self.closed or data is None:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                self._drop(s)

    def _count(self, data):
        """The bytes allowed through; None when the trip cut the connection."""
        with self.lock:
            self.sent += len(data)
            over = self.budget is not None and self.sent >= self.budget
        if not over:
            return data
        if self.mode == "cut":
            self.flowing.clear()
            self._drop_all()
            return None
        self.flowing.clear()  # stall: this and every later byte waits for heal()
        return data

    def _drop(self, s):
        with self.lock:
            self.conns.discard(s)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()

    def _drop_all(self):
        with self.lock:
            conns = list(self.conns)
        for s in conns:
            self._drop(s)
