"""Join a tandem gateway as a co-located trainer, from any Python training loop.

Standard library only. The gateway lends the device to training while serving has
headroom and takes it back when latency budgets tighten; this client speaks its protocol
(docs/coloc-protocol.md) so that a loop needs one call per step::

    import tandem_coloc

    with tandem_coloc.Trainer("/run/user/1000/tandem/coloc.sock", name="resnet",
                              max_streams=4, memory_bytes=8 << 30) as coloc:
        for step, (x, y) in enumerate(loader):
            coloc.step()                       # blocks while paused; obeys the duty cycle
            torch.set_num_threads(coloc.max_streams)   # on a CPU: threads
            ...                                # forward, backward, optimizer step
            coloc.report(step=step, samples_per_second=rate, loss=loss.item())

Directives are acknowledged at the step boundary where they take effect. If the gateway
goes away the loop keeps running, unconstrained, and the client joins it again when it is
back (a restarted gateway takes its trainers back).
"""

import json
import os
import socket
import threading
import time

PROTOCOL_VERSION = 1
MAX_LINE = 64 * 1024
# Between attempts to rejoin a gateway that went away: from the first to the last, doubling.
REJOIN_FIRST = 0.2
REJOIN_LAST = 5.0


class Directive:
    """The gateway's latest word: how much of the device training may use."""

    def __init__(self, fields):
        self.seq = int(fields.get("seq", 0))
        self.allowance = float(fields.get("allowance", 1.0))
        self.max_streams = int(fields.get("max_streams", 1))
        self.memory_limit_bytes = int(fields.get("memory_limit_bytes", 0))
        self.duty_cycle = float(fields.get("duty_cycle", 1.0))
        self.pause = bool(fields.get("pause", False))
        self.ack_within_ms = int(fields.get("ack_within_ms", 0))
        self.reason = str(fields.get("reason", ""))

    def __repr__(self):
        return (f"Directive(seq={self.seq}, allowance={self.allowance:.2f}, "
                f"streams={self.max_streams}, pause={self.pause}, reason={self.reason!r})")


