"""How fast each candidate for realrun's message integrity runs here, before choosing one.

Every candidate authenticates one buffer of N bytes with a 256-bit key, streaming it from the
array's own memory (no copy), as realrun/auth.py would over a PUSH or a pulled value:

- HMAC-SHA256 (hashlib; what realrun signed every frame with until issue 36),
- BLAKE2b keyed (hashlib),
- Poly1305 with a one-time key (the ``cryptography`` package; ChaCha20-Poly1305's MAC),
- GMAC: AES-256-GCM over additional data only (``cryptography``, AES-NI + CLMUL),
- BLAKE3 keyed (the ``blake3`` package), on one thread and on every core,
- ZeroMQ CURVE (libsodium inside libzmq): one message of N bytes sent and received over TCP
  loopback with CURVE on, against the same with it off; CURVE encrypts and authenticates.

GB/s is N / wall time, median of ``--runs``; CPU time (this process, zmq's I/O threads
included) is reported beside wall time, so a candidate that only looks fast by using more
cores shows it. A missing package is reported, not fatal.

    python benchmarks/bench_auth_candidates.py [--sizes-mb 4 64] [--runs 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import zmq

KEY = os.urandom(32)


@dataclass(frozen=True)
class Row:
    """One candidate at one size: medians over the runs."""

    candidate: str
    size_mb: float
    gbps: float
    wall_ms: float
    cpu_ms: float
    cpu_gbps: float  # N / CPU time: what the candidate costs, whatever the load
    min_gbps: float
    max_gbps: float


def _hmac_sha256(view: memoryview) -> bytes:
    return hmac.new(KEY, view, "sha256").digest()


def _blake2b(view: memoryview) -> bytes:
    return hashlib.blake2b(view, key=KEY, digest_size=32).digest()


def _macs() -> dict[str, Callable[[memoryview], bytes] | str]:
    """Each candidate's function, or why it cannot run here."""
    out: dict[str, Callable[[memoryview], bytes] | str] = {
        "HMAC-SHA256 (hashlib)": _hmac_sha256,
        "BLAKE2b keyed (hashlib)": _blake2b,
    }
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.poly1305 import Poly1305

        def poly1305(view: memoryview) -> bytes:
            p = Poly1305(KEY)  # one-time key: a real use derives it per message (ChaCha20)
            p.update(view)
            return p.finalize()

        def gmac(view: memoryview) -> bytes:
            enc = Cipher(algorithms.AES(KEY), modes.GCM(os.urandom(12))).encryptor()
            enc.authenticate_additional_data(view)
            enc.finalize()
            return enc.tag

        out["Poly1305 (cryptography)"] = poly1305
        out["GMAC AES-256-GCM (cryptography)"] = gmac
    except ImportError as e:
        out["Poly1305 (cryptography)"] = out["GMAC AES-256-GCM (cryptography)"] = str(e)
    try:
        import blake3

        out["BLAKE3 keyed, 1 thread"] = lambda v: blake3.blake3(v, key=KEY).digest()
        out["BLAKE3 keyed, all cores"] = lambda v: blake3.blake3(
            v, key=KEY, max_threads=blake3.blake3.AUTO
        ).digest()
    except ImportError as e:
        out["BLAKE3 keyed, 1 thread"] = out["BLAKE3 keyed, all cores"] = str(e)
    return out


class ZmqLoop:
    """One message of N bytes pushed and pulled over TCP loopback, CURVE on or off."""

    def __init__(self, curve: bool) -> None:
        self.ctx = zmq.Context()
        self.rx = self.ctx.socket(zmq.PULL)
        self.tx = self.ctx.socket(zmq.PUSH)
        if curve:
            server_public, server_secret = zmq.curve_keypair()
            client_public, client_secret = zmq.curve_keypair()
            self.rx.curve_server = True
            self.rx.curve_secretkey = server_secret
            self.tx.curve_serverkey = server_public
            self.tx.curve_publickey = client_public
            self.tx.curve_secretkey = client_secret
        port = self.rx.bind_to_random_port("tcp://127.0.0.1")
        self.tx.connect(f"tcp://127.0.0.1:{port}")

    def __call__(self, view: memoryview) -> bytes:
        self.tx.send(view, copy=False)
        return self.rx.recv(copy=False).buffer[:0].tobytes()

    def close(self) -> None:
        self.tx.close(linger=0)
        self.rx.close(linger=0)
        self.ctx.term()


def _time(fn: Callable[[memoryview], bytes], view: memoryview, runs: int) -> Row:
    fn(view)  # warm up (page faults, a connection's handshake)
    walls, cpus = [], []
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        fn(view)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    wall = statistics.median(walls)
    gb = view.nbytes / 1e9
    return Row(
        "",
        view.nbytes / 1e6,
        gb / wall,
        wall * 1e3,
        statistics.median(cpus) * 1e3,
        gb / max(statistics.median(cpus), 1e-9),
        gb / max(walls),
        gb / min(walls),
    )


def measure(sizes_mb: list[float], runs: int) -> tuple[list[Row], dict[str, str]]:
    """Rows for every candidate that runs here, and why the others did not."""
    rows: list[Row] = []
    missing: dict[str, str] = {}
    macs = _macs()
    for mb in sizes_mb:
        array = np.ones(int(mb * 1e6) // 4, dtype=np.float32)
        view = memoryview(array).cast("B")
        for name, fn in macs.items():
            if isinstance(fn, str):
                missing[name] = fn
                continue
            rows.append(_with_name(_time(fn, view, runs), name))
        for curve in (False, True):
            loop = ZmqLoop(curve)
            try:
                name = f"zmq TCP send+recv, CURVE {'on' if curve else 'off'}"
                rows.append(_with_name(_time(loop, view, runs), name))
            finally:
                loop.close()
    return rows, missing


def _with_name(row: Row, name: str) -> Row:
    return Row(name, *list(asdict(row).values())[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[4, 64])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per candidate (median)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    rows, missing = measure(args.sizes_mb, args.runs)
    print(
        f"{'candidate':<36} {'size':>6} {'GB/s':>7} {'wall ms':>8} {'CPU ms':>8} {'GB/CPU-s':>8} "
        f"{'min-max GB/s':>14}   (medians of {args.runs})"
    )
    for r in rows:
        print(
            f"{r.candidate:<36} {r.size_mb:>4g}MB {r.gbps:>7.2f} {r.wall_ms:>8.2f} "
            f"{r.cpu_ms:>8.2f} {r.cpu_gbps:>8.2f} {r.min_gbps:>6.2f}-{r.max_gbps:<7.2f}"
        )
    for name, why in missing.items():
        print(f"{name}: not measured ({why})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "runs": args.runs,
                    "zmq": zmq.zmq_version(),
                    "rows": [asdict(r) for r in rows],
                    "missing": missing,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
