"""The ``nvtutorial`` command: list and run workloads, run the course, check the machine.

Exit codes: 0 success; 1 a run or a check failed; 2 bad input (nothing was launched).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from . import launch, params as params_mod, workloads

EXIT_FAILED = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage + message)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


def cmd_list(args: argparse.Namespace) -> int:
    names = workloads.names()
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {workloads.summary(name)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    try:
        values = params_mod.parse_assignments(args.set)
        env = params_mod.parse_assignments(args.env)
        spec = launch.prepare(args.workload, nproc=args.nproc, backend=args.backend, params=values,
                              timeout=args.timeout, env=env, out=args.out, output=args.output)
    except (launch.LaunchError, params_mod.ParamError) as exc:
        print(f"nvtutorial run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = launch.execute(spec)
    except launch.RunFailed as exc:
        print(f"nvtutorial run: {args.workload} failed after {exc.result.wall_s:.1f} s", file=sys.stderr)
        print(str(exc), file=sys.stderr)
        print(f"result: {exc.result.run_dir / 'result.json'}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    print(f"\n{args.workload}: ok in {result.wall_s:.1f} s (first output after {result.first_output_s or 0:.1f} s)")
    print(f"where: {result.label}")
    print(result.to_frame().to_string())
    print(f"result: {result.run_dir / 'result.json'}")
    return 0


def cmd_course(args: argparse.Namespace) -> int:
    from . import course

    try:
        summary = course.run_course(out=args.out, only=args.only, profile=args.profile, notebooks_dir=args.notebooks)
    except course.CourseError as exc:
        print(f"nvtutorial course: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(course.format_summary(summary))
    return 0 if all(item.passed for item in summary.notebooks) else EXIT_FAILED


def cmd_bundle(args: argparse.Namespace) -> int:
    from . import bundle

    try:
        folder = bundle.build(out=args.out, python=args.python, platforms=args.platform, with_torch=args.with_torch,
                              skip=args.skip)
    except bundle.BundleError as exc:
        print(f"nvtutorial bundle: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(bundle.install_instructions(folder))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nvtutorial", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("list", help="the workloads, one line each")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run a workload on N processes and write DIR/result.json")
    p.add_argument("workload")
    p.add_argument("--nproc", type=int, default=2, help="processes (default 2)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: nccl when N GPUs are visible, else gloo on CPU")
    p.add_argument("--timeout", type=_positive_float, default=600.0, help="deadline in seconds (default 600)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a workload parameter")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="an environment variable for this run")
    p.add_argument("--out", type=Path, help="run folder (default: a new folder under runs/)")
    p.add_argument("--output", choices=("rank0", "all", "none"), default="rank0", help="which ranks' lines to show")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("course", help="execute the notebooks with papermill and print a summary")
    p.add_argument("--out", type=Path, default=Path("build/course"), help="folder for executed notebooks and summary.json")
    p.add_argument("--only", action="append", default=None, metavar="PATTERN",
                   help="run only notebooks whose file name contains this (e.g. 01); repeatable")
    p.add_argument("--profile", choices=("auto", "ci", "full"), default="auto",
                   help="ci: small and fast; full: the lesson sizes; auto (default): full with 2 GPUs, else ci")
    p.add_argument("--notebooks", type=Path, default=None, help="folder of the notebooks (default: the repository's)")
    p.set_defaults(func=cmd_course)

    p = sub.add_parser("bundle", help="download wheels for an air-gapped GPU node")
    p.add_argument("--out", type=Path, default=Path("wheels"))
    p.add_argument("--python", default="3.12", help="the node's Python version (default 3.12)")
    p.add_argument("--platform", action="append", default=None, help="pip platform tag(s) (default: manylinux x86_64)")
    p.add_argument("--with-torch", action="store_true", help="include torch (large; most GPU nodes have their own)")
    p.add_argument("--skip", action="append", default=[], metavar="PACKAGE", help="leave a requirement out (repeatable)")
    p.set_defaults(func=cmd_bundle)

    for module in _COMMAND_MODULES:
        importlib.import_module(f".{module}", __package__).add_command(sub)
    return parser


# Subcommands that live beside the module they expose: each module's add_command(sub) adds
# its parser (class _Parser, so bad input exits 2) and sets `func`.
_COMMAND_MODULES: list[str] = ["machine.topology", "machine.doctor", "slurm"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
