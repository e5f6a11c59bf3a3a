"""Reading the ``pitfalls`` workload's results in the notebook (parent side; never touches CUDA).

Used by notebook 06: tables, the lines that say where each rank was, the NCCL flight recorder's
dumps, and the verdicts on claims C17 to C21 computed from the measured numbers. The traps are
launched by :mod:`nvtutorial.experiments.pitfalls`.
"""

from __future__ import annotations

import os
import pickle
import re
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..units import knee


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.IGNORECASE)


def where_ranks(text_by_rank: Mapping[int, str], package: str = "nvtutorial") -> dict[int, dict[str, Any]]:
    """From faulthandler stack dumps (a rank's log): where each rank's main thread was.

    faulthandler prints ``Thread 0x... (most recent call first):`` then ``File "...", line N in
    func`` lines. The main thread is the block whose outermost frame is the workload's entry;
    the answer is its innermost frame overall and its three innermost frames inside ``package``.
    """
    out: dict[int, dict[str, Any]] = {}
    for rank, text in text_by_rank.items():
        blocks: list[list[dict[str, str]]] = []
        current: list[dict[str, str]] | None = None
        for line in text.splitlines():
            if _THREAD.match(line.strip()):
                current = []
                blocks.append(current)
                continue
            m = _FRAME.match(line)
            if m and current is not None:
                current.append(m.groupdict())
            elif current is not None and line.strip() and not m:
                current = None
        main = [b for b in blocks if b and any("runtime.py" in f["file"] and f["func"] == "main" for f in b)]
        if not main:
            main = [b for b in blocks if b]
        if not main:
            continue
        frames = main[-1]  # the last dump is the most recent
        ours = [f for f in frames if package in f["file"] and not f["file"].endswith("runtime.py")]
        out[rank] = {"innermost": f'{Path(frames[0]["file"]).name}:{frames[0]["line"]} in {frames[0]["func"]}',
                     "in_course_code": " <- ".join(f'{Path(f["file"]).name}:{f["line"]} {f["func"]}' for f in ours[:3]) or None,
                     "stack": [f'{Path(f["file"]).name}:{f["line"]} {f["func"]}' for f in frames]}
    return out


def flight_recorder(run_dir: str | os.PathLike[str], last: int = 3) -> dict[int, dict[str, Any]]:
    """The NCCL flight recorder's dumps of a run (``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0 and
    ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``): per rank, the last collectives and their states.

    The workload points the dumps into the run folder; dumps in PyTorch's default places
    (``/tmp/nccl_trace_rank_R``, ``~/.cache/torch/comm_lib_trace_rank_R``) written after the run
    started are read too.
    """
    import json

    run_dir = Path(run_dir)
    started = min((p.stat().st_mtime for p in run_dir.glob("rank*.pid")), default=0.0)
    candidates = list(run_dir.glob("nccl_trace_rank_*"))
    for pattern in ("/tmp/nccl_trace_rank_*", str(Path.home() / ".cache/torch/comm_lib_trace_rank_*")):
        folder, _, glob = pattern.rpartition("/")
        candidates += [p for p in Path(folder).glob(glob) if started and p.stat().st_mtime >= started - 1]
    found: dict[int, dict[str, Any]] = {}
    for path in sorted(candidates):
        m = re.search(r"(\d+)$", path.name)
        if not m:
            continue
        try:
            raw = path.read_bytes()
            try:
                data = pickle.loads(raw)  # written by this run's own workers
            except Exception:
                data = json.loads(raw)
        except Exception as exc:
            found[int(m.group(1))] = {"error": f"{type(exc).__name__}: {exc}", "file": str(path)}
            continue
        entries = data.get("entries", []) if isinstance(data, dict) else []
        rows = [{"seq": e.get("collective_seq_id"), "op": e.get("profiling_name"), "state": e.get("state"),
                 "sizes": e.get("input_sizes"), "timeout_ms": e.get("timeout_ms")} for e in entries]
        completed = [r["seq"] for r in rows if r["state"] == "completed" and r["seq"] is not None]
        found[int(m.group(1))] = {"entries": rows[-last:], "last_completed_seq": max(completed) if completed else None,
                                  "pending": [r for r in rows if r["state"] in ("scheduled", "started")], "file": str(path)}
    return found


