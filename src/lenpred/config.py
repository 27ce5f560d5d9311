"""One config mechanism for everything read from a file, sent over HTTP or set by CLI flags.

Every config is a :class:`Config`: a pydantic v2 model that is frozen, refuses unknown keys and
validates on construction, so a config object in hand is always a valid one. What that buys:

* ``Cfg.from_dict(data)`` / ``Cfg.load(path)`` turn pydantic's multi-line report into one
  :class:`~lenpred.errors.ConfigError` line that names the field (``workload.arrival.rate``) and,
  for unknown keys, lists the valid ones;
* ``cfg.to_dict()`` / ``cfg.to_json()`` write the exact settings beside every artifact;
* ``Cfg.json_schema()`` documents the file format (and the HTTP API, through FastAPI);
* :func:`add_arguments` derives ``--flag`` options from a model's fields (help text from each
  field's description) and :func:`from_arguments` builds the model back from the parsed flags, so
  flags are never copied by hand.
"""

from __future__ import annotations

import argparse
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal, Self, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from lenpred.errors import ConfigError, FieldError

__all__ = ["Config", "FieldError", "add_arguments", "from_arguments", "format_validation_error"]



def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def format_validation_error(err: ValidationError, model: type[BaseModel], where: str) -> ConfigError:
    """One readable line for the first problem pydantic found (and a count of the others)."""
    errs = err.errors(include_url=False)
    e = errs[0]
    loc = tuple(x for x in e.get("loc", ()) if not (isinstance(x, str) and x.startswith("function-")))
    path = ".".join(p for p in (where, _loc(loc)) if p)
    more = f" (and {len(errs) - 1} more problem(s))" if len(errs) > 1 else ""
    if e["type"] == "extra_forbidden":
        parent: Any = model
        for part in loc[:-1]:
            parent = _field_model(parent, part)
        valid = ", ".join(parent.model_fields) if parent is not None else "see the JSON schema"
        return ConfigError(_at(path, f"unknown key{more}"), f"valid keys: {valid}")
    msg = str(e.get("msg", "invalid value"))
    ctx_err = (e.get("ctx") or {}).get("error")
    if isinstance(ctx_err, _InvalidConfig):  # a nested section's own __init__ failed
        return format_validation_error(ctx_err.validation_error, ctx_err.model, path)
    if isinstance(ctx_err, ConfigError):  # raised by a validator: it names the fix (a fallback where it did not)
        return ConfigError(_at(path, f"{ctx_err.problem}{more}"),
                           ctx_err.fix or f"set {path or 'the value'} as the message says (--help lists every key)")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    got = e.get("input")
    shown = "" if isinstance(got, dict | list) else f", got {got!r}"
    return ConfigError(_at(path, f"{msg}{shown}{more}"), _fix(e, path))


def _at(path: str, text: str) -> str:
    """``path: text``, or the text alone for a problem of the whole object (no path)."""
    return f"{path}: {text}" if path else text


_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
_KINDS = {"int": "a whole number", "float": "a number", "bool": "true or false", "string": "text",
          "list": "a list", "tuple": "a list", "dict": "an object", "model": "an object"}


def _fix(e: Any, path: str) -> str:
    """What to change, for pydantic's own errors (a validator of ours names its fix itself)."""
    t = str(e["type"])
    ctx = e.get("ctx") or {}
    if t in _BOUNDS:
        bound = next(iter(ctx.values()), "the limit")
        shown = f"{bound:g}" if isinstance(bound, int | float) else str(bound)
        return f"set {path} to a value {_BOUNDS[t]} {shown}"
    if t in ("literal_error", "enum"):
        return f"use one of: {ctx.get('expected', 'the values --help lists')}"
    if t == "missing":
        return f"set {path}"
    if t in ("too_short", "too_long", "string_too_short", "string_too_long"):
        return f"give {path} a length within the limits (--help)"
    if t == "finite_number":
        return f"set {path} to a finite number"
    kind = _KINDS.get(t.split("_")[0])
    if kind is not None:
        return f"set {path} to {kind}"
    return f"see the description of {path} in --help or the JSON schema"


class _InvalidConfig(FieldError):
    """A config's constructor failed; keeps pydantic's report so a parent can add its path."""

    def __init__(self, err: ValidationError, model: type[BaseModel]) -> None:
        self.validation_error, self.model = err, model
        one = format_validation_error(err, model, model.__name__)
        super().__init__(one.problem, one.fix)


