#!/usr/bin/env python
"""Write a Keras model's architecture as JSON with Keras's own ``model.to_json()``, as mpi_learn users did.

    python examples/make_keras_json.py --out arch.json [--module examples/digits_keras.py] [--hidden 64]
    nnlo train -n 3 --model arch.json --train train.list --val val.list --loss categorical_crossentropy --epochs 5

The JSON holds the architecture only; nnlo builds the model on every rank and broadcasts one replica's fresh
weights. ``--module`` names any model module whose ``get_model`` returns a Keras model; extra ``--KEY VALUE``
pairs are passed to it as hyperparameters (numbers are converted).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="the JSON file to write")
    parser.add_argument("--module", type=Path, default=HERE / "digits_keras.py",
                        help="model module with get_model() returning a Keras model (default: digits_keras.py)")
    args, extra = parser.parse_known_args(argv)
    if len(extra) % 2 or any(not k.startswith("--") for k in extra[::2]):
        parser.error(f"hyperparameters must be --name value pairs, got {' '.join(extra)}")
    hyper = {k[2:].replace("-", "_"): _value(v) for k, v in zip(extra[::2], extra[1::2])}
    if not args.module.is_file():
        parser.error(f"model module {args.module} does not exist")
    spec = importlib.util.spec_from_file_location("keras_model_module", args.module)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.get_model(**hyper)
    if not hasattr(model, "to_json"):
        parser.error(f"{args.module}: get_model() returned {type(model).__name__}, not a Keras model")
    text = model.to_json()
    json.loads(text)  # Keras wrote valid JSON; fail here rather than in nnlo train
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
