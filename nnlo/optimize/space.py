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

Tree-shaped (conditional) spaces: a categorical parameter may have ``branches``, one table per value, each
holding the parameters that exist only when that value is chosen (nested to any depth)::

    [model.branches.cnn.filters]        # exists only when model = "cnn"
    type = "integer"
    low = 8
    high = 64

In Python the same is ``Categorical(["mlp", "cnn"], name="model", branches={"cnn": [Integer(8, 64,
name="filters")]})``. The space is kept *flattened* (every parameter of every branch, in pre-order: a
choice, then its branches' parameters, then the next parameter); a point holds only its **active**
parameters (the roots, and the parameters of the branches its choices select). Names are unique across the
whole tree (a parameter becomes one ``get_model`` keyword, whichever branch it came from).
"""
from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnlo.errors import ConfigError

PRIORS = ("uniform", "log-uniform")


class _Bounded:
    """The unit-interval view of a numeric dimension in ``[low, high]`` (in log space for log-uniform): the
    genetic engine mutates there. Real and Integer differ only in how a value is clipped back."""

    low: Any
    high: Any
    prior: str

    def clip(self, value: Any) -> Any:
        raise NotImplementedError

    def _unit_range(self) -> tuple[float, float]:
        if self.prior == "log-uniform":
            return math.log(self.low), math.log(self.high)
        return float(self.low), float(self.high)

    def to_unit(self, value: Any) -> float:
        """Position of ``value`` in [0, 1]."""
        lo, hi = self._unit_range()
        x = math.log(float(value)) if self.prior == "log-uniform" else float(value)
        return (x - lo) / (hi - lo)

    def from_unit(self, u: float) -> Any:
        """The value at position ``u`` (clamped to [0, 1]), clipped to a valid value."""
        lo, hi = self._unit_range()
        x = lo + min(1.0, max(0.0, u)) * (hi - lo)
        return self.clip(math.exp(x) if self.prior == "log-uniform" else x)


@dataclass(frozen=True)
class Real(_Bounded):
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

    @property
    def default(self) -> float:
        """The value an inactive parameter takes in a model's embedding of a tree space (the low bound)."""
        return float(self.low)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "real", "low": self.low, "high": self.high, "prior": self.prior}


@dataclass(frozen=True)
class Integer(_Bounded):
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

    @property
    def default(self) -> int:
        return int(self.low)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "integer", "low": self.low, "high": self.high, "prior": self.prior}


