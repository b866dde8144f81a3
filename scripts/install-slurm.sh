#!/usr/bin/env bash
# Install the private test Slurm's packages (bench/private_slurm.py starts and stops the daemons).
# Idempotent, quiet and fast when everything is present. Needs root and apt-get; otherwise it says why
# and exits 0, so the Slurm tests skip with that reason (or fail, in CI, where NNLO_REQUIRE_SLURM=1).
#   slurm-wlm          slurmctld, slurmd, sbatch/squeue/scancel/sacct (22.05 on Debian 12)
#   slurm-wlm-torque   qsub/qstat/qdel wrappers over Slurm: a smoke test of the PBS path
#   mariadb-server, slurmdbd (no recommends)   accounting, so that sacct works in the tests that need it
set -euo pipefail
need=()
command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 \
  || need+=(slurm-wlm)
command -v qsub >/dev/null 2>&1 || need+=(slurm-wlm-torque)
extra=()
command -v slurmdbd >/dev/null 2>&1 || extra+=(slurmdbd)
{ command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; } || extra+=(mariadb-server)
if [ ${#need[@]} -eq 0 ] && [ ${#extra[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-slurm: not root or no apt-get; missing ${need[*]} ${extra[*]} (Slurm tests will skip)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
echo "install-slurm: installing ${need[*]} ${extra[*]}" >&2
log=$(mktemp)
# Daemons must not start at install time (no systemd here; the harness starts private instances).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made_policy=1; fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"; rm -f "$log"' EXIT
if ! { apt-get update -qq && apt-get install -y -qq "${need[@]}" >"$log" 2>&1 &&
       { [ ${#extra[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${extra[@]}" >>"$log" 2>&1; }; } >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "install-slurm: apt-get install failed (see above); Slurm tests will skip" >&2
  exit 0
fi