class Trainer:
    """A context manager: connects on entry, closes on exit."""

    def __init__(self, path, name="python-trainer", max_streams=1, memory_bytes=0,
                 device="cpu", timeout=5.0):
        self.path = path
        self.name = name
        self._max_streams = int(max_streams)
        self._memory_bytes = int(memory_bytes)
        self.device = device
        self.timeout = timeout
        self.trainer_id = None
        self.heartbeat = 1.0
        self._cond = threading.Condition()
        self._directive = Directive({"max_streams": max_streams,
                                     "memory_limit_bytes": memory_bytes})
        self._applied = 0
        # Added to the sequence numbers of the connection in force: each connection numbers
        # its directives from 1, and the loop must see them keep rising across a rejoin.
        self._seq_offset = 0
        self._connected = False
        self._closed = False
        self._sock = None
        self._send_lock = threading.Lock()
        self._last_step = None
        self._last_report = 0.0
        self._report = {"step": 0, "samples_per_second": 0.0, "loss": 0.0}

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self):
        self.connect()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def connect(self):
        self._join()
        threading.Thread(target=self._read_loop, name="tandem-coloc", daemon=True).start()

    def _join(self):
        """Says hello on a fresh connection and waits for the welcome."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
            hello = {"type": "hello", "version": PROTOCOL_VERSION, "name": self.name,
                     "pid": os.getpid(), "device": self.device,
                     "max_streams": self._max_streams, "memory_bytes": self._memory_bytes}
            sock.sendall(json.dumps(hello, separators=(",", ":")).encode() + b"\n")
            file = sock.makefile("rb")
            welcome = self._read(file)
            if not welcome or welcome.get("type") != "welcome":
                raise ConnectionError(f"expected a welcome from the gateway, got {welcome!r}")
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        self._sock, self._file = sock, file
        self.trainer_id = welcome.get("trainer_id")
        self.heartbeat = max(welcome.get("heartbeat_ms", 1000), 1) / 1000.0
        self._connected = True

    def close(self):
        self._closed = True
        self._connected = False
        self._drop_socket()
        with self._cond:
            self._cond.notify_all()

    def _drop_socket(self):
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                # Wakes the reader thread if it is blocked on the socket.
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    # -- what the loop uses --------------------------------------------------------

    @property
    def directive(self):
        with self._cond:
            return self._directive

    @property
    def max_streams(self):
        """Streams (threads on a CPU) the step may use."""
        return max(1, min(self._max_streams, self.directive.max_streams))

    @property
    def memory_limit_bytes(self):
        """Device memory the step may hold (shrink the micro-batch to fit)."""
        return self.directive.memory_limit_bytes

    @property
    def paused(self):
        return self.directive.pause

    def step(self):
        """Call at every step boundary: acks new directives, blocks while paused, and
        sleeps as much as the duty cycle asks (relative to the last step's length)."""
        now = time.monotonic()
        d = self.directive
        duty = max(0.01, min(1.0, d.duty_cycle))
        if self._last_step is not None and duty < 1.0:
            busy = now - self._last_step
            self._idle(busy * (1.0 - duty) / duty, d)
        d = self.directive
        if d.seq > self._applied:
            self._ack(d)
        while self._connected and self.directive.pause:
            # The pause may have come after `d` was read above: ack it before waiting, or
            # the gateway would hear of it only a heartbeat later.
            d = self.directive
            if d.seq > self._applied:
                self._ack(d)
            self._heartbeat(force=True, samples_per_second=0.0)
            with self._cond:
                if self._directive is d:
                    self._cond.wait(timeout=self.heartbeat)
        d = self.directive
        if d.seq > self._applied:
            self._ack(d)
        self._heartbeat()
        self._last_step = time.monotonic()

    def report(self, step, samples_per_second, loss, **extra):
        """Progress for the gateway's metrics; sent at least every heartbeat."""
        self._report = dict(step=int(step), samples_per_second=float(samples_per_second),
                            loss=float(loss), **extra)
        self._heartbeat()

    # -- internals ------------------------------------------------------------------

    def _idle(self, seconds, d):
        """Sleeps `seconds` of the duty cycle, cut short by a directive other than `d`: a
        pause must be acknowledged within its deadline, which a long idle would overrun."""
        until = time.monotonic() + seconds
        with self._cond:
            while self._directive is d and self._connected:
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=left)

    def _ack(self, d):
        self._applied = d.seq
        if d.seq <= self._seq_offset:
            return  # a directive of a connection that has ended
        streams = 0 if d.pause else self.max_streams
        memory = 0 if d.pause else min(self._memory_bytes, d.memory_limit_bytes)
        self._send({"type": "ack", "seq": d.seq - self._seq_offset, "streams": streams,
                    "memory_bytes": memory})

    def _heartbeat(self, force=False, **override):
        now = time.monotonic()
        if force or now - self._last_report >= self.heartbeat / 2:
            self._last_report = now
            self._send(dict(self._report, type="report", **override))

    def _send(self, message):
        sock = self._sock
        if sock is None or not self._connected:
            return
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._send_lock:
            try:
                sock.sendall(line)
            except OSError:
                self._connected = False

    def _read(self, file=None):
        line = (file or self._file).readline(MAX_LINE + 1)
        if not line:
            return None
        if len(line) > MAX_LINE:
            raise ConnectionError("line from the gateway is too long")
        return json.loads(line)

    def _read_loop(self):
        while True:
            self._read_directives()
            self._drop_socket()
            # The gateway is gone: train unconstrained (a new number, so the loop takes
            # it; the next connection's count starts after it), and try to join again.
            self._connected = False
            with self._cond:
                seq = self._directive.seq + 1
                self._directive = Directive({"seq": seq, "max_streams": self._max_streams,
                                             "memory_limit_bytes": self._memory_bytes})
                self._seq_offset = seq
                self._cond.notify_all()
            wait = REJOIN_FIRST
            while True:
                time.sleep(wait)
                if self._closed:
                    return
                try:
                    self._join()
                    break
                except (OSError, ValueError, ConnectionError):
                    wait = min(wait * 2, REJOIN_LAST)
            if self._closed:
                self.close()
                return

    def _read_directives(self):
        try:
            while self._connected:
                msg = self._read()
                if msg is None:
                    break
                if msg.get("type") == "directive":
                    d = Directive(msg)
                    with self._cond:
                        d.seq += self._seq_offset
                        self._directive = d
                        self._cond.notify_all()
        except (OSError, ValueError, ConnectionError):
            pass
