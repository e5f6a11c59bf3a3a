"""Ranks forked from the warm interpreter: fit to fork, indistinguishable from torchrun's, and a cold start
(said in one line) whenever the interpreter cannot serve a run.

The process layer's contract (nvtutorial/launch/): a rank forked warm sees exactly the environment,
working folder, arguments and random state a rank started by ``torchrun`` sees, computes the same
results, and the warm interpreter itself never initialises CUDA and runs one thread.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import cast

import psutil
import pytest

import nvtutorial
from nvtutorial import launch
from nvtutorial.launch import warm as warm_mod
from nvtutorial.teach import ranks
from tests.helpers.launch import assert_no_process
from tests.helpers.paths import ROOT

REPO = ROOT
RANK_VIEW = REPO / "tests" / "scripts" / "rank_view.py"
DDP_LESSON = REPO / "nvtutorial" / "chapters" / "ch03_ddp_training" / "lessons" / "ddp_train.py"
PER_RUN = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}
"""The variables torchrun gives each run a value of its own (a port, an id, an error file): compared by form."""


@pytest.fixture
def fresh_warm():
    """A warm interpreter of this test's own (the environment set by the test), ended afterwards."""
    warm_mod.shutdown()
    yield
    warm_mod.shutdown()


def interpreter() -> warm_mod.WarmInterpreter:
    warm = warm_mod.get()
    assert warm is not None
    warm.wait_ready()
    return warm


def test_the_warm_interpreter_never_initialises_cuda_and_runs_one_thread(runs_dir):
    warm = interpreter()
    for _ in range(2):  # forking, and the runs, leave it as it was
        res = nvtutorial.run("selftest", nproc=2, backend="gloo", params={"steps": 1, "numel": 64}, output="none")
        assert res.started == "warm" and res.cold_reason is None
    pid = warm.proc.pid
    assert len(os.listdir(f"/proc/{pid}/task")) == 1, "the warm interpreter runs more than one thread"
    if launch.torch_cuda() is None:  # a CPU build never loads the driver (a CUDA build maps it, uninitialised)
        assert "libcuda" not in Path(f"/proc/{pid}/maps").read_text(), "the CUDA driver is loaded in it"
    state = warm.health()
    assert state["threads"] == 1 and state["cuda"] is None and state["problem"] is None
    assert warm.hello["problems"] == [], warm.hello["problems"]
    assert "torch" in psutil.Process(pid).cmdline()[-2] or warm.hello["preload_s"] > 0


def test_torch_compiler_is_preloaded_and_a_variable_read_when_python_starts_means_torchrun(runs_dir, tmp_path, capsys):
    """DDP's constructor and every optimizer import torch._dynamo (1.3 s a rank on 2 cores): a warm rank finds it
    imported. Python reads some variables when it starts, torch's compiler (and inductor's configuration) when
    imported: a run that sets one starts cold and says why."""
    script = tmp_path / "sees.py"
    script.write_text(
        "import sys\nfrom nvtutorial.runtime import save_metrics\n"
        "save_metrics({'dynamo': 'torch._dynamo' in sys.modules})\n"
    )
    warm = nvtutorial.run(script, nproc=1, backend="gloo", output="none")
    assert warm.started == "warm" and warm.metrics["dynamo"] is True
    capsys.readouterr()
    said = "{} is read when Python or torch starts, and the warm interpreter started without it"
    cold = nvtutorial.run(script, nproc=1, backend="gloo", env={"PYTHONHASHSEED": "123", "TORCHDYNAMO_VERBOSE": "1"})
    assert cold.ok and cold.started == "torchrun" and cold.metrics["dynamo"] is False
    assert cold.cold_reason == said.format("PYTHONHASHSEED=123")  # the first of the two, by name
    out = capsys.readouterr().out
    assert f"[nvtutorial] starting with torchrun instead of warm ranks: {cold.cold_reason}" in out
    started = r"^\[nvtutorial\] started with: CUDA_VISIBLE_DEVICES='' OMP_NUM_THREADS=\d+ "
    assert re.search(f"{started}PYTHONHASHSEED=123 TORCHDYNAMO_VERBOSE=1 torchrun --standalone ", out, re.M), out
    # each of the compiler's and inductor's variables alone is refused by the warm interpreter that served the run
    # above, in the same sentence (one cold run shows what a refusal leads to; each more is 7-10 s on 2 cores)
    interpreter = warm_mod.get()
    for key in ("TORCHDYNAMO_VERBOSE", "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCH_COMPILE_DISABLE"):
        with pytest.raises(warm_mod.WarmUnavailable) as refused:
            interpreter.spawn([str(script)], {**interpreter.base_env, key: "1"}, fds={0: 0, 1: 1, 2: 2})
        assert str(refused.value) == said.format(f"{key}=1")