def _field_model(model: Any, name: Any) -> Any:
    """The nested Config class behind ``model.name`` (through Optional / tuple), or None."""
    if model is None or isinstance(name, int) or not hasattr(model, "model_fields"):
        return model if isinstance(name, int) else None
    f = model.model_fields.get(name)
    if f is None:
        return None
    stack = [f.annotation]
    while stack:
        t = stack.pop()
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
        stack.extend(get_args(t))
    return None


class Config(BaseModel):
    """Base of every lenpred config: frozen, strict about keys, one-line errors."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    def __init__(self, **data: Any) -> None:
        # Constructing a config in Python gets the same one-line ConfigError as a file or a flag.
        # (pydantic also calls an overridden __init__ for nested sections: the error then travels
        # inside the parent's ValidationError and is unwrapped with its full path.)
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise _InvalidConfig(e, type(self)) from None

    @classmethod
    def from_dict(cls, data: Any, where: str = "") -> Self:
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise ConfigError(f"{where or cls.__name__} must be a JSON object, got {type(data).__name__}",
                              "write the config as one JSON object of its keys (the JSON schema lists them)")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise format_validation_error(e, cls, where) from None
        except _InvalidConfig as e:
            raise format_validation_error(e.validation_error, e.model, where) from None

    @classmethod
    def load(cls, path: str | Path, where: str = "config") -> Self:
        p = Path(path)
        if p.is_dir():
            raise ConfigError(f"config {p} is a directory", "pass a JSON file")
        if not p.is_file():
            raise ConfigError(f"config file {p} not found", "check the path")
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise ConfigError(f"{p} is not UTF-8 text (byte {e.start})", "save the config as UTF-8 JSON") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
                              "correct the JSON at that place") from None
        return cls.from_dict(data, where)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    def replace(self, **changes: Any) -> Self:
        """A validated copy with some fields changed (``model_copy`` would skip validation)."""
        return type(self).from_dict({**self.model_dump(), **changes})

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        return cls.model_json_schema()


# ---------------------------------------------------------------- CLI flags from fields
def _scalar_type(annotation: Any) -> tuple[Any, bool]:
    """(the scalar type behind an annotation, whether None is allowed)."""
    optional = False
    t = annotation
    if get_origin(t) in (typing.Union, types.UnionType):
        args = [a for a in get_args(t) if a is not type(None)]
        optional = len(args) < len(get_args(t))
        t = args[0] if len(args) == 1 else str
    return t, optional


def add_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    model: type[Config],
    *,
    only: typing.Iterable[str] | None = None,
    exclude: typing.Iterable[str] = (),
    prefix: str = "",
    defaults: dict[str, Any] | None = None,
) -> list[str]:
    """Add ``--<prefix><field-name>`` options for scalar fields of ``model``; returns their names.

    bool fields become ``--x / --no-x``; ``Literal`` fields get ``choices``; the help text is the
    field's description plus its default. Values are parsed by argparse to the field's type, then
    validated by the model itself in :func:`from_arguments`.
    """
    names = list(only) if only is not None else list(model.model_fields)
    skip = set(exclude)
    added = []
    for name in names:
        if name in skip:
            continue
        f = model.model_fields[name]
        t, optional = _scalar_type(f.annotation)
        default = (defaults or {}).get(name, f.default)
        flag = "--" + prefix + name.replace("_", "-")
        dest = (prefix + name).replace("-", "_")
        help_ = (f.description or "").strip()
        help_ = f"{help_} (default {default})" if help_ else f"default {default}"
        kw: dict[str, Any] = {"dest": dest, "default": default, "help": help_}
        if t is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif get_origin(t) is Literal:
            kw["choices"] = list(get_args(t))
            kw["type"] = type(get_args(t)[0])
        elif t in (int, float, str):
            kw["type"] = t
        else:
            continue  # nested sections and lists are set through the config file
        if optional and t is not bool:
            kw["help"] += " ('none' to unset)"
            base = kw.get("type", str)
            kw["type"] = _optional(base)
        parser.add_argument(flag, **kw)
        added.append(name)
    return added


def _optional(base: Any) -> Any:
    def parse(text: str) -> Any:
        return None if text.lower() == "none" else base(text)

    parse.__name__ = getattr(base, "__name__", "value")
    return parse


def from_arguments(model: type[Config], args: argparse.Namespace, *, prefix: str = "",
                   where: str = "", **extra: Any) -> Any:
    """Build ``model`` from flags added by :func:`add_arguments` (plus ``extra`` fields)."""
    data: dict[str, Any] = {}
    for name in model.model_fields:
        dest = (prefix + name).replace("-", "_")
        if hasattr(args, dest):
            data[name] = getattr(args, dest)
    data.update(extra)
    return model.from_dict(data, where)
