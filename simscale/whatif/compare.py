"""Side-by-side predictions of the same cluster under different choices, and what differs in
words: which is faster and by how much, where each loses its time, what limits each, and what
each costs.

The first scenario is the reference; every other one is compared with it. Variants come from
files, or from the first file with fields changed (``--vs kvstore.mode=allreduce``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simscale.report.results import Result
from simscale.spec.config import to_mapping
from simscale.spec.profile import Profile
from simscale.spec.scenario import Scenario
from simscale.whatif.errors import WhatIfError
from simscale.whatif.executors import run_tasks
from simscale.whatif.rows import result_row
from simscale.whatif.sweep import costs_for, load_base, point_scenario

# A variant's settings: "a.b=1,c.d[0].e=x" splits before each "path=".
_SETTING_SPLIT = re.compile(r",(?=\s*[A-Za-z_][\w.\[\]]*\s*=)")


@dataclass(frozen=True)
class Entry:
    label: str
    scenario: Scenario
    result: Result
    row: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "row": self.row, "result": self.result.to_dict()}


def vs_label(text: str, index: int) -> tuple[str, str]:
    """(label, settings) of a ``--vs``: ``"allreduce:kvstore.mode=allreduce"`` names itself;
    otherwise short settings are their own label and long ones become 'variant N'."""
    head, sep, rest = text.partition(":")
    if sep and "=" not in head and head.strip():
        return head.strip(), rest
    return (text if len(text) <= 32 else f"variant {index}"), text


def parse_vs(text: str) -> list[tuple[str, Any]]:
    """``"kvstore.mode=allreduce,kvstore.servers=null"`` -> [(path, value), ...]."""
    from simscale.spec.config import ConfigError, parse_override

    out = []
    for part in _SETTING_SPLIT.split(text):
        path, _, _ = part.partition("=")
        try:
            value = parse_override(part.strip())[1]
        except ConfigError as e:  # parse_override speaks of --set; this setting came from --vs
            problem = e.problem
            if problem.startswith("got "):
                problem = (
                    f"got {text!r}, expected [NAME:]path=value[,path=value] "
                    "(e.g. allreduce:kvstore.mode=allreduce)"
                )
            raise ConfigError("--vs", problem) from None
        out.append((path.strip(), value))
    return out


def _predict(job: tuple[str, Scenario, Profile | None, bool]) -> Entry:
    from simscale.simulator import simulate

    label, s, profile, force = job
    costs = costs_for(s, profile, force)
    r = simulate(s, costs)
    return Entry(label, s, r, result_row(s, r, costs))


def compare(
    scenarios: Sequence[Any],
    vs: Sequence[str] = (),
    *,
    overrides: Sequence[str] = (),
    profile: Profile | None = None,
    force_profile: bool = False,
    executor: str = "local",
) -> list[Entry]:
    """Predict each scenario (files, mappings or Scenarios) and each ``--vs`` variant of the
    first one; entries in the order given."""
    from simscale.whatif.api import _settings_pairs

    base_pairs = _settings_pairs(list(overrides))
    jobs: list[tuple[str, Scenario, Profile | None, bool]] = []
    first: tuple[dict[str, Any], str] | None = None
    for sc in scenarios:
        base, source = load_base(sc)
        first = first or (base, source)
        s = point_scenario(base, source, base_pairs)
        jobs.append((s.name or source, s, profile, force_profile))
    if vs and first is None:
        raise WhatIfError("compare: --vs needs a scenario to vary")
    for i, text in enumerate(vs, start=1):
        assert first is not None
        label, settings = vs_label(text, i)
        s = point_scenario(first[0], first[1], [*base_pairs, *parse_vs(settings)])
        jobs.append((label, s, profile, force_profile))
    labels = [j[0] for j in jobs]
    if len(set(labels)) < len(labels):
        raise WhatIfError(
            f"compare: two entries share a label ({', '.join(labels)}); name "
            "variants as --vs NAME:FIELD=VALUE"
        )
    entries = {e.label: e for e in run_tasks(executor, _predict, jobs)}
    return [entries[j[0]] for j in jobs]


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(data, list):
        out = {}
        for i, v in enumerate(data):
            out.update(_flat(v, f"{prefix}[{i}]"))
        return out
    return {prefix: data}


def resolved_mapping(s: Scenario) -> dict[str, Any]:
    """The scenario as plain data with every host group's preset applied: the values the
    simulation uses (an instance's NIC, GPUs, latency, cores, transport), not the None a YAML
    file leaves to its preset."""
    data = to_mapping(s)
    for group, out in zip(s.cluster.hosts, data["cluster"]["hosts"], strict=True):
        gpus, gpu, nic, latency, cores = group.resolved()
        out.update(
            gpus_per_host=gpus,
            gpu=gpu,
            nic_gbps=nic,
            latency_us=latency,
            cpu_cores=cores,
            transport=group.resolved_transport(),
        )
    if s.cluster.server_hosts is not None:
        nic, latency, cores = s.cluster.server_hosts.resolved()
        data["cluster"]["server_hosts"].update(nic_gbps=nic, latency_us=latency, cpu_cores=cores)
    return data


def config_differences(a: Scenario, b: Scenario) -> list[str]:
    """The fields that differ between two scenarios, as 'path: A -> B', with presets applied
    (so an instance's NIC is its preset's value, not None)."""
    fa = _flat(resolved_mapping(a))
    fb = _flat(resolved_mapping(b))
    skip = ("name", "description")
    return [
        f"{k}: {fa.get(k)} -> {fb.get(k)}"
        for k in sorted(set(fa) | set(fb))
        if k not in skip and fa.get(k) != fb.get(k)
    ]


def explain(entries: Sequence[Entry]) -> list[str]:
    """The differences against the first entry, in words."""
    if not entries:
        return []
    ref = entries[0]
    lines = []
    for e in entries[1:]:
        a, b = ref.result, e.result
        ratio = b.throughput_samples_per_s / a.throughput_samples_per_s
        if abs(ratio - 1) < 0.01:
            speed = f"{e.label} and {ref.label} are within 1% of each other"
        elif ratio > 1:
            speed = f"{e.label} is {ratio:.2f}x as fast as {ref.label}"
        else:
            speed = f"{e.label} is {1 - ratio:.0%} slower than {ref.label}"
        lines.append(
            f"{speed} ({b.throughput_samples_per_s:,.0f} vs {a.throughput_samples_per_s:,.0f} "
            f"samples/s; efficiency {b.scaling_efficiency:.0%} vs {a.scaling_efficiency:.0%})."
        )
        lines.append(
            "Per iteration, exposed communication "
            f"{b.breakdown['exposed_comm_s'] * 1e3:.1f} ms in {e.label} vs "
            f"{a.breakdown['exposed_comm_s'] * 1e3:.1f} ms in {ref.label}; waiting for other "
            f"workers {b.breakdown['wait_for_workers_s'] * 1e3:.1f} vs "
            f"{a.breakdown['wait_for_workers_s'] * 1e3:.1f} ms; compute "
            f"{b.breakdown['compute_s'] * 1e3:.1f} vs {a.breakdown['compute_s'] * 1e3:.1f} ms."
        )
        if a.bottleneck == b.bottleneck:
            lines.append(f"Both are limited the same way: {a.bottleneck}.")
        else:
            lines.append(f"Limit in {ref.label}: {a.bottleneck}.")
            lines.append(f"Limit in {e.label}: {b.bottleneck}.")
        lines += _cost_words(ref, e)
        diffs = config_differences(ref.scenario, e.scenario)
        if diffs:
            lines.append(f"{e.label} differs from {ref.label} in " + "; ".join(diffs) + ".")
        lines.append("")
    return lines[:-1] if lines and not lines[-1] else lines


def _cost_words(ref: Entry, e: Entry) -> list[str]:
    pa, pb = ref.row["usd_per_hour"], e.row["usd_per_hour"]
    if pa is None or pb is None:
        missing = ref.label if pa is None else e.label
        return [f"No cost comparison: {missing} has hosts without a price (set usd_per_hour)."]
    out = []
    if abs(pb - pa) < 1e-9:
        out.append(f"Both rent for ${pa:,.2f}/h.")
    else:
        out.append(f"{e.label} rents for ${pb:,.2f}/h vs ${pa:,.2f}/h ({(pb - pa) / pa:+.0%}).")
    sa, sb = ref.row["samples_per_usd"], e.row["samples_per_usd"]
    if sa and sb:
        better = e.label if sb > sa else ref.label
        out.append(
            f"Per dollar: {sb:,.0f} vs {sa:,.0f} samples, so {better} trains more cheaply "
            f"({max(sa, sb) / min(sa, sb) - 1:.0%} more samples per dollar)."
        )
    ta, tb = ref.row["train_usd"], e.row["train_usd"]
    ha, hb = ref.row["train_hours"], e.row["train_hours"]
    if ta is not None and tb is not None:
        out.append(
            f"To train: {hb:,.2f} h and ${tb:,.0f} for {e.label} vs {ha:,.2f} h and "
            f"${ta:,.0f} for {ref.label}."
        )
    return out


def format_comparison(entries: Sequence[Entry]) -> str:
    """The table (one column per entry) followed by the differences in words."""

    def money(v: Any, fmt: str) -> str:
        return "no price" if v is None else fmt.format(v)

    rows = [
        ("", [e.label for e in entries]),
        ("mode", [e.result.mode for e in entries]),
        (
            "GPUs / workers / servers",
            [
                f"{e.result.num_gpus} / {e.result.num_workers} / {e.result.num_servers}"
                for e in entries
            ],
        ),
        ("throughput (samples/s)", [f"{e.result.throughput_samples_per_s:,.0f}" for e in entries]),
        ("scaling efficiency", [f"{e.result.scaling_efficiency:.1%}" for e in entries]),
        ("iteration (ms)", [f"{e.result.iteration_time_s * 1e3:,.1f}" for e in entries]),
        ("  compute (ms)", [f"{e.result.breakdown['compute_s'] * 1e3:,.1f}" for e in entries]),
        (
            "  exposed comm (ms)",
            [f"{e.result.breakdown['exposed_comm_s'] * 1e3:,.1f}" for e in entries],
        ),
        (
            "  waiting (ms)",
            [f"{e.result.breakdown['wait_for_workers_s'] * 1e3:,.1f}" for e in entries],
        ),
        ("$/hour", [money(e.row["usd_per_hour"], "{:,.2f}") for e in entries]),
        ("samples per $", [money(e.row["samples_per_usd"], "{:,.0f}") for e in entries]),
        ("hours to train", [money(e.row["train_hours"], "{:,.2f}") for e in entries]),
        ("$ to train", [money(e.row["train_usd"], "{:,.0f}") for e in entries]),
    ]
    rows = [
        r
        for r in rows
        if r[0] not in ("hours to train", "$ to train") or any(v != "no price" for v in r[1])
    ]
    w0 = max(len(r[0]) for r in rows)
    widths = [max(len(r[1][i]) for r in rows) for i in range(len(entries))]
    lines = [
        f"{name:<{w0}}  " + "  ".join(v.rjust(w) for v, w in zip(vals, widths, strict=True))
        for name, vals in rows
    ]
    lines.append("")
    for e in entries:
        lines.append(f"bottleneck, {e.label}: {e.result.bottleneck}")
    words = explain(entries)
    if words:
        lines += ["", *words]
    return "\n".join(lines)