def stack_excerpt(run: Any, rank: int, skip: tuple[str, ...] = ("<frozen", "threading.py")) -> list[str]:
    """Rank ``rank``'s main-thread stack from the last dump in its log, innermost first, compact."""
    result = _result(run)
    if result is None:
        return []
    try:
        text = Path(result.log_files[rank]).read_text(errors="replace")
    except (KeyError, FileNotFoundError):
        return []
    where = where_ranks({rank: text}).get(rank)
    return [f for f in where["stack"] if not f.startswith(skip)] if where else []


def log_lines(path: str | os.PathLike[str], patterns: Iterable[str] = ("Watchdog", "Timed out", "timeout", "Error",
                                                                       "Detected mismatch", "Fatal Python error")) -> list[str]:
    """The lines of a rank's log that say what went wrong (case-sensitive substrings)."""
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return []
    pats = tuple(patterns)
    return [line for line in text.splitlines() if any(p in line for p in pats)]


def processes_left(result: Any) -> list[int]:
    """Worker pids of a run (its ``rank{R}.pid`` files) still alive: should be none."""
    import psutil

    alive = []
    for pid_file in Path(result.run_dir).glob("rank*.pid"):
        try:
            proc = psutil.Process(int(pid_file.read_text().strip()))
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (psutil.Error, ValueError, OSError):
            continue
    return alive


def describe_failure(exc: Any, pg_timeout: float | None = None) -> list[str]:
    """How a trap ended: the error class, the rank and its exception, how long it took, what is left."""
    if exc is None:
        return ["the run finished without an error: no trap was sprung (was the validation shorter than the timeout?)"]
    res = exc.result
    first = str(exc).splitlines()[0] if str(exc) else ""
    lines = [f"ended with {type(exc).__name__} after {res.wall_s:.1f} s"
             + (f" (process-group timeout {pg_timeout:g} s)" if pg_timeout else ""),
             f"  {first[:400]}"]
    if exc.rank is not None:
        lines.append(f"  the first rank to fail: rank {exc.rank}, {exc.exc_type}")
    left = processes_left(res)
    lines.append("  processes of the run still alive: " + (", ".join(map(str, left)) if left else "none"))
    return lines


def _result(run: Any) -> Any:
    """A RunResult from a RunResult or a RunFailed (``None`` stays ``None``)."""
    return getattr(run, "result", run)


def signature_lines(run: Any, limit: int = 6) -> dict[int, list[str]]:
    """Per rank, the log lines that name the failure (timeouts, watchdog, mismatch, fatal errors);
    ``run``: the error a trap ended with, or its result."""
    result = _result(run)
    if result is None:
        return {}
    out = {}
    for rank, path in sorted(result.log_files.items()):
        lines = log_lines(path)
        out[rank] = [line[:300] for line in lines[:limit]] or [
            "(no error in this rank's log: it was still working when the run was ended)"]
    return out


def describe_where(run: Any) -> list[str]:
    """Where each rank was when the deadline passed, from the stacks the launcher had dumped."""
    result = _result(run)
    if result is None:
        return ["the run finished: nothing hung"]
    texts = {}
    for rank, path in result.log_files.items():
        try:
            texts[rank] = Path(path).read_text(errors="replace")
        except FileNotFoundError:
            texts[rank] = ""
    where = where_ranks(texts)
    if not where:
        return ["no Python stacks in the logs (the run did not reach the deadline?)"]
    return [f"rank {r}: in {w['in_course_code'] or '?'}   (innermost frame: {w['innermost']})" for r, w in sorted(where.items())]


