"""An MPI program for the warm TensorFlow world (tests/keras/test_keras_world.py): ``python keras_state_probe.py
OUT [dirty]``. Each rank writes what a run finds of Keras's, TensorFlow's and the random generators' global state
to ``OUT.rank-R.json``; with ``dirty`` it then changes all of it, as a user's model module may."""
from __future__ import annotations

import json
import random
import sys

import keras
import numpy as np
import tensorflow as tf
from mpi4py import MPI
from tensorflow.python.framework import random_seed

out, dirty = sys.argv[1], sys.argv[2:] == ["dirty"]
rank = MPI.COMM_WORLD.Get_rank()
found = {
    "size": MPI.COMM_WORLD.Get_size(),
    "layer": keras.layers.Dense(1).name,  # the layer-name counter
    "floatx": keras.config.floatx(),
    "epsilon": keras.config.epsilon(),
    "image_data_format": keras.config.image_data_format(),
    "dtype_policy": keras.config.dtype_policy().name,
    "custom": sorted(k for k in keras.saving.get_custom_objects() if "Probe" in k),
    "tf_seed": list(random_seed.get_seed(None)),  # [None, None] without a global seed
    "python_random": random.random(),
    "numpy_random": float(np.random.random()),
    "threads": [tf.config.threading.get_intra_op_parallelism_threads(),
                tf.config.threading.get_inter_op_parallelism_threads()],
}
with open(f"{out}.rank-{rank}.json", "w") as f:
    json.dump(found, f)
if dirty:
    keras.utils.set_random_seed(0)  # Python's, NumPy's and TensorFlow's global seeds
    keras.config.set_floatx("float64")
    keras.config.set_epsilon(1e-3)
    keras.config.set_image_data_format("channels_first")
    keras.config.set_dtype_policy("mixed_float16")

    @keras.saving.register_keras_serializable(package="Probe")
    class ProbeLayer(keras.layers.Layer):
        pass

    for _ in range(3):  # advance the layer-name counter
        keras.layers.Dense(1)
