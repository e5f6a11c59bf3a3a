"""``%%ranks``: cells on two real gloo ranks, in-process and through real Jupyter kernels.

Every case ends by checking that no rank process is left. The in-process cases share one group
(``group``); the kernel cases share one kernel (``kernel``), which the last of them kills.
"""

from __future__ import annotations

import ast
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from nvtutorial.teach import _ranks_pool, ranks
from tests.helpers.kernel import Kernel
from tests.helpers.launch import requires_two_gpus
from tests.helpers.paths import ROOT

TEACH = Path(ranks.__file__).parent
KERNEL_SIDE = [TEACH / "ranks.py", TEACH / "_ranks_pool.py", TEACH / "_ranks_result.py"]


SLEEPER = (
    "%%ranks\nimport subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\nprint('child', child.pid)"
)
"""A cell that starts a process on each rank (it must end with the rank)."""


def child_pids(text: str) -> list[int]:
    return [int(line.split()[-1]) for line in text.splitlines() if " child " in line]


def alive(pids: list[int]) -> list[int]:
    """The pids still running (a zombie waiting for a parent to reap it counts as ended)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def assert_gone(pids: list[int], within: float = 5.0) -> None:
    assert pids, "no rank pids were recorded"
    end = time.monotonic() + within
    while alive(pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(pids), f"rank processes still running: {alive(pids)}"


# ----- in-process: the Python API -----------------------------------------------------------------
@pytest.fixture(scope="module")
def group():
    pool = ranks.start(nproc=2, backend="gloo", timeout=60, quiet=True)
    pids = {"all": list(pool.pids())}
    yield pids
    pids["all"] += ranks.status().get("pids", [])
    ranks.stop()
    assert_gone(pids["all"])


@pytest.fixture(autouse=True)
def short_graces(request, monkeypatch):
    """In-process cases wait less for ranks to finish or stop (the kernel cases keep the defaults)."""
    if "group" in request.fixturenames:
        monkeypatch.setattr(_ranks_pool, "FAILURE_GRACE_S", 0.5)
        monkeypatch.setattr(_ranks_pool, "INTERRUPT_GRACE_S", 0.5)
        monkeypatch.setattr(_ranks_pool, "ABORT_GRACE_S", 1.0)


def test_all_reduce_on_two_ranks_variables_persist_and_pull(group):
    result = ranks.run_code("t = torch.ones(3) * (rank + 1)\ndist.all_reduce(t)\nprint('sum', t.sum().item())")
    assert result.ok, result.report()
    assert [o.output for o in result.outcomes] == ["sum 9.0", "sum 9.0"]
    assert ranks.run_code("u = t * 2").ok
    values = ranks.pull("u")
    assert [v.tolist() for v in values] == [[6.0, 6.0, 6.0]] * 2
    assert ranks.pull("(rank, world_size, local_rank, str(device), backend, dist.get_backend())") == [
        (0, 2, 0, "cpu", "gloo", "gloo"),
        (1, 2, 1, "cpu", "gloo", "gloo"),
    ]
    assert ranks.pull("rank", ranks="1") == [1]
    ranks.push(k=5)
    assert ranks.pull("k * (rank + 1)") == [5, 10]
    # a final expression is shown, as in Jupyter
    assert [o.output for o in ranks.run_code("rank * 100").outcomes] == ["0", "100"]
    # a cell on some ranks only
    solo = ranks.run_code("solo = True", ranks="1")
    assert solo.ok and [o.status for o in solo.outcomes] == ["skipped", "ok"]
    assert ranks.pull("'solo' in globals()") == [False, True]


def test_cpu_ranks_see_no_gpu(group):
    assert ranks.pull("__import__('os').environ['CUDA_VISIBLE_DEVICES']") == ["", ""]
    assert ranks.pull("torch.cuda.device_count()") == [0, 0]


def test_exception_names_the_rank_with_its_traceback(group):
    result = ranks.run_code("x = 1\nif rank == 1:\n    1 / 0\n")
    assert not result.ok and result.failed == [1]
    bad = result.outcomes[1]
    assert bad.status == "error" and bad.exc_type == "ZeroDivisionError" and bad.traceback is not None
    assert "<ranks cell" in bad.traceback and "1 / 0" in bad.traceback and "_ranks_worker" not in bad.traceback
    assert result.outcomes[0].status == "ok"
    with pytest.raises(ranks.RankFailed, match="rank 1 failed: ZeroDivisionError"):
        raise ranks.RankFailed(result)
    assert ranks.pull("x") == [1, 1]  # the group was not touched: an error alone needs no recovery


def test_failure_stops_the_rank_waiting_for_it_and_keeps_variables(group):
    pids = ranks.status()["pids"]
    ranks.run_code("kept = rank + 10")
    result = ranks.run_code("t = torch.ones(1)\nif rank == 1:\n    raise ValueError('boom')\ndist.all_reduce(t)")
    assert result.failed == [0, 1]
    assert result.outcomes[1].exc_type == "ValueError"
    waiting = result.outcomes[0]
    assert waiting.status == "stopped" and waiting.stack is not None and "all_reduce" in waiting.stack
    assert result.group_kept and result.recovery is not None and "aborted" in result.recovery
    assert ranks.status()["pids"] == pids
    after = ranks.run_code("t = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)")
    assert after.ok and [v.item() for v in ranks.pull("t")] == [3.0, 3.0]
    assert ranks.pull("kept") == [10, 11]


def test_hang_ends_at_the_deadline_with_stacks_and_the_group_recovers(group):
    pids = ranks.status()["pids"]
    ranks.run_code("before = rank")
    result = ranks.run_code(
        "t = torch.ones(1)\nif rank == 0:\n    dist.all_reduce(t)  # rank 1 never joins", timeout=1.5
    )
    assert result.reason == "timeout" and result.failed == [0]
    stack = result.outcomes[0].stack
    assert stack is not None
    assert "dist.all_reduce(t)  # rank 1 never joins" in stack and "<ranks cell" in stack
    assert "did not finish within its 1.5 s deadline on rank 0" in result.report()[0]
    assert result.group_kept and result.recovery is not None
    assert "process group was aborted and created again" in result.recovery
    assert ranks.status()["pids"] == pids
    assert ranks.run_code("t = torch.ones(1)\ndist.all_reduce(t)").ok
    assert [v.item() for v in ranks.pull("t")] == [2.0, 2.0]
    assert ranks.pull("before") == [0, 1]


def test_plain_python_stops_at_sigint_and_keeps_everything(group):
    pids = ranks.status()["pids"]
    result = ranks.run_code("import time\nprint('sleeping', flush=True)\ntime.sleep(60)", timeout=1.0)
    assert result.reason == "timeout" and {o.status for o in result.outcomes} == {"timeout"}
    assert all(o.stack is not None and "time.sleep(60)" in o.stack for o in result.outcomes)
    assert result.group_kept and result.recovery is not None and "stopped at SIGINT" in result.recovery
    assert ranks.status()["pids"] == pids and ranks.run_code("pass").ok


@pytest.mark.parametrize("backend, queued_note", [("gloo", False), ("nccl", True)])
def test_stop_messages_say_what_each_backend_leaves_behind(backend, queued_note):
    """SIGINT stops plain Python on both backends; with NCCL a collective queued before it may still wait for its
    peers (gloo's are synchronous), and what SIGINT cannot interrupt is a wait for the GPU, not the collective."""
    stopped = _ranks_pool.stopped_at_sigint([0, 1], backend)
    ended, kept = stopped.split("\n")
    assert ended.startswith("ended: the cell on rank 0, 1") and kept.startswith("kept: the ranks, their variables")
    assert ("queued" in kept) is queued_note and ("%ranks stop, then %ranks start" in kept) is queued_note
    freed = _ranks_pool.freed_by_abort([0, 1], [1], backend, 0.25)
    assert "rank 1 did not stop at SIGINT" in freed and "in 0.25 s" in freed and freed.count("\n") == 1
    assert ("a gloo collective" in freed) is (backend == "gloo") and (".item()" in freed) is (backend != "gloo")
    assert _ranks_pool.ended_every_rank("rank 1 exited").split("\n")[0] == "ended: every rank (rank 1 exited)"


def test_bad_input_is_refused_before_anything_starts(group):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ranks.RanksUsageError, match="at least 1"):
        ranks.start(nproc=0)
    with pytest.raises(ranks.RanksUsageError, match="unknown backend"):
        ranks.start(backend="mpi")
    with pytest.raises(ranks.RanksUsageError, match="ranks 0 to 1"):
        ranks.run_code("pass", ranks=[2])
    with pytest.raises(ranks.RanksUsageError, match="environment variable name"):
        ranks.start(env={"A=B": "1"})
    if ranks._torch_cuda_build() is None:
        with pytest.raises(ranks.RanksUsageError, match="CPU-only build.*--backend gloo"):
            ranks.start(backend="nccl")
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before
    assert ranks.status()["running"]


