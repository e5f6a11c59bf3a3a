#!/usr/bin/env python
"""Mutation testing of the course's conclusions: would a realistic one-line bug in a rule be caught?

    make mutate                                   # mutate, test, write benchmarks/results/mutation-after.json
    .venv/bin/python scripts/mutate.py run --label after [--only nvtutorial/launch/guards.py ...]
    .venv/bin/python scripts/mutate.py run --label before --source e1ea54c --tests "tests/test_a.py ..."
    .venv/bin/python scripts/mutate.py run --label after --recheck   # after new tests: the survivors again
    .venv/bin/python scripts/mutate.py report --label after      # the scores and survivors, again

What is mutated (``[tool.mutmut]`` in pyproject.toml): the verdict rules (``nvtutorial/report/``), the
resource guards, the failure diagnosis, the collectives lessons (ring, sparse all-reduce, compression
hooks) and the exercise checkers. Each mutant is a one-token change (``<`` for ``<=``, ``and`` for
``or``, a number + 1, an argument dropped, ``True`` for ``False``...); it is *killed* when a test fails
(or hangs past mutmut's deadline), and *survives* when every test passes.

The tool is mutmut 3, not cosmic-ray, because of the machine it must run on (2 cores, shared):

- mutmut records which tests call which function (one run of the suite), then runs for each mutant
  only those tests, in a process forked from one that has already imported torch and collected the
  tests: no 1.5 s interpreter start-up per mutant. cosmic-ray runs a whole test command per mutant.
- mutmut works on a copy (``mutants/``), so the working tree is never edited; cosmic-ray rewrites the
  source file in place while the tests run.
- a mutant runs in the ranks too: the copy is put first on ``PYTHONPATH`` and mutmut's switch
  (``MUTANT_UNDER_TEST``) is in the environment that the gloo ranks inherit.

One change to mutmut's defaults: string literals that contain whitespace (sentences: a verdict's
wording, an error message) are not mutated. The course's tests assert a verdict's status and numbers,
never its wording (``/work/shared/STYLE.md``: "Assert on the status and numbers, not on the wording"),
so those mutants would survive by design. Strings without whitespace (statuses, keys, names) are
mutated as usual.

Each run works in ``build/mutation/<label>/`` (a copy of the sources, tests and reference data; with
``--source REV`` the sources and tests of that git revision), so the score of a past commit can be
measured with today's tool. The result, per module, goes to ``benchmarks/results/mutation-<label>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("nvtutorial", "tests", "reference", "notebooks", "scripts", "README.md", "pyproject.toml")
RESULTS = ROOT / "benchmarks" / "results"

# mutmut's exit codes (mutmut/stats.py) grouped the way the score counts them: a mutant the tests
# fail on, hang on (past mutmut's deadline) or crash on is caught.
CAUGHT = {"killed", "timeout", "segfault", "caught by type check"}
NOT_CAUGHT = {"survived", "no tests", "suspicious"}


def _workdir(label: str) -> Path:
    return ROOT / "build" / "mutation" / label


def _prepare(work: Path, source: str | None) -> None:
    """A fresh copy of what the tests read: the working tree's files, or ``source``'s (a git revision)."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if source:
        tar = subprocess.run(
            ["git", "archive", source, *[c for c in COPIED if c != "pyproject.toml"]],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(work)], input=tar, check=True)
    else:
        for name in COPIED:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif src.exists():
                shutil.copy2(src, work / name)
    # Today's tool in any case: the [tool.mutmut] table of this checkout, and its test-selection plugin.
    shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")
    (work / "scripts").mkdir(exist_ok=True)  # (a revision from before the tool has none)
    shutil.copy2(ROOT / "scripts" / "mutation_select.py", work / "scripts" / "mutation_select.py")


def _without_sentences(operator):
    """mutmut's string operator, skipping literals that contain whitespace (wording, see the docstring)."""

    def operator_string(node):
        value = getattr(node, "value", "")
        if any(ch.isspace() for ch in value):
            return
        yield from operator(node)

    return operator_string


