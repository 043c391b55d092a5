"""One program for every role (``python -m realrun.node``), picked by ``DMLC_ROLE``.

Scheduler and server need only the ``DMLC_*`` environment; a worker also needs the scenario
(``--scenario PATH [--set path=value ...]``), from which it learns the model and the training.
The scheduler prints its events (port, ranks, reports, end) as JSON lines on stdout for the
launcher; every role logs on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import socket
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from realrun.ps.roles import PARENT_PID_VARIABLE, NodeEnv, RoleError, node_env
from simscale.lifetime import EXIT_ORPHANED, exit_with_parent, parent_from_environ

log = logging.getLogger("realrun.node")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m realrun.node", description=__doc__)
    parser.add_argument("--scenario", help="scenario YAML (workers)")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument(
        "--compute-profile",
        help="measured ComputeProfile JSON (workers, realrun.compute: emulated)",
    )
    args = parser.parse_args(argv)
    try:
        env = node_env()
    except RoleError as e:
        print(f"realrun.node: {e}", file=sys.stderr)
        return 2
    _logging(env.role)
    # A launcher killed outright (SIGKILL, a crash) cannot tear its nodes down; each node
    # then notices it was orphaned and ends itself (local and netns launchers; over ssh the
    # remote session outlives the client, and the scheduler's heartbeat ends the job).
    exit_with_parent(env.role, log, parent_from_environ(PARENT_PID_VARIABLE))
    if env.role == "scheduler":
        return run_scheduler(env)
    if env.role == "server":
        return run_server(env)
    if not args.scenario:
        print("realrun.node: a worker needs --scenario PATH", file=sys.stderr)
        return 2
    return run_worker(env, args.scenario, args.set, args.compute_profile)


def run_scheduler(env: NodeEnv) -> int:
    from realrun.ps.scheduler import Scheduler

    def emit(event: dict[str, Any]) -> None:
        try:
            sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            # The launcher that reads the events is gone: end quietly (the van closes on the
            # way out), and let nothing flush into the broken pipe again at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            log.error("scheduler: the launcher's event pipe is closed; exiting")
            raise SystemExit(EXIT_ORPHANED) from None

    try:
        scheduler = Scheduler(env, emit)
    except OSError as e:
        emit({"event": "error", "message": f"scheduler: {e}"})
        return 1
    return scheduler.run()


def run_server(env: NodeEnv) -> int:
    from realrun.ps.kv_server import KVServer
    from realrun.ps.postoffice import Postoffice
    from realrun.ps.tracker import JobAborted

    server = KVServer(env.num_workers)
    po = Postoffice(env, handler=server.handle)
    try:
        rank = po.start().rank
        log.info("server rank %d listening on %s:%d", rank, env.node_host, po.port)
        po.wait_closed()
    except JobAborted:
        pass  # po.error says why
    finally:
        po.close()
    if po.error is not None:
        log.error("%s", po.error)
        return 1
    return 0


def run_worker(
    env: NodeEnv, scenario_path: str, overrides: list[str], profile_path: str | None = None
) -> int:
    import torch

    from realrun.ps.kv_worker import KVWorker
    from realrun.ps.postoffice import Postoffice, window_bytes_for
    from realrun.ps.tracker import JobAborted
    from realrun.records.timeline import rank_tracing
    from realrun.training import torch_models
    from realrun.training.compute_profile import ComputeProfile
    from realrun.training.replay import ReplayTrainer
    from realrun.training.worker_loop import Trainer
    from simscale.spec.scenario import load_scenario

    po = Postoffice(env)
    where = f"worker (slot {env.slot}) on {env.node_host}"
    try:
        rank = po.start().rank
        where = f"worker rank {rank} on {env.node_host}"
        scenario = load_scenario(scenario_path, overrides)
        plan, bound, threshold = plan_from_scenario(scenario, rank)
        torch.set_num_threads(scenario.realrun.threads_per_worker)
        po.schedule(scenario.kvstore.scheduling, window_bytes_for(scenario.kvstore.send_window_mb))
        kv = KVWorker(po, bound, threshold, scenario.kvstore.pull_request)
        if scenario.realrun.compute == "emulated":
            if profile_path is not None:  # times measured on this machine's device
                profile = ComputeProfile.from_dict(json.loads(Path(profile_path).read_text()))
                trainer = ReplayTrainer(kv, plan, profile, scenario.realrun.dilation)
            else:  # times of the scenario's GPU from the simulator's compute model
                from realrun.training.emulated_compute import EmulatedTrainer, emulated_device

                device = emulated_device(scenario, rank)
                trainer = EmulatedTrainer(
                    kv, device, plan.iterations, plan.seed, plan.sync, plan.optimizer
                )
        else:
            trainer = Trainer(kv, plan, torch_models)
        sending = {"scheduling": po.scheduling, "send_window_bytes": po.window_bytes}
        po.report({"type": "environment", **environment(), **trainer.describe(), **sending})
        trainer.run(lambda t: po.report({"type": "iteration", **asdict(t)}))
        if rank_tracing() and isinstance(trainer, Trainer):  # real compute only
            po.report({"type": "trace", **trainer.recorder.report()})
        po.finish()
        return 0
    except JobAborted as e:
        log.error("%s: %s", where, e)
        return 1
    except Exception as e:  # any failure: tell the scheduler, which stops the job
        message = f"{type(e).__name__}: {e}"
        log.exception("%s failed", where)
        po.fail(message)
        return 1
    finally:
        po.close()


def plan_from_scenario(scenario: Any, rank: int):
    """The worker's TrainPlan, big-array bound and 2-bit threshold (None: no compression)."""
    from realrun.ps.optimizer import SGD
    from realrun.training.worker_loop import TrainPlan

    kv, tr, rr, sim = scenario.kvstore, scenario.training, scenario.realrun, scenario.simulation
    if not kv.mode.startswith("dist_"):
        raise ValueError(f"kvstore.mode is {kv.mode!r}; realrun runs the dist_* modes only")
    check_compute(scenario)
    total_gpus = sum(scenario.gpus_per_worker(r) for r in range(scenario.num_workers))
    opt = tr.optimizer
    plan = TrainPlan(
        model=scenario.model.name or "custom",  # explicit arrays: emulated compute only
        batch_per_gpu=tr.batch_per_gpu,
        gpus=scenario.gpus_per_worker(rank),
        iterations=sim.warmup_iterations + sim.measured_iterations,
        seed=sim.seed,
        sync=kv.mode in ("dist_sync", "dist_sync_device"),
        # The servers sum every GPU's mean-loss gradient; rescaling by 1/GPUs averages them.
        optimizer=SGD(opt.learning_rate, opt.momentum, opt.weight_decay, 1.0 / total_gpus),
        device_aggregation=kv.mode.endswith("_device"),
        device=rr.device,
    )
    gc = kv.gradient_compression
    return plan, kv.bigarray_bound, (gc.threshold if gc.type == "2bit" else None)


