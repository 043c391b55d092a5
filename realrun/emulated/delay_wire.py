"""The cable of an emulated host: a process that carries frames between two TAP devices, late.

Each emulated host's NIC is a TAP pair: ``eth0`` in the host's namespace and ``h<i>`` on the
switch's bridge. This process holds both, and hands every frame read from one to the other
``delay`` seconds after it arrived, in both directions; that delay is the host's one-way NIC
latency. It exists because the kernel has no ``sch_netem`` (see ``realrun.emulated.shaping``). Rate
is
not its business: HTB on each tap's egress has already paced the frames it reads, so what it
holds is at most rate x delay bytes, and a FIFO per direction suffices because every frame
of a direction waits the same time.

The taps advertise TSO and carry virtio-net headers, so TCP hands over 64 KiB super-frames and
a Gbit/s link costs a few thousand frames a second, which Python moves comfortably. The header
read from one tap is valid as is for the other, so frames are never parsed.

Run as ``python -m realrun.emulated.delay_wire`` inside the host's namespace (``EmulatedCluster``
does).

With ``REALRUN_WIRE_LOG_DIR`` set in the launcher's environment, each wire also keeps, for every
frame it takes, the time it took it (after the sending tap's HTB: when the frame left the shaped
NIC) and the frame's first bytes, and on exit writes ``<dir>/wire-<switch namespace>-<switch
tap>.tsv`` (the namespace names the cluster, the tap the host): one line per TCP frame with its
direction, addresses, ports, sequence and acknowledgement numbers, window field and payload
bytes. Any system's traffic through the emulated cluster (realrun's, MXNet's) is then seen the
same way (benchmarks/wire_timeline.py reads it). Off, it costs one test per frame. A frame the
shaping queue dropped never reaches the wire: it shows only as its retransmission.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import fcntl
import os
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path

# <linux/if_tun.h>
TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUN_F_CSUM = 0x01
TUN_F_TSO4 = 0x02
TUN_F_TSO6 = 0x04
TUN_F_TSO_ECN = 0x08
# <linux/prctl.h>, <sched.h>
PR_SET_TIMERSLACK = 29
CLONE_NEWNET = 0x40000000

# select() with 1 ns timer slack still oversleeps ~50 us on the 2-core CI VM (measured: median
# 31-54 us, p90 48-74 us for 0.1-1 ms timeouts); waking this much early and polling the rest
# keeps the added delay near the hand-off cost at the price of <= 50 us of polling per frame.
WAKE_EARLY_S = 50e-6
WIRE_NICE = -10  # CFS weight ~9.5x a nice-0 process: ahead of the workload, not real-time
READ_BYTES = 1 << 18  # > one 64 KiB TSO frame plus its ethernet and virtio-net headers
READY_LINE = "ready"
WIRE_LOG_VARIABLE = "REALRUN_WIRE_LOG_DIR"
VNET_HDR_BYTES = 10  # struct virtio_net_hdr: IFF_VNET_HDR without TUNSETVNETHDRSZ
ETH_HDR_BYTES = 14
LOGGED_BYTES = VNET_HDR_BYTES + ETH_HDR_BYTES + 60 + 20  # IPv4 and TCP headers, options included
LOG_HEADER = "time_s\tfrom\tsrc\tdst\tsport\tdport\tseq\tpayload\tflags\tack\twindow\n"


def open_tap(name: str) -> int:
    """Attach to the existing TAP device ``name`` in this namespace, with TSO and vnet headers."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), flags))
        fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN)
    except OSError:
        os.close(fd)
        raise
    return fd


