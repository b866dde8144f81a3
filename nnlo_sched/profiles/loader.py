"""Finding and reading cluster profiles: built-in ones, then the user's, with ``extends`` inheritance.

Search order (a later file with the same name wins, so a site can replace a built-in profile):

1. the built-in ``*.toml`` files beside this module;
2. ``$XDG_CONFIG_HOME/nnlo/clusters/*.toml`` (``~/.config/nnlo/clusters``);
3. every directory in ``$NNLO_CLUSTERS`` (``os.pathsep``-separated).

A profile's name is its file name without ``.toml``. A file may say ``extends = "flatiron"`` to start from
another profile and change only some keys (``queues`` merge per queue). Aliases (``rusty`` for ``flatiron``) are
declared with ``aliases = [...]`` in the profile itself.
"""
from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnlo.contract import ENV_CLUSTERS
from nnlo.errors import ConfigError
from nnlo_sched.profiles.schema import Profile, ProfileError, profile_from_table, profile_path_str
from nnlo_sched.resources import profiles_dir


@dataclass(frozen=True)
class ProfileFile:
    name: str
    path: Path
    builtin: bool


def user_dirs() -> list[Path]:
    """User profile directories, in increasing priority."""
    config = _expand(Path(os.environ.get("XDG_CONFIG_HOME") or "~/.config"))
    dirs = [config / "nnlo" / "clusters"]
    for d in os.environ.get(ENV_CLUSTERS, "").split(os.pathsep):
        if d:
            dirs.append(_expand(Path(d)))
    return [d for d in dirs if _nameable(d)]


def _nameable(path: Path) -> bool:
    """Whether the filesystem takes the name at all (a name too long cannot hold profiles: it is left out)."""
    try:
        path.exists()
    except (OSError, ValueError):
        return False
    return True


def _expand(path: Path) -> Path:
    """``~`` expanded; ``~user`` of no user stays as typed (a folder that does not exist: no profiles)."""
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def profile_files() -> dict[str, ProfileFile]:
    """Every profile file by name; user files shadow built-in ones of the same name."""
    found: dict[str, ProfileFile] = {}
    for p in sorted(profiles_dir().glob("*.toml")):
        found[p.stem] = ProfileFile(p.stem, p, True)
    for d in user_dirs():
        try:
            files = sorted(d.glob("*.toml")) if d.is_dir() else []
        except OSError:  # unreadable, a name too long: no profiles there (`nnlo clusters` lists the folders)
            files = []
        for p in files:
            found[p.stem] = ProfileFile(p.stem, p, False)
    return found


def _read(path: Path) -> dict[str, Any]:
    src = profile_path_str(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"profile {src} is not valid TOML: {' '.join(str(e).split())}; fix or remove it") from None
    except UnicodeDecodeError as e:
        raise ProfileError(f"profile {src} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                           f"save it as UTF-8") from None
    except RecursionError:
        raise ProfileError(f"profile {src} nests tables or arrays too deeply to read; fix or remove it") from None
    except OSError as e:
        raise ProfileError(f"profile {src} cannot be read: {e.strerror or e}; fix its permissions or remove it") \
            from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if k == "queues" and isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    if "aliases" not in over:  # a derived profile does not take over its parent's short names
        out.pop("aliases", None)
    return out


def _raw_table(name: str, files: dict[str, ProfileFile], seen: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    pf = files[name]
    table = _read(pf.path)
    src = profile_path_str(pf.path)
    parent = table.get("extends")
    if parent is None:
        return table, src
    if not isinstance(parent, str):
        raise ProfileError(f"profile {src}: key 'extends' must be a string naming a profile, got {parent!r}")
    target = resolve_name(parent, files)  # by name or alias: a cycle through aliases is a cycle too
    if target in seen or (target == name and (pf.builtin or parent != name)):
        shown = parent if parent == target else f"{parent} (alias of {target})"
        raise ProfileError(f"profile {src}: 'extends' makes a cycle ({' -> '.join((*seen, name, shown))}); "
                           f"make one of them extend a built-in profile instead")
    if parent == name:  # a user file extending the built-in of the same name
        builtin = profiles_dir() / f"{name}.toml"
        if not builtin.exists():
            raise ProfileError(f"profile {src}: extends itself and there is no built-in {name!r}")
        base, base_src = _read(builtin), profile_path_str(builtin)
    else:
        if target is None:
            raise ProfileError(
                f"profile {src}: extends unknown profile {parent!r}; known: {', '.join(sorted(files))}"
            )
        base, base_src = _raw_table(target, files, (*seen, name))
    return _merge(base, table), f"{src} (extends {base_src})"


def resolve_name(name: str, files: dict[str, ProfileFile] | None = None) -> str | None:
    """The profile file name for ``name`` or one of its aliases (None when unknown)."""
    files = profile_files() if files is None else files
    if name in files:
        return name
    for pf in files.values():
        try:
            aliases = _read(pf.path).get("aliases", [])
        except ProfileError:
            continue
        if isinstance(aliases, list) and name in aliases:
            return pf.name
    return None


#: retired profiles already named in this process (:func:`load_profile` says so once)
_told_retired: set[str] = set()


def tell_retired(profile: Profile) -> None:
    """Say once per process, on standard error, that ``profile``'s machine is retired."""
    if profile.retired and profile.name not in _told_retired:
        _told_retired.add(profile.name)
        print(f"nnlo: note: {profile.retired_note}", file=sys.stderr)


def load_profile(name: str, *, quiet: bool = False) -> Profile:
    """The profile called ``name`` (or aliased so), fully checked; a one-line error if absent or wrong. A
    retired machine's is said once per process (:func:`tell_retired`) unless ``quiet``."""
    files = profile_files()
    real = resolve_name(name, files)
    if real is None:
        raise ConfigError(
            f"unknown cluster {name!r}; known: {', '.join(sorted(files))} "
            f"(add your own as ~/.config/nnlo/clusters/{name}.toml)"
        )
    table, src = _raw_table(real, files, ())
    profile = profile_from_table(real, table, src)
    if not quiet:
        tell_retired(profile)
    return profile


def list_profiles() -> list[tuple[ProfileFile, Profile | ProfileError]]:
    """Every profile with either its loaded form or the error that loading it gives."""
    out: list[tuple[ProfileFile, Profile | ProfileError]] = []
    for name, pf in sorted(profile_files().items()):
        try:
            out.append((pf, load_profile(name, quiet=True)))
        except ProfileError as e:
            out.append((pf, e))
    return out
