"""Run a plain ``torchrun`` script as one rank of a launched run.

The launcher runs ``torchrun ... -m nvtutorial.launch.runtime_script --out RUN_DIR -- PATH ARGS...``
so a script the learner wrote gets what a built-in workload gets: its output in
``rank{R}.log``, a stack dump on SIGUSR1, the end of the rank when the launcher is gone,
``rank{R}.error.json`` with its traceback when it raises, and ``rank{R}.json`` with the
environment and whatever it passed to :func:`nvtutorial.runtime.save_metrics` when it ends.
The script itself stays an ordinary one: it sets up its own process group and needs nothing
from the course.
"""

from __future__ import annotations

import argparse
import gc
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

from nvtutorial import runtime


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nvtutorial.launch.runtime_script", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="the run folder")
    parser.add_argument(
        "--backend",
        choices=("nccl", "gloo"),
        default=None,
        help="the launcher's backend, recorded when the script's process group is gone",
    )
    parser.add_argument("--capture", action="store_true", help="write this rank's output to RUN_DIR/rank{R}.log")
    parser.add_argument("script", help="the script's path")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser


def _from_script(tb: TracebackType | None, script: str) -> TracebackType | None:
    """The traceback from the script's first frame on (this runner's and runpy's frames left out)."""
    here = tb
    while here is not None and here.tb_frame.f_code.co_filename != script:
        here = here.tb_next
    return here or tb


def _script_environment(fallback_backend: str | None) -> dict[str, Any]:
    """The environment block, read after the script ran: its process group if it still exists."""
    import torch
    import torch.distributed as dist

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    backend = fallback_backend
    if dist.is_available() and dist.is_initialized():
        backend = str(dist.get_backend())
        world_size = dist.get_world_size()
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    gpu = None
    if backend == "nccl" and torch.cuda.is_available():
        gpu = torch.cuda.current_device() if torch.cuda.is_initialized() else int(os.environ.get("LOCAL_RANK", "0"))
    return runtime.environment_block(backend, world_size, gpu)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    run_dir: Path = args.out
    runtime.start_worker(run_dir, rank, args.capture)
    script = str(Path(args.script).resolve())
    sys.argv = [script, *args.args]
    sys.path[0] = os.path.dirname(script)  # as `python script.py` would have it
    started = time.perf_counter()
    import torch  # noqa: F401  (the script's own import is then free: start-up ends here, see mark_ready)

    runtime.mark_ready(run_dir, rank)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            trace = "".join(traceback.format_exception(exc.with_traceback(_from_script(exc.__traceback__, script))))
            why = f"the script exited with code {exc.code}" if isinstance(exc.code, int) else str(exc.code)
            runtime.report_failure(run_dir, rank, SystemExit(why), trace)
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, KeyboardInterrupt included
        trace = "".join(traceback.format_exception(exc.with_traceback(_from_script(exc.__traceback__, script))))
        runtime.report_failure(run_dir, rank, exc, trace)
    try:
        payload = runtime.rank_payload(
            script,
            rank,
            time.perf_counter() - started,
            {"args": list(args.args)},
            _script_environment(args.backend),
            None,
        )
        runtime.write_result(run_dir / f"rank{rank}.json", payload)
    except BaseException as exc:  # noqa: BLE001 - a full disk, a deleted run folder
        runtime.report_failure(run_dir, rank, exc)
    # Python's exit then skips the garbage collections over the heap that torch and its compiler built (0.8 s of
    # a cold rank's 1 s exit on 2 cores); atexit handlers, flushes and the modules' teardown run as at any exit.
    gc.freeze()


if __name__ == "__main__":
    main()
