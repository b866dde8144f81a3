"""One optimizer spec means the same update on the Keras backend, in torch.optim and on the master.

The Keras backend's optimizers re-state torch's rules; these tests feed identical gradients (and, at the end,
identical networks and data) to both and compare the weights step by step.
"""
from __future__ import annotations

import numpy as np
import pytest

from nnlo.algorithms.optimizers import make_optimizer as make_master_optimizer
from nnlo.algorithms.optimizers import torch_equivalent
from nnlo.backends.keras_backend import KerasBackend

pytestmark = pytest.mark.usefixtures("tf_keras")
torch = pytest.importorskip("torch")

SPECS = [
    "sgd:lr=0.1",
    "sgd:lr=0.05,momentum=0.9",
    "sgd:lr=0.05,momentum=0.9,nesterov=true,weight_decay=0.01",
    "adam",
    "adam:lr=0.01,beta1=0.8,beta2=0.99,eps=1e-3,weight_decay=0.1",
    "rmsprop",
    "rmsprop:lr=0.01,momentum=0.5,centered=true,eps=1e-4",
    "adadelta",
    "adadelta:lr=0.5,rho=0.8,weight_decay=0.01",
]


@pytest.mark.parametrize("spec", SPECS)
def test_same_gradients_same_steps_as_torch_and_master(spec, make_mlp):
    backend = KerasBackend(make_mlp(seed=0, n_in=4, hidden=5, n_out=2), "mse", spec)
    w0 = backend.get_weights()
    param = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    cls, kwargs = torch_equivalent(spec)
    reference = getattr(torch.optim, cls)([param], **kwargs)
    master, master_w = make_master_optimizer(spec), w0.copy()
    rng = np.random.default_rng(7)
    for step in range(6):
        grad = rng.normal(scale=[0.01, 1.0, 5.0][step % 3], size=w0.size).astype(np.float32)
        backend.apply_gradients(grad)
        param.grad = torch.from_numpy(grad.copy())
        reference.step()
        master.step(master_w, grad)
        np.testing.assert_allclose(backend.get_weights(), param.detach().numpy(), rtol=2e-5, atol=2e-6,
                                   err_msg=f"{spec}: Keras and torch differ after step {step + 1}")
        np.testing.assert_allclose(backend.get_weights(), master_w, rtol=2e-5, atol=2e-6)
    assert not np.allclose(backend.get_weights(), w0)


@pytest.mark.parametrize("spec", ["sgd:lr=0.2,momentum=0.9", "adam:lr=0.01"])
def test_same_network_same_data_trains_the_same_as_torch(spec, make_mlp, batch):
    """A Keras MLP (softmax + categorical cross-entropy) and the same torch MLP (logits + cross_entropy)."""
    x, y = batch
    model = make_mlp(seed=3)
    backend = KerasBackend(model, "categorical_crossentropy", spec)
    k1, b1, k2, b2 = (v.numpy() for v in model.trainable_variables)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for layer, kernel, bias in ((net[0], k1, b1), (net[2], k2, b2)):
            layer.weight.copy_(torch.from_numpy(kernel.T.copy()))
            layer.bias.copy_(torch.from_numpy(bias))
    cls, kwargs = torch_equivalent(spec)
    opt = getattr(torch.optim, cls)(net.parameters(), **kwargs)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(10):
        metrics = backend.train_on_batch(x, np.eye(3, dtype=np.float32)[y])
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(xt), yt)
        loss.backward()
        opt.step()
        assert metrics["loss"] == pytest.approx(float(loss.detach()), rel=1e-4)
    torch_flat = np.concatenate([net[0].weight.detach().numpy().T.reshape(-1), net[0].bias.detach().numpy(),
                                 net[2].weight.detach().numpy().T.reshape(-1), net[2].bias.detach().numpy()])
    np.testing.assert_allclose(backend.get_weights(), torch_flat, rtol=1e-4, atol=1e-5)
