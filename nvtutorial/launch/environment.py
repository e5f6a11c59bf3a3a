"""The one rule for a rank's environment, whichever way the rank starts, and free ports.

:func:`child_environment` is what every process of a run inherits: the caller's environment, the
run's overrides, and what the course adds (the package on ``PYTHONPATH``, unbuffered output, the
launcher's pid that ranks watch, a thread count per rank, no GPU in the CPU simulation).
:func:`node_environment` adds an emulated node's identity; it is what a ``torchrun`` agent gets.
:func:`rank_environment` adds exactly the variables torchrun's agent gives each worker (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``ROLE_*``, ``MASTER_ADDR``,
``MASTER_PORT``, ``TORCHELASTIC_*``, ``TORCH_NCCL_ASYNC_ERROR_HANDLING``): what a rank forked from the
warm interpreter gets, so that a rank cannot tell from its environment how it was started
(``tests/test_warm.py`` compares both, variable by variable; Python's string-hash secret is the one thing a
forked rank shares with the warm interpreter: see ``docs/architecture.md``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nvtutorial.launch import guards
from nvtutorial.runtime import free_port

if TYPE_CHECKING:
    from nvtutorial.launch.spec import LaunchSpec

__all__ = [
    "base_environment",
    "child_environment",
    "free_port",
    "node_devices",
    "node_environment",
    "rank_environment",
    "torchrun_variables",
]

TORCHELASTIC_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
"""What torchrun's agent sets ``TORCHELASTIC_SIGNALS_TO_HANDLE`` to (torch 2.11-2.14)."""


RESTART_STORE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
"""Ranks that torchrun may restart, each attempt on a store of its own: torchrun shares its rendezvous TCPStore with
the ranks (recent torch), and every attempt writes the same keys, so a restarted rank can read the dead attempt's
address and fail to connect (pytorch/pytorch#135712; notebook 09 shows it)."""
NCCL_WATCHDOG = {"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "1000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}
"""NCCL ranks that are restarted: after an NCCL error ProcessGroupNCCL's watchdog sleeps 4 × the first (torch's
default 15 000 ms: a minute) before it ends the process; the second only skips the flight-recorder dump (review
RR5-1; notebook 09's lab and the Slurm scripts that restart)."""


def base_environment(
    world_size: int, backend: str, overrides: Mapping[str, str], max_restarts: int = 0
) -> dict[str, str]:
    """The environment every process of a run of ``world_size`` ranks inherits (see the module docstring)."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["NVTUTORIAL_LAUNCHER_PID"] = str(os.getpid())  # workers end themselves if we die
    env.setdefault("OMP_NUM_THREADS", str(max(1, guards.usable_cores() // world_size)))
    if backend == "gloo":
        # The CPU simulation must not see a GPU: torch code that checks torch.cuda.is_available()
        # (PowerSGD's hook synchronises the GPU) would otherwise touch it from CPU ranks.
        env["CUDA_VISIBLE_DEVICES"] = ""
    if max_restarts:
        env.update(RESTART_STORE)
    env.update(overrides)
    return env


def child_environment(spec: LaunchSpec) -> dict[str, str]:
    """The parent's environment, the run's overrides, and what the workers need to import us."""
    return base_environment(spec.world_size, spec.backend, spec.env, spec.max_restarts)


def node_devices(nproc: int, nnodes: int, gpu_ids: Sequence[str]) -> list[list[str]]:
    """The GPUs each emulated node's ranks use: distinct GPUs while there are enough, then shared.

    Within a node the ranks need distinct GPUs (``nproc <= len(gpu_ids)``, checked before launch);
    two nodes may share one, since ``NCCL_HOSTID`` makes NCCL treat them as separate hosts.
    """
    return [[gpu_ids[(node * nproc + j) % len(gpu_ids)] for j in range(nproc)] for node in range(nnodes)]


def node_environment(spec: LaunchSpec, node: int, gpu_ids: Sequence[str] = ()) -> dict[str, str]:
    """The environment of emulated node ``node``'s agent: its host identity for NCCL and its GPUs."""
    env = child_environment(spec)
    env["NVTUTORIAL_NODE"] = str(node)
    if spec.nnodes > 1 and spec.backend == "nccl":
        if "NCCL_HOSTID" not in spec.env:
            env["NCCL_HOSTID"] = f"{socket.gethostname()}-node{node}"
        if gpu_ids and "CUDA_VISIBLE_DEVICES" not in spec.env:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(node_devices(spec.nproc, spec.nnodes, gpu_ids)[node])
    return env


def torchrun_variables(
    rank: int,
    nproc: int,
    master_port: int | None,
    run_id: str,
    error_file: str,
    base: Mapping[str, str],
    agent_store: bool = True,
) -> dict[str, str]:
    """The variables torchrun's agent (one node, no restarts) gives worker ``rank`` of ``nproc``.

    ``master_port``: the agent's store (None: set later by the ranks, as ``%%ranks`` does, whose
    rank 0 hosts the store: then ``agent_store`` is False); ``base``: the agent's own environment.
    """
    variables = {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(nproc),
        "WORLD_SIZE": str(nproc),
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": socket.getfqdn(),  # what torchrun's c10d rendezvous publishes (the node's address)
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": str(agent_store),
        "TORCHELASTIC_SIGNALS_TO_HANDLE": base.get("TORCHELASTIC_SIGNALS_TO_HANDLE", TORCHELASTIC_SIGNALS),
        "TORCHELASTIC_ERROR_FILE": error_file,
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }
    if master_port is not None:
        variables["MASTER_PORT"] = str(master_port)
    return variables


def rank_environment(
    spec: LaunchSpec, rank: int, master_port: int, run_id: str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Rank ``rank``'s whole environment on one node, as torchrun's agent would give it (``base``: the
    agent's environment, by default :func:`node_environment` of node 0)."""
    env = dict(node_environment(spec, 0) if base is None else base)
    error_file = str(Path(spec.run_dir).resolve() / f"rank{rank}.torchelastic-error.json")
    env.update(torchrun_variables(rank, spec.nproc, master_port, run_id, error_file, env))
    return env