def describe_flight_recorder(run: Any) -> list[str]:
    """The NCCL flight recorder's dumps, one line per rank, or why there are none."""
    result = _result(run)
    if result is None:
        return ["the run finished: nothing to record"]
    fr = flight_recorder(result.run_dir)
    if not fr:
        from ..machine import hardware

        if hardware.gpu_count() < len(result.log_files):
            return ["no flight-recorder dump: it records NCCL's collectives on GPUs; this run used gloo on the CPU"]
        return [("no flight-recorder dump found (TORCH_NCCL_TRACE_BUFFER_SIZE > 0 and TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
                 "make the NCCL watchdog write one when a collective times out)")]
    lines = []
    for rank, d in sorted(fr.items()):
        if "error" in d:
            lines.append(f"rank {rank}: unreadable dump ({d['error']})")
            continue
        pending = ", ".join(f"#{e['seq']} {e['op']} ({e['state']})" for e in d["pending"]) or "none"
        lines.append(f"rank {rank}: flight recorder: last completed collective #{d['last_completed_seq']}; "
                     f"not completed: {pending}")
    return lines


def pyspy_hint() -> str:
    """Whether py-spy (a stack sampler that attaches to a running process) is available here."""
    import shutil

    if shutil.which("py-spy"):
        return "py-spy is installed: `py-spy dump --pid PID` prints a hanging rank's Python stack without stopping it"
    return ("py-spy is not installed here; with it (`pip install py-spy`), `py-spy dump --pid PID` prints a hanging "
            "rank's stack. The launcher's deadline does the same through faulthandler (below)")


def validation_frame(result: Any):  # -> pandas.DataFrame
    """The fixed validation patterns, per rank: who waited how long, and whether the numbers agree."""
    import pandas as pd

    rows = []
    for rank, m in enumerate(result.ranks):
        v = m["rank0_validation"]
        rows.append({"rank": rank, "rank 0 validates alone (s)": v["lone_validation_s"],
                     "first training step after it (s)": round(v["first_step_s"], 3),
                     "every rank validates its shard (s)": round(v["all_ranks_validation_s"], 3),
                     "loss (all ranks)": round(v["all_ranks_metrics"]["loss"], 6),
                     "loss (one process, whole set)": round(v["single_process_metrics"]["loss"], 6),
                     "agree": v["agrees_with_single_process"]})
    return pd.DataFrame(rows)


def verdict_c18(hang: Any, result: Any, pg_timeout: float) -> str:
    """Claim C18 from the trap run and the fixed run."""
    v1 = result.ranks[-1]["rank0_validation"]
    v0 = result.ranks[0]["rank0_validation"]
    died = hang is not None and hang.result.wall_s < 60
    return (f"C18: rank-0-only validation {'ended the run with a timeout' if died else 'did not fail'} when it outlasted "
            f"the {pg_timeout:g} s process-group timeout; shorter ({v0['lone_validation_s']:.2f} s) it only made rank "
            f"{len(result.ranks) - 1} wait ({v1['first_step_s']:.2f} s for its next step). Validating on every rank took "
            f"{v0['all_ranks_validation_s']:.2f} s and {'matches' if v0['agrees_with_single_process'] else 'does NOT match'} "
            "a single process on the whole set. Verdict: "
            + ("'breaks the parallelism' is vague: it idles the other ranks, and kills the job once it outlasts the "
               "timeout; the fix (every rank validates, all_reduce of sums and counts) works."
               if died and v0["agrees_with_single_process"] else "see the numbers: the expected failure or agreement did not show."))


def mismatch_lines(result: Any) -> list[str]:
    """What each rank reported for the two mismatch traps, and the fixes' results."""
    lines = []
    for name in ("mismatched_shapes", "mismatched_order"):
        for rank, m in enumerate(result.ranks):
            d = m.get(name, {})
            trap = d.get("trap", {})
            if trap:
                lines.append(f"{name}, rank {rank}: {trap.get('raised') or 'no error'}: "
                             f"{trap.get('difference') or trap.get('message', '')[:200]}")
        fix = result.ranks[0].get(name, {}).get("fix")
        if fix:
            lines.append(f"{name}, fixed: {fix}")
    return lines