def _run_mutmut(
    work: Path, tests: list[str], only: list[str], max_children: int, names: list[str] = (), sample: int = 0
) -> int:
    """mutmut run in ``work`` (in this process: the string operator is patched first); with ``names``, only those
    mutants, run again whatever their last result; with ``sample``, only that many mutants per module
    (:func:`_sampled`)."""
    os.chdir(work)
    # The ranks a test starts import the mutated copy too; the selection plugin comes from scripts/.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(work / "mutants"), str(work / "scripts"), os.environ.get("PYTHONPATH")])
    )
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import tomllib

    config = tomllib.loads((work / "pyproject.toml").read_text())["tool"]["mutmut"]
    config["pytest_add_cli_args_test_selection"] = tests or config.get("pytest_add_cli_args_test_selection", [])
    if only:
        config["only_mutate"] = only
    _write_mutmut_config(work / "pyproject.toml", config)

    from mutmut.mutation import mutators

    for i, (node_type, operator) in enumerate(mutators.mutation_operators):
        if operator is mutators.operator_string:
            mutators.mutation_operators[i] = (node_type, _without_sentences(operator))
    _fast_tests_first()
    _lean_pytest()
    if sample:
        _sampled(sample)
    from mutmut.__main__ import cli

    try:
        cli(["run", "--max-children", str(max_children), *names], standalone_mode=False)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


SEED = 21
"""The seed of the sample: the same rule picks the mutants of every run (and of ``--source`` runs of past commits)."""


def sample_of(names: list[str], per_module: int, seed: int = SEED) -> list[str]:
    """``per_module`` of a module's mutant names, drawn uniformly at random (sorted first, so the draw depends only
    on the names and the seed); all of them when the module has fewer."""
    import random

    ordered = sorted(names, key=_natural)
    return (
        ordered if len(ordered) <= per_module else sorted(random.Random(seed).sample(ordered, per_module), key=_natural)
    )


def _sampled(per_module: int) -> None:
    """mutmut runs only a uniform random sample of each module's mutants (:func:`sample_of`); the others stay
    "not checked". On 2 shared cores every mutant of every module takes many hours (about 8 s per mutant and core
    where tests reach the function); a sample per module estimates each module's score with a stated interval
    (:func:`interval`) in a bounded time."""
    import mutmut.__main__ as mm

    collect = mm.collect_source_file_mutation_data

    def sampled(*, mutant_names):
        mutants, by_path = collect(mutant_names=mutant_names)
        if mutant_names:
            return mutants, by_path
        keep = set()
        for m in by_path.values():
            keep |= set(sample_of(list(m.exit_code_by_key), per_module))
        return [x for x in mutants if x[1] in keep], by_path

    mm.collect_source_file_mutation_data = sampled


def interval(caught: int, checked: int, z: float = 1.96) -> tuple[float, float] | None:
    """The 95 % Wilson interval of a score measured on ``checked`` sampled mutants (None when none was checked)."""
    if not checked:
        return None
    p = caught / checked
    centre = (p + z * z / (2 * checked)) / (1 + z * z / checked)
    half = z * ((p * (1 - p) / checked + z * z / (4 * checked * checked)) ** 0.5) / (1 + z * z / checked)
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def _fast_tests_first() -> None:
    """Each mutant's tests in the order of their duration in the stats run, fastest first (mutmut's fork runner does
    this; its fork-server runner, the one safe with torch, takes them in a set's order). With ``-x`` a mutant is
    then killed by its fastest failing test: the same verdicts, an hour or more sooner on 2 cores."""
    from mutmut.state import state
    from mutmut.workers import isolation

    submit = isolation.ForkServerRunner.submit

    def sorted_submit(self, mutant_name, tests, cpu_time_limit, estimated_time):
        order = sorted(tests, key=lambda t: state().duration_by_test.get(t, 0.0))
        return submit(self, mutant_name, order, cpu_time_limit, estimated_time)

    isolation.ForkServerRunner.submit = sorted_submit


UNUSED_PLUGINS = (
    "nbval",
    "anyio",
    "hypothesispytest",
    "timeout",
    "warnings",
    "logging",
    "junitxml",
    "doctest",
    "pastebin",
    "legacypath",
    "stepwise",
    "faulthandler",
)
"""pytest plugins the tests do not need, left out of every pytest session mutmut starts: one session per mutant
starts in about 0.8 s instead of 2 on a loaded 2-core machine. (Hypothesis runs without its pytest plugin; a test
that hangs is ended by mutmut's own deadline instead of pytest-timeout's.)"""


def _lean_pytest() -> None:
    """Every pytest session of the run without :data:`UNUSED_PLUGINS` (patched in, not configured: mutmut would
    otherwise count a changed pytest command line as a reason to discard every result so far)."""
    from mutmut.runners import harness

    execute = harness.PytestRunner.execute_pytest

    def lean(self, params, **kwargs):
        return execute(self, [*params, *(arg for name in UNUSED_PLUGINS for arg in ("-p", f"no:{name}"))], **kwargs)

    harness.PytestRunner.execute_pytest = lean