def test_a_cold_rank_ends_as_python_does_with_its_heap_frozen(tmp_path):
    """runtime_script freezes the heap before Python's exit (its collections then skip torch's: 0.8 s of a cold
    rank's 1 s exit on 2 cores), and the exit is still Python's: atexit handlers run, an unclosed file is flushed."""
    script = tmp_path / "leaves.py"
    script.write_text(
        "import atexit, gc\n"
        f"unclosed = open({str(tmp_path / 'unclosed.txt')!r}, 'w')\n"
        "unclosed.write('flushed at exit')\n"
        f"atexit.register(lambda: open({str(tmp_path / 'frozen.txt')!r}, 'w').write(str(gc.get_freeze_count())))\n"
    )
    cmd = [sys.executable, "-m", "nvtutorial.launch.runtime_script", "--out", str(tmp_path / "run"), "--", str(script)]
    subprocess.run(cmd, check=True, env={**os.environ, "RANK": "0", "WORLD_SIZE": "1"}, timeout=120)
    assert (tmp_path / "unclosed.txt").read_text() == "flushed at exit"
    assert int((tmp_path / "frozen.txt").read_text()) > 10_000  # torch's objects, frozen before the exit
    assert json.loads((tmp_path / "run" / "rank0.json").read_text())["params"] == {"args": []}


def test_a_rank_cannot_tell_how_it_was_started(runs_dir):
    """The same script under both launchers: every variable, the folder, argv, sys.path[0], __name__, thread
    count, store and output buffering the same; the per-run values of the same form; torch's seed fresh."""
    # TORCH_DISTRIBUTED_DEBUG is read when torch.distributed is imported, OMP_NUM_THREADS when OpenBLAS is loaded:
    # a forked rank must take both from its own environment
    detail = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "OMP_NUM_THREADS": "2"}
    warm = nvtutorial.run(RANK_VIEW, nproc=2, backend="gloo", output="none", env=detail)
    cold = nvtutorial.run(RANK_VIEW, nproc=2, backend="gloo", output="none", launcher="torchrun", env=detail)
    assert (warm.started, cold.started) == ("warm", "torchrun")
    assert (
        warm.torchrun
        == cold.torchrun
        == (
            f"CUDA_VISIBLE_DEVICES='' OMP_NUM_THREADS=2 TORCH_DISTRIBUTED_DEBUG=DETAIL "
            f"torchrun --standalone --nproc-per-node 2 {RANK_VIEW}"
        )
    )
    for rank in range(2):
        w, c = dict(warm.ranks[rank]), dict(cold.ranks[rank])
        w_env, c_env = w.pop("env"), c.pop("env")
        assert set(w_env) == set(c_env), set(w_env) ^ set(c_env)
        differ = {k for k in w_env if w_env[k] != c_env[k]}
        assert differ <= PER_RUN, {k: (w_env[k], c_env[k]) for k in differ - PER_RUN}
        assert w_env["RANK"] == w_env["LOCAL_RANK"] == str(rank) and w_env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        assert w_env["MASTER_PORT"].isdigit() and w_env["TORCHELASTIC_ERROR_FILE"].endswith(
            f"rank{rank}.torchelastic-error.json"
        )
        seeds = (w.pop("initial_seed"), c.pop("initial_seed"))
        w.pop("rand")
        c.pop("rand")
        assert w == c, {k: (w[k], c[k]) for k in w if w[k] != c[k]}
        assert w["sum"] == 3.0 and w["main"] == "__main__" and w["store"] == "PrefixStore"
        assert w["debug_level"] == "DebugLevel.DETAIL" and w["threads"] == w["openblas_threads"] == 2
        assert w_env["MASTER_ADDR"] == c_env["MASTER_ADDR"] == socket.getfqdn()  # what torchrun's rendezvous publishes
        assert seeds[0] != seeds[1]
    # torch's CPU generator is seeded from the OS in every fresh process: forked ranks must not share a stream
    assert warm.ranks[0]["initial_seed"] != warm.ranks[1]["initial_seed"]
    assert warm.ranks[0]["rand"] != warm.ranks[1]["rand"]