def first_mismatch_report(result: Any) -> str:
    """Rank 0's full mismatch report (the DETAIL check's message)."""
    trap = result.ranks[0].get("mismatched_shapes", {}).get("trap", {})
    return trap.get("message", "")


def epoch_frame(result: Any, rank: int = 0):  # -> pandas.DataFrame
    """The first indices of each epoch on one rank, with and without set_epoch."""
    import pandas as pd

    d = result.ranks[rank]["no_set_epoch"]
    rows = []
    for label in ("without_set_epoch", "with_set_epoch"):
        for epoch, order in enumerate(d[label]["orders"]):
            rows.append({"sampler": label.replace("_", " "), "epoch": epoch, "first indices": " ".join(map(str, order))})
    return pd.DataFrame(rows)


def verdict_set_epoch(result: Any) -> str:
    d = result.ranks[0]["no_set_epoch"]
    return (f"without set_epoch every epoch repeats the same order: {d['without_set_epoch']['identical_every_epoch']}; "
            f"with it the order changes: {not d['with_set_epoch']['identical_every_epoch']}")


def seeds_frames(result: Any):  # -> tuple[pandas.DataFrame, pandas.DataFrame]
    """(checksums of the weights before and after DDP per rank, crops drawn per rank)."""
    import pandas as pd

    s = result.ranks[0]["seeds"]
    weights = pd.DataFrame({"rank": list(range(len(s["checksums_before_ddp"]))),
                            "seed": [f"seed + {r}" for r in range(len(s["checksums_before_ddp"]))],
                            "weights checksum before DDP": s["checksums_before_ddp"],
                            "after DDP(model)": s["checksums_after_ddp"]})
    rows = []
    for label, d in s["crops"].items():
        for rank, crops in enumerate(d["per_rank"]):
            rows.append({"augmentation seed": label.replace("_", " "), "rank": rank,
                         "(sample, crop x, crop y)": "  ".join(f"({a},{b},{c})" for a, b, c in crops[:6])})
    return weights, pd.DataFrame(rows)


def verdict_c21(result: Any) -> str:
    s = result.ranks[0]["seeds"]
    same, plus = s["crops"]["same_seed"], s["crops"]["seed_plus_rank"]
    return (f"C21: with a different seed per rank the weights differ before DDP ({not s['equal_before']}) and agree after "
            f"it ({s['equal_after']}): DDP broadcasts rank 0's weights, so a common seed is not needed for the model. "
            f"With the same seed on every rank, {same['identical_crops']} of {same['of']} crops were identical across ranks "
            f"(on different samples); with seed + rank, {plus['identical_crops']}. Verdict: "
            + ("half right: a common seed is not needed for the weights and harmful for augmentation; seed the model for "
               "reproducibility, and give each rank its own augmentation seed."
               if s["equal_after"] and same["identical_crops"] > plus["identical_crops"] else "not reproduced here."))


def loader_frame(result: Any, rank: int = 0):  # -> pandas.DataFrame
    import pandas as pd

    d = result.ranks[rank]["dataloader"]
    return pd.DataFrame(d["rows"]).round(3)


def verdict_c17(result: Any) -> str:
    d = result.ranks[0]["dataloader"]
    k = knee([r for r in d["rows"] if not r["pin_memory"]])
    best = max(d["rows"], key=lambda r: r["samples_per_s"])
    pinned = [r for r in d["rows"] if r["pin_memory"]]
    pin_note = ""
    if pinned:
        gain = statistics.mean(p["samples_per_s"] / u["samples_per_s"] for p in pinned for u in d["rows"]
                               if not u["pin_memory"] and u["num_workers"] == p["num_workers"])
        pin_note = f" pin_memory changed throughput by {100 * (gain - 1):+.0f} % on average."
    enough = best["samples_per_s"] >= d["step_consumes_samples_per_s"]
    return (f"C17: on {d['cpu_cores']} CPU cores shared by {d['ranks']} ranks, the knee is at {k['num_workers'] if k else '?'} "
            f"workers per rank (90 % of the best, {best['samples_per_s']:.0f} samples/s at {best['num_workers']}); the rule "
            f"of thumb says {d['rule_of_thumb_workers']}. The training step consumes {d['step_consumes_samples_per_s']:.0f} "
            f"samples/s per rank: the loader {'keeps up' if enough else 'cannot keep up'} at its best.{pin_note} Verdict: "
            + ("the rule matches this machine." if k and k["num_workers"] == d["rule_of_thumb_workers"]
               else "a starting point, not a law; measure on the machine at hand."))


