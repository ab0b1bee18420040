"""An emulated network link in user space: a TCP relay on 127.0.0.1 in front of a server, for
kernels without the netem qdisc. It relays bytes, so TLS (and HTTP/2 by ALPN) passes through
untouched.

    with LinkRelay(nginx.port, delay_ms=40, rate_mbit=20) as relay:
        ... fetch https://127.0.0.1:<relay.port>/...

or from a shell (prints the listening port on its first line, runs until SIGTERM/SIGINT):

    python3 scripts/benchmarks/link_relay.py TARGET_PORT --delay-ms 40 --rate-mbit 20

LinkRelay runs the relay as a subprocess (this file), so its event loop does not share a GIL with
the caller; with `--exit-on-stdin-eof` (which LinkRelay passes) it also ends when its parent dies.

The model. Each direction (client->server, server->client) is ONE pipe shared by all connections,
like one radio link:
  - serialization: bytes read from a socket (up to CHUNK at a time) depart in arrival order;
    a chunk's departure ends at max(now, end of the previous departure in that direction)
    + its size * 8 / rate (1 Mbit = 10^6 bits; payload bytes only);
  - propagation: a chunk is written to the other side `delay_ms` after its departure ends, i.e.
    when its last byte would have arrived (a chunk arrives in one piece);
  - bottleneck queue: a direction takes no new bytes while its not-yet-serialized backlog exceeds
    `queue_ms` (default one RTT, i.e. one bandwidth-delay product), and a connection's direction
    takes none while its read-but-undelivered bytes exceed 2 * BDP + 64 KiB (a receiver that does
    not read). Instead of dropping, the relay stops reading, so the sender feels back-pressure
    (the relay's sockets have a small fixed receive buffer, so the kernel does not hide it); the
    relay's memory stays bounded;
  - connection setup: a client's connect() to the relay returns at once (t0); the relay connects
    upstream at t0 + delay (the SYN's arrival) and starts reading the client's bytes at
    t0 + 2 * delay (the SYN-ACK's arrival), so a request sent right after connecting reaches the
    server at t0 + 3 * delay and its answer the client at t0 + 4 * delay: two RTTs, as on a real
    link. Server-first bytes (a banner) leave at t0 + delay. A refused upstream connect resets
    the client at t0 + 2 * delay;
  - closing: an EOF (FIN) travels like a zero-length chunk behind the bytes before it, and is
    delivered as shutdown(SHUT_WR) of the other side (half-close is kept); once both directions
    delivered their EOF, both sockets are closed. A reset is delivered as an abort of the other
    side after the bytes before it; a failed write aborts both sides at once.

Not modelled: loss, reordering, jitter; TCP's own dynamics over the link (slow start, congestion
window, receive-window limits, ACK clocking), since the relay terminates TCP on loopback on both
sides (a new connection gets the full rate in its first RTT, where real TCP would need a few RTTs
of slow start to fill the 200 kB BDP of 20 Mbit/s x 80 ms); header and ACK overhead (a real
20 Mbit/s link carries ~3.5% less payload); asymmetric rates (both directions get `rate_mbit`);
the client's connect() time (~0 here; the handshake's RTT is charged to its first bytes instead,
so totals are right); UDP (QUIC). Delivery is quantized to CHUNK-sized reads (16 KiB = 6.6 ms at
20 Mbit/s).
"""
import argparse
import asyncio
import collections
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

CHUNK = 16 * 1024
SOCKET_BUFFER = 128 * 1024  # SO_RCVBUF of the relay's sockets (the kernel doubles it)
EOF = "eof"
RESET = "reset"


class Link:
    """One direction of the link, shared by all connections: when its current departure ends, and
    the readers waiting for room in its queue, admitted one at a time in FIFO order (round robin)."""

    def __init__(self, rate_bytes, queue_s):
        self.rate_bytes = rate_bytes  # bytes/s; 0: no serialization limit
        self.queue_s = queue_s
        self.busy_until = 0.0
        self.bytes = 0
        self.waiters = collections.deque()
        self.timer = None

    def depart(self, now, size):
        start = max(now, self.busy_until)
        if self.rate_bytes:
            self.busy_until = start + size / self.rate_bytes
            return self.busy_until
        return start

    def room_at(self):
        """When the not-yet-serialized backlog is back under the queue limit."""
        return self.busy_until - self.queue_s

    async def admit(self):
        loop = asyncio.get_running_loop()
        if not self.waiters and self.room_at() <= loop.time():
            return
        waiter = loop.create_future()
        self.waiters.append(waiter)
        self.schedule(loop)
        await waiter

    def schedule(self, loop):
        if self.timer is None and self.waiters:
            self.timer = loop.call_at(max(loop.time(), self.room_at()), self.grant, loop)

    def grant(self, loop):
        self.timer = None
        while self.waiters and self.waiters[0].done():
            self.waiters.popleft()  # cancelled
        if not self.waiters:
            return
        if self.room_at() <= loop.time():
            self.waiters.popleft().set_result(None)
            # the admitted reader runs first (its wake-up is queued before this) and, if it has
            # bytes, moves busy_until on; then the next waiter's turn is reconsidered
            self.timer = loop.call_soon(self.grant, loop)
        else:
            self.schedule(loop)


