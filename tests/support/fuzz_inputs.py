"""A seeded fuzzer for the files users hand to simscale: scenarios and run records.

Each variant is one shipped scenario (or one committed run record) with one mutation from the
classes that once broke the commands (issue 13): a number replaced by something absurd
(negative, zero, 1e308, 5e-324, infinity, NaN, 2**64, a string, a list, a deeply nested list),
a field removed or unknown, a section of the wrong type, and byte-level damage (a YAML alias
bomb, a duplicate key, 1,000 nested brackets, a 5,000-digit integer, invalid UTF-8, a cut-off
file). A fifth of the variants instead move a few numbers to other values *inside* their
ranges, so that the simulator really runs on unusual but valid input.

Run as a script (tests/test_fuzz.py does, in a child process with a memory limit and a per-
variant alarm); it writes a JSON summary of outcomes. A variant's outcome is "ok" (exit 0 with
sane output), "refused" (exit 2 with one ``simscale: error:`` line) or a failure: "traceback"
(any exception escaping the command), "hang" (the alarm fired), "bad-output".

    python tests/support/fuzz_inputs.py scenarios --variants 2000 --seed 0 --out summary.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simscale.cli import main as simscale_main  # noqa: E402
from simscale.report import budget  # noqa: E402

# Predict under the fuzzer may only simulate what its estimate says takes a fraction of a
# second; anything bigger must be refused by the same path that refuses hours-long scenarios.
FUZZ_PREDICT_BUDGET_S = 0.3

NUMERIC_FIELDS = (
    ("cluster", "hosts", 0, "count"),
    ("cluster", "hosts", 0, "gpus_per_host"),
    ("cluster", "hosts", 0, "nic_gbps"),
    ("cluster", "hosts", 0, "latency_us"),
    ("cluster", "hosts", 0, "cpu_cores"),
    ("cluster", "hosts", 0, "workers_per_host"),
    ("cluster", "core_oversubscription"),
    ("cluster", "shared_cpu_cores"),
    ("training", "batch_per_gpu"),
    ("training", "optimizer", "learning_rate"),
    ("training", "optimizer", "momentum"),
    ("kvstore", "servers"),
    ("kvstore", "bigarray_bound"),
    ("kvstore", "send_window_mb"),
    ("kvstore", "gradient_compression", "threshold"),
    ("kvstore", "allreduce", "fusion_mb"),
    ("kvstore", "allreduce", "cycle_ms"),
    ("simulation", "warmup_iterations"),
    ("simulation", "measured_iterations"),
    ("simulation", "stable_tolerance"),
    ("simulation", "seed"),
    ("simulation", "compute_jitter"),
    ("realrun", "dilation"),
    ("realrun", "threads_per_worker"),
    ("model", "arrays", 0, "elements"),
    ("model", "arrays", 0, "fwd_gflops"),
)

WEIRD_VALUES: tuple[Any, ...] = (
    -1,
    0,
    -0.0,
    0.5,
    1e12,
    10**12,
    2**64,
    1e308,
    -1e308,
    5e-324,
    math.inf,
    -math.inf,
    math.nan,
    "fast",
    "1e12",
    "",
    True,
    None,
    [],
    [1, 2],
    {},
    {"a": 1},
)

# Values inside the ranges the schema allows, per field name: the simulator must run on them.
IN_RANGE: dict[str, tuple[Any, ...]] = {
    "count": (1, 2, 3, 5),
    "gpus_per_host": (1, 2, 8, 64),
    "nic_gbps": (0.001, 0.1, 1, 100, 100_000),
    "latency_us": (0, 1, 1000, 1_000_000),
    "cpu_cores": (1, 4096),
    "workers_per_host": (1, 2, 8),
    "core_oversubscription": (1, 3.5, 1000),
    "shared_cpu_cores": (1, 2, 64),
    "batch_per_gpu": (1, 7, 1_000_000),
    "servers": (1, 2),
    "bigarray_bound": (1, 1000, 10**11),
    "send_window_mb": (0, 0.001, 1e6),
    "fusion_mb": (1e-6, 1, 1e6),
    "cycle_ms": (0, 1e6),
    "warmup_iterations": (0, 1),
    "measured_iterations": (1, 2, 4),
    "stable_tolerance": (0, 1),
    "seed": (0, 2**63 - 1),
    "compute_jitter": (0, 0.5, 1),
    "elements": (1, 10**11),
    "fwd_gflops": (0, 1e-9, 1e6),
    "mode": ("dist_sync", "dist_async", "dist_sync_device", "allreduce", "local"),
    "network_model": ("fairshare", "fifo"),
    "precision": ("fp16", "fp32", "amp"),
    "scheduling": ("fifo", "priority"),
}


def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


# ---- scenario variants ----


def _set_path(data: Any, path: tuple[Any, ...], value: Any) -> bool:
    node = data
    for part in path[:-1]:
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return False
        elif not isinstance(node, dict):
            return False
        elif part not in node:
            node[part] = {}
        node = node[part]
    if isinstance(path[-1], int):
        if not isinstance(node, list) or path[-1] >= len(node):
            return False
    elif not isinstance(node, dict):
        return False
    node[path[-1]] = value
    return True


def _dump(data: Any) -> bytes:
    return yaml.safe_dump(data, sort_keys=False).encode()


def _data_mutations(rng: random.Random, data: dict[str, Any]) -> dict[str, Any]:
    """One structural or value mutation of a parsed scenario (a copy)."""
    d = copy.deepcopy(data)
    kind = rng.choice(("weird", "weird", "weird", "delete", "unknown", "section", "mode"))
    if kind == "weird":
        path = rng.choice(NUMERIC_FIELDS)
        _set_path(d, path, rng.choice(WEIRD_VALUES))
    elif kind == "delete":
        section = rng.choice(list(d))
        if isinstance(d[section], dict) and d[section] and rng.random() < 0.5:
            del d[section][rng.choice(list(d[section]))]
        else:
            del d[section]
    elif kind == "unknown":
        section = rng.choice(list(d))
        target = d[section] if isinstance(d[section], dict) else d
        target[rng.choice(("sever", "count ", "nic_gbs", "x" * 200))] = 1
    elif kind == "section":
        d[rng.choice(("cluster", "model", "training", "kvstore", "simulation"))] = rng.choice(
            (None, 7, "text", [1, 2], {"unexpected": True})
        )
    else:
        kv = d.setdefault("kvstore", {})
        if isinstance(kv, dict):
            kv["mode"] = rng.choice(IN_RANGE["mode"])
            kv["placement"] = rng.choice(("colocated", "dedicated"))
            if rng.random() < 0.5:
                d["cluster"]["server_hosts"] = {"count": rng.choice((1, 2)), "nic_gbps": 10}
    return d


def _in_range(rng: random.Random, data: dict[str, Any]) -> dict[str, Any]:
    """A few fields moved to other valid values, iterations kept short."""
    d = copy.deepcopy(data)
    sim = d.setdefault("simulation", {})
    sim["warmup_iterations"] = rng.choice((0, 1))
    sim["measured_iterations"] = rng.choice((1, 2, 3))
    for _ in range(rng.randint(1, 4)):
        path = rng.choice(NUMERIC_FIELDS)
        name = path[-1]
        if name in IN_RANGE:
            _set_path(d, path, rng.choice(IN_RANGE[name]))
    for section, name in (
        ("kvstore", "mode"),
        ("simulation", "network_model"),
        ("training", "precision"),
        ("kvstore", "scheduling"),
    ):
        if rng.random() < 0.2 and isinstance(d.get(section, {}), dict):
            d.setdefault(section, {})[name] = rng.choice(IN_RANGE[name])
    return d


def _byte_mutations(rng: random.Random, text: bytes) -> bytes:
    kind = rng.choice(
        ("bomb", "duplicate", "nested", "digits", "utf8", "truncate", "flip", "huge-line")
    )
    if kind == "bomb":
        return _alias_bomb(rng.choice((6, 9, 12))).encode() + text
    if kind == "duplicate":
        lines = text.splitlines(keepends=True)
        top = [i for i, line in enumerate(lines) if line[:1].isalpha()]
        i = rng.choice(top) if top else 0
        return b"".join([*lines, lines[i]] if top else lines)
    if kind == "nested":
        depth = rng.choice((40, 1000, 100_000))
        return text + b"extra: " + b"[" * depth + b"1" + b"]" * depth + b"\n"
    if kind == "digits":
        return text.replace(b"seed: 0", b"seed: " + b"9" * rng.choice((25, 5000)), 1) + (
            b"" if b"seed: 0" in text else b"name: " + b"7" * 5000 + b"\n"
        )
    if kind == "utf8":
        i = rng.randrange(len(text))
        return text[:i] + rng.choice((b"\xff", b"\xe9", b"\xc3", b"\x00")) + text[i:]
    if kind == "truncate":
        return text[: rng.randrange(len(text))]
    if kind == "flip":
        b = bytearray(text)
        for _ in range(rng.randint(1, 5)):
            b[rng.randrange(len(b))] = rng.choice(b"{}[]:,&*!|>-'\"\n\t 0123456789")
        return bytes(b)
    return text + b"description: " + b"x" * 5_000_000 + b"\n"


OVERRIDES = (
    "cluster.hosts[0].count=1e12",
    "cluster.hosts[0].count=1.0e+12",
    "simulation.seed=-1",
    "training.batch_per_gpu=1.0e+308",
    "cluster.hosts[0].nic_gbps=5.0e-324",
    "cluster.hosts[0].nic_gbps=.inf",
    "kvstore.servers=[[[[1]]]]",
    "cluster.hosts[5].count=2",
    "kvstore=3",
    "simulation.measured_iterations=999999",
    "noequals",
    "a..b=1",
    "cluster.hosts[x]=1",
)


def scenario_variants(seed: int, n: int) -> Iterator[tuple[str, bytes, list[str]]]:
    """``n`` (label, file bytes, --set overrides) variants of the shipped scenarios."""
    rng = random.Random(seed)
    bases = sorted(ROOT.glob("scenarios/**/*.yaml"))
    for i in range(n):
        base = bases[i % len(bases)]
        text = base.read_bytes()
        data = yaml.safe_load(text)
        r = rng.random()
        if r < 0.2:
            yield f"{base.stem}/in-range", _dump(_in_range(rng, data)), []
        elif r < 0.6:
            yield f"{base.stem}/data", _dump(_data_mutations(rng, data)), []
        elif r < 0.9:
            yield f"{base.stem}/bytes", _byte_mutations(rng, text), []
        else:
            yield f"{base.stem}/override", text, [rng.choice(OVERRIDES)]


# ---- record variants ----


def _record_mutation(rng: random.Random, rec: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(rec)
    kind = rng.choice(("scenario", "summary", "iteration", "env", "structure"))
    if kind == "scenario":
        path = rng.choice(NUMERIC_FIELDS)
        _set_path(d["scenario"], path, rng.choice((*WEIRD_VALUES, 10**12)))
    elif kind == "summary" and isinstance(d.get("summary"), dict):
        s = d["summary"]
        s[rng.choice(list(s))] = rng.choice(WEIRD_VALUES)
    elif kind == "iteration" and d.get("iterations"):
        row = rng.choice(d["iterations"])
        row[rng.choice(list(row))] = rng.choice(WEIRD_VALUES)
    elif kind == "env":
        d["environment"][rng.choice(("machine_load", "cpu_count", "dilation"))] = rng.choice(
            (*WEIRD_VALUES, {"cores": 10**12}, {"cores": 1e308})
        )
    else:
        key = rng.choice(list(d))
        if rng.random() < 0.5:
            del d[key]
        else:
            d[key] = rng.choice(WEIRD_VALUES)
    return d


def _json_bytes(d: Any) -> bytes:
    return json.dumps(d, allow_nan=True).encode()


def record_variants(seed: int, n: int) -> Iterator[tuple[str, bytes, list[str]]]:
    """``n`` (label, file bytes, []) variants of the committed run records."""
    rng = random.Random(seed)
    bases = sorted(ROOT.glob("runs/emulated-v2/*.json"))[::5]
    for i in range(n):
        base = bases[i % len(bases)]
        text = base.read_bytes()
        rec = json.loads(text)
        r = rng.random()
        if r < 0.55:
            yield f"{base.stem}/data", _json_bytes(_record_mutation(rng, rec)), []
            continue
        kind = rng.choice(("nested", "digits", "inf", "utf8", "truncate", "flip", "huge"))
        if kind == "nested":
            depth = rng.choice((40, 1000, 100_000))
            mutated = text.replace(b'"error": null', b'"error": ' + b"[" * depth + b"]" * depth)
        elif kind == "digits":
            mutated = text.replace(b'"wall_s": ', b'"wall_s": ' + b"9" * 5000 + b"0", 1)
        elif kind == "inf":
            mutated = text.replace(
                b'"wall_s": ', b'"wall_s": ' + rng.choice((b"Infinity, ", b"NaN, ", b"1e999, ")), 1
            ).replace(b", ,", b",")
        elif kind == "utf8":
            i = rng.randrange(len(text))
            mutated = text[:i] + b"\xff\xfe" + text[i:]
        elif kind == "truncate":
            mutated = text[: rng.randrange(len(text))]
        elif kind == "flip":
            b = bytearray(text)
            for _ in range(rng.randint(1, 5)):
                b[rng.randrange(len(b))] = rng.choice(b'{}[]:,"\\0123456789e-.')
            mutated = bytes(b)
        else:
            rec["scenario"]["cluster"]["hosts"][0]["count"] = 10**12
            mutated = _json_bytes(rec)
        yield f"{base.stem}/{kind}", mutated, []


# ---- running commands under limits ----


class Hang(BaseException):
    """The per-variant alarm fired (BaseException, so the command cannot swallow it)."""


def _alarm(_signum: int, _frame: Any) -> None:
    raise Hang


def run_command(argv: list[str], timeout_s: float) -> tuple[str, str]:
    """Run ``simscale argv`` in this process; (outcome, detail)."""
    out, err = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = simscale_main(argv)
    except Hang:
        return "hang", f"over {timeout_s} s"
    except SystemExit as e:  # argparse usage errors
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException as e:  # counting exactly these is the point
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        return "traceback", "".join(tb[-3:])[-800:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    lines = err.getvalue().strip().splitlines()
    if rc == 0:
        return "ok", out.getvalue()
    if rc == 2 and lines and lines[-1].startswith("simscale: error: ") and len(lines) <= 3:
        return "refused", lines[-1][:300]
    return "bad-output", f"rc {rc}: {err.getvalue()[-400:]}"


def _check_prediction(stdout: str) -> str | None:
    """Why a successful predict's JSON is not sane, or None."""
    try:
        result = json.loads(stdout)
    except ValueError:
        return "predict printed no JSON"
    rate = result.get("throughput_samples_per_s")
    if not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        return f"throughput {rate!r}"
    return None