def shards_line(result: Any) -> str:
    sh = result.ranks[0]["dataloader"].get("shards")
    if not sh:
        return "no shard measurement"
    return (f"reading {sh['samples']} samples of {sh['bytes_per_sample'] / 1024:.0f} KiB: one file each "
            f"{sh['one_file_per_sample_us']:.0f} µs per sample, {sh['per_shard']} samples per shard file "
            f"{sh['shards_us']:.1f} µs per sample ({sh['one_file_per_sample_us'] / max(sh['shards_us'], 1e-9):.0f}× less), "
            "from a warm page cache on a local disk")


def oom_frames(result: Any, rank: int = 0):  # -> dict[str, pandas.DataFrame] or a str
    """The OOM demo's tables (fragmentation, empty_cache, training), or the skip message."""
    import pandas as pd

    d = result.ranks[rank]["oom"]
    if "skipped" in d:
        return d["skipped"]
    frag = pd.DataFrame([{k: v for k, v in r.items() if k != "message"} for r in d["fragmentation"]]).round(1)
    empty = pd.DataFrame(d["empty_cache"]["rows"]).round(1)
    train = pd.DataFrame([{k: v for k, v in r.items() if k != "message"} for r in d["training"]["rows"]]).round(1)
    return {"fragmentation": frag, "empty_cache": empty, "training": train}


def oom_message(result: Any, rank: int = 0) -> str:
    """The message of the training OOM (what the learner will see), first lines."""
    d = result.ranks[rank]["oom"]
    if "skipped" in d:
        return ""
    for r in d["training"]["rows"] + d["fragmentation"]:
        if r.get("outcome") == "OOM" and r.get("message"):
            return r["message"]
    return "(no OOM happened: the cap did not bite)"


def verdict_c19_c20(result: Any, rank: int = 0) -> list[str]:
    d = result.ranks[rank]["oom"]
    if "skipped" in d:
        return ["C19, C20: not checked here: " + d["skipped"]]
    rows = d["empty_cache"]["rows"]
    alive = next(r for r in rows if "while x is alive" in r["step"])
    before_alive = rows[rows.index(alive) - 1]
    after = next(r for r in rows if "after del x" in r["step"])
    before = next(r for r in rows if r["step"] == "del x")
    frag = {r["config"]: r.get("outcome") for r in d["fragmentation"]}
    train = {r["variant"]: r.get("outcome") for r in d["training"]["rows"]}
    return [
        (f"C19: empty_cache() with the tensor alive left {alive['allocated_mib']:.0f} MiB allocated (it frees nothing "
         f"referenced); after del, it returned {after['driver_free_mib'] - before['driver_free_mib']:.0f} MiB to the "
         "driver (visible to other processes, useless to PyTorch itself, which would have reused its cache). "
         + ("Verdict: it does not fix an OOM." if alive["allocated_mib"] >= before_alive["allocated_mib"]
            else "Unexpected: see the table.")),
        "C20: the fragmentation case: " + "; ".join(f"{k}: {v}" for k, v in frag.items())
        + ". max_split_size_mb and expandable_segments are options of PYTORCH_CUDA_ALLOC_CONF (set before the first "
        "CUDA allocation), not functions.",
        "Training under a cap: " + "; ".join(f"{k}: {v}" for k, v in train.items()),
    ]