def test_a_rank_that_ignores_sigint_is_ended_with_the_others(group):
    old = ranks.status()["pids"]
    code = "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except KeyboardInterrupt:\n        pass"
    result = ranks.run_code(code, timeout=1.0)
    assert result.reason == "timeout" and not result.group_kept and result.recovery is not None
    assert result.recovery.startswith("ended: every rank (rank ") and "variables are lost" in result.recovery
    assert_gone(old)
    assert not ranks.status()["running"]  # the next cell starts new ranks (tested by every first cell)


def test_line_magic_commands(group, capsys):
    from IPython.core.error import UsageError

    ranks.ranks_magic("start --nproc 2 --backend gloo")  # the ranks ended by the last test: new ones
    pids = ranks.status()["pids"]
    group["all"] += pids
    ranks.ranks_magic("start --nproc 2 --backend gloo")
    assert "already running" in capsys.readouterr().out
    assert ranks.ranks_magic("pull rank * 2") == [0, 2]
    with pytest.raises(UsageError, match="already running with other settings"):
        ranks.ranks_magic("start --nproc 3")
    with pytest.raises(UsageError, match="invalid choice"):
        ranks.ranks_magic("start --backend mpi")
    with pytest.raises(UsageError, match="does not exist"):
        ranks.ranks_magic("--rank 5", "pass")
    ranks.ranks_magic("status")
    assert f"pids {pids}" in capsys.readouterr().out
    ranks.ranks_magic("", SLEEPER.split("\n", 1)[1])
    children = child_pids(capsys.readouterr().out)
    assert len(alive(children)) == 2
    ranks.ranks_magic("stop")
    assert "every rank was ended" in capsys.readouterr().out
    assert_gone(pids + children, within=1.0)
    assert not ranks.status()["running"]


