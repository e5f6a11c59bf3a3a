"""Benchmark ``%%ranks``: what a warm cell costs, and what the first cell (cold start) costs.

    .venv/bin/python benchmarks/ranks_bench.py                 # 2 ranks, gloo on the CPU
    .venv/bin/python benchmarks/ranks_bench.py --backend nccl --nproc 2 --out build/bench/h200.json

Everything goes through a real Jupyter kernel (``jupyter_client``), as a learner's notebook does:

- warm: ``%%ranks`` with ``pass`` (median of ``--repeats``), beside an empty plain cell (the
  kernel's own round trip), ``run_code("pass")`` in this process, and one launcher run
  (``nvtutorial.run("selftest", nproc=N)``) on the same machine;
- cold: the first ``%%ranks`` cell of a fresh kernel (extension loaded), which starts the ranks,
  creates the process group and does one all-reduce, against a bare ``torchrun`` of the same
  ranks doing the same (``--cold`` of each, interleaved);
- with ``--ipyparallel`` (if installed): the same cold start on ipyparallel engines, tuned, and a
  warm execute through its client: the measurements behind building our own pool.

Targets: a warm cell at most 50 ms; the cold start at most 1.2x the bare torchrun. The machine's
load is recorded before and after: on a shared machine the numbers move with it.
Writes JSON (named after the machine) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WARM_TARGET_S = 0.050
COLD_TARGET_RATIO = 1.2
BARE = """\
import os, torch, torch.distributed as dist
backend = os.environ["BENCH_BACKEND"]
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, device_id=torch.device("cuda", int(os.environ["LOCAL_RANK"])))
    t = torch.ones(1, device="cuda")
else:
    dist.init_process_group(backend)
    t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size()
dist.destroy_process_group()
"""
CELL = "%%ranks\nt = torch.ones(1, device=device)\ndist.all_reduce(t)\nassert t.item() == world_size"


class Kernel:
    def __init__(self) -> None:
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT))

    def execute(self, code: str, timeout: float = 600) -> float:
        """Seconds from the request to the kernel's reply; raises if the cell failed."""
        t0 = time.perf_counter()
        msg_id = self.kc.execute(code)
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        elapsed = time.perf_counter() - t0
        while True:  # drain the cell's output so that it does not pile up
            try:
                msg = self.kc.get_iopub_msg(timeout=0.01)
            except queue.Empty:
                break
            if msg["msg_type"] == "error":
                print("\n".join(msg["content"]["traceback"]), file=sys.stderr)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(
                f"cell failed: {code!r}: {reply['content'].get('ename')}: {reply['content'].get('evalue')}"
            )
        return elapsed

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


def median(values: list[float]) -> float:
    return statistics.median(values)


def warm(args: argparse.Namespace) -> dict:
    k = Kernel()
    try:
        k.execute(f"%load_ext nvtutorial.teach.ranks\n%ranks start --nproc {args.nproc} --backend {args.backend}")
        k.execute("%%ranks\npass")
        plain = [k.execute("pass") for _ in range(args.repeats)]
        cell = [k.execute("%%ranks\npass") for _ in range(args.repeats)]
        reduce = [k.execute(CELL) for _ in range(args.repeats)]
    finally:
        k.close()
    from nvtutorial.teach import ranks

    ranks.start(nproc=args.nproc, backend=args.backend, quiet=True)
    try:
        api = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            assert ranks.run_code("pass").ok
            api.append(time.perf_counter() - t0)
    finally:
        ranks.stop()
    return {"plain_cell_s": plain, "ranks_pass_cell_s": cell, "ranks_all_reduce_cell_s": reduce, "run_code_pass_s": api}


def launcher(args: argparse.Namespace) -> list[float]:
    import nvtutorial

    times = []
    for _ in range(args.launcher_runs):
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            nvtutorial.run("selftest", nproc=args.nproc, backend=args.backend, out=out, output="none")
            times.append(time.perf_counter() - t0)
    return times


def torchrun(args: argparse.Namespace, script: Path) -> float:
    env = dict(os.environ, BENCH_BACKEND=args.backend)
    if args.backend == "gloo":
        env["CUDA_VISIBLE_DEVICES"] = ""
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(args.nproc),
            str(script),
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


