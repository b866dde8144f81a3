"""``flux run`` (El Capitan, Tuolumne): ``-N nodes -n tasks -c cores -g gpus --exclusive -o gpu-affinity=per-task``.

Flux's ``gpu-affinity=per-task`` gives each task its own ``-g`` GPUs and says so in ``CUDA_VISIBLE_DEVICES``
(flux-shell-options(7)). On AMD nodes that is not the variable ROCm binds by: OLCF's working Flux example
moves it, ``export ROCR_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; unset CUDA_VISIBLE_DEVICES``, in every task; nnlo
does the same through a wrapper in the launch line when the profile's ``gpu_vendor`` is ``amd`` (whether LLNL's
own mpibind also sets ``ROCR_VISIBLE_DEVICES`` per task is unverified: this wins either way). Without GPUs per
rank (masters on spare cores) every task sees the job's GPUs and picks its own (:mod:`nnlo.device`).

Signals: Flux delivers a batch job's warning (``--signal=SIG@TIME``) to the batch script *and* to its running
jobs (flux-batch(1)), so the ranks already have it; the job shell forwards SIGINT and SIGTERM to the tasks
(flux-core's shell signals plugin). The batch shell therefore passes on TERM (and INT, as TERM) to ``flux run``
and keeps USR1/USR2 to itself (:meth:`FluxRun.relay` is ""): a front end that is sent a signal it does not
handle would die and leave the ranks running.
"""
from __future__ import annotations

from nnlo.device import device_variable
from nnlo_sched.launchers.base import WRAPPER_NAME, LaunchError, LaunchPlan, Launcher

NVIDIA_VARIABLE = device_variable("nvidia")


class FluxRun(Launcher):
    name = "flux"
    binds_gpus = True

    def program(self) -> str:
        return self.profile.launcher_command or "flux"

    def relay(self, signal: str) -> str:
        """TERM for TERM and INT (the job shell forwards both); "" (not passed on) for USR1/USR2, which Flux
        delivers to the job's tasks itself."""
        return "TERM" if signal in ("TERM", "INT") else ""

    def argv(self, plan: LaunchPlan) -> list[str]:
        out = [
            self.program(), "run",
            *self.profile.launcher_flags,
            "-N", str(plan.nodes),
            "-n", str(plan.ranks),
            "-c", str(plan.cores_per_rank),
        ]
        if plan.gpus_per_rank >= 1 and not plan.unbound:
            out += ["-g", str(int(plan.gpus_per_rank))]
        out.append("--exclusive")
        if plan.bound:
            out += ["-o", "gpu-affinity=per-task"]
            variable = device_variable(self.profile.gpu_vendor)
            if variable != NVIDIA_VARIABLE:
                out += ["bash", "-c", f'export {variable}="${NVIDIA_VARIABLE}"; unset {NVIDIA_VARIABLE}; exec "$@"',
                        WRAPPER_NAME]
        return out

    def check(self, plan: LaunchPlan) -> None:
        if 0 < plan.gpus_per_rank < 1 and not plan.unbound:
            raise LaunchError("flux run gives a task whole GPUs (-g N); ranks cannot share one through it: use "
                              "--gpus-per-worker 1 or more")