def enter_netns(name: str) -> None:
    """Move this (single-threaded) process into the named network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {name}: {os.strerror(errno)}")
    finally:
        os.close(fd)


class DelayWire:
    """Two frame endpoints joined so that each frame arrives ``delay_s`` after it was sent."""

    def __init__(self, fd_a: int, fd_b: int, delay_s: float) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        self.delay_s = delay_s
        self._peer = {fd_a: fd_b, fd_b: fd_a}
        # Per source fd: (due time, frame) in arrival order, so due times are sorted.
        self._queues: dict[int, collections.deque[tuple[float, bytes]]] = {
            fd_a: collections.deque(),
            fd_b: collections.deque(),
        }
        self.frames_carried = 0
        self.frames_dropped = 0
        # (time taken, source fd, frame length, its first LOGGED_BYTES) when logging (module
        # docstring)
        self.log: list[tuple[float, int, int, bytes]] | None = None

    def _deliver_due(self, now: float) -> float | None:
        """Write every frame whose time has come; return seconds until the next one is due."""
        wait: float | None = None
        for src, queue in self._queues.items():
            dst = self._peer[src]
            while queue and queue[0][0] <= now:
                frame = queue.popleft()[1]
                try:
                    os.write(dst, frame)
                    self.frames_carried += 1
                except OSError:
                    # A tap whose far side is down refuses frames (EIO); a real cable
                    # loses them too, and TCP above recovers.
                    self.frames_dropped += 1
            if queue:
                left = queue[0][0] - now
                wait = left if wait is None else min(wait, left)
        return wait

    def _take_arrivals(self, ready: list[int], now: float) -> None:
        due = now + self.delay_s
        for src in ready:
            queue = self._queues[src]
            while True:
                try:
                    frame = os.read(src, READ_BYTES)
                except BlockingIOError:
                    break
                if not frame:
                    break
                queue.append((due, frame))
                if self.log is not None:
                    self.log.append((now, src, len(frame), frame[:LOGGED_BYTES]))

    def run(self, stop_fd: int | None = None) -> None:
        """Carry frames until ``stop_fd`` becomes readable (or forever when it is None)."""
        watched = list(self._queues)
        if stop_fd is not None:
            watched.append(stop_fd)
        while True:
            wait = self._deliver_due(time.monotonic())
            if wait is not None:
                wait = max(0.0, wait - WAKE_EARLY_S)
            ready, _, _ = select.select(watched, [], [], wait)
            if stop_fd is not None and stop_fd in ready:
                return
            self._take_arrivals(ready, time.monotonic())


def main(argv: list[str] | None = None) -> None:
    """Entry point: attach host and switch taps, report ready on stdout, carry frames."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host-dev", required=True, help="tap in the current (host) namespace")
    parser.add_argument("--switch-netns", required=True, help="namespace holding the bridge")
    parser.add_argument("--switch-dev", required=True, help="tap enslaved to the bridge")
    parser.add_argument("--delay-us", type=float, required=True, help="one-way NIC latency")
    args = parser.parse_args(argv)

    libc = ctypes.CDLL(None, use_errno=True)
    # The wire stands for network hardware, which the hosts' CPU load does not slow down: run
    # it ahead of the emulated hosts' processes (PyTorch compute, servers) competing for the
    # same cores. Best effort: without CAP_SYS_NICE it keeps the default priority.
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, WIRE_NICE)
    # The default 50 us timer slack would add up to 50 us to every frame's delay.
    libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)

    host_fd = open_tap(args.host_dev)
    enter_netns(args.switch_netns)
    switch_fd = open_tap(args.switch_dev)
    print(READY_LINE, flush=True)
    # stdin is a pipe from the launcher: it reads EOF when the launcher closes it or dies, even
    # by SIGKILL, so no wire outlives its cluster's owner. (PR_SET_PDEATHSIG would instead fire
    # when the launcher *thread* that started the wire exits.)
    wire = DelayWire(host_fd, switch_fd, args.delay_us * 1e-6)
    log_dir = os.environ.get(WIRE_LOG_VARIABLE)
    if not log_dir:
        wire.run(stop_fd=sys.stdin.fileno())
        return
    wire.log = []
    # The cluster stops its wires with SIGTERM: leave run() through the finally that writes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        wire.run(stop_fd=sys.stdin.fileno())
    finally:
        name = f"wire-{args.switch_netns}-{args.switch_dev}.tsv"
        write_frame_log(Path(log_dir) / name, wire.log, host_fd)


def frame_fields(
    frame: bytes, length: int
) -> tuple[str, str, int, int, int, int, int, int, int] | None:
    """(src, dst, sport, dport, seq, payload bytes, TCP flags, ack, window field) of a TCP/IPv4
    frame of ``length`` bytes whose first bytes are ``frame``, else None."""
    ip = VNET_HDR_BYTES + ETH_HDR_BYTES
    if len(frame) < ip + 20 or frame[ip - 2 : ip] != b"\x08\x00" or frame[ip + 9] != 6:
        return None
    ihl = (frame[ip] & 0x0F) * 4
    tcp = ip + ihl
    if len(frame) < tcp + 20:
        return None
    sport, dport, seq, ack = struct.unpack_from("!HHII", frame, tcp)
    window = struct.unpack_from("!H", frame, tcp + 14)[0]  # unscaled: the scale is in the SYN
    doff = (frame[tcp + 12] >> 4) * 4
    payload = length - tcp - doff  # from the frame's length: a TSO super-frame's IP length may lie
    return (
        socket.inet_ntoa(frame[ip + 12 : ip + 16]),
        socket.inet_ntoa(frame[ip + 16 : ip + 20]),
        sport,
        dport,
        seq,
        payload,
        frame[tcp + 13],
        ack,
        window,
    )


def write_frame_log(path: Path, log: list[tuple[float, int, int, bytes]], host_fd: int) -> None:
    """The frame log as TSV, times as wall-clock seconds (as realrun's message traces);
    ``from`` is "host" (the frame left the host's NIC) or "switch" (it is going into it)."""
    to_wall = time.time() - time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write(LOG_HEADER)
        for t, src, length, head in log:
            fields = frame_fields(head, length)
            if fields is not None:
                side = "host" if src == host_fd else "switch"
                f.write(f"{t + to_wall:.6f}\t{side}\t" + "\t".join(map(str, fields)) + "\n")


if __name__ == "__main__":
    sys.exit(main())
