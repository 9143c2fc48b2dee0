"""A TCP proxy for the tests: forwards to the gateway, and cuts its
connections when told (a dropped connection, a lost answer)."""

from __future__ import annotations

import socket
import threading


class Proxy:
    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        #: Connections accepted so far.
        self.connections = 0
        #: Chunks of request bytes carried to the gateway so far (a request
        #: is one or more).
        self.requests = 0
        self._lose_answers = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def lose_next_answers(self, n: int = 1) -> None:
        """The next `n` answers from the gateway, on whichever connection
        they come, are thrown away and their connection cut: the request
        was carried out, and its caller never hears."""
        with self._lock:
            self._lose_answers += n

    def wait_requests(self, more_than: int, timeout_s: float) -> bool:
        """Whether more than `more_than` request chunks have passed within `timeout_s`."""
        with self._changed:
            return self._changed.wait_for(lambda: self.requests > more_than, timeout_s)

    def cut(self) -> int:
        """Cuts every open connection now; answers how many."""
        with self._lock:
            socks, self._open = self._open, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        return len(socks) // 2

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                downstream.close()
                continue
            with self._lock:
                self.connections += 1
                self._open += [downstream, upstream]
                self._changed.notify_all()
            threading.Thread(target=self._pump, args=(downstream, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, downstream, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    if not answers:
                        self.requests += 1
                        self._changed.notify_all()
                    lose = answers and self._lose_answers > 0
                    if lose:
                        self._lose_answers -= 1
                if lose:
                    # The answer has begun: the request was carried out.
                    # Its caller gets a cut connection instead.
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        with self._lock:
            self._open = [s for s in self._open if s not in (src, dst)]
