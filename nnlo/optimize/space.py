"""The search space: named Integer, Real and Categorical dimensions.

Why our own dimension types: scikit-optimize is unmaintained and only :mod:`nnlo.optimize.engines.bayesian`
may import it, yet the random and genetic engines, the results table and the TOML loader all need to know
the space. These classes take the same arguments as ``skopt.space.Integer/Real/Categorical`` so a model
module can use either; :func:`from_dimensions` converts skopt objects by their attributes (duck typing,
no import), which keeps the upstream contract ``get_model.parameter_range = [skopt.space.Real(...), ...]``
working.

A TOML space file has one table per parameter::

    [lr]
    type = "real"          # real | integer | categorical
    low = 1e-4
    high = 1e-1
    prior = "log-uniform"  # optional, real only: uniform (default) | log-uniform

    [batch]
    type = "integer"
    low = 16
    high = 128

    [optimizer]
    type = "categorical"
    values = ["adam", "sgd"]
"""
from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnlo.errors import ConfigError

PRIORS = ("uniform", "log-uniform")


@dataclass(frozen=True)
class Real:
    """A float in ``[low, high]``; ``prior="log-uniform"`` samples the exponent uniformly (for rates)."""

    low: float
    high: float
    prior: str = "uniform"
    name: str | None = None

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low >= self.high:
            raise ConfigError(f"parameter {self.name!r}: Real needs finite low < high, got {self.low}, {self.high}")
        if self.prior not in PRIORS:
            raise ConfigError(f"parameter {self.name!r}: prior must be one of {', '.join(PRIORS)}, got {self.prior!r}")
        if self.prior == "log-uniform" and self.low <= 0:
            raise ConfigError(f"parameter {self.name!r}: a log-uniform prior needs low > 0, got {self.low}")

    kind = "real"

    def sample(self, rng: np.random.Generator) -> float:
        if self.prior == "log-uniform":
            return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return float(rng.uniform(self.low, self.high))

    def clip(self, value: Any) -> float:
        return float(min(self.high, max(self.low, float(value))))

    def contains(self, value: Any) -> bool:
        return isinstance(value, (int, float)) and self.low <= float(value) <= self.high

    def to_unit(self, value: Any) -> float:
        """Position in [0, 1] (in log space for log-uniform): the genetic engine mutates there."""
        if self.prior == "log-uniform":
            lo, hi = math.log(self.low), math.log(self.high)
            return (math.log(float(value)) - lo) / (hi - lo)
        return (float(value) - self.low) / (self.high - self.low)

    def from_unit(self, u: float) -> float:
        u = min(1.0, max(0.0, u))
        if self.prior == "log-uniform":
            lo, hi = math.log(self.low), math.log(self.high)
            return self.clip(math.exp(lo + u * (hi - lo)))
        return self.clip(self.low + u * (self.high - self.low))

    def to_dict(self) -> dict[str, Any]:
        return {"type": "real", "low": self.low, "high": self.high, "prior": self.prior}


@dataclass(frozen=True)
class Integer:
    """An integer in ``[low, high]`` (both included)."""

    low: int
    high: int
    prior: str = "uniform"
    name: str | None = None

    kind = "integer"

    def __post_init__(self) -> None:
        _check_name(self.name)
        if int(self.low) != self.low or int(self.high) != self.high or self.low >= self.high:
            raise ConfigError(
                f"parameter {self.name!r}: Integer needs integer low < high, got {self.low}, {self.high}"
            )
        object.__setattr__(self, "low", int(self.low))
        object.__setattr__(self, "high", int(self.high))
        if self.prior not in PRIORS or (self.prior == "log-uniform" and self.low <= 0):
            raise ConfigError(f"parameter {self.name!r}: bad prior {self.prior!r} for [{self.low}, {self.high}]")

    def sample(self, rng: np.random.Generator) -> int:
        if self.prior == "log-uniform":
            return self.from_unit(float(rng.uniform()))
        return int(rng.integers(self.low, self.high + 1))

    def clip(self, value: Any) -> int:
        return int(min(self.high, max(self.low, round(float(value)))))

    def contains(self, value: Any) -> bool:
        return (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
                and bool(self.low <= value <= self.high))

    def to_unit(self, value: Any) -> float:
        if self.prior == "log-uniform":
            lo, hi = math.log(self.low), math.log(self.high)
            return (math.log(float(value)) - lo) / (hi - lo)
        return (float(value) - self.low) / (self.high - self.low)

    def from_unit(self, u: float) -> int:
        u = min(1.0, max(0.0, u))
        if self.prior == "log-uniform":
            lo, hi = math.log(self.low), math.log(self.high)
            return self.clip(math.exp(lo + u * (hi - lo)))
        return self.clip(self.low + u * (self.high - self.low))

    def to_dict(self) -> dict[str, Any]:
        return {"type": "integer", "low": self.low, "high": self.high, "prior": self.prior}