@dataclass(frozen=True, init=False)
class Categorical:
    """One of a list of values (strings, numbers or booleans).

    ``branches`` makes a tree: ``{value: [dimension, ...]}``, the parameters that exist only when this
    value is chosen (keys are the values themselves or their labels, see :func:`label`).
    """

    categories: tuple[Any, ...]
    name: str | None = None
    branches: tuple[tuple[Any, tuple[Dimension, ...]], ...] = ()

    kind = "categorical"

    def __init__(self, categories: Iterable[Any], prior: Any = None, transform: Any = None, name: str | None = None,
                 branches: Mapping[Any, Iterable[Any]] | None = None):
        # prior/transform are accepted (and ignored) for call compatibility with skopt.space.Categorical.
        if isinstance(categories, (str, bytes)) or not isinstance(categories, Iterable):
            raise ConfigError(f"parameter {name!r}: Categorical needs a list of values, got {categories!r}")
        cats = tuple(_plain(c) for c in categories)
        object.__setattr__(self, "categories", cats)
        object.__setattr__(self, "name", name)
        _check_name(name)
        if len(cats) < 1:
            raise ConfigError(f"parameter {name!r}: Categorical needs at least one value")
        if len(set(map(repr, cats))) != len(cats):
            raise ConfigError(f"parameter {name!r}: Categorical values must be distinct, got {list(cats)}")
        object.__setattr__(self, "branches", self._branches(branches))

    def _branches(self, branches: Mapping[Any, Iterable[Any]] | None) -> tuple[tuple[Any, tuple[Dimension, ...]], ...]:
        if branches is None:
            return ()
        labels = [label(c) for c in self.categories]
        if len(set(labels)) != len(labels):
            raise ConfigError(f"parameter {self.name!r}: values {list(self.categories)} name the same branch "
                              "twice (a branch is named by its value's text); make the values distinct as text")
        if not isinstance(branches, Mapping):
            raise ConfigError(f"parameter {self.name!r}: branches must map a value to a list of parameters, "
                              f"got {type(branches).__name__}")
        found: dict[int, tuple[Dimension, ...]] = {}
        for key, dims in branches.items():
            i = self._index_of(key)
            if i is None:
                raise ConfigError(f"parameter {self.name!r}: branch {key!r} is not one of its values "
                                  f"{[label(c) for c in self.categories]}")
            if i in found:
                raise ConfigError(f"parameter {self.name!r}: branch {label(self.categories[i])!r} is given twice")
            if isinstance(dims, (str, bytes, Mapping)) or not isinstance(dims, Iterable):
                raise ConfigError(f"parameter {self.name!r}: branch {key!r} must be a list of parameters")
            sub = tuple(convert_dimension(d) for d in dims)
            if not sub:
                raise ConfigError(f"parameter {self.name!r}: branch {label(self.categories[i])!r} has no parameters; "
                                  "leave it out (a value without parameters needs no branch)")
            found[i] = sub
        return tuple((self.categories[i], found[i]) for i in sorted(found))

    def _index_of(self, key: Any) -> int | None:
        for i, c in enumerate(self.categories):
            if _same(key, c):
                return i
        for i, c in enumerate(self.categories):
            if isinstance(key, str) and key == label(c):
                return i
        return None

    def index(self, value: Any) -> int | None:
        """The position of ``value`` among the categories (a list read back from JSON is the tuple it was),
        or None when it is none of them."""
        return next((i for i, c in enumerate(self.categories) if _same(value, c)), None)

    def branch(self, value: Any) -> tuple[Dimension, ...]:
        """The parameters that exist when ``value`` is chosen (none if it has no branch)."""
        for v, dims in self.branches:
            if _same(v, value):
                return dims
        return ()

    @property
    def default(self) -> Any:
        return self.categories[0]

    def sample(self, rng: np.random.Generator) -> Any:
        return self.categories[int(rng.integers(len(self.categories)))]

    def clip(self, value: Any) -> Any:
        return value if self.contains(value) else self.categories[0]

    def contains(self, value: Any) -> bool:
        return any(_same(value, c) for c in self.categories)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "categorical", "values": [_json(c) for c in self.categories]}
        if self.branches:
            out["branches"] = {label(v): {str(d.name): d.to_dict() for d in dims} for v, dims in self.branches}
        return out


Dimension = Real | Integer | Categorical


