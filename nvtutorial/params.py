"""Typed workload parameters: parsing ``KEY=VALUE`` strings into a frozen dataclass.

Every workload declares a frozen dataclass ``Params``. The launcher (parent side) and the
workload (child side) both build it with :func:`build`, so a bad value is rejected before
anything launches and a standalone ``torchrun`` run accepts exactly the same parameters.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin


class ParamError(ValueError):
    """A parameter is unknown, missing or has a bad value. The message names the fix."""


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "|".join(str(a) for a in get_args(tp))
    if origin in (tuple, list):
        return f"comma-separated {_type_name(get_args(tp)[0])}s"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _coerce(name: str, tp: Any, value: Any) -> Any:
    """Turn ``value`` (a string from the command line, or a Python value) into ``tp``."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() in ("none", "null", ""))):
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(name, arg, value)
            except ParamError as exc:
                errors.append(str(exc))
        raise ParamError(errors[0] if errors else f"{name}: bad value {value!r}")
    if origin is Literal:
        choices = get_args(tp)
        for choice in choices:
            if value == choice or str(value) == str(choice):
                return choice
        raise ParamError(f"{name}={value!r} is not one of: {', '.join(map(str, choices))}")
    if origin in (tuple, list):
        (item,) = get_args(tp)[:1]
        if isinstance(value, str):
            parts = [p.strip() for p in value.split(",") if p.strip()]
        else:
            parts = list(value)
        items = [_coerce(name, item, p) for p in parts]
        return tuple(items) if origin is tuple else items
    if tp is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ParamError(f"{name}={value!r} is not a boolean: use true or false")
    if tp is int:
        if isinstance(value, bool):
            raise ParamError(f"{name}={value!r} is not an integer")
        if isinstance(value, int):
            return value
        try:
            text = str(value).strip().replace("_", "")
            return int(float(text)) if "e" in text.lower() and float(text).is_integer() else int(text, 0)
        except ValueError:
            raise ParamError(f"{name}={value!r} is not an integer") from None
    if tp is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ParamError(f"{name}={value!r} is not a number") from None
    if tp is str:
        return str(value)
    raise ParamError(f"{name}: unsupported parameter type {tp!r}")


def fields(params_cls: type) -> dict[str, Any]:
    """Resolved field types of a ``Params`` dataclass, in declaration order."""
    hints = typing.get_type_hints(params_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(params_cls) if f.init}


def describe(params_cls: type) -> list[tuple[str, str, Any]]:
    """``(name, type, default)`` for every parameter; the default is ``MISSING`` when required."""
    out = []
    types_ = fields(params_cls)
    for f in dataclasses.fields(params_cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out.append((f.name, _type_name(types_[f.name]), default))
    return out


def parse_assignments(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``; a malformed item is a :class:`ParamError`."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParamError(f"malformed assignment {item!r}: write KEY=VALUE")
        out[key.strip()] = value
    return out


def build(params_cls: type, values: Mapping[str, Any] | Any | None = None) -> Any:
    """Build and validate ``params_cls`` from a mapping (strings or values) or an instance.

    Unknown names, missing required values and values of the wrong type raise
    :class:`ParamError` naming the accepted parameters; ``__post_init__`` checks ranges.
    """
    if isinstance(values, params_cls):
        return values
    if values is not None and dataclasses.is_dataclass(values):
        raise ParamError(f"expected {params_cls.__qualname__} or a dict, got {type(values).__qualname__}")
    values = dict(values or {})
    types_ = fields(params_cls)
    unknown = sorted(set(values) - set(types_))
    if unknown:
        accepted = ", ".join(f"{n} ({t})" for n, t, _ in describe(params_cls)) or "none"
        raise ParamError(f"unknown parameter {', '.join(unknown)}; accepted: {accepted}")
    kwargs = {name: _coerce(name, types_[name], v) for name, v in values.items()}
    missing = [n for n, _, d in describe(params_cls) if d is dataclasses.MISSING and n not in kwargs]
    if missing:
        raise ParamError(f"missing required parameter {', '.join(missing)}: pass it with --set {missing[0]}=VALUE")
    try:
        return params_cls(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ParamError):
            raise
        raise ParamError(str(exc)) from None


def to_strings(params: Any) -> dict[str, str]:
    """A ``Params`` instance as ``KEY=VALUE`` strings that :func:`build` turns back into it."""
    out = {}
    for name in fields(type(params)):
        value = getattr(params, name)
        if isinstance(value, (tuple, list)):
            out[name] = ",".join(str(v) for v in value)
        elif value is None:
            out[name] = "none"
        else:
            out[name] = str(value)
    return out


def set_args(params: Any) -> list[str]:
    """``--set KEY=VALUE`` for each parameter of a ``Params`` instance (or of ``KEY: VALUE`` strings), in order."""
    strings = params if isinstance(params, Mapping) else to_strings(params)
    return [word for key, value in strings.items() for word in ("--set", f"{key}={value}")]


def require(condition: bool, message: str) -> None:
    """For ``__post_init__`` range checks: raise :class:`ParamError` with ``message`` if false."""
    if not condition:
        raise ParamError(message)