def test_the_same_lesson_gives_the_same_weights_either_way(runs_dir):
    """03's DDP lesson (with a DataLoader worker forked from each rank): identical losses and weights."""
    args = [
        "--model",
        "tiny",
        "--image-size",
        "16",
        "--samples",
        "32",
        "--val-samples",
        "8",
        "--batch-size",
        "4",
        "--epochs",
        "1",
        "--workers",
        "1",
    ]
    warm = nvtutorial.run(DDP_LESSON, nproc=2, backend="gloo", args=args, output="none", timeout=300)
    cold = nvtutorial.run(
        DDP_LESSON, nproc=2, backend="gloo", args=args, output="none", timeout=300, launcher="torchrun"
    )
    assert (warm.started, cold.started) == ("warm", "torchrun")
    assert warm.metrics["history"] == cold.metrics["history"]
    assert warm.metrics["weights_sha256"] == cold.metrics["weights_sha256"]
    assert warm.ranks[1]["weights_sha256"] == warm.metrics["weights_sha256"]


def test_a_thread_in_the_warm_interpreter_means_torchrun(runs_dir, fresh_warm, monkeypatch, tmp_path, capsys):
    """A preloaded module that starts a thread makes forking unsafe: the run starts cold and says why."""
    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("NVTUTORIAL_WARM_PRELOAD", "starts_a_thread")
    res = nvtutorial.run("selftest", nproc=2, backend="gloo", params={"steps": 1, "numel": 64})
    assert res.ok and res.started == "torchrun"
    assert res.cold_reason == "the warm interpreter runs 2 threads (forking it is safe only with one)"
    assert res.cold_reason in capsys.readouterr().out


def test_a_dead_warm_interpreter_means_one_cold_run_then_a_new_one(runs_dir, fresh_warm, capsys):
    warm = interpreter()
    os.kill(warm.proc.pid, signal.SIGKILL)
    warm.proc.wait()
    first = nvtutorial.run("selftest", nproc=2, backend="gloo", params={"steps": 1, "numel": 64})
    assert first.ok and first.started == "torchrun"
    assert first.cold_reason.startswith("the warm interpreter exited (killed by SIGKILL)"), first.cold_reason
    second = nvtutorial.run("selftest", nproc=2, backend="gloo", params={"steps": 1, "numel": 64}, output="none")
    assert second.ok and second.started == "warm"
    assert warm_mod.get().proc.pid != warm.proc.pid


