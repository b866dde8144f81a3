"""Test model: records, at get_model() time, the TensorFlow environment each rank sees, then builds tiny's MLP.

The file is ``$NNLO_TEST_ENV_PROBE/rank-<pid>.json``; nothing here imports TensorFlow, and the record says
whether anything else did.
"""
import json
import os
import sys
from pathlib import Path

from torch import nn

KEYS = ("KERAS_BACKEND", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "TF_CPP_MIN_LOG_LEVEL",
        "TF_ENABLE_ONEDNN_OPTS", "TF_FORCE_GPU_ALLOW_GROWTH")


def get_model(hidden=16):
    record = {k: os.environ.get(k) for k in KEYS}
    record["tensorflow_imported"] = "tensorflow" in sys.modules
    folder = Path(os.environ["NNLO_TEST_ENV_PROBE"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank-{os.getpid()}.json").write_text(json.dumps(record))
    return nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 3))
