"""MXNet's single-machine kvstore (simscale.comm.local): whether there is one, where its
optimizer runs, and what a key costs the host's copy engine."""

from __future__ import annotations

import pytest
import simpy

from simscale.comm.local import (
    UPDATE_ON_KVSTORE_MAX_ELEMENTS,
    LocalKVStore,
    NoKVStore,
    has_kvstore,
    local_kvstore,
    updates_on_cpu,
)
from simscale.model.worker import HostCopies

N = 1e6  # bytes of a key
UPDATE_NS_PER_BYTE = 0.4


def copy_engine(env: simpy.Environment) -> HostCopies:
    """Two GPUs behind one 16 GB/s link, summing at 1 ns/byte on the CPU."""
    return HostCopies(
        env,
        0,
        2,
        on_cpu=False,
        device_mode=False,
        host_link_Bps=16e9,
        peer_link_Bps=16e9,
        merge_s_per_byte=1e-9,
    )


def test_one_device_on_one_machine_has_no_kvstore() -> None:
    assert not has_kvstore("local", 1) and not has_kvstore("device", 1)
    assert has_kvstore("local", 2) and has_kvstore("device", 8)
    assert has_kvstore("dist_sync", 1)


def test_local_updates_on_the_cpu_unless_an_array_is_over_16m_elements() -> None:
    assert updates_on_cpu("local", [10, UPDATE_ON_KVSTORE_MAX_ELEMENTS])
    assert not updates_on_cpu("local", [10, UPDATE_ON_KVSTORE_MAX_ELEMENTS + 1])
    assert not updates_on_cpu("device", [10])


def test_without_a_kvstore_the_key_is_done_at_once() -> None:
    env = simpy.Environment()
    hook = local_kvstore("local", 1, [250_000], copy_engine(env), [N], UPDATE_NS_PER_BYTE)
    assert isinstance(hook, NoKVStore)
    got: list[float] = []
    hook.communicate(0, 0, got.append)
    assert got == [0.0]  # nothing copied, nothing waited for


@pytest.mark.parametrize(
    ("elements", "update_s"),
    [(250_000, N * UPDATE_NS_PER_BYTE * 1e-9), (UPDATE_ON_KVSTORE_MAX_ELEMENTS + 1, 0.0)],
)
def test_a_key_is_summed_updated_and_copied_back_on_the_copy_engine(
    elements: int, update_s: float
) -> None:
    """Two GPUs, 1 MB keys: copying both GPUs' gradients in takes 2 x 1 MB / 16 GB/s = 125 us,
    summing the second 1 ms, the CPU's update 400 us (none where the GPUs update: an array over
    16M elements), copying back 125 us: 1.65 ms a key (1.25 ms), and two keys handed over
    together queue on the one copy engine."""
    env = simpy.Environment()
    hook = local_kvstore("local", 2, [elements], copy_engine(env), [N, N], UPDATE_NS_PER_BYTE)
    assert isinstance(hook, LocalKVStore)
    done: dict[int, tuple[float, float]] = {}
    for key in (0, 1):
        hook.communicate(0, key, lambda w, key=key: done.__setitem__(key, (env.now, w)))
    env.run()
    one = 2 * N / 16e9 + N * 1e-9 + update_s + 2 * N / 16e9
    assert done[0] == pytest.approx((one, 0.0), rel=1e-12, abs=1e-15)
    assert done[1] == pytest.approx((2 * one, 0.0), rel=1e-12, abs=1e-15)