def _write_mutmut_config(path: Path, config: dict) -> None:
    """Replace the [tool.mutmut] table of a copied pyproject.toml with ``config``."""
    text = path.read_text()
    head = text.split("[tool.mutmut]")[0]
    lines = ["[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in config.items()]
    path.write_text(head + "\n".join(lines) + "\n")


def collect(work: Path) -> dict:
    """Per mutated module: counts by status, the score, and every mutant not caught with the change it makes
    (mutmut's diff, its removed and added lines). Runs mutmut's own reader in a child process (it reads its
    configuration from the folder it starts in)."""
    out = subprocess.run([sys.executable, __file__, "_collect", str(work)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def _collect(work: Path) -> dict:
    os.chdir(work)
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code

    modules: dict[str, dict] = {}
    for meta in sorted((work / "mutants").rglob("*.py.meta")):
        module = str(meta.relative_to(work / "mutants"))[: -len(".meta")]
        data = json.loads(meta.read_text())
        counts: dict[str, int] = {}
        survivors = []
        for name, code in sorted(data["exit_code_by_key"].items(), key=lambda kv: _natural(kv[0])):
            status = status_by_exit_code[code]
            counts[status] = counts.get(status, 0) + 1
            if status in NOT_CAUGHT:
                try:
                    diff = get_diff_for_mutant(name, path=module)
                except Exception as exc:  # noqa: BLE001 - a report, not a gate
                    diff = f"(no diff: {exc})"
                change = [line for line in diff.splitlines() if line[:1] in "-+" and line[:3] not in ("---", "+++")]
                survivors.append({"mutant": name, "status": status, "change": " | ".join(c.strip() for c in change)})
        total = sum(counts.values())
        caught = sum(n for s, n in counts.items() if s in CAUGHT)
        checked = sum(n for s, n in counts.items() if s in CAUGHT | NOT_CAUGHT)
        modules[module] = {
            "mutants": total,
            "caught": caught,
            "checked": checked,
            "score": round(caught / checked, 4) if checked else None,
            "interval95": interval(caught, checked),
            "by_status": counts,
            "not_caught": survivors,
        }
    return modules


def _natural(name: str) -> tuple:
    head, _, number = name.rpartition("__mutmut_")
    return (head, int(number) if number.isdigit() else 0)


def _machine() -> dict:
    import torch

    try:
        import mutmut

        version = getattr(mutmut, "__version__", None) or _dist_version("mutmut")
    except ImportError:
        version = None
    model = ""
    try:
        model = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
    except OSError:
        pass
    return {
        "cpu": model or platform.processor(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "mutmut": version,
        "gpu": "none (CPU only: collectives on gloo)",
    }


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def write_result(label: str, work: Path, meta: dict) -> Path:
    modules = collect(work)
    caught = sum(m["caught"] for m in modules.values())
    checked = sum(m["checked"] for m in modules.values())
    out = {
        "label": label,
        **meta,
        "machine": _machine(),
        "total": {
            "mutants": sum(m["mutants"] for m in modules.values()),
            "caught": caught,
            "checked": checked,
            "score": round(caught / checked, 4) if checked else None,
            "interval95": interval(caught, checked),
        },
        "modules": modules,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"mutation-{label}.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return path


def print_scores(path: Path) -> None:
    data = json.loads(path.read_text())
    width = max(len(m) for m in data["modules"])
    print(f"mutation score ({data['label']}): caught / checked, per module")
    for module, m in data["modules"].items():
        score = "—" if m["score"] is None else f"{100 * m['score']:5.1f} %"
        print(
            f"  {module:<{width}}  {m['caught']:5d} / {m['checked']:<5d} {score}   not caught: {len(m['not_caught'])}"
        )
    t = data["total"]
    print(
        f"  {'all':<{width}}  {t['caught']:5d} / {t['checked']:<5d} {100 * t['score']:5.1f} %"
        if t["score"] is not None
        else "no mutant checked"
    )
    print(f"(written to {path.relative_to(ROOT)})")


EQUIVALENT = RESULTS / "mutation-equivalent.json"
"""Mutants that no test can or should catch, ``{"mutant name": "one-line reason"}`` (kept by hand)."""


def _moves(source: str) -> dict[str, str]:
    """Files of ``source`` renamed since (``git diff -M30%``: moved into the chapters and reformatted since, some keep
    only a third of their lines as they were): their path then, their path now."""
    out = subprocess.run(
        ["git", "diff", "-M30%", "--name-status", "--diff-filter=R", source, "HEAD", "--", "nvtutorial"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    return {parts[1]: parts[2] for line in out.splitlines() if len(parts := line.split("\t")) == 3}


def write_summary() -> Path:
    """The before/after table per module and the list of mutants not caught (with their reason, or "unexplained")."""
    runs = {
        label: json.loads((RESULTS / f"mutation-{label}.json").read_text())
        for label in ("before", "after")
        if (RESULTS / f"mutation-{label}.json").exists()
    }
    reasons = json.loads(EQUIVALENT.read_text()) if EQUIVALENT.exists() else {}
    after = runs.get("after")
    lines = [
        "# Mutation testing: the score before and after the rule tests (issue 21)",
        "",
        "Generated by `python scripts/mutate.py summary` from the JSON files beside it. A mutant is one token "
        "changed in a verdict rule, a guard, the diagnosis, a collectives lesson or an exercise checker "
        "(`scripts/mutate.py` says which and why mutmut); it is *caught* when a test fails or hangs past "
        "mutmut's deadline. Score = caught ÷ checked. Where a run checked a random sample of each module's "
        "mutants (the same seeded rule for both), each score comes with its 95 % (Wilson) interval.",
        "",
    ]
    for label, data in runs.items():
        m = data["machine"]
        drawn = (
            f" (a random sample of at most {data['sample_per_module']} per module, seed {data.get('seed')})"
            if data.get("sample_per_module")
            else ""
        )
        lines.append(
            f"- **{label}**: source {data['source']}, {data['total']['checked']} mutants checked{drawn}, "
            f"{data.get('wall_s', 0) / 60:.0f} min wall on {m['usable_cores']} cores ({m['cpu']}), "
            f"torch {m['torch']}, Python {m['python']}, mutmut {m['mutmut']}, {m['gpu']}."
        )
    lines += [
        "",
        "| module | mutants | before | after | not caught after | of which explained |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    modules = sorted(set().union(*(d["modules"] for d in runs.values()))) if runs else []

    moved = _moves(runs["before"]["source"]) if "before" in runs else {}
    if "before" in runs:  # the modules of the past commit under today's names (files moved since: git's renames)
        runs["before"]["modules"] = {moved.get(k, k): v for k, v in runs["before"]["modules"].items()}

    def score(label: str, module: str) -> str:
        m = runs.get(label, {}).get("modules", {}).get(module)
        if not m or m["score"] is None:
            return "—"
        low_high = m.get("interval95")
        band = (
            f", {100 * low_high[0]:.0f}–{100 * low_high[1]:.0f} %"
            if low_high and runs[label].get("sample_per_module")
            else ""
        )
        return f"{100 * m['score']:.1f} % ({m['caught']}/{m['checked']}{band})"

    for module in modules:
        a = (after or {}).get("modules", {}).get(module)
        if not any((runs[label]["modules"].get(module) or {}).get("mutants") for label in runs):
            continue
        missed = a["not_caught"] if a else []
        explained = sum(1 for x in missed if x["mutant"] in reasons)
        lines.append(
            f"| `{module}` | {(a or {}).get('mutants', '—')} | {score('before', module)} | "
            f"{score('after', module)} | {len(missed)} | {explained} |"
        )
    for label, data in runs.items():
        t = data["total"]
        lines.append(
            f"| **all ({label})** | {t['mutants']} | | {100 * t['score']:.1f} % ({t['caught']}/{t['checked']}) | | |"
            if label == "after"
            else f"| **all ({label})** | {t['mutants']} | {100 * t['score']:.1f} % "
            f"({t['caught']}/{t['checked']}) | | | |"
        )
    if after:
        lines += [
            "",
            "## Mutants not caught after the rule tests",
            "",
            "Each with the change it makes and why no test catches it; *unexplained* ones are open work.",
            "",
        ]
        for module, m in after["modules"].items():
            if not m["not_caught"]:
                continue
            lines += [f"### `{module}`", ""]
            for x in m["not_caught"]:
                why = reasons.get(x["mutant"], "**unexplained**")
                lines.append(f"- `{x['mutant'].rsplit('.', 1)[-1]}` ({x['status']}): `{x['change'][:160]}`: {why}")
            lines.append("")
    path = RESULTS / "mutation.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="mutate, run the tests against each mutant, write the result")
    run.add_argument("--label", default="after", help="names build/mutation/LABEL and the result file")
    run.add_argument("--source", help="a git revision whose sources and tests to mutate (default: the working tree)")
    run.add_argument(
        "--tests",
        default="",
        help="the test selection (pytest arguments, space-separated); "
        "default: pytest_add_cli_args_test_selection of [tool.mutmut]",
    )
    run.add_argument(
        "--only", nargs="*", default=[], help="mutate only these files (globs), e.g. nvtutorial/launch/guards.py"
    )
    run.add_argument("--max-children", type=int, default=len(os.sched_getaffinity(0)))
    run.add_argument(
        "--sample",
        type=int,
        default=0,
        help="run only this many mutants per module, drawn at random "
        "with a fixed seed (the others stay 'not checked'); the score then comes with its 95 %% interval",
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="go on with an interrupted run in build/mutation/LABEL "
        "(its copy, its mutants and the results so far are kept)",
    )
    run.add_argument(
        "--recheck",
        action="store_true",
        help="after new tests: copy the working tree's tests (and "
        "sources) into build/mutation/LABEL again and run only the mutants its last result did not catch",
    )
    run.add_argument(
        "--refresh",
        action="store_true",
        help="with --resume: copy the working tree's tests (and "
        "sources) into build/mutation/LABEL first (results so far kept: new tests only add kills)",
    )
    report = sub.add_parser("report", help="write and print the result of a finished run again")
    report.add_argument("--label", default="after")
    sub.add_parser(
        "summary",
        help="benchmarks/results/mutation.md: before and after per module, and every mutant "
        "not caught, with its reason from benchmarks/results/mutation-equivalent.json",
    )
    args = parser.parse_args(argv)
    if args.command == "summary":
        print(write_summary().relative_to(ROOT))
        return 0

    work = _workdir(args.label)
    if args.command == "report":
        print_scores(write_result(args.label, work, json.loads((work / "run.json").read_text())))
        return 0
    names: list[str] = []
    previous = json.loads((work / "run.json").read_text()) if (work / "run.json").exists() else {}
    if args.recheck or (args.refresh and args.resume and (work / "mutants").is_dir()):
        if args.source:
            parser.error("--recheck and --refresh take the working tree's tests: not with --source")
        for name in ("tests", "nvtutorial"):
            shutil.rmtree(work / name)
            shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        shutil.copy2(ROOT / "scripts" / "mutation_select.py", work / "scripts" / "mutation_select.py")
    if args.recheck:
        last = json.loads((RESULTS / f"mutation-{args.label}.json").read_text())
        names = [x["mutant"] for m in last["modules"].values() for x in m["not_caught"]]
        print(f"rechecking the {len(names)} mutants not caught in mutation-{args.label}.json")
    elif not (args.resume and (work / "mutants").is_dir()):
        _prepare(work, args.source)
        previous = {}
    source = args.source or "working tree"
    if args.source:
        source = subprocess.run(
            ["git", "rev-parse", "--short", args.source], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.strip()
    meta = {
        "source": source,
        "tests": args.tests.split() or None,
        "only": args.only or None,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "max_children": args.max_children,
        "sample_per_module": args.sample or previous.get("sample_per_module") or None,
        "seed": SEED,
    }
    t0 = time.monotonic()
    # mutmut runs in a child process: it changes directory and its configuration is read once per process.
    code = subprocess.run(
        [
            sys.executable,
            __file__,
            "_mutmut",
            str(work),
            args.tests,
            " ".join(args.only),
            str(args.max_children),
            str(meta["sample_per_module"] or 0),
            *names,
        ]
    ).returncode
    # The wall time of the whole measurement: an interrupted run's segments, and its rechecks, added up.
    meta["segments_s"] = [
        *previous.get("segments_s", [previous["wall_s"]] if "wall_s" in previous else []),
        round(time.monotonic() - t0),
    ]
    meta["wall_s"] = sum(meta["segments_s"])
    meta["rechecks"] = previous.get("rechecks", 0) + bool(args.recheck)
    if previous.get("started"):
        meta["started"] = previous["started"]
    meta["mutmut_exit"] = code
    (work / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
    print_scores(write_result(args.label, work, meta))
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["_collect"]:
        print(json.dumps(_collect(Path(sys.argv[2]))))
        sys.exit(0)
    if sys.argv[1:2] == ["_mutmut"]:
        _, _, work_dir, tests, only, children, sample, *mutants = sys.argv
        sys.exit(_run_mutmut(Path(work_dir), tests.split(), only.split(), int(children), mutants, int(sample)))
    sys.exit(main())