@dataclass(frozen=True, init=False)
class Categorical:
    """One of a list of values (strings, numbers or booleans)."""

    categories: tuple[Any, ...]
    name: str | None = None

    kind = "categorical"

    def __init__(self, categories: Iterable[Any], prior: Any = None, transform: Any = None, name: str | None = None):
        # prior/transform are accepted (and ignored) for call compatibility with skopt.space.Categorical.
        cats = tuple(_plain(c) for c in categories)
        object.__setattr__(self, "categories", cats)
        object.__setattr__(self, "name", name)
        _check_name(name)
        if len(cats) < 1:
            raise ConfigError(f"parameter {name!r}: Categorical needs at least one value")
        if len(set(map(repr, cats))) != len(cats):
            raise ConfigError(f"parameter {name!r}: Categorical values must be distinct, got {list(cats)}")

    def sample(self, rng: np.random.Generator) -> Any:
        return self.categories[int(rng.integers(len(self.categories)))]

    def clip(self, value: Any) -> Any:
        return value if self.contains(value) else self.categories[0]

    def contains(self, value: Any) -> bool:
        return any(type(value) is type(c) and value == c for c in self.categories)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "categorical", "values": list(self.categories)}


Dimension = Real | Integer | Categorical


def _check_name(name: str | None) -> None:
    if name is not None and (not isinstance(name, str) or not name.isidentifier()):
        raise ConfigError(f"parameter name {name!r} must be a Python identifier (it becomes a get_model keyword)")


def _plain(value: Any) -> Any:
    """numpy scalars -> Python scalars, so points are JSON-able and compare by value."""
    if isinstance(value, np.generic):
        return value.item()
    return value


class Space:
    """An ordered set of named dimensions. Points are plain ``{name: value}`` dicts of Python scalars."""

    def __init__(self, dimensions: Sequence[Dimension]):
        if not dimensions:
            raise ConfigError(
                "the search space is empty: give get_model.parameter_range in the model module or --space FILE.toml"
            )
        names = [d.name for d in dimensions if d.name is not None]
        if len(names) < len(dimensions):
            raise ConfigError("every search dimension needs a name=...: it is the get_model keyword it sets")
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"search dimensions named twice: {', '.join(map(str, dup))}; give each a unique name")
        self.dimensions: tuple[Dimension, ...] = tuple(dimensions)

    @property
    def names(self) -> list[str]:
        return [str(d.name) for d in self.dimensions]

    def __len__(self) -> int:
        return len(self.dimensions)

    def __iter__(self) -> Iterator[Dimension]:
        return iter(self.dimensions)

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        return {str(d.name): d.sample(rng) for d in self.dimensions}

    def point(self, values: Sequence[Any] | dict[str, Any]) -> dict[str, Any]:
        """A dict point from a list in dimension order (as skopt returns) or a dict; values made plain."""
        if isinstance(values, dict):
            return {n: _plain(values[n]) for n in self.names}
        return {n: _plain(v) for n, v in zip(self.names, values, strict=True)}

    def as_list(self, point: dict[str, Any]) -> list[Any]:
        return [point[n] for n in self.names]

    def contains(self, point: dict[str, Any]) -> bool:
        names = self.names
        return set(point) == set(names) and all(
            d.contains(point[n]) for n, d in zip(names, self.dimensions, strict=True))

    def key(self, point: dict[str, Any]) -> str:
        """A stable identity for a point (used to avoid handing the same point out twice)."""
        return repr([point[n] for n in self.names])

    def to_dict(self) -> dict[str, Any]:
        return {str(d.name): d.to_dict() for d in self.dimensions}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "space") -> Space:
        dims: list[Dimension] = []
        for name, spec in data.items():
            if not isinstance(spec, dict):
                raise ConfigError(f"{source}: [{name}] must be a table with type = real|integer|categorical")
            dims.append(_dimension_from_table(name, spec, source))
        return cls(dims)

    def __repr__(self) -> str:
        return f"Space({self.to_dict()})"