def test_a_rank_that_exits_is_reported_and_the_next_cell_starts_new_ranks(group):
    assert ranks.run_code("pass").ok  # after the previous test ended them: new ranks
    pids = ranks.status()["pids"]
    group["all"] += pids
    result = ranks.run_code("import os\nt = torch.ones(1)\nif rank == 1:\n    os._exit(3)\ndist.all_reduce(t)")
    assert result.outcomes[1].status == "died" and result.outcomes[1].exitcode == 3
    peer = result.outcomes[0]  # gloo may notice the closed connection first, else it is stopped
    said = peer.stack or peer.traceback
    assert peer.status in ("error", "stopped") and said is not None and "all_reduce" in said
    assert result.recovery is not None and "rank 1 (exit code 3) exited" in result.recovery and not result.group_kept
    assert not ranks.status()["running"]
    assert_gone(pids)


# ----- the kernel never touches CUDA: checked on the code itself ----------------------------------
def test_kernel_side_modules_never_import_or_use_torch():
    for path in KERNEL_SIDE:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "torch" for a in node.names), f"{path.name}:{node.lineno}"
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "torch", f"{path.name}:{node.lineno}"
            elif isinstance(node, ast.Name):
                assert node.id != "torch", f"{path.name}:{node.lineno} uses torch"


# ----- through a real Jupyter kernel -------------------------------------------------------------
class _Kernel(Kernel):
    seen: list[int]
    """The ranks' pids the tests saw: all gone once the kernel is closed."""


