"""PyTorch backend: an ``nn.Module`` and its worker optimizer behind :class:`nnlo.backends.base.Backend`.

The model is expected to return *logits* for classification losses (``categorical_crossentropy`` is
``torch.nn.functional.cross_entropy``, which applies log-softmax itself); a model ending in
``log_softmax`` should use ``--loss nll``. Labels may be class indices (integers) or one-hot / probability
vectors (floats) — HDF5 files written for Keras usually hold one-hot labels.

Only trainable parameters travel between ranks as the flat float32 weight vector. Buffers (BatchNorm running
statistics and their step counters) are a second, much shorter flat vector (:meth:`TorchBackend.get_buffers`)
that workers send at each epoch end for the master to average (see :mod:`nnlo.backends.base`).
"""
from __future__ import annotations

import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nnlo.algorithms.optimizers import torch_equivalent
from nnlo.backends.base import Backend
from nnlo.backends.torch_amp import STATE_KEY, Amp, AmpPolicy
from nnlo.errors import ConfigError, ModelError

log = logging.getLogger("nnlo.backend.torch")

_COUNTER_DTYPES = (torch.int64, torch.int32)
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LossSpec:
    name: str
    fn: LossFn  # mean over the batch
    kind: str  # "categorical" | "binary" | "regression"


def _cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y)


