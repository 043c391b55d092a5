"""Bytes this process has sent over its TCP connections to its peers, read from the kernel.

Each connected TCP socket of the process (found under ``/proc/self/fd``) is asked for
``TCP_INFO``; its ``tcpi_bytes_acked`` (Linux 4.1+) counts the payload bytes the peer has
acknowledged, so the sum is what really crossed the wire from this rank, whatever library
(gloo inside DDP or FSDP) sent it. Connections to ``skip_port`` (the job's store: reports,
heartbeats) are left out. Read twice, the difference is the traffic in between.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct

TCP_INFO_LEN = 232
BYTES_ACKED_OFFSET = 120  # struct tcp_info: after 8 bytes of u8, 24 u32 and 2 u64 fields


def sent_bytes(skip_port: int | None = None) -> int:
    """Payload bytes acknowledged by the peers of every TCP connection of this process."""
    total = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError, ValueError):
            fd = int(name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            total += _acked(fd, skip_port)
    return total


def _acked(fd: int, skip_port: int | None) -> int:
    s = socket.socket(fileno=os.dup(fd))
    try:
        if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
            return 0
        try:
            peer = s.getpeername()
        except OSError:  # a listening socket
            return 0
        if skip_port is not None and peer[1] == skip_port:
            return 0
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
        if len(info) < BYTES_ACKED_OFFSET + 8:
            return 0
        return struct.unpack_from("Q", info, BYTES_ACKED_OFFSET)[0]
    finally:
        s.close()  # closes the dup only: the connection lives on through the original fd
