"""DDP and FSDP ranks (realrun.allreduce.data_parallel) end where one process training on the
concatenated batch ends, and send the bytes their collectives move.

Each rank is a separate process (torch.multiprocessing) with its own gloo group over TCP on
127.0.0.1, so the kernel's per-socket byte counts are each rank's own.
"""

from __future__ import annotations

import socket

import pytest

torch = pytest.importorskip("torch", reason="torch is in the realrun extra")

import torch.multiprocessing as mp  # noqa: E402

from realrun.allreduce.data_parallel import (  # noqa: E402
    DataParallelPlan,
    DataParallelTrainer,
)
from realrun.training import torch_models  # noqa: E402
from realrun.training.overlap import batch_seed  # noqa: E402
from tests.support.training import loopback_data_parallel_group  # noqa: E402

# Each test trains torch models in several processes: 15-19 CPU s apiece.
pytestmark = pytest.mark.slow

MODEL, BATCH, SEQ, SEED = "gpt2_tiny", 2, 16, 5
LR, MOMENTUM, WD = 0.1, 0.9, 1e-3
ITERATIONS, WARMUP, RANKS = 3, 1, 2


def plan(mode: str, rank: int, stage: int = 3, micro_batches: int = 1, store_port=None):
    return DataParallelPlan(
        mode=mode,
        model=MODEL,
        batch_per_gpu=BATCH,
        seq_len=SEQ,
        micro_batches=micro_batches,
        host=rank,
        replica=0,
        iterations=ITERATIONS,
        warmup=WARMUP,
        seed=SEED,
        learning_rate=LR,
        momentum=MOMENTUM,
        weight_decay=WD,
        bucket_mb=1.0,  # several buckets: 27 MB of gradients
        first_bucket_mb=0.5,
        stage=stage,
        store_port=store_port,
    )


def _rank(rank: int, port: int, mode: str, stage: int, micro: int, out: str) -> None:
    group = loopback_data_parallel_group(rank, RANKS, port, timeout_s=120)
    torch.set_num_threads(1)
    trainer = DataParallelTrainer(group, rank, plan(mode, rank, stage, micro, port), torch_models)
    timings = trainer.run()
    weights = trainer.weights()
    torch.save(
        {"weights": weights, "sent": trainer.sent_bytes_measured, "timings": timings},
        f"{out}/rank{rank}.pt",
    )
    group.barrier().wait()


def run_ranks(tmp_path, mode: str, stage: int = 3, micro: int = 1) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, mode, stage, micro, str(tmp_path)), nprocs=RANKS, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(RANKS)]


def reference_weights(micro: int = 1) -> list[torch.Tensor]:
    """torch.optim.SGD in one process on every rank's micro-batches together (the mean loss
    over the concatenated batch)."""
    m = torch_models
    torch.manual_seed(SEED)
    model = m.build(MODEL)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    pool = []
    for r in range(RANKS):
        gens = [torch.Generator().manual_seed(batch_seed(SEED, r, 0, i)) for i in range(4)]
        pool.append([m.synthetic_batch(MODEL, BATCH, g, seq_len=SEQ) for g in gens])
    for it in range(ITERATIONS):
        opt.zero_grad()
        for k in range(micro):
            index = (it * micro + k) % 4
            x = torch.cat([pool[r][index][0] for r in range(RANKS)])
            y = torch.cat([pool[r][index][1] for r in range(RANKS)])
            (m.loss(model(x), y) / micro).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


def assert_same(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=2e-6)


def gradient_bytes() -> int:
    with torch.device("meta"):
        return sum(p.numel() * 4 for p in torch_models.build(MODEL).parameters())


def test_ddp_equals_one_process_on_the_concatenated_batch(tmp_path) -> None:
    """Two DDP ranks with two micro-batches each (no_sync on the first) end with the weights
    of single-process SGD on both ranks' micro-batches, on every rank; each rank sends what
    a two-rank ring all-reduce of every gradient sends, 2(n-1)/n x 27.4 MB per step."""
    ranks = run_ranks(tmp_path, "ddp", micro=2)
    want = reference_weights(micro=2)
    for r in ranks:
        assert_same(r["weights"], want)
    per_step = [r["sent"] / (ITERATIONS - WARMUP) for r in ranks]
    formula = 2 * (RANKS - 1) / RANKS * gradient_bytes()
    for sent in per_step:
        assert sent == pytest.approx(formula, rel=0.02)


def block_bytes() -> int:
    with torch.device("meta"):
        model = torch_models.build(MODEL)
    return sum(p.numel() * 4 for n, p in model.named_parameters() if ".h." in n)


@pytest.mark.parametrize("stage", [2, 3])
def test_fsdp_equals_one_process_on_the_concatenated_batch(tmp_path, stage: int) -> None:
    """FSDP ranks (FULL_SHARD for stage 3, SHARD_GRAD_OP for 2) end with the single-process
    weights too. On gloo a reduce-scatter is an all-reduce (2(n-1)/n B sent, not (n-1)/n B as
    NCCL's), so a step sends 3(n-1)/n B: the gradients' all-reduce and the parameters'
    all-gather; stage 3 adds the blocks' second all-gather before backward (the root unit,
    embeddings and final norm, stays gathered from forward to backward)."""
    ranks = run_ranks(tmp_path, "zero", stage=stage)
    want = reference_weights()
    for r in ranks:
        assert_same(r["weights"], want)
    n = RANKS
    formula = 3 * (n - 1) / n * gradient_bytes()
    if stage == 3:
        formula += (n - 1) / n * block_bytes()
    for r in ranks:
        assert r["sent"] / (ITERATIONS - WARMUP) == pytest.approx(formula, rel=0.005)


def test_fsdp_full_shard_gathers_and_reduce_scatters_every_micro_batch(tmp_path) -> None:
    """With two micro-batches (no no_sync under FSDP, as Composer runs it) FULL_SHARD ranks
    still end with the single-process weights, and each step sends twice what a one-micro-
    batch step sends: every micro-batch gathers the units and reduce-scatters the gradients,
    as simscale models it (tests/simscale/comm/test_sharded.py)."""
    ranks = run_ranks(tmp_path, "zero", stage=3, micro=2)
    want = reference_weights(micro=2)
    for r in ranks:
        assert_same(r["weights"], want)
    n = RANKS
    one_micro_batch = 3 * (n - 1) / n * gradient_bytes() + (n - 1) / n * block_bytes()
    for r in ranks:
        assert r["sent"] / (ITERATIONS - WARMUP) == pytest.approx(2 * one_micro_batch, rel=0.005)
