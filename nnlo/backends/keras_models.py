"""Loading Keras models from files: ``model.to_json()`` output, native ``.keras`` archives and legacy ``.h5``.

Why the care with JSON: mpi_learn users hand nnlo the ``arch.json`` their Keras 2 wrote years ago. Keras 3's
``model_from_json`` only reads Keras 3 JSON, so a Keras 2 file (``"keras_version": "2.x"``, classes such as
``Model``, ``batch_input_shape``) goes through Keras's own legacy reader, and the Keras 2.0 layout where a
Sequential's ``config`` is a bare list of layers is normalised first. Every failure becomes one line naming
the file and the fix. A JSON model has fresh random weights (seeded when a seed is given); the runtime
broadcasts one replica's weights to all ranks before training.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

from nnlo.errors import ModelError

SUFFIXES = (".json", ".keras", ".h5", ".hdf5")


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:197] + "..."


def _legacy_config(config: dict[str, Any]) -> dict[str, Any]:
    """Normalise a Keras 2 model config for Keras 3's legacy reader.

    Keras <= 2.1 wrote a Sequential's config as a bare list of layers (later: ``{name, layers}``), and Keras 2
    put the input shape on the first layer as ``batch_input_shape``, which Keras 3 misreads as a shape
    *without* the batch axis; it becomes an explicit ``InputLayer`` with ``batch_shape`` instead.
    """
    config = json.loads(json.dumps(config))  # a deep copy
    inner = config.get("config")
    if config.get("class_name") == "Sequential" and isinstance(inner, list):
        inner = config["config"] = {"name": "sequential", "layers": inner}
    layers = inner.get("layers") if isinstance(inner, dict) else None
    if not isinstance(layers, list):
        return config
    for layer in layers:
        cfg = layer.get("config") if isinstance(layer, dict) else None
        if layer.get("class_name") == "InputLayer" and isinstance(cfg, dict) and "batch_input_shape" in cfg:
            cfg["batch_shape"] = cfg.pop("batch_input_shape")
    first = layers[0] if layers else None
    if config.get("class_name") == "Sequential" and isinstance(first, dict) and first.get("class_name") != "InputLayer":
        cfg = first.get("config") or {}
        shape = cfg.pop("batch_input_shape", None)
        if shape is not None:
            layers.insert(0, {"class_name": "InputLayer",
                              "config": {"batch_shape": shape, "dtype": cfg.get("dtype", "float32"),
                                         "name": f"{cfg.get('name', 'layer')}_input"}})
    return config


def model_from_json_text(keras: ModuleType, text: str, source: str = "<json>") -> Any:
    """A Keras model from the text of ``model.to_json()`` (Keras 3, or Keras 2 via the legacy reader)."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelError(f"{source} is not valid JSON ({e}); write it with model.to_json()") from None
    if not isinstance(config, dict) or "class_name" not in config or "config" not in config:
        raise ModelError(f"{source} is JSON but not a Keras model (no class_name/config); "
                         f"write it with model.to_json()")
    version = str(config.get("keras_version", ""))
    errors: list[str] = []
    if not version.startswith(("1.", "2.")):
        try:
            return keras.models.model_from_json(text)
        except Exception as e:  # noqa: BLE001 - Keras raises TypeError/ValueError/KeyError for foreign configs
            errors.append(_short(e))
    try:
        from keras.src.legacy.saving import saving_utils  # lazy: Keras loads TensorFlow
    except ImportError:  # pragma: no cover - Keras moved its legacy reader
        saving_utils = None
    if saving_utils is not None:
        try:
            return saving_utils.model_from_config(_legacy_config(config))
        except Exception as e:  # noqa: BLE001 - as above: collected, named in the one-line error
            errors.append(_short(e))
    shown = f" (keras_version {version})" if version else ""
    raise ModelError(f"cannot build a Keras model from {source}{shown}: {errors[-1] if errors else 'unknown'}; "
                     f"re-export it with model.to_json() from Keras >= 2.2, or give a model module")


def load_model_path(keras: ModuleType, path: str | Path) -> Any:
    """A Keras model from a ``.json``, ``.keras`` or ``.h5`` file (not compiled: nnlo trains it itself)."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"model file {p} does not exist; check the --model path")
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise ModelError(f"model file {p} is not a Keras model file; give a .json (model.to_json()), "
                         f".keras (model.save()) or .h5 file, or a model module (.py)")
    if suffix == ".json":
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ModelError(f"cannot read model file {p}: {_short(e)}") from None
        return model_from_json_text(keras, text, str(p))
    try:
        return keras.models.load_model(str(p), compile=False)
    except Exception as e:  # noqa: BLE001 - whatever Keras raises becomes one line naming the file
        hint = ("it may hold weights only (save the whole model with model.save())" if suffix != ".keras"
                else "re-save it with model.save('model.keras')")
        raise ModelError(f"cannot load Keras model {p}: {_short(e)}; {hint}") from None
