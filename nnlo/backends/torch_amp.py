"""Automatic mixed precision for the torch backend (``--amp``): which autocast, and the gradient scaler.

On GPUs the forward pass runs under ``torch.autocast`` in float16 and the loss is multiplied by a
``GradScaler``'s factor before backward, so small gradients do not underflow; the optimizer step then unscales
the gradients, skips the step when one is inf/NaN, and adapts the factor. On CPUs autocast runs in bfloat16,
whose exponent range is float32's: no scaler. Parameters, gradients and the optimizer's state stay float32, so
everything that moves between ranks (flat weights, gradient buffers) is unchanged.

**Gradients in the scaler's units.** With a scaler, the gradients a backend hands out
(:meth:`~nnlo.backends.torch_backend.TorchBackend.compute_gradients`, ``gradient_sum_into``) are the loss's
gradients times the current factor, and :meth:`Amp.step` (called by ``apply_gradients``) expects them so. An
all-reduce step sums and averages them linearly, every replica holds the same factor (same start, same sums,
so the same inf/NaN verdicts and the same updates), and one inf anywhere makes every replica skip that step.
The scaler's state is part of the optimizer state (:data:`STATE_KEY`), so checkpoints restore it.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

#: the key of the scaler's state inside the backend's optimizer state (absent: no scaler)
STATE_KEY = "nnlo_grad_scaler"


@dataclass(frozen=True)
class AmpPolicy:
    """Autocast on ``device_type`` in ``dtype``, with a gradient scaler or not."""

    device_type: str
    dtype: torch.dtype
    scaler: bool


def amp_policy(device: torch.device) -> AmpPolicy:
    """The ``--amp`` rule: float16 with a scaler on CUDA devices, bfloat16 without one elsewhere."""
    if device.type == "cuda":
        return AmpPolicy("cuda", torch.float16, scaler=True)
    return AmpPolicy(device.type, torch.bfloat16, scaler=False)


class Amp:
    """One backend's autocast and scaler (``policy`` None: full precision, every method a pass-through)."""

    def __init__(self, policy: AmpPolicy | None, device: torch.device) -> None:
        self.policy = policy
        self.scaler: Any = None
        if policy is not None and policy.scaler:
            self.scaler = torch.amp.GradScaler(policy.device_type)
            self.scaler.scale(torch.zeros((), device=device))  # its factor exists before any step (empty slices)

    @property
    def enabled(self) -> bool:
        return self.policy is not None

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        if self.policy is None:
            yield
            return
        with torch.autocast(self.policy.device_type, dtype=self.policy.dtype):
            yield

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to call ``backward`` on."""
        return loss if self.scaler is None else self.scaler.scale(loss)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """One optimizer step on gradients in the scaler's units (skipped on inf/NaN), then adapt the factor."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        return {} if self.scaler is None else {STATE_KEY: self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the scaler from ``state[STATE_KEY]`` (a checkpoint written without AMP has none: keep the
        fresh scaler)."""
        saved = state.get(STATE_KEY)
        if self.scaler is not None and saved:
            self.scaler.load_state_dict(dict(saved))