class Direction:
    """One connection's bytes in one direction: (due, data|EOF|RESET), in order."""

    def __init__(self, name):
        self.name = name
        self.items = collections.deque()
        self.arrived = asyncio.Event()
        self.drained = asyncio.Event()
        self.pending = 0


class Teardown(Exception):
    pass


class Relay:
    def __init__(self, target_host, target_port, delay_ms, rate_mbit, queue_ms=None, verbose=False):
        self.target = (target_host, target_port)
        self.delay = delay_ms / 1000.0
        rate_bytes = rate_mbit * 1e6 / 8 if rate_mbit and rate_mbit > 0 else 0
        queue_s = (2 * self.delay if queue_ms is None else queue_ms / 1000.0)
        if rate_bytes:
            queue_s = max(queue_s, 2 * CHUNK / rate_bytes)  # room for a chunk or two, or the link idles
        self.up = Link(rate_bytes, queue_s)
        self.down = Link(rate_bytes, queue_s)
        bdp = rate_bytes * 2 * self.delay if rate_bytes else 4 * 1024 * 1024
        self.pending_limit = int(2 * bdp + 64 * 1024)
        self.verbose = verbose
        self.connections = set()
        self.count = 0
        self.server = None

    def log(self, *args):
        if self.verbose:
            print("link_relay: %.3f" % time.monotonic(), *args, file=sys.stderr, flush=True)

    async def listen(self, host, port=0):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)  # accepted sockets inherit it
        sock.bind((host, port))
        self.server = await asyncio.start_server(self.handle, sock=sock, limit=CHUNK, backlog=512)
        return sock.getsockname()[1]

    async def connect_upstream(self):
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, self.target)
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock, limit=CHUNK)

    async def handle(self, client_reader, client_writer):
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        # no Nagle: a chunk is written when due, not when the previous one is acknowledged (asyncio
        # sets TCP_NODELAY only on sockets made with proto=IPPROTO_TCP, and accept() gives proto 0)
        client_writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.count += 1
        cid = self.count
        task = asyncio.current_task()
        self.connections.add(task)
        upstream_writer = None
        try:
            await asyncio.sleep(self.delay)  # the SYN travels
            try:
                upstream_reader, upstream_writer = await self.connect_upstream()
            except OSError as e:
                self.log("#%d upstream connect failed: %s" % (cid, e))
                await asyncio.sleep(self.delay)  # the RST travels back
                abort(client_writer)
                return
            self.log("#%d connected" % cid)
            up, down = Direction("#%d up" % cid), Direction("#%d down" % cid)
            tasks = [asyncio.ensure_future(c) for c in (
                self.pump_in(client_reader, self.up, up, t0 + 2 * self.delay),
                self.pump_out(up, upstream_writer),
                self.pump_in(upstream_reader, self.down, down, 0.0),
                self.pump_out(down, client_writer))]
            try:
                done, _ = await asyncio.wait(tasks[1::2], return_when=asyncio.FIRST_EXCEPTION)
                for t in done:
                    t.result()
                for t in tasks[0::2]:
                    await t
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            self.log("#%d closed" % cid)
        except (Teardown, OSError, asyncio.CancelledError) as e:
            # a cancelled handler returns normally: asyncio 3.11's start_server callback would
            # log task.exception()'s CancelledError as an error
            self.log("#%d torn down: %r" % (cid, e))
            abort(client_writer)
            abort(upstream_writer)
        finally:
            self.connections.discard(task)
            for w in (client_writer, upstream_writer):
                if w is not None:
                    w.close()

    async def pump_in(self, reader, link, direction, start_at):
        """Reads a socket into `direction`, stamping each chunk with its due time on `link`."""
        loop = asyncio.get_running_loop()
        wait = start_at - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        while True:
            while direction.pending >= self.pending_limit:
                direction.drained.clear()
                await direction.drained.wait()
            await link.admit()
            try:
                data = await reader.read(CHUNK)
            except OSError:
                data = RESET
            now = loop.time()
            if isinstance(data, bytes) and data:
                due = link.depart(now, len(data)) + self.delay
                link.bytes += len(data)
                direction.pending += len(data)
            else:
                data = data or EOF
                due = max(now, link.busy_until) + self.delay
            if self.verbose > 1:
                self.log("read %s %s due +%.1f ms" % (
                    direction.name, len(data) if isinstance(data, bytes) else data, (due - now) * 1000))
            direction.items.append((due, data))
            direction.arrived.set()
            if not isinstance(data, bytes):
                return

    async def pump_out(self, direction, writer):
        """Writes `direction`'s chunks to the other side at their due times."""
        loop = asyncio.get_running_loop()
        while True:
            while not direction.items:
                direction.arrived.clear()
                await direction.arrived.wait()
            due, data = direction.items[0]
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            direction.items.popleft()
            if self.verbose > 1:
                self.log("write %s %s late %.1f ms" % (
                    direction.name, len(data) if isinstance(data, bytes) else data, (loop.time() - due) * 1000))
            if data is EOF:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            if data is RESET:
                raise Teardown("reset")
            writer.write(data)
            await writer.drain()
            direction.pending -= len(data)
            direction.drained.set()

    async def close(self):
        if self.server is not None:
            self.server.close()
        for t in list(self.connections):
            t.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)