IPP_INIT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo", rank=rank, world_size=world_size, init_method=f"tcp://127.0.0.1:{port}")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == world_size
"""


def ipyparallel_cold_and_warm(args: argparse.Namespace) -> tuple[float, float]:
    """The same cold start on ipyparallel engines (tuned: 500 ms heartbeat, no start delay, controller
    threads; RANK pushed to each engine) and a warm ``execute("pass")`` through its client (median)."""
    import socket as _socket

    import ipyparallel as ipp

    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the engines inherit it: gloo on the CPU, as %%ranks does
    t0 = time.perf_counter()
    cluster = ipp.Cluster(
        n=args.nproc,
        log_level=40,
        delay=0,
        controller_args=["--HeartMonitor.period=500", "--IPController.use_threads=True"],
    )
    try:
        client = cluster.start_and_connect_sync()
        client.wait_for_engines(args.nproc, timeout=300)
        with _socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        ids = sorted(client.ids)
        for rank, engine in enumerate(ids):
            client[engine].push({"rank": rank, "world_size": args.nproc, "port": port}, block=True)
        client[ids].execute(IPP_INIT, block=True)
        cold = time.perf_counter() - t0
        warm = []
        for _ in range(args.repeats):
            t1 = time.perf_counter()
            client[ids].execute("pass", block=True)
            warm.append(time.perf_counter() - t1)
    finally:
        cluster.stop_cluster_sync()
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    return cold, median(warm)


def machine() -> dict:
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_before": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--cold", type=int, default=3, help="cold starts of each kind, interleaved")
    parser.add_argument("--launcher-runs", type=int, default=3)
    parser.add_argument("--ipyparallel", action="store_true", help="also time the same on ipyparallel engines")
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default build/bench/ranks-HOST.json)")
    args = parser.parse_args()

    info = machine()
    import torch

    info["torch"] = torch.__version__
    result: dict = {
        "machine": info,
        "nproc": args.nproc,
        "backend": args.backend,
        "label": f"{args.nproc} ranks, {args.backend}, on {info['host']} ({info['cpus']} CPUs): "
        "tool overhead, not a GPU measurement",
    }
    result["warm"] = warm(args)
    result["launcher_selftest_s"] = launcher(args)
    script = Path(tempfile.mkdtemp()) / "bare_allreduce.py"
    script.write_text(BARE)
    firsts, bares, ipp_cold, ipp_warm = [], [], [], []
    if args.ipyparallel:
        try:
            import ipyparallel
        except ImportError:
            print("skipped ipyparallel: not installed (pip install 'ipyparallel==9.2.*')", file=sys.stderr)
            args.ipyparallel = False
    for _ in range(args.cold):
        firsts.append(cold(args))
        bares.append(torchrun(args, script))
        if args.ipyparallel:
            c, w = ipyparallel_cold_and_warm(args)
            ipp_cold.append(c)
            ipp_warm.append(w)
    result["cold"] = {"first_ranks_cell_s": firsts, "bare_torchrun_s": bares}
    if args.ipyparallel:
        import ipyparallel

        result["ipyparallel"] = {
            "version": ipyparallel.__version__,
            "cold_s": ipp_cold,
            "warm_execute_median_s": ipp_warm,
        }
    info["loadavg_after"] = os.getloadavg()

    w = result["warm"]
    summary = {
        "warm_ranks_cell_median_s": median(w["ranks_pass_cell_s"]),
        "warm_plain_cell_median_s": median(w["plain_cell_s"]),
        "warm_all_reduce_cell_median_s": median(w["ranks_all_reduce_cell_s"]),
        "run_code_median_s": median(w["run_code_pass_s"]),
        "launcher_selftest_median_s": median(result["launcher_selftest_s"]),
        "cold_first_cell_median_s": median(firsts),
        "cold_bare_torchrun_median_s": median(bares),
    }
    summary["cold_ratio"] = summary["cold_first_cell_median_s"] / summary["cold_bare_torchrun_median_s"]
    summary["warm_within_target"] = summary["warm_ranks_cell_median_s"] <= WARM_TARGET_S
    summary["cold_within_target"] = summary["cold_ratio"] <= COLD_TARGET_RATIO
    result["summary"] = summary
    result["targets"] = {"warm_cell_s": WARM_TARGET_S, "cold_ratio": COLD_TARGET_RATIO}

    out = args.out or ROOT / "build" / "bench" / f"ranks-{info['host']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    rows = [
        (
            "warm %%ranks cell (pass), median",
            summary["warm_ranks_cell_median_s"],
            f"target <= {WARM_TARGET_S * 1e3:.0f} ms",
        ),
        ("warm %%ranks cell (all_reduce), median", summary["warm_all_reduce_cell_median_s"], ""),
        ("warm plain cell (kernel round trip), median", summary["warm_plain_cell_median_s"], ""),
        ("ranks.run_code('pass') in-process, median", summary["run_code_median_s"], ""),
        ("one launcher run: nvtutorial.run('selftest'), median", summary["launcher_selftest_median_s"], ""),
        ("cold: first %%ranks cell (start + init + all_reduce), median", summary["cold_first_cell_median_s"], ""),
        ("cold: bare torchrun (init + all_reduce), median", summary["cold_bare_torchrun_median_s"], ""),
    ]
    print(f"\n{result['label']}; load {info['loadavg_before'][0]:.1f} -> {info['loadavg_after'][0]:.1f}")
    for name, seconds, note in rows:
        print(f"  {name:<62} {seconds * 1e3:>10.1f} ms  {note}")
    print(
        f"  {'cold ratio (first cell / bare torchrun)':<62} {summary['cold_ratio']:>10.2f}     "
        f"target <= {COLD_TARGET_RATIO}"
    )
    if args.ipyparallel:
        ipp = result["ipyparallel"]
        print(
            f"  {'ipyparallel ' + ipp['version'] + ': cold (cluster + init + all_reduce), median':<62} "
            f"{median(ipp['cold_s']) * 1e3:>10.1f} ms"
        )
        print(
            f"  {'ipyparallel: warm execute(pass) via its client, median':<62} "
            f"{median(ipp['warm_execute_median_s']) * 1e3:>10.1f} ms  (compare run_code above)"
        )
    print(f"results: {out}")


def cold(args: argparse.Namespace) -> float:
    """The first %%ranks cell of a fresh kernel: starts the ranks, creates the group, one all-reduce."""
    k = Kernel()
    try:
        k.execute(
            "%load_ext nvtutorial.teach.ranks\n"
            f"import nvtutorial.teach.ranks; nvtutorial.teach.ranks.configure(nproc={args.nproc}, "
            f"backend={args.backend!r})"
        )
        return k.execute(CELL)
    finally:
        k.close()


if __name__ == "__main__":
    main()
