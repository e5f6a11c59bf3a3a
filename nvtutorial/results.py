"""Typed results of a run, written atomically as schema-versioned JSON.

A workload's ranks each write ``rank{R}.json`` (see :mod:`nvtutorial.runtime`); the launcher
collects them into a :class:`RunResult` and writes ``result.json``. Both use
:func:`write_json_atomic`, so a killed run never leaves half a file.

What a workload returns is a frozen dataclass of its chapter's schema (``chapters/chNN_topic/schema.py``);
it crosses the process boundary as JSON and comes back typed: ``result.ranks_as(TrainRank)`` reads every
rank's metrics through :func:`typed`, after the schema's ``upgrade`` (if it has one) has renamed what an
older layout of the same result called otherwise (the committed reference runs).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from nvtutorial.i18n import N_

SCHEMA_VERSION = 1
"""Bumped whenever the layout of ``rank{R}.json`` or ``result.json`` changes."""
M = TypeVar("M")
"""A workload's typed result (one rank's metrics): a frozen dataclass of its chapter's schema."""


def typed(cls: type[M], data: Any, where: str = "") -> M:
    """``data`` (JSON: dicts and lists) as an instance of the dataclass ``cls``, nested dataclasses and tuples included,
    after ``cls.upgrade(data)`` where the schema has one. A missing or unknown field is a ``ValueError`` naming it
    (``where`` says whose)."""
    upgrade = getattr(cls, "upgrade", None)
    if callable(upgrade) and isinstance(data, Mapping):
        data = upgrade(dict(data))
    return _value(cls, data, where or cls.__name__)


def as_typed(cls: type[M], value: Any) -> M:
    """``value`` as the dataclass ``cls``: as it is where it is one already, else (raw JSON: what a notebook cell
    passes, e.g. ``result.ranks[0]["rows"][0]``) through :func:`typed`, ``cls.upgrade`` included. For the functions a
    notebook calls with either form."""
    return value if isinstance(value, cls) else typed(cls, value)


def rows_typed(cls: type[M], rows: Iterable[Any]) -> tuple[M, ...]:
    """Each of ``rows`` as ``cls`` (:func:`as_typed`): typed rows as they are, raw JSON rows through :func:`typed`."""
    return tuple(as_typed(cls, r) for r in rows)


def _value(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected an object for {tp.__name__}, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{where}: unknown field {', '.join(unknown)} for {tp.__name__}")
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                kwargs[f.name] = _value(hints[f.name], data[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{where}: missing field {f.name!r} of {tp.__name__}")
        return tp(**kwargs)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(inner, data, where)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], x, f"{where}[{i}]") for i, x in enumerate(data))
        return tuple(_value(a, x, f"{where}[{i}]") for i, (a, x) in enumerate(zip(args, data)))
    if origin is Literal:
        if data not in typing.get_args(tp):
            raise ValueError(f"{where}: {data!r} is not one of {typing.get_args(tp)}")
        return data
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data


def with_defaults(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` (one ``cls`` as JSON) with every field it lacks set to the field's default, in nested
    dataclasses too: the JSON of what :func:`typed` builds from it (``typed`` takes those defaults by itself), for a
    schema's ``upgrade`` to return, so the upgraded layout says everything the typed result holds (what
    ``tests/test_typed_results.py`` checks: nothing a run wrote lost on the way). A field without a default is left
    missing, for ``typed`` to name."""
    hints = typing.get_type_hints(cls)
    out = dict(data)
    for f in dataclasses.fields(cls):
        if f.name in out:
            out[f.name] = _filled(hints[f.name], out[f.name])
        elif f.default is not dataclasses.MISSING:
            out[f.name] = _as_json(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = _as_json(f.default_factory())
    return out


def _filled(tp: Any, value: Any) -> Any:
    """``value`` (JSON of type ``tp``) with the defaults of the dataclasses inside it filled in."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if value is None:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return with_defaults(tp, value) if isinstance(value, Mapping) else value
    if origin in (typing.Union, types.UnionType):  # X | None
        inner = [a for a in args if a is not type(None)]
        return _filled(inner[0], value) if len(inner) == 1 else value
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and isinstance(value, list):
        return [_filled(args[0], v) for v in value]
    return value


def _as_json(value: Any) -> Any:
    """A field's default as JSON holds it (a tuple as a list)."""
    return list(value) if isinstance(value, tuple) else value


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` through a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, default=_json_default)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _json_default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    tolist = getattr(obj, "tolist", None)
    if tolist is not None:  # numpy / torch scalars and arrays
        return tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"cannot write {type(obj).__qualname__} to JSON")