def _check_name(name: str | None) -> None:
    if name is not None and (not isinstance(name, str) or not name.isidentifier()):
        raise ConfigError(f"parameter name {name!r} must be a Python identifier (it becomes a get_model keyword)")


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same type (``1``, ``1.0`` and ``True`` are different categories; a list and a tuple
    of the same items are one, as JSON keeps both as a list)."""
    a, b = _plain(a), _plain(b)
    return type(a) is type(b) and bool(a == b)


def label(value: Any) -> str:
    """How a categorical value names its branch: strings as they are, numbers and booleans as TOML/JSON
    write them (``1``, ``0.5``, ``true``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _plain(value: Any) -> Any:
    """numpy scalars -> Python scalars, lists -> tuples (a value read back from JSON is the one written), so
    points are JSON-able and compare by value."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def _json(value: Any) -> Any:
    """A categorical value as JSON writes it (tuples as lists), so a space read back compares equal."""
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return value


class Space:
    """An ordered set of named dimensions, possibly tree-shaped. Points are plain ``{name: value}`` dicts of
    Python scalars holding the *active* parameters only.

    ``dimensions`` is the flattened tree (every parameter of every branch, in pre-order), so a flat space's
    behaviour (order, sampling stream, keys) is exactly what it was before trees existed.
    """

    def __init__(self, dimensions: Sequence[Dimension]):
        if not dimensions:
            raise ConfigError(
                "the search space is empty: give get_model.parameter_range in the model module or --space FILE.toml"
            )
        self.roots: tuple[Dimension, ...] = tuple(convert_dimension(d) for d in dimensions)
        flat: list[Dimension] = []
        #: name -> (name of the categorical choice, value) under which the parameter exists
        self.condition: dict[str, tuple[str, Any]] = {}

        def walk(dims: Sequence[Dimension], cond: tuple[str, Any] | None) -> None:
            for d in dims:
                if d.name is None:
                    raise ConfigError("every search dimension needs a name=...: it is the get_model keyword it sets")
                flat.append(d)
                if cond is not None:
                    self.condition.setdefault(str(d.name), cond)
                if isinstance(d, Categorical):
                    for value, sub in d.branches:
                        walk(sub, (str(d.name), value))

        walk(self.roots, None)
        names = [str(d.name) for d in flat]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"search dimensions named twice: {', '.join(map(str, dup))}; give each a unique name "
                              "(also across branches: a name is one get_model keyword)")
        self.dimensions: tuple[Dimension, ...] = tuple(flat)

    @property
    def names(self) -> list[str]:
        """Every parameter's name (all branches), in the flattened order: the columns of ``trials.csv``."""
        return [str(d.name) for d in self.dimensions]

    @property
    def is_tree(self) -> bool:
        return bool(self.condition)

    def __len__(self) -> int:
        return len(self.dimensions)

    def __iter__(self) -> Iterator[Dimension]:
        return iter(self.dimensions)

    def _is_active(self, name: str, point: Mapping[str, Any]) -> bool:
        cond = self.condition.get(name)
        return cond is None or (cond[0] in point and _same(point[cond[0]], cond[1]))

    def active(self, point: Mapping[str, Any]) -> list[Dimension]:
        """The dimensions ``point``'s choices make active (its values for other parameters are ignored)."""
        out: list[Dimension] = []
        chosen: dict[str, Any] = {}
        for d in self.dimensions:
            n = str(d.name)
            if self._is_active(n, chosen):
                out.append(d)
                if n in point:
                    chosen[n] = point[n]
        return out

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        point: dict[str, Any] = {}
        for d in self.dimensions:
            if self._is_active(str(d.name), point):
                point[str(d.name)] = d.sample(rng)
        return point

    def complete(self, point: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        """``point`` with every inactive parameter drawn at random (the genetic engine breeds such points,
        so a child that switches branch gets fresh values there)."""
        full = dict(point)
        for d in self.dimensions:
            if str(d.name) not in full:
                full[str(d.name)] = d.sample(rng)
        return full

    def point(self, values: Sequence[Any] | Mapping[str, Any]) -> dict[str, Any]:
        """A dict point of the active parameters, from a list of every dimension's value in order (as skopt
        returns) or from a dict; values made plain. Values of inactive parameters are dropped."""
        full = values if isinstance(values, Mapping) else dict(zip(self.names, values, strict=True))
        point: dict[str, Any] = {}
        for d in self.dimensions:
            n = str(d.name)
            if self._is_active(n, point):
                point[n] = _plain(full[n])
        return point

    def as_list(self, point: Mapping[str, Any]) -> list[Any]:
        """Every dimension's value in order; inactive parameters at their ``default`` (the embedding a
        surrogate model sees: low bound, or first category)."""
        return [point.get(str(d.name), d.default) for d in self.dimensions]

    def contains(self, point: Mapping[str, Any]) -> bool:
        names = [str(d.name) for d in self.active(point)]
        return set(point) == set(names) and all(
            d.contains(point[str(d.name)]) for d in self.active(point))

    def key(self, point: Mapping[str, Any]) -> str:
        """A stable identity for a point (used to avoid handing the same point out twice)."""
        return repr([point.get(n) for n in self.names])

    def subspace_of(self, point: Mapping[str, Any]) -> str:
        """Which subspace (leaf of the tree) ``point`` lies in: its branch choices, ``"model=cnn,pool=max"``
        in the flattened order; ``""`` for a flat space. One of :meth:`subspaces`."""
        return ",".join(f"{d.name}={label(point[str(d.name)])}" for d in self.dimensions
                        if isinstance(d, Categorical) and d.branches and str(d.name) in point
                        and self._is_active(str(d.name), point))

    def subspaces(self) -> list[str]:
        """Every subspace label :meth:`subspace_of` can return (``[""]`` for a flat space)."""
        return [",".join(p) for p in _paths(self.roots)]

    def to_dict(self) -> dict[str, Any]:
        return {str(d.name): d.to_dict() for d in self.roots}

    @classmethod
    def from_dict(cls, data: Any, source: str = "space") -> Space:
        dims = _dimensions_from_tables(data, source, "")
        try:
            return cls(dims)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    def __repr__(self) -> str:
        return f"Space({self.to_dict()})"


def _paths(dims: Sequence[Dimension]) -> list[list[str]]:
    combos: list[list[str]] = [[]]
    for d in dims:
        if isinstance(d, Categorical) and d.branches:
            options = [[f"{d.name}={label(c)}", *tail] for c in d.categories for tail in _paths(d.branch(c))]
            combos = [a + b for a in combos for b in options]
    return combos


def _dimensions_from_tables(data: Any, source: str, where: str) -> list[Dimension]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: {where or 'the space'} must be a table of [name] parameter tables")
    dims: list[Dimension] = []
    for name, spec in data.items():
        at = f"{where}.{name}" if where else str(name)
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{source}: [{at}] must be a table with type = real|integer|categorical")
        dims.append(_dimension_from_table(str(name), spec, source, at))
    return dims


def _dimension_from_table(name: str, spec: Mapping[str, Any], source: str, at: str | None = None) -> Dimension:
    at = at or name
    kind = str(spec.get("type", "")).lower()
    known = {"real": {"type", "low", "high", "prior"}, "integer": {"type", "low", "high", "prior"},
             "categorical": {"type", "values", "branches"}}
    if kind not in known:
        raise ConfigError(f"{source}: [{at}] needs type = \"real\", \"integer\" or \"categorical\", got {kind!r}")
    extra = sorted(set(spec) - known[kind])
    if extra:
        raise ConfigError(f"{source}: [{at}] has unknown key(s) {', '.join(extra)}; allowed: "
                          f"{', '.join(sorted(known[kind]))}")
    try:
        if kind == "categorical":
            values = spec.get("values")
            if not isinstance(values, list):
                raise ConfigError(f"{source}: [{at}] needs values = [..] (a list)")
            branches = spec.get("branches")
            if branches is None:
                return Categorical(values, name=name)
            if not isinstance(branches, Mapping) or not branches:
                raise ConfigError(f"{source}: [{at}.branches] must hold one table per value, e.g. "
                                  f"[{at}.branches.{label(values[0]) if values else 'VALUE'}.NAME]")
            subs: dict[str, list[Dimension]] = {}
            for key, table in branches.items():
                if isinstance(table, Mapping) and not table:
                    raise ConfigError(f"{source}: [{at}.branches.{key}] has no parameters; leave it out "
                                      "(a value without parameters needs no branch)")
                subs[str(key)] = _dimensions_from_tables(table, source, f"{at}.branches.{key}")
            return Categorical(values, name=name, branches=subs)
        if "low" not in spec or "high" not in spec:
            raise ConfigError(f"{source}: [{at}] needs low = .. and high = ..")
        low, high = spec["low"], spec["high"]
        if kind == "integer":
            return Integer(low, high, spec.get("prior", "uniform"), name=name)
        return Real(float(low), float(high), spec.get("prior", "uniform"), name=name)
    except ConfigError as e:
        if str(e).startswith(source):
            raise
        raise ConfigError(f"{source}: [{at}]: {e}") from None
    except (TypeError, ValueError, OverflowError) as e:
        raise ConfigError(f"{source}: [{at}] is malformed: {e}") from None


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


def convert_dimension(d: Any) -> Dimension:
    """One dimension of ours from one of ours or a scikit-optimize one (read by attribute, never imported)."""
    if isinstance(d, (Real, Integer, Categorical)):
        return d
    name = getattr(d, "name", None)
    cls = type(d).__name__
    if hasattr(d, "categories"):
        return Categorical(list(d.categories), name=name)
    if hasattr(d, "low") and hasattr(d, "high"):
        prior = getattr(d, "prior", "uniform") or "uniform"
        try:
            if cls == "Integer":
                return Integer(int(d.low), int(d.high), prior, name=name)
            return Real(float(d.low), float(d.high), prior, name=name)
        except (TypeError, ValueError, OverflowError) as e:
            raise ConfigError(f"search dimension {name!r} is malformed: {e}") from None
    if isinstance(d, tuple) and len(d) == 2:
        raise ConfigError(f"search dimension {d!r} has no name; use Real(low, high, name=...) / Integer(...)")
    raise ConfigError(f"search dimension {d!r} ({cls}) is not an Integer, Real or Categorical")


def from_dimensions(dims: Any) -> Space:
    """Convert a ``parameter_range`` into a :class:`Space`: a list of dimensions (skopt's or ours, with
    ``Categorical(..., branches={...})`` for a tree), or a dict in the TOML file's form.

    skopt objects are read by attribute (``low``, ``high``, ``prior``, ``categories``, ``name``) so this
    module never imports skopt. ``Integer`` is recognised by integer bounds / class name.
    """
    if isinstance(dims, Mapping):
        return Space.from_dict(dims, source="parameter_range")
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
        raise ConfigError(f"parameter_range must be a list of dimensions or a dict like a --space file, "
                          f"got {type(dims).__name__}")
    return Space([convert_dimension(d) for d in dims])


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