def _dimension_from_table(name: str, spec: dict[str, Any], source: str) -> Dimension:
    kind = str(spec.get("type", "")).lower()
    known = {"real": {"type", "low", "high", "prior"}, "integer": {"type", "low", "high", "prior"},
             "categorical": {"type", "values"}}
    if kind not in known:
        raise ConfigError(f"{source}: [{name}] needs type = \"real\", \"integer\" or \"categorical\", got {kind!r}")
    extra = sorted(set(spec) - known[kind])
    if extra:
        raise ConfigError(f"{source}: [{name}] has unknown key(s) {', '.join(extra)}; allowed: "
                          f"{', '.join(sorted(known[kind]))}")
    try:
        if kind == "categorical":
            values = spec.get("values")
            if not isinstance(values, list):
                raise ConfigError(f"{source}: [{name}] needs values = [..] (a list)")
            return Categorical(values, name=name)
        if "low" not in spec or "high" not in spec:
            raise ConfigError(f"{source}: [{name}] needs low = .. and high = ..")
        low, high = spec["low"], spec["high"]
        if kind == "integer":
            return Integer(low, high, spec.get("prior", "uniform"), name=name)
        return Real(float(low), float(high), spec.get("prior", "uniform"), name=name)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{source}: [{name}] is malformed: {e}") from None


def from_toml(path: str | Path) -> Space:
    """Load a space file (format in the module docstring); errors name the file and the parameter."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--space {p}: no such file; write a TOML file with one [name] table per parameter")
    try:
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--space {p}: not valid TOML ({e})") from None
    return Space.from_dict(data, source=str(p))


def from_dimensions(dims: Iterable[Any]) -> Space:
    """Convert a ``parameter_range`` list (skopt dimensions or ours) into a :class:`Space`.

    skopt objects are read by attribute (``low``, ``high``, ``prior``, ``categories``, ``name``) so this
    module never imports skopt. ``Integer`` is recognised by integer bounds / class name.
    """
    out: list[Dimension] = []
    for d in dims:
        if isinstance(d, (Real, Integer, Categorical)):
            out.append(d)
            continue
        name = getattr(d, "name", None)
        cls = type(d).__name__
        if hasattr(d, "categories"):
            out.append(Categorical(list(d.categories), name=name))
        elif hasattr(d, "low") and hasattr(d, "high"):
            prior = getattr(d, "prior", "uniform") or "uniform"
            if cls == "Integer":
                out.append(Integer(int(d.low), int(d.high), prior, name=name))
            else:
                out.append(Real(float(d.low), float(d.high), prior, name=name))
        elif isinstance(d, tuple) and len(d) == 2:
            raise ConfigError(f"search dimension {d!r} has no name; use Real(low, high, name=...) / Integer(...)")
        else:
            raise ConfigError(f"search dimension {d!r} ({cls}) is not an Integer, Real or Categorical")
    return Space(out)


def from_model(module: Any) -> Space:
    """The space a model module declares as ``get_model.parameter_range`` (upstream contract)."""
    get_model = getattr(module, "get_model", None)
    dims = getattr(get_model, "parameter_range", None) if get_model is not None else None
    if dims is None:
        dims = getattr(module, "parameter_range", None)
    if dims is None:
        name = getattr(module, "__file__", module)
        raise ConfigError(
            f"{name} declares no search space: set get_model.parameter_range = [Real(..., name='lr'), ...] "
            "or pass --space FILE.toml"
        )
    return from_dimensions(dims)