@pytest.fixture(scope="module")
def kernel():
    k = _Kernel()
    # gloo even where there are GPUs (the outputs below are CPU tensors); the first cell starts the ranks
    k.execute(
        "%load_ext nvtutorial.teach.ranks\nimport nvtutorial.teach.ranks\n"
        "nvtutorial.teach.ranks.configure(nproc=2, backend='gloo')"
    )
    seen: list[int] = []
    k.seen = seen
    yield k
    if k.km.is_alive():
        seen += k.pids()
    k.close()
    assert_gone(seen)


def test_kernel_cell_runs_on_two_ranks_and_never_loads_torch(kernel):
    out = kernel.execute("%%ranks\nt = torch.ones(2) * (rank + 1)\ndist.all_reduce(t)\nprint(t)")
    kernel.seen += kernel.pids()
    assert out["status"] == "ok", out
    assert "[rank0] tensor([3., 3.])" in out["stdout"] and "[rank1] tensor([3., 3.])" in out["stdout"]
    assert kernel.execute("%%ranks\nt * 10")["stdout"].count("tensor([30., 30.])") == 2  # variables persist
    # The kernel itself has not even imported torch: it cannot have initialised CUDA.
    assert kernel.execute("import sys; print('torch' in sys.modules)")["stdout"].strip() == "False"
    out = kernel.execute(
        "values = %ranks pull t\nprint([v.tolist() for v in values])\nimport torch; print(torch.cuda.is_initialized())"
    )
    # tensors arrive as torch tensors: the kernel imports torch, and says so (and, every 1.5 s, that it goes on: a CUDA
    # build on a busy machine, a timing the test leaves out)
    lines = [line for line in out["stdout"].splitlines() if not line.startswith("[nvtutorial] still importing torch")]
    assert lines == [
        "[nvtutorial] importing PyTorch in this kernel (once per kernel; it starts no GPU)",
        "[[3.0, 3.0], [3.0, 3.0]]",
        "False",
    ], out


def test_kernel_streams_each_line_once_while_the_cell_runs(kernel, tmp_path):
    flag = tmp_path / "go"
    code = (
        f"%%ranks\nimport os, time\nprint('waiting', flush=True)\n"
        f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.02)\n"
        f"for i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.3)"
    )

    def release(out):  # the cell waits for the flag, which the test sets once both ranks' lines arrived
        if out["stdout"].count("waiting") == 2:
            flag.touch()

    out = kernel.execute(code, on_stream=release)
    assert out["status"] == "ok" and flag.exists(), out
    lines = out["stdout"].splitlines()
    for r in (0, 1):
        mine = [ln for ln in lines if ln.startswith(f"[rank{r}] ")]
        assert mine == [f"[rank{r}] waiting"] + [f"[rank{r}] line {i}" for i in range(3)]  # each once, in order
    assert len(out["streams"]) >= 2  # "waiting" arrived in a message of its own, before the rest existed


def test_kernel_error_shows_the_failing_rank_and_fails_the_cell(kernel):
    out = kernel.execute("%%ranks\nif rank == 1:\n    raise ValueError('boom on one rank')")
    assert out["status"] == "error"
    ename, text = out["error"]
    assert ename == "RankFailed"
    assert "rank 1 failed: ValueError: boom on one rank (rank 0: ok)" in text
    assert "raise ValueError('boom on one rank')" in text and "_ranks_pool" not in text


def test_kernel_hang_shows_stacks_at_the_deadline_then_works(kernel):
    out = kernel.execute("%%ranks --timeout 1.5\nkept = rank\nif rank == 0:\n    dist.all_reduce(t)")
    assert out["status"] == "error" and out["error"][0] == "RanksTimeout"
    text = out["error"][1]
    assert "deadline on rank 0" in text and "dist.all_reduce(t)" in text and "created again" in text
    out = kernel.execute("%%ranks\nt = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item(), kept)")
    assert out["status"] == "ok" and "[rank0] 2.0 0" in out["stdout"] and "[rank1] 2.0 1" in out["stdout"]