def read_json(path: str | os.PathLike[str]) -> Any:
    with open(path) as fh:
        return json.load(fh)


@dataclasses.dataclass(frozen=True)
class EnvInfo:
    """Where a run happened. ``label`` is the caption every table and plot carries."""

    host: str
    backend: str
    world_size: int
    device_names: tuple[str, ...]
    torch: str
    cuda: str | None
    nccl: str | None
    python: str
    link: str | None = None
    driver: str | None = None
    nnodes: int = 1
    """Nodes (torchrun agents) the ranks ran on; on one host, emulated nodes."""
    device_ids: tuple[str, ...] = ()
    """Each rank's GPU UUID (empty where not recorded): ranks that share a GPU share its UUID."""

    @property
    def is_gpu(self) -> bool:
        return self.backend == "nccl"

    @property
    def label_without_nccl(self) -> str:
        """:attr:`label` without NCCL's version: for ranks that make no NCCL call (copies and kernels on one GPU, DDP in
        a world of one), where the version says nothing about the numbers."""
        return dataclasses.replace(self, nccl=None).label

    @property
    def label(self) -> str:
        """E.g. ``2× NVIDIA H200 · NV18 · NCCL 2.28.9 · torch 2.11.0`` or a simulation notice."""
        if not self.is_gpu:
            if self.nnodes > 1:
                return N_(
                    "CPU, {backend}, {processes} processes ({nodes} emulated nodes) on {host}: "
                    "a simulation, not a GPU measurement",
                    backend=self.backend,
                    processes=self.world_size,
                    nodes=self.nnodes,
                    host=self.host,
                )
            return N_(
                "CPU, {backend}, {processes} processes on {host}: a simulation, not a GPU measurement",
                backend=self.backend,
                processes=self.world_size,
                host=self.host,
            )
        parts = [self._gpus()]
        if self.link:
            parts.append(self.link)
        if self.nccl:
            parts.append(f"NCCL {self.nccl}")
        parts.append(f"torch {self.torch}")
        if self.cuda:
            parts.append(f"CUDA {self.cuda}")
        return " · ".join(parts)

    def _gpus(self) -> str:
        """The GPUs, each counted once: ``2× NVIDIA H200``, or ``1× NVIDIA H200 shared by 2 ranks``."""
        ids = self.device_ids if len(self.device_ids) == len(self.device_names) and all(self.device_ids) else ()
        if not ids:  # not recorded: one GPU per rank, as the launcher places them
            names = sorted(set(self.device_names))
            return " + ".join(f"{self.device_names.count(n)}× {n}" for n in names)
        ranks_on = {u: ids.count(u) for u in ids}
        name_of = dict(zip(ids, self.device_names))
        parts = []
        for name in sorted(set(self.device_names)):
            gpus = [u for u in ranks_on if name_of[u] == name]
            shared = sum(ranks_on[u] for u in gpus if ranks_on[u] > 1)
            text = f"{len(gpus)}× {name}"
            if shared:
                text += f" shared by {shared} ranks" if len(gpus) == 1 else f" ({shared} ranks share a GPU)"
            parts.append(text)
        return " + ".join(parts)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnvInfo:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["device_names"] = tuple(kwargs.get("device_names") or ())
        kwargs["device_ids"] = tuple(kwargs.get("device_ids") or ())
        return cls(**kwargs)


