#!/usr/bin/env bash
# Mutation testing of the pure modules (docs/testing.md, "Mutation testing"): for each module, mutmut makes
# small wrong changes and runs the process-free unit tests that pin that module against each; prints every
# module's score and writes mutation-report.json. Not part of scripts/test.sh: about 13 minutes of CPU.
#
#   scripts/mutation.sh                    every module
#   scripts/mutation.sh roles layout       only these groups (or modules: nnlo/roles.py)
#   scripts/mutation.sh --list             which tests pin which module
#   scripts/mutation.sh --survivors ...    also print each mutant no test caught
#
# One mutant at a time, at the lowest CPU priority: the machine stays usable.
set -euo pipefail
cd "$(dirname "$0")/.."
exec nice -n 19 .venv/bin/python scripts/mutation.py "$@"
