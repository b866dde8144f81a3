"""An error in the user's own code is located (:mod:`nnlo.usercode`): the one line names their file and line
(or, in a model of the framework's layers, the failing layer); the rank's log gets their part of the
traceback; an error of nnlo's own gets neither (a defect, reported as before)."""
from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import numpy as np
import pytest

from nnlo.config import TrainConfig
from nnlo.errors import ModelError
from nnlo.models import data_plan, load_model_source
from nnlo.training.failure import describe_exception, failure_line, in_model
from nnlo.usercode import is_user_file, locate, user_traceback

MODEL = '''
import torch
from torch import nn


def helper(x):
    return x.view(-1, 7)  # line 7: a reshape that cannot be


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(63, 4)

    def forward(self, x):
        return self.fc(x)  # line 16: 63 in_features meet 64


def get_model(kind="net"):
    if kind == "broken":
        raise ValueError("no such kind")  # line 21
    if kind == "sequential":
        return nn.Sequential(nn.Linear(64, 8), nn.ReLU(), nn.Linear(63, 3))
    return Net()


def get_train():
    return helper(torch.zeros(3))  # line 28: the data function fails in a helper of the user's
'''


@pytest.fixture
def user_model(tmp_path: Path) -> tuple[Path, object]:
    path = tmp_path / "my_model.py"
    path.write_text(textwrap.dedent(MODEL))
    return path, load_model_source(str(path))


def _raised(fn, *args, **kwargs):
    """The exception ``fn`` raises, as nnlo's own catch sees it: without this test's frame on top (in the
    runtime the frames above the user's are nnlo's)."""
    try:
        fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001
        e.__traceback__ = e.__traceback__.tb_next
        return e
    raise AssertionError("did not raise")


def _train_step(model, x):
    """A training step as a worker takes it (nnlo's backend runs the model, in_model names the failure): what
    it raises."""
    from nnlo.backends import make_backend

    backend = make_backend(model, TrainConfig(model="m.py", loss="sparse_categorical_crossentropy"), "cpu")
    return _raised(in_model, "training", backend.train_on_batch, x, np.zeros(len(x), np.int64))


def test_the_users_files_and_nobody_elses(user_model) -> None:
    path, _ = user_model
    import numpy
    import torch

    import nnlo.training.worker
    import nnlo_sched.cli

    assert is_user_file(str(path))
    for other in (nnlo.training.worker.__file__, nnlo_sched.cli.__file__, numpy.__file__, torch.__file__,
                  logging.__file__, "<frozen importlib._bootstrap>", "<string>"):
        assert not is_user_file(other), other


def test_a_forward_error_names_the_users_line_and_logs_their_traceback(user_model, caplog) -> None:
    path, source = user_model
    error = _train_step(source.build(), np.zeros((5, 64), np.float32))
    message, code = describe_exception(error)
    assert code == 1 and message.startswith("the model raised RuntimeError while training: mat1 and mat2")
    assert message.endswith(f"(at {path}:16 in forward)") and "\n" not in message
    trimmed = user_traceback(error)
    assert trimmed is not None
    lines = trimmed.splitlines()
    assert f'File "{path}", line 16, in forward' in lines[1] and lines[-1].startswith("RuntimeError: mat1")
    assert "nnlo" not in trimmed.replace(str(path.parent), "")  # none of nnlo's frames (nor its name)
    with caplog.at_level(logging.DEBUG, logger="nnlo.test"):
        assert failure_line(error, logging.getLogger("nnlo.test"), "training failed") == (message, code)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.nnlo_detail and trimmed in record.getMessage()


def test_errors_in_get_model_and_the_data_functions_name_the_users_line(user_model) -> None:
    path, source = user_model
    built = _raised(source.build, kind="broken")
    assert isinstance(built, ModelError)
    assert describe_exception(built)[0] == (f"{path}: get_model() raised ValueError: no such kind "
                                            f"(at {path}:21 in get_model)")
    data = _raised(data_plan, TrainConfig(model=str(path)), source)
    message = describe_exception(data)[0]
    assert "get_train() raised RuntimeError" in message and message.endswith(f"(at {path}:7 in helper)")
    assert f'line 28, in get_train' in user_traceback(data)


def test_a_model_of_framework_layers_names_the_failing_layer(user_model) -> None:
    _, source = user_model
    error = _train_step(source.build(kind="sequential"), np.zeros((5, 64), np.float32))
    message = describe_exception(error)[0]
    assert message.endswith("(in the model's layer '2', Linear(in_features=63, out_features=3, bias=True))")
    trimmed = user_traceback(error)
    assert trimmed is not None and "torch/nn/modules" in trimmed and "/nnlo/" not in trimmed


def test_a_syntax_error_in_the_module_names_its_line(tmp_path) -> None:
    path = tmp_path / "typo.py"
    path.write_text("def get_model():\n    return (\n\ndef get_name(:\n")
    error = _raised(load_model_source, str(path))
    message = describe_exception(error)[0]
    assert message.startswith(f"importing model module {path} raised SyntaxError") and f"(at {path}:" in message


def test_an_error_of_nnlos_own_is_not_located_and_keeps_its_whole_traceback(caplog) -> None:
    from nnlo.training.validation import split_range

    error = _raised(split_range, 3, 1, [1])
    assert locate(error) is None and user_traceback(error) is None
    assert describe_exception(error) == ("ValueError: cannot split [3, 1) by weights [1]", 1)
    with caplog.at_level(logging.DEBUG, logger="nnlo.test"):
        failure_line(error, logging.getLogger("nnlo.test"))
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG and record.exc_info is not None