def test_kernel_interrupt_stops_every_rank(kernel):
    # the ranks up, whether or not a test before started them, with a variable the interrupt must keep
    assert kernel.execute("%%ranks\nkept = rank")["status"] == "ok"
    pids = kernel.pids()
    assert len(pids) == 2
    code = (
        "%%ranks\nimport time\nprint('running', flush=True)\n"
        "if rank == 0:\n    time.sleep(120)\nelse:\n    dist.all_reduce(torch.ones(1))  # waits for rank 0"
    )
    sent = threading.Event()

    def interrupt(out):
        if out["stdout"].count("running") == 2 and not sent.is_set():
            sent.set()
            kernel.km.interrupt_kernel()

    out = kernel.execute(code, timeout=60, on_stream=interrupt)
    assert sent.is_set() and out["status"] == "error"
    ename, text = out["error"]
    assert ename == "RanksInterrupted" and text.startswith("KeyboardInterrupt: stopped while rank 0, 1 ran this cell")
    assert "time.sleep(120)" in text  # where rank 0 was
    assert "rank 1 did not stop at SIGINT" in text and "\nkept: the ranks and their variables" in text
    assert kernel.pids() == pids
    out = kernel.execute("%%ranks\nt = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item(), kept)")
    assert out["status"] == "ok" and "[rank1] 2.0 1" in out["stdout"], out


def test_kernel_killed_leaves_no_rank(kernel):
    children = child_pids(kernel.execute(SLEEPER)["stdout"])  # and a process each rank started
    pids = kernel.pids()
    assert len(alive(pids)) == 2 and len(alive(children)) == 2
    os.kill(kernel.km.provisioner.process.pid, signal.SIGKILL)
    assert_gone(pids + children, within=5.0)
    kernel.km.shutdown_kernel(now=True)


# ----- headless: papermill -----------------------------------------------------------------------
def test_papermill_captures_rank_output_and_sees_a_failed_cell(tmp_path):
    import nbformat
    import papermill

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext nvtutorial.teach.ranks\n%ranks start --nproc 2 --backend gloo"),
        nbformat.v4.new_code_cell(
            "%%ranks\nt = torch.ones(1) * (rank + 1)\ndist.all_reduce(t)\nprint('sum', t.item())"
        ),
        nbformat.v4.new_code_cell("from nvtutorial.teach import ranks\nprint('pids', ranks.status()['pids'])"),
        nbformat.v4.new_code_cell("%%ranks\nassert rank == 0, 'only rank 0 passes'"),
    ]
    src, dst = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, src)
    with pytest.raises(papermill.PapermillExecutionError) as info:
        papermill.execute_notebook(str(src), str(dst), kernel_name="python3", progress_bar=False, cwd=str(ROOT))
    assert info.value.ename == "RankFailed" and "only rank 0 passes" in info.value.evalue
    done = {c.source: c for c in nbformat.read(dst, as_version=4).cells}

    def shown(cell):
        return "".join(o.get("text", "") for o in done[cell.source].outputs)

    assert "[rank0] sum 3.0" in shown(nb.cells[1]) and "[rank1] sum 3.0" in shown(nb.cells[1])
    pids = ast.literal_eval(shown(nb.cells[2]).split("pids", 1)[1].strip())
    assert_gone(pids)  # papermill shut the kernel down, and the ranks with it


# ----- GPUs, NCCL (the lead's GPU machine) ---------------------------------------------------------
def _gpus() -> int:
    from nvtutorial.machine import hardware

    return hardware.gpu_count() if ranks._torch_cuda_build() else 0


@contextlib.contextmanager
def _nccl_ranks(nproc: int):
    """``nproc`` NCCL ranks for a test's body; after it, this process has never initialised CUDA (what it pulled from
    the ranks came as CPU copies), and once the ranks are stopped none of their processes is left."""
    pool = ranks.start(nproc=nproc, backend="nccl", quiet=True)
    pids = list(pool.pids())
    try:
        yield
        pids += ranks.status().get("pids", [])
        assert not sys.modules["torch"].cuda.is_initialized()
    finally:
        ranks.stop()
    assert_gone(pids)