def test_a_changed_file_renews_the_warm_interpreter(runs_dir, fresh_warm, monkeypatch, tmp_path, capsys):
    """A learner edits a file the ranks import: the next run gets a new interpreter that imported the edit."""
    module = tmp_path / "learner_module.py"
    module.write_text("VALUE = 1\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("NVTUTORIAL_WARM_PRELOAD", "learner_module")
    script = tmp_path / "reads.py"
    script.write_text(
        "import learner_module\nfrom nvtutorial.runtime import save_metrics\n"
        "save_metrics({'value': learner_module.VALUE})\n"
    )
    before = nvtutorial.run(script, nproc=1, backend="gloo", output="none")
    old = warm_mod.get().proc.pid
    module.write_text("VALUE = 2\n")
    os.utime(module, (time.time() + 5, time.time() + 5))  # a new modification time, whatever the clock's grain
    after = nvtutorial.run(script, nproc=1, backend="gloo", output="none")
    assert (before.metrics["value"], after.metrics["value"]) == (1, 2)
    assert before.started == after.started == "warm" and warm_mod.get().proc.pid != old
    said = capsys.readouterr().out
    assert (
        f"[nvtutorial] {module} changed since the warm interpreter imported it: starting a new warm interpreter" in said
    )


def test_the_warm_interpreter_ends_with_the_process_that_started_it(tmp_path):
    code = textwrap.dedent(f"""
        import nvtutorial
        from nvtutorial.launch import warm
        nvtutorial.run("selftest", nproc=1, backend="gloo", params={{"steps": 1, "numel": 8}},
                       out={str(tmp_path / "run")!r}, output="none")
        print(warm.get().proc.pid, flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    pid = int(done.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the warm interpreter outlived the process that started it"
        time.sleep(0.1)
    assert_no_process(tmp_path / "run")


def test_closing_does_not_wait_for_an_interpreter_still_importing_torch():
    """A warm interpreter that notices the closed socket only after ``import torch`` is ended at once: it took 2.8 s
    to close on the idle 2-core machine, 0.5 s now."""
    w = warm_mod.WarmInterpreter()
    try:
        assert w.proc.poll() is None  # still starting: its import of torch takes seconds
        t0 = time.monotonic()
        w.close()
        assert w.proc.returncode is not None
        assert time.monotonic() - t0 < 2.0, "close waited for the import"
    finally:
        if w.proc.poll() is None:
            w.proc.kill()


class _Stubborn:
    """A process that outlasts each wait until it is sent ``ends_on``."""

    def __init__(self, ends_on: str | None):
        self.sent: list[str] = []
        self.ends_on, self.returncode = ends_on, None

    def _send(self, what: str) -> None:
        self.sent.append(what)
        if what == self.ends_on:
            self.returncode = -1

    def terminate(self) -> None:
        self._send("terminate")

    def kill(self) -> None:
        self._send("kill")

    def wait(self, timeout=None):
        if self.returncode is None and timeout is not None:
            raise subprocess.TimeoutExpired("warm", timeout)
        return self.returncode


@pytest.mark.parametrize(
    "ends_on, sent", [("itself", []), ("terminate", ["terminate"]), ("kill", ["terminate", "kill"])]
)
def test_closing_escalates_from_waiting_to_terminate_to_kill(ends_on, sent):
    w = warm_mod.WarmInterpreter.__new__(warm_mod.WarmInterpreter)
    stubborn = _Stubborn(ends_on)
    w.sock, w.proc = socket.socket(), cast(subprocess.Popen, stubborn)
    w._reader = cast(threading.Thread, type("Done", (), {"join": staticmethod(lambda timeout=None: None)})())
    w.proc.stderr = None
    if ends_on == "itself":  # it ends on its own within the first wait
        w.proc.returncode = 0
    w.close()
    assert stubborn.sent == sent


def test_ranks_cells_run_on_warm_ranks():
    pool = ranks.start(nproc=2, backend="gloo", quiet=True)
    try:
        assert pool.cold_reason is None
        assert all(isinstance(w.proc, warm_mod.Forked) for w in pool.workers)
        result = ranks.run_code("import os\nx = int(os.environ['RANK']) + int(os.environ['WORLD_SIZE'])")
        assert all(o.status == "ok" for o in result.outcomes)
        assert ranks.pull("x") == [2, 3]
    finally:
        ranks.stop()


def test_the_cli_forces_torchrun(runs_dir, capsys):
    from nvtutorial import cli

    assert (
        cli.main(["run", "selftest", "--nproc", "1", "--set", "steps=1", "--torchrun", "--out", str(runs_dir / "cli")])
        == 0
    )
    assert (
        "[nvtutorial] started with: CUDA_VISIBLE_DEVICES='' OMP_NUM_THREADS=2 torchrun --standalone --nproc-per-node 1 "
        "-m nvtutorial.workloads.selftest --backend gloo"
    ) in capsys.readouterr().out


def test_the_printed_torchrun_line_runs_the_same_run(runs_dir, tmp_path, capfd):
    """Typed in a terminal, the line a run prints (its parameters at their defaults left out) and the full one in
    result.json start ranks with the same backend, GPUs hidden, thread count and parameters."""
    res = nvtutorial.run(
        "selftest",
        nproc=2,
        backend="gloo",
        output="none",
        params={"steps": 1, "numel": 8, "mode": "ok", "report_env": ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")},
    )
    (printed,) = re.findall(r"^\[nvtutorial\] ranks forked warm, as: (.*)$", capfd.readouterr().out, re.M)
    assert len(printed) < len(res.torchrun) and "mode=ok" not in printed and "mode=ok" in res.torchrun
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for line, out in ((printed, "typed"), (res.torchrun, "typed-full")):
        typed = subprocess.run(
            f"{line} --out {out}", shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert typed.returncode == 0, typed.stderr[-2000:]
        for rank in range(2):
            saw = json.loads((tmp_path / out / f"rank{rank}.json").read_text())
            assert saw["env"]["backend"] == res.env.backend == "gloo"
            assert saw["metrics"]["env"] == res.ranks[rank]["env"]
            assert saw["metrics"]["numel"] == res.ranks[rank]["numel"] == 8
        assert shlex.split(line)[0].startswith("CUDA_VISIBLE_DEVICES=")
