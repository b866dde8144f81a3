"""Upstream model code under today's frameworks (nnlo/legacy.py): each failure NNLO's own models meet is one line
that names the old API and its replacement. Process-free: the exceptions are the real ones (a module object's
missing attribute, torch's own view and CUDA errors), raised in this process."""
from __future__ import annotations

import pytest

from nnlo.errors import ModelError, TrainingError
from nnlo.legacy import hint
from nnlo.models import load_model_source
from nnlo.training.failure import in_model

KERAS2_MODULE = '''
import types
K = types.ModuleType("keras.backend")  # Keras 3's backend module has no image_dim_ordering any more
K.set_image_dim_ordering("th")

def get_model():
    return None
'''


def test_a_keras_1_2_call_at_import_is_one_line_with_the_keras_3_spelling(tmp_path, clean_path) -> None:
    (tmp_path / "example_mnist.py").write_text(KERAS2_MODULE)
    with pytest.raises(ModelError) as err:
        load_model_source(str(tmp_path / "example_mnist.py"))
    line = str(err.value)
    assert "\n" not in line and "set_image_dim_ordering" in line
    assert "set_image_data_format('channels_first')" in line and "removed in Keras 3" in line


def test_a_keras_1_2_call_in_get_model_and_a_removed_module_name_their_keras_3_spelling(tmp_path, clean_path) -> None:
    (tmp_path / "m.py").write_text("import types\n\ndef get_model():\n    import keras.layers.core\n")
    with pytest.raises(ModelError, match=r"keras\.layers\.core is Keras 1/2's, removed in Keras 3: from keras"):
        load_model_source(str(tmp_path / "m.py")).build()
    import types

    with pytest.raises(AttributeError) as missing:
        types.ModuleType("keras.layers").Convolution2D  # noqa: B018
    assert hint(missing.value) == "Convolution2D is Keras 1/2's, removed in Keras 3: use keras.layers.Conv2D"


def test_a_cuda_call_on_a_machine_without_cuda_says_to_drop_it() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip(".cuda() works on this machine")

    def forward():
        return torch.zeros(1).cuda()

    with pytest.raises(TrainingError, match=r"the model calls \.cuda\(\): drop it"):
        in_model("training", forward)


def test_other_failures_get_no_hint() -> None:
    assert hint(AttributeError("'Net' object has no attribute 'image_dim_ordering2'")) is None
    assert hint(ModuleNotFoundError("No module named 'mymodels'", name="mymodels")) is None
    assert hint(RuntimeError("shape mismatch")) is None