@pytest.mark.skipif(_gpus() < 1, reason="needs a GPU with a CUDA build of torch (none here)")
def test_nccl_rank_on_one_gpu_and_the_caller_never_initialises_cuda():
    with _nccl_ranks(1):
        result = ranks.run_code(
            "import os\nt = torch.ones(4, device=device) * 3\ndist.all_reduce(t)\n"
            "torch.cuda.synchronize()\nprint(t.device, os.environ['TORCH_NCCL_ASYNC_ERROR_HANDLING'])"
        )
        assert result.ok, result.report()
        assert result.outcomes[0].output == "cuda:0 0"
        (t,) = ranks.pull("t")
        assert t.device.type == "cpu" and t.tolist() == [3.0] * 4
        hang = ranks.run_code("torch.cuda._sleep(int(1e12))\ntorch.cuda.synchronize()", timeout=2)
        stack = hang.outcomes[0].stack
        assert hang.reason == "timeout" and stack is not None and "synchronize" in stack, hang.report()


# ----- two GPUs, NCCL (the lead's GPU machine) ---------------------------------------------------
@requires_two_gpus
def test_nccl_all_reduce_and_a_hang_recovered_on_two_gpus():
    with _nccl_ranks(2):
        result = ranks.run_code(
            "t = torch.ones(4, device=device) * (rank + 1)\ndist.all_reduce(t)\n"
            "torch.cuda.synchronize()\nprint(t.device)"
        )
        assert result.ok, result.report()
        assert [o.output for o in result.outcomes] == ["cuda:0", "cuda:1"]
        assert [v.tolist() for v in ranks.pull("t")] == [[3.0] * 4] * 2
        hang = ranks.run_code("if rank == 0:\n    dist.all_reduce(t)\n    torch.cuda.synchronize()", timeout=5)
        assert hang.reason == "timeout" and hang.failed == [0], hang.report()
        # the NCCL abort frees rank 0 (its process and variables stay), and the group works again
        recovery = hang.recovery
        assert hang.group_kept and recovery is not None and "aborted and created again" in recovery, hang.report()
        after = ranks.run_code("t = torch.ones(1, device=device)\ndist.all_reduce(t)\nassert t.item() == 2")
        assert after.ok, after.report()


def test_stop_while_the_ranks_start_says_so_in_three_lines(monkeypatch):
    """Stop pressed while the first %%ranks cell starts its ranks: what was running, what was ended, what is kept
    (as every Stop says it), no traceback of ours."""
    from nvtutorial.teach import _ranks_pool

    def interrupted(self):
        self.stop()
        raise KeyboardInterrupt

    monkeypatch.setattr(_ranks_pool.Pool, "start", interrupted)
    with pytest.raises(ranks.RanksStartInterrupted) as info:
        ranks.start(nproc=2, backend="gloo", quiet=True)
    assert isinstance(info.value, KeyboardInterrupt)  # Run All stops there
    assert info.value._render_traceback_() == [
        "KeyboardInterrupt: stopped while 2 ranks were starting (their processes and process group)",
        "ended: every rank that had started",
        "kept: nothing; the next %%ranks cell starts new ranks",
    ]
    assert ranks.status()["running"] is False


@pytest.mark.parametrize(
    "cuda, gpus, backend, said",
    [
        ("13.0", 2, "auto", "GPUs, NCCL"),  # resolved nccl
        ("13.0", 1, "auto", "CPU, gloo: 2 ranks need 2 GPUs for NCCL; this machine's 1 GPU hidden from them"),
        ("13.0", 2, "gloo", "CPU, gloo as asked; this machine's 2 GPUs hidden from them"),
        ("13.0", 0, "auto", "CPU, gloo; no GPU visible to a CUDA build of torch"),
        (None, 1, "auto", "CPU, gloo; no GPU visible to a CUDA build of torch"),  # a CPU build sees none
    ],
)
def test_the_start_line_says_why_the_ranks_run_on_the_cpu(monkeypatch, cuda, gpus, backend, said):
    """Review R1-18.5: a machine with a GPU is told why its ranks run on the CPU, never that it has no GPU."""
    from nvtutorial import launch
    from nvtutorial.machine import hardware

    monkeypatch.setattr(launch, "torch_cuda", lambda: cuda)
    monkeypatch.setattr(hardware, "gpu_count", lambda: gpus)
    resolved = "nccl" if said.startswith("GPUs") else "gloo"
    assert ranks._where(resolved, backend, 2) == said