def fuzz(kind: str, seed: int, n: int, timeout_s: float) -> dict[str, Any]:
    budget.REFUSE_ABOVE_S = FUZZ_PREDICT_BUDGET_S
    counts: dict[str, int] = {}
    failures: list[dict[str, str]] = []
    slowest = (0.0, "")

    def note(cmd: str, label: str, outcome: str, detail: str, seconds: float) -> None:
        nonlocal slowest
        counts[f"{cmd}:{outcome}"] = counts.get(f"{cmd}:{outcome}", 0) + 1
        if outcome in ("traceback", "hang", "bad-output"):
            failures.append(
                {"command": cmd, "variant": label, "outcome": outcome, "detail": detail}
            )
        slowest = max(slowest, (seconds, f"{cmd} {label}"))

    variants: Callable[[int, int], Iterator[tuple[str, bytes, list[str]]]]
    variants = scenario_variants if kind == "scenarios" else record_variants
    suffix = ".yaml" if kind == "scenarios" else ".json"
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, content, overrides) in enumerate(variants(seed, n)):
            label = f"{i}:{label}"
            path = Path(tmp) / f"v{i}{suffix}"
            path.write_bytes(content)
            sets = [a for o in overrides for a in ("--set", o)]
            if kind == "scenarios":
                t = time.perf_counter()
                outcome, detail = run_command(["check", str(path), *sets], timeout_s)
                note("check", label, outcome, detail, time.perf_counter() - t)
                if outcome == "ok":
                    t = time.perf_counter()
                    outcome, detail = run_command(
                        ["predict", str(path), "--json", *sets], timeout_s
                    )
                    if outcome == "ok":
                        why = _check_prediction(detail)
                        outcome, detail = ("ok", "") if why is None else ("bad-output", why)
                    note("predict", label, outcome, detail, time.perf_counter() - t)
            else:
                t = time.perf_counter()
                profile = Path(tmp) / "profile.yaml"
                outcome, detail = run_command(
                    ["calibrate", str(path), "--fit", "none", "-o", str(profile), "--force"],
                    timeout_s,
                )
                note("calibrate", label, outcome, detail, time.perf_counter() - t)
                if i % 25 == 0:
                    t = time.perf_counter()
                    outcome, detail = run_command(["validate", str(path), "--json"], timeout_s)
                    note("validate", label, outcome, detail, time.perf_counter() - t)
            path.unlink()
    return {
        "kind": kind,
        "seed": seed,
        "variants": n,
        "counts": counts,
        "failures": failures,
        "slowest": {"seconds": round(slowest[0], 3), "what": slowest[1]},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("scenarios", "records"))
    ap.add_argument("--variants", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per command")
    ap.add_argument("--memory-mb", type=int, default=3000, help="address-space limit")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    limit = args.memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    summary = fuzz(args.kind, args.seed, args.variants, args.timeout)
    args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