@dataclasses.dataclass
class RunResult(Generic[M]):
    """What a launched run gives back. ``ranks[r]`` holds rank r's metrics."""

    workload: str
    params: dict[str, Any]
    returncode: int
    wall_s: float
    first_output_s: float | None
    env: EnvInfo | None
    ranks: list[dict[str, Any]]
    run_dir: Path
    log_files: dict[int, Path]
    log_tail: list[str]
    overrides: dict[str, str] = dataclasses.field(default_factory=dict)
    error: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION
    nnodes: int = 1
    """Nodes (torchrun agents) of the run; ``nproc`` ranks each."""
    ready_s: float | None = None
    """Seconds from the launch until every rank was up (start-up); the deadline counts from there."""
    started: str = "torchrun"
    """How the ranks started: ``warm`` (forked from the warm interpreter) or ``torchrun``."""
    torchrun: str = ""
    """The ``torchrun`` command a learner would type for the same run."""
    cold_reason: str | None = None
    """Why a run that could have started warm started with torchrun (None: it did not)."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def ranks_as(self, schema: type[M]) -> list[M]:
        """Every rank's metrics as the workload's typed result (:func:`typed`; upgraded from older layouts)."""
        return [typed(schema, m, f"{self.run_dir} rank {r}") for r, m in enumerate(self.ranks)]

    def metrics_as(self, schema: type[M]) -> M:
        """Rank 0's metrics as the workload's typed result."""
        if not self.ranks:
            raise ValueError(f"{self.run_dir}: no rank reported metrics (the run failed: {self.error})")
        return typed(schema, self.ranks[0], f"{self.run_dir} rank 0")

    @property
    def metrics(self) -> dict[str, Any]:
        """Rank 0's metrics (the usual place for a workload's summary)."""
        return self.ranks[0] if self.ranks else {}

    @property
    def label(self) -> str:
        return self.env.label if self.env else N_("unknown hardware")

    def to_frame(self, key: str | None = None):  # -> pandas.DataFrame
        """Per-rank scalar metrics as a DataFrame, or, with ``key``, the records of a table metric.

        ``result.to_frame("sizes")`` turns rank 0's list of dicts under ``"sizes"`` into rows.
        """
        import pandas as pd

        if key is not None:
            rows = self.metrics.get(key)
            if rows is None:
                raise KeyError(f"rank 0 reported no metric {key!r}; it has: {', '.join(self.metrics)}")
            return pd.DataFrame(rows)
        scalars = [
            {"rank": r, **{k: v for k, v in m.items() if isinstance(v, (int, float, str, bool)) or v is None}}
            for r, m in enumerate(self.ranks)
        ]
        return pd.DataFrame(scalars).set_index("rank")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["env"] = dataclasses.asdict(self.env) if self.env else None
        data["label"] = self.label
        data["log_files"] = {str(k): str(v) for k, v in self.log_files.items()}
        return data

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write ``result.json`` (atomically) into the run folder, or to ``path``."""
        return write_json_atomic(path or self.run_dir / "result.json", self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunResult:
        data = read_json(path)
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{path}: schema version {data.get('schema_version')}, expected {SCHEMA_VERSION}")
        data.pop("label", None)
        data["env"] = EnvInfo.from_dict(data["env"]) if data.get("env") else None
        data["run_dir"] = Path(data["run_dir"])
        data["log_files"] = {int(k): Path(v) for k, v in data["log_files"].items()}
        return cls(**data)


Where = RunResult | EnvInfo | str
"""Where a table or figure's numbers come from: a run, the environment it ran in, or words (a reference's label, "not
measured: ..."). Every reading function that labels its output takes this, and :func:`label_of` reads it."""


def label_of(where: Where) -> str:
    """The caption of ``where``: a run's or an environment's :attr:`EnvInfo.label`, or the words as given."""
    return where if isinstance(where, str) else where.label