def abort(writer):
    if writer is None:
        return
    try:
        writer.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
    except (OSError, AttributeError):
        pass
    writer.transport.abort()


async def serve(args):
    loop = asyncio.get_running_loop()
    relay = Relay(args.host, args.target_port, args.delay_ms, args.rate_mbit, args.queue_ms, args.verbose)
    port = await relay.listen(args.host, args.port)
    print(port, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.exit_on_stdin_eof:
        def stdin_readable():
            if not os.read(0, 4096):
                loop.remove_reader(0)
                stop.set()
        loop.add_reader(0, stdin_readable)
    await stop.wait()
    await relay.close()
    relay.log("%d connections, %d bytes up, %d bytes down" % (relay.count, relay.up.bytes, relay.down.bytes))


def main(argv=None):
    p = argparse.ArgumentParser(description="A TCP relay that emulates a link (delay, shared rate) in front of "
                                            "TARGET_PORT; prints its listening port on the first line.")
    p.add_argument("target_port", type=int)
    p.add_argument("--delay-ms", type=float, default=40, help="one-way delay (default 40)")
    p.add_argument("--rate-mbit", type=float, default=20, help="rate of each direction, 0 = unlimited (default 20)")
    p.add_argument("--queue-ms", type=float, default=None,
                   help="bottleneck queue of each direction, in ms of link time (default: one RTT)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and of the target")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: any free one)")
    p.add_argument("--exit-on-stdin-eof", action="store_true", help="end when stdin closes (the parent died)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log connections (-vv: chunks) to stderr")
    args = p.parse_args(argv)
    asyncio.run(serve(args))


class LinkRelay:
    """The relay as a subprocess: `.start()` (or `with`), `.port`, `.stop()`."""

    def __init__(self, target_port, delay_ms=40, rate_mbit=20, host="127.0.0.1", queue_ms=None, verbose=False):
        self.args = [str(target_port), "--delay-ms", str(delay_ms), "--rate-mbit", str(rate_mbit), "--host", host,
                     "--exit-on-stdin-eof"]
        if queue_ms is not None:
            self.args += ["--queue-ms", str(queue_ms)]
        if verbose:
            self.args.append("--verbose")
        self.host = host
        self.port = None
        self.proc = None

    def start(self, timeout=10):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)] + self.args,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = b""
        deadline = time.monotonic() + timeout
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                self.stop()
                raise RuntimeError("link_relay did not print its port within %d s" % timeout)
            b = os.read(self.proc.stdout.fileno(), 64)
            if not b:
                code = self.proc.wait()
                raise RuntimeError("link_relay exited (%s) before printing its port" % code)
            line += b
        self.port = int(line.decode())
        return self

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()
        self.proc = None

    def cpu_seconds(self):
        """User + system CPU time the relay used so far (Linux)."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":
    main()