def check_compute(scenario: Any) -> None:
    """ValueError unless realrun can run this scenario's precision, compute mode and dilation."""
    if scenario.training.precision != "fp32":
        raise ValueError(
            f"training.precision {scenario.training.precision!r}: realrun trains fp32 only; "
            "the simulator models fp16 and amp (simscale predict)"
        )
    rr = scenario.realrun
    if rr.compute == "real" and rr.dilation != 1.0:
        raise ValueError(
            f"realrun.dilation is {rr.dilation:g}, but real compute cannot be slowed down: "
            "use realrun.compute=emulated with a dilation, or dilation 1"
        )
    if rr.compute == "real" and not scenario.model.name:
        raise ValueError("realrun needs a zoo model name (model.name), not explicit arrays")


def environment() -> dict[str, Any]:
    """Versions and machine facts of this process, for the run record."""
    import numpy
    import torch
    import zmq

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
        "numpy": numpy.__version__,
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cuda_available": torch.cuda.is_available(),
    }


def _logging(role: str) -> None:
    verbose = os.environ.get("PS_VERBOSE", "")
    level = {"1": logging.INFO, "2": logging.DEBUG}.get(verbose, logging.WARNING)
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format=f"%(asctime)s {role}[{os.getpid()}] %(levelname)s %(name)s: %(message)s",
    )


if __name__ == "__main__":
    sys.exit(main())