def _nll(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if y.dtype.is_floating_point and y.dim() > 1:  # one-hot targets with log-probability outputs
        return -(y * out).sum(dim=1).mean()
    return F.nll_loss(out, y)


def _bce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(out, y.reshape(out.shape).to(out.dtype))


def _regression(fn: Callable[..., torch.Tensor]) -> LossFn:
    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return fn(out, y.reshape(out.shape).to(out.dtype))

    return loss


_LOSSES: dict[str, tuple[LossFn, str]] = {
    "categorical_crossentropy": (_cross_entropy, "categorical"),
    "sparse_categorical_crossentropy": (_cross_entropy, "categorical"),
    "cross_entropy": (_cross_entropy, "categorical"),
    "crossentropy": (_cross_entropy, "categorical"),
    "nll": (_nll, "categorical"),
    "nll_loss": (_nll, "categorical"),
    "binary_crossentropy": (_bce, "binary"),
    "bce": (_bce, "binary"),
    "mse": (_regression(F.mse_loss), "regression"),
    "mean_squared_error": (_regression(F.mse_loss), "regression"),
    "mae": (_regression(F.l1_loss), "regression"),
    "mean_absolute_error": (_regression(F.l1_loss), "regression"),
    "huber": (_regression(F.smooth_l1_loss), "regression"),
}


def loss_spec(name: str) -> LossSpec:
    """A loss by its Keras or torch spelling; a one-line ConfigError listing the valid ones otherwise."""
    key = name.strip().lower()
    if key not in _LOSSES:
        raise ConfigError(f"--loss {name!r} is unknown; use one of {', '.join(sorted(_LOSSES))}")
    fn, kind = _LOSSES[key]
    return LossSpec(key, fn, kind)


def _to_numpy(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy().copy()
    if isinstance(obj, dict):
        return {k: _to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_numpy(v) for v in obj)
    return obj


def _to_torch(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, dict):
        return {k: _to_torch(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_torch(v) for v in obj)
    return obj


def _address(buf: Any) -> tuple[int, int]:
    """(memory address, elements) of a flat numpy array or tensor: how a bound buffer is recognised."""
    if isinstance(buf, np.ndarray):
        return buf.ctypes.data, buf.size
    return buf.data_ptr(), buf.numel()


class TorchBackend(Backend):
    """One torch model replica on one device with its worker optimizer (from a spec string).

    ``amp``: an :class:`~nnlo.backends.torch_amp.AmpPolicy` (``--amp``: :func:`~nnlo.backends.torch_amp.amp_policy`)
    or None for full precision."""

    name = "torch"

    def __init__(self, model: torch.nn.Module, loss: str, worker_optimizer: str, device: str = "cpu",
                 amp: AmpPolicy | None = None) -> None:
        if not isinstance(model, torch.nn.Module):
            raise ModelError(f"get_model() returned a {type(model).__name__}, not a torch nn.Module")
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:  # compare equal to the tensors' device
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.model = model.to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        if not self.params:
            raise ModelError("the model has no trainable parameters")
        self._sizes = [p.numel() for p in self.params]
        self._n = int(sum(self._sizes))
        self._flat_grad: torch.Tensor | None = None  # see _grad_views
        self._views: list[torch.Tensor] = []
        # gradient_sum_into: views of the caller's buffer (cached by its address) and the step in flight
        self._bound: tuple[int, int, list[torch.Tensor]] | None = None
        self._in_flight: tuple[list[torch.Tensor], float, Callable[[int], None], list[bool]] | None = None
        self._hooked = False
        self._n_buffers = int(sum(b.numel() for b in self._buffer_tensors()))
        self.loss = loss_spec(loss)
        self._optimizer_args = torch_equivalent(worker_optimizer)  # a bad spec is refused here, at once
        self._optimizer: torch.optim.Optimizer | None = None
        self.amp = Amp(amp, self.device)
        self._device_weights: torch.Tensor | None = None  # weights_into's flat copy on a GPU (allocated once)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The worker optimizer, built on first use: torch.optim's first call imports torch._dynamo, about as
        long again as ``import torch`` (1.4 s on an idle core), which a master or an evaluating rank never
        needs."""
        if self._optimizer is None:
            cls, kwargs = self._optimizer_args
            self._optimizer = getattr(torch.optim, cls)(self.params, **kwargs)
        return self._optimizer

    # -- weights -----------------------------------------------------------------------------------
    @property
    def n_params(self) -> int:
        return self._n

    def get_weights(self) -> np.ndarray:
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        return np.ascontiguousarray(flat.to("cpu", torch.float32).numpy()).copy()

    def host_buffer(self, n: int) -> np.ndarray:
        """On a GPU: page-locked (pinned) host memory, which the device copies to and from by DMA at full speed
        (pageable memory goes through the driver's own staging buffer at a fraction of it)."""
        if self.device.type != "cuda":
            return super().host_buffer(n)
        return torch.empty(n, dtype=torch.float32, pin_memory=True).numpy()  # the array keeps the tensor alive

    def weights_into(self, out: np.ndarray) -> None:
        if self.device.type != "cuda" or out.dtype != np.float32 or out.size != self._n:
            super().weights_into(out)
            return
        with torch.no_grad():
            if self._device_weights is None:
                self._device_weights = torch.empty(self._n, dtype=torch.float32, device=self.device)
            torch.cat([p.detach().reshape(-1) for p in self.params], out=self._device_weights)
            torch.from_numpy(out).copy_(self._device_weights, non_blocking=True)  # DMA when out is pinned
        torch.cuda.current_stream(self.device).synchronize()  # out is read by MPI next

    def set_weights(self, flat: np.ndarray) -> None:
        if flat.size != self._n:
            raise ValueError(f"weight vector has {flat.size} values, the model {self._n}")
        host = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32))
        cuda = self.device.type == "cuda"
        src = host.to(self.device, non_blocking=cuda)  # pinned memory (host_buffer): one DMA copy
        offset = 0
        with torch.no_grad():
            for p, n in zip(self.params, self._sizes, strict=True):
                p.copy_(src[offset:offset + n].view_as(p))  # copy: never alias the caller's buffer
                offset += n
        if cuda:  # the caller may overwrite flat (the next receive) as soon as this returns
            torch.cuda.current_stream(self.device).synchronize()

    def _buffer_tensors(self) -> list[torch.Tensor]:
        """Floating-point buffers (running statistics) and integer counters (num_batches_tracked), not masks.
        Looked up each time: moving the model between devices replaces buffer tensors."""
        return [b for b in self.model.buffers()
                if b.dtype.is_floating_point or (b.numel() == 1 and b.dtype in _COUNTER_DTYPES)]

    @property
    def n_buffers(self) -> int:
        return self._n_buffers

    def get_buffers(self) -> np.ndarray:
        buffers = self._buffer_tensors()
        if not buffers:
            return np.zeros(0, dtype=np.float32)
        with torch.no_grad():
            flat = torch.cat([b.detach().reshape(-1).to(torch.float32) for b in buffers])
        return flat.cpu().numpy().copy()

    def set_buffers(self, flat: np.ndarray) -> None:
        if flat.size != self._n_buffers:
            raise ValueError(f"buffer vector has {flat.size} values, the model {self._n_buffers}")
        src = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32)).to(self.device)
        offset = 0
        with torch.no_grad():
            for b in self._buffer_tensors():
                part = src[offset:offset + b.numel()].view_as(b)
                b.copy_(part if b.dtype.is_floating_point else part.round())  # copy_ casts to b's dtype
                offset += b.numel()

    # -- training ----------------------------------------------------------------------------------
    def _tensors(self, x: Any, y: Any) -> tuple[Any, torch.Tensor]:
        """The batch as the model's tensors: contiguous (an adaptor's ``np.swapaxes`` view would otherwise reach
        a model that calls ``.view``), float32 for float64, integer labels as int64."""
        def conv(a: Any) -> Any:
            if isinstance(a, (list, tuple)):
                return [conv(v) for v in a]
            t = torch.as_tensor(np.ascontiguousarray(a))
            if t.dtype == torch.float64:
                t = t.float()
            return t.to(self.device)

        xt = conv(x)
        yt = torch.as_tensor(np.ascontiguousarray(y))
        if yt.dtype in (torch.int8, torch.int16, torch.int32, torch.uint8):
            yt = yt.long()
        if yt.dtype == torch.float64:
            yt = yt.float()
        if self.loss.kind == "categorical" and not yt.dtype.is_floating_point and yt.dim() > 1:
            yt = yt.reshape(-1)  # (N, 1) integer labels
        return xt, yt.to(self.device)

    def _forward(self, xt: Any) -> torch.Tensor:
        return self.model(*xt) if isinstance(xt, list) else self.model(xt)

    def _forward_loss(self, xt: Any, yt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's output and the batch's mean loss, under ``--amp``'s autocast when asked."""
        with self.amp.autocast():
            out = self._forward(xt)
            return out, self.loss.fn(out, yt)

    def _metrics(self, out: torch.Tensor, yt: torch.Tensor, loss: torch.Tensor) -> dict[str, float]:
        m = {"loss": float(loss.detach()), "count": float(out.shape[0])}
        correct = self._correct(out, yt)
        if correct is not None:
            m["correct"] = correct
        return m

    def _correct(self, out: torch.Tensor, yt: torch.Tensor) -> float | None:
        with torch.no_grad():
            if self.loss.kind == "categorical":
                truth = yt.argmax(dim=1) if yt.dim() > 1 else yt
                return float((out.argmax(dim=1) == truth).sum())
            if self.loss.kind == "binary":
                return float(((out.reshape(-1) > 0) == (yt.reshape(-1) > 0.5)).sum())
        return None

    def _grad_views(self) -> list[torch.Tensor] | None:
        """Every parameter's ``.grad`` as a view of one flat float32 tensor (allocated once), so that backward
        writes the flat gradient in place and no concatenation copy is needed; None for non-float32 models."""
        if self._flat_grad is None:
            if any(p.dtype != torch.float32 for p in self.params):
                return None
            self._flat_grad = torch.zeros(self._n, dtype=torch.float32, device=self.device)
            self._views, offset = [], 0
            for p, n in zip(self.params, self._sizes, strict=True):
                self._views.append(self._flat_grad[offset:offset + n].view_as(p))
                offset += n
        for p, v in zip(self.params, self._views, strict=True):
            if p.grad is not v:  # train_on_batch (set_to_none) or the user replaced it
                p.grad = v
        return self._views

    def compute_gradients(self, x: Any, y: Any) -> tuple[np.ndarray, dict[str, float]]:
        """The flat gradient; on the CPU a view of the backend's own gradient buffer, valid until the next
        call (callers copy or reduce it at once, as the all-reduce step does)."""
        self.model.train()
        views = self._grad_views()
        if views is not None:
            self._flat_grad.zero_()  # type: ignore[union-attr]
        else:
            self.optimizer.zero_grad(set_to_none=False)
        xt, yt = self._tensors(x, y)
        out, loss = self._forward_loss(xt, yt)
        self.amp.scale(loss).backward()
        if views is not None and all(p.grad is v for p, v in zip(self.params, views, strict=True)):
            flat = self._flat_grad.detach()  # type: ignore[union-attr]
            result = flat.numpy() if flat.device.type == "cpu" else flat.cpu().numpy()
        else:  # accumulated out of place (or not float32): concatenate
            grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=self.device)
                     for p in self.params]
            result = torch.cat(grads).to("cpu", torch.float32).numpy().copy()
        return result, self._metrics(out, yt, loss)

    # -- gradients reported from hooks during backward (the bucketed all-reduce) --------------------
    @property
    def grad_hooks(self) -> bool:  # type: ignore[override]
        return all(p.dtype == torch.float32 for p in self.params)

    def can_hook_into(self, buf: Any) -> bool:
        """Hooks write straight into ``buf`` when it lives where the model computes: a numpy array for a model on
        the CPU, a float32 tensor on the model's own device (the NCCL engine's step buffer)."""
        if not self.grad_hooks:
            return False
        if isinstance(buf, np.ndarray):
            return self.device.type == "cpu" and buf.dtype == np.float32 and buf.flags.c_contiguous
        return (isinstance(buf, torch.Tensor) and buf.device == self.device and buf.dtype == torch.float32
                and buf.is_contiguous())

    def param_sizes(self) -> list[int]:
        return list(self._sizes)

    def _bind(self, out: Any) -> list[torch.Tensor]:
        """Per-parameter views of ``out`` (a flat float32 numpy array or tensor, memory shared, no copy)."""
        key = _address(out)
        if self._bound is None or self._bound[:2] != key:
            flat = torch.from_numpy(out) if isinstance(out, np.ndarray) else out
            views, offset = [], 0
            for p, n in zip(self.params, self._sizes, strict=True):
                views.append(flat[offset:offset + n].view_as(p))
                offset += n
            self._bound = (*key, views)
        return self._bound[2]

    def _on_grad(self, i: int, p: torch.Tensor) -> None:
        """Post-accumulate hook of parameter ``i``: its gradient is final; scale it into the caller's buffer."""
        state = self._in_flight
        if state is None or p.grad is None:
            return
        views, count, ready, seen = state
        torch.mul(p.grad, count, out=views[i])  # the copy into the flat buffer and the x count in one pass
        p.grad = None
        seen[i] = True
        ready(i)

    def gradient_sum_into(self, x: Any, y: Any, out: Any,
                          ready: Callable[[int], None]) -> dict[str, float]:
        if not self.can_hook_into(out) or out.shape[0] != self._n:
            if isinstance(out, np.ndarray):
                return super().gradient_sum_into(x, y, out, ready)
            grad, metrics = self.compute_gradients(x, y)  # a device buffer the hooks cannot fill: copy once
            torch.mul(torch.from_numpy(grad).to(out.device), float(metrics.get("count", len(y))), out=out)
            for i in range(len(self.params)):
                ready(i)
            return metrics
        if not self._hooked:
            for i, p in enumerate(self.params):
                p.register_post_accumulate_grad_hook(lambda q, i=i: self._on_grad(i, q))
            self._hooked = True
        self.model.train()
        views = self._bind(out)
        for p in self.params:
            p.grad = None  # backward then hands its own gradient tensors over (no zeroing, no accumulation)
        xt, yt = self._tensors(x, y)
        o, loss = self._forward_loss(xt, yt)
        seen = [False] * len(self.params)
        self._in_flight = (views, float(o.shape[0]), ready, seen)
        try:
            self.amp.scale(loss).backward()
        finally:
            self._in_flight = None
        for i, done in enumerate(seen):
            if not done:  # not used by this batch's graph: its gradient is zero
                views[i].zero_()
                ready(i)
        return self._metrics(o, yt, loss)

    def apply_gradients(self, flat_grad: Any) -> None:
        """One optimizer step with ``flat_grad`` (a numpy array, or a tensor such as a device step buffer; with
        ``--amp``'s scaler, in the scaler's units)."""
        bound = self._bound
        if bound is not None and _address(flat_grad) == bound[:2] and (
                flat_grad.dtype == np.float32 if isinstance(flat_grad, np.ndarray)
                else flat_grad.dtype == torch.float32):
            for p, v in zip(self.params, bound[2], strict=True):  # the buffer gradient_sum_into filled:
                p.grad = v  # the optimizer reads it in place, no copy
            self.amp.step(self.optimizer)
            return
        src = (torch.from_numpy(np.ascontiguousarray(flat_grad, dtype=np.float32))
               if isinstance(flat_grad, np.ndarray) else flat_grad)
        views = self._grad_views()
        if views is not None:
            self._flat_grad.copy_(src)  # type: ignore[union-attr]  # one copy (none if it is our own buffer)
        else:
            src = src.to(self.device)
            offset = 0
            for p, n in zip(self.params, self._sizes, strict=True):
                p.grad = src[offset:offset + n].view_as(p).to(p.dtype)
                offset += n
        self.amp.step(self.optimizer)

    def train_on_batch(self, x: Any, y: Any) -> dict[str, float]:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        xt, yt = self._tensors(x, y)
        out, loss = self._forward_loss(xt, yt)
        self.amp.scale(loss).backward()
        self.amp.step(self.optimizer)
        return self._metrics(out, yt, loss)

    def evaluate_batch(self, x: Any, y: Any) -> dict[str, float]:
        self.model.eval()
        with torch.no_grad():
            xt, yt = self._tensors(x, y)
            out, loss = self._forward_loss(xt, yt)
        n = float(out.shape[0])
        m = {"loss_sum": float(loss) * n, "count": n}
        correct = self._correct(out, yt)
        if correct is not None:
            m["correct"] = correct
        return m

    # -- state -------------------------------------------------------------------------------------
    def optimizer_state(self) -> dict[str, Any]:
        """The optimizer's state dict (numpy), with ``--amp``'s gradient scaler under ``STATE_KEY``."""
        return {**_to_numpy(self.optimizer.state_dict()), **self.amp.state_dict()}

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`optimizer_state`. The current spec's options win over the saved ones (lr, momentum,
        ...: a restarted run may change them, and PBT's explore does), as for the Keras backend and the
        master's rule; the state vectors (momentum buffers, Adam's moments, step counts) are restored."""
        self.amp.load_state_dict(state)
        restored = _to_torch({k: v for k, v in state.items() if k != STATE_KEY})
        options = [{k: v for k, v in group.items() if k != "params"} for group in self.optimizer.param_groups]
        # torch keeps integer parameter ids as keys of "state"; pickling preserves them.
        self.optimizer.load_state_dict(restored)
        for group, current in zip(self.optimizer.param_groups, options, strict=True):
            group.update(current)

    def save_model(self, path: str) -> str:
        """``torch.save(model)`` (loadable with ``--model file.pt``); a state_dict if the class cannot be
        pickled (e.g. defined inside a function). A path without a suffix (the runtime's backend-neutral
        ``model``) gets ``.pt``; the path written is returned."""
        if not Path(path).suffix:
            path = f"{path}.pt"
        try:
            buf = io.BytesIO()
            torch.save(self.model.to("cpu"), buf)
        except Exception as e:  # noqa: BLE001
            log.warning("cannot pickle the whole model (%s); saving its state_dict instead", e)
            buf = io.BytesIO()
            torch.save(self.model.state_dict(), buf)
        finally:
            self.model.to(self.device)
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        return path

    def rng_state(self) -> dict[str, Any]:
        state = {"cpu": torch.get_rng_state().numpy().copy()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device).numpy().copy()
        return state

    def set_rng_state(self, state: dict[str, Any]) -> None:
        if "cpu" in state:
            torch.set_rng_state(torch.from_numpy(np.asarray(state["cpu"], dtype=np.uint8).copy()))
        if "cuda" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(torch.from_numpy(np.asarray(state["cuda"], dtype=np.uint8).copy()), self.device)
