"""Cluster profiles: built-in TOML data for Summit, Titan, CSCS (Piz Daint), Flatiron and local, plus users' own.

Use :func:`load_profile` (by name or alias) and :func:`list_profiles`; the schema is in
:mod:`nnlo_sched.profiles.schema`, the search path and ``extends`` rules in :mod:`nnlo_sched.profiles.loader`.
"""
from nnlo_sched.profiles.loader import list_profiles, load_profile, profile_files, user_dirs
from nnlo_sched.profiles.schema import Interpreter, Profile, ProfileError, Queue, WalltimeBin

__all__ = [
    "Interpreter",
    "Profile",
    "ProfileError",
    "Queue",
    "WalltimeBin",
    "list_profiles",
    "load_profile",
    "profile_files",
    "user_dirs",
]
