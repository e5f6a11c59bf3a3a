"""The ``nvtutorial`` command: list and run workloads (or scripts), run the course, check the machine.

Exit codes: 0 success; 1 a run or a check failed; 2 bad input (nothing was launched).
Each command imports what it needs when it runs: ``nvtutorial run`` starts its ranks without
loading pandas, matplotlib or torch in this process (torch is imported once, by the warm interpreter
the ranks are forked from).
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
import shlex
import sys
from pathlib import Path

EXIT_FAILED = 1
EXIT_USAGE = 2


_BREAKS = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def one_line(text: object) -> str:
    """A message on one line: line breaks that came in with the user's input are shown escaped."""
    return _BREAKS.sub(lambda m: m.group().encode("unicode_escape").decode(), str(text))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage + message)
        print(f"{self.prog}: error: {one_line(message)}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


def cmd_list(args: argparse.Namespace) -> int:
    from nvtutorial import workloads

    names = workloads.names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {workloads.summary(name)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from nvtutorial import launch
    from nvtutorial import params as params_mod

    try:
        values = params_mod.parse_assignments(args.set)
        env = params_mod.parse_assignments(args.env)
        spec = launch.prepare(
            args.target,
            nproc=args.nproc,
            backend=args.backend,
            params=values,
            args=args.script_args,
            timeout=args.timeout,
            env=env,
            out=args.out,
            output=args.output,
            nnodes=args.nnodes,
            allow_oversubscribe=args.oversubscribe,
            launcher="torchrun" if args.torchrun else None,
        )
    except (launch.LaunchError, params_mod.ParamError) as exc:
        print(f"nvtutorial run: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = launch.execute(spec, full_command=args.full_command)
    except launch.LaunchError as exc:  # the run folder could not be made after all
        print(f"nvtutorial run: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except launch.RunFailed as exc:
        print(f"nvtutorial run: {args.target} failed after {exc.result.wall_s:.1f} s", file=sys.stderr)
        print(str(exc), file=sys.stderr)
        where = exc.result.run_dir / "result.json"
        print(f"result: {where}" if where.exists() else f"no result saved ({exc.result.run_dir})", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as exc:
        if str(exc):
            print(f"nvtutorial run: {exc}", file=sys.stderr)
        return 130
    print(f"\n{args.target}: ok in {result.wall_s:.1f} s (first output after {result.first_output_s or 0:.1f} s)")
    print(f"where: {result.label}")
    print(format_ranks(result.ranks))
    print(f"result: {result.run_dir / 'result.json'}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from nvtutorial.launch import spec

    root = spec.runs_root()
    before = len(spec.finished_runs(root))
    removed, freed = spec.prune_runs(keep=args.keep, root=root)
    left = len(spec.finished_runs(root))
    print(
        f"{root}: removed {removed} finished run folder{'s' * (removed != 1)} ({freed / 1e6:.1f} MB); "
        f"{left} of {before} kept (runs still in flight and folders touched in the last 10 minutes are never removed)"
    )
    return 0


def format_ranks(ranks: list[dict]) -> str:
    """Each rank's scalar metrics as a plain text table (one row per rank)."""
    keys = list(dict.fromkeys(k for m in ranks for k, v in m.items() if isinstance(v, (int, float, str, bool))))
    if not keys:
        return "(no scalar metrics)"

    def cell(value: object) -> str:
        return f"{value:.4g}" if isinstance(value, float) else ("" if value is None else str(value))

    rows = [["rank", *keys]] + [[str(r), *(cell(m.get(k)) for k in keys)] for r, m in enumerate(ranks)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(keys) + 1)]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows)


def cmd_course(args: argparse.Namespace) -> int:
    from nvtutorial import course

    try:
        summary = course.run_course(out=args.out, only=args.only, profile=args.profile, notebooks_dir=args.notebooks)
    except course.CourseError as exc:
        print(f"nvtutorial course: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(course.format_summary(summary))
    return 0 if all(item.passed for item in summary.notebooks) else EXIT_FAILED


def cmd_bundle(args: argparse.Namespace) -> int:
    from nvtutorial import bundle

    try:
        folder = bundle.build(
            out=args.out, python=args.python, platforms=args.platform, with_torch=args.with_torch, skip=args.skip
        )
    except bundle.BundleError as exc:
        print(f"nvtutorial bundle: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(bundle.install_instructions(folder))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nvtutorial", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="the workloads, one line each")
    p.set_defaults(func=cmd_list)
    _add_run(sub)
    p = sub.add_parser("clean", help="remove finished run folders under the runs root (.runs, or $NVTUTORIAL_RUNS_DIR)")
    p.add_argument("--keep", type=int, default=0, metavar="N", help="keep the newest N finished runs (default 0)")
    p.set_defaults(func=cmd_clean)
    _add_course(sub)
    _add_bundle(sub)
    for module in _COMMAND_MODULES:
        importlib.import_module(f".{module}", __package__).add_command(sub)
    return parser


def _add_run(sub: argparse._SubParsersAction) -> None:
    """``nvtutorial run TARGET [options] [-- SCRIPT ARGS...]``."""
    p = sub.add_parser(
        "run",
        help="run a workload or a script on N processes and write DIR/result.json",
        usage="nvtutorial run TARGET [options] [-- SCRIPT ARGS...]",
    )
    p.add_argument("target", metavar="TARGET", help="a workload (nvtutorial list) or the path of a .py script")
    p.add_argument("--nproc", type=int, default=2, help="processes per node (default 2)")
    p.add_argument(
        "--nnodes", type=int, default=1, help="emulated nodes on this host, one torchrun agent each (default 1)"
    )
    p.add_argument(
        "--oversubscribe", action="store_true", help="start even with more ranks than the CPU cores or the memory hold"
    )
    p.add_argument(
        "--backend",
        choices=("auto", "nccl", "gloo"),
        default="auto",
        help="auto: nccl when N GPUs are visible, else gloo on CPU",
    )
    p.add_argument("--timeout", type=_positive_float, default=600.0, help="deadline in seconds (default 600)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a workload parameter")
    p.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="an environment variable for this run"
    )
    p.add_argument("--out", type=Path, help="run folder (default: a new folder under runs/)")
    p.add_argument("--output", choices=("rank0", "all", "none"), default="rank0", help="which ranks' lines to show")
    p.add_argument(
        "--torchrun",
        action="store_true",
        help="start the ranks with the literal torchrun command (default: fork them from a warm "
        "interpreter that has imported torch, where the run allows it)",
    )
    p.add_argument(
        "--full-command",
        action="store_true",
        help="print the torchrun command with every parameter (default: those not at the workload's defaults; "
        "result.json records every one)",
    )
    p.set_defaults(func=cmd_run, script_args=[])


def _add_course(sub: argparse._SubParsersAction) -> None:
    """``nvtutorial course [--out DIR] [--only PATTERN] [--profile auto|ci|full]``."""
    p = sub.add_parser("course", help="execute the notebooks with papermill and print a summary")
    p.add_argument(
        "--out", type=Path, default=Path("build/course"), help="folder for executed notebooks and summary.json"
    )
    p.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="PATTERN",
        help="run only notebooks whose file name contains this (e.g. 01); repeatable",
    )
    p.add_argument(
        "--profile",
        choices=("auto", "ci", "full"),
        default="auto",
        help=(
            "auto (default): each notebook gives each part the lesson sizes where this machine runs it as taught, "
            "small sizes for the CPU simulation; ci: small sizes everywhere; full: the lesson sizes wherever possible"
        ),
    )
    p.add_argument("--notebooks", type=Path, default=None, help="folder of the notebooks (default: the repository's)")
    p.set_defaults(func=cmd_course)


def _add_bundle(sub: argparse._SubParsersAction) -> None:
    """``nvtutorial bundle [--out DIR] [--python X.Y] ...``."""
    p = sub.add_parser("bundle", help="download wheels for an air-gapped GPU node")
    p.add_argument("--out", type=Path, default=Path("wheels"))
    p.add_argument("--python", default="3.12", help="the node's Python version (default 3.12)")
    p.add_argument("--platform", action="append", default=None, help="pip platform tag(s) (default: manylinux x86_64)")
    p.add_argument("--with-torch", action="store_true", help="include torch (large; most GPU nodes have their own)")
    p.add_argument(
        "--skip", action="append", default=[], metavar="PACKAGE", help="leave a requirement out (repeatable)"
    )
    p.set_defaults(func=cmd_bundle)


# Subcommands that live beside the module they expose: each module's add_command(sub) adds
# its parser (class _Parser, so bad input exits 2) and sets `func`.
_COMMAND_MODULES: list[str] = ["machine.topology", "machine.doctor", "launch.slurm"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if argv[:1] == ["run"] and "--" in argv:  # `nvtutorial run my.py -- ARGS`: ARGS go to the script
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        hint = "; a script's own arguments go after --" if args.command == "run" else ""
        parser.error(f"unrecognized arguments: {shlex.join(unknown)}{hint}")
    if args.command == "run":
        args.script_args = script_args
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
