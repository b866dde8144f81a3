"""KerasBackend against Keras/TensorFlow themselves: weights, gradients, steps, evaluation, labels, losses."""
from __future__ import annotations

import numpy as np
import pytest

from nnlo.backends.keras_backend import KerasBackend, is_keras_model, make_backend
from nnlo.errors import ConfigError, ModelError

pytestmark = pytest.mark.usefixtures("tf_keras")


def onehot(y: np.ndarray, n: int = 3) -> np.ndarray:
    return np.eye(n, dtype=np.float32)[y]


def test_weights_round_trip_in_model_order(make_mlp):
    model = make_mlp(seed=1)
    b = KerasBackend(model, "categorical_crossentropy", "sgd:lr=0.1")
    expected = np.concatenate([np.asarray(v.numpy()).reshape(-1) for v in model.trainable_variables])
    w = b.get_weights()
    assert w.dtype == np.float32 and w.ndim == 1 and w.flags.c_contiguous
    assert b.n_params == w.size == 8 * 16 + 16 + 16 * 3 + 3
    np.testing.assert_array_equal(w, expected)

    new = np.arange(b.n_params, dtype=np.float32) / 100.0
    b.set_weights(new)
    np.testing.assert_array_equal(b.get_weights(), new)
    np.testing.assert_array_equal(model.trainable_variables[0].numpy().reshape(-1), new[:8 * 16])
    new[:] = 0.0  # the backend copied: changing the caller's buffer must not change the model
    assert b.get_weights()[1] == np.float32(0.01)
    w2 = b.get_weights()
    w2[:] = 5.0  # and get_weights hands out a copy
    assert b.get_weights()[1] == np.float32(0.01)


def test_single_variable_weights_and_gradients_are_copies(tf_keras):
    """With one variable the concat could be the variable's own buffer; it must still be a copy."""
    _, keras = tf_keras
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, use_bias=False)])
    b = KerasBackend(model, "mse", "sgd")
    w = b.get_weights()
    kept = w.copy()
    w[:] = 42.0
    np.testing.assert_array_equal(b.get_weights(), kept)
    np.testing.assert_array_equal(model.trainable_variables[0].numpy().reshape(-1), kept)


def test_set_weights_rejects_wrong_size(make_mlp):
    b = KerasBackend(make_mlp(), "categorical_crossentropy", "sgd")
    with pytest.raises(ValueError, match="same model"):
        b.set_weights(np.zeros(b.n_params + 1, dtype=np.float32))


def test_gradient_equals_gradient_tape(make_mlp, batch, tf_keras):
    tf, keras = tf_keras
    x, y = batch
    model = make_mlp(seed=2)
    b = KerasBackend(model, "categorical_crossentropy", "sgd")
    grad, metrics = b.compute_gradients(x, onehot(y))
    with tf.GradientTape() as tape:
        ref_loss = keras.losses.CategoricalCrossentropy()(onehot(y), model(x, training=True))
    ref = tape.gradient(ref_loss, model.trainable_variables)
    ref_flat = np.concatenate([np.asarray(g).reshape(-1) for g in ref])
    np.testing.assert_allclose(grad, ref_flat, rtol=1e-5, atol=1e-7)
    assert metrics["loss"] == pytest.approx(float(ref_loss), rel=1e-6)
    assert metrics["count"] == 64
    pred = np.asarray(model(x)).argmax(1)
    assert metrics["correct"] == float((pred == y).sum())


def test_regularisation_losses_are_trained_like_fit(tf_keras, batch):
    tf, keras = tf_keras
    x, y = batch
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, activation="softmax",
                                                                   kernel_regularizer=keras.regularizers.L2(0.5))])
    b = KerasBackend(model, "sparse_categorical_crossentropy", "sgd")
    grad, metrics = b.compute_gradients(x, y)
    with tf.GradientTape() as tape:
        data = keras.losses.SparseCategoricalCrossentropy()(y, model(x, training=True))
        total = data + tf.add_n(model.losses)
    ref = np.concatenate([np.asarray(g).reshape(-1) for g in tape.gradient(total, model.trainable_variables)])
    np.testing.assert_allclose(grad, ref, rtol=1e-5, atol=1e-7)
    assert metrics["loss"] == pytest.approx(float(data), rel=1e-6)  # reported: the data loss


def test_apply_gradients_equals_keras_sgd_step(make_mlp, batch, tf_keras):
    """Plain SGD with momentum: Keras's own SGD has the same semantics as torch's, so the steps agree."""
    _, keras = tf_keras
    x, y = batch
    ours, theirs = make_mlp(seed=4), make_mlp(seed=4)
    b = KerasBackend(ours, "categorical_crossentropy", "sgd:lr=0.1,momentum=0.9")
    opt = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    for _ in range(3):
        grad, _ = b.compute_gradients(x, onehot(y))
        b.apply_gradients(grad)
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = keras.losses.CategoricalCrossentropy()(onehot(y), theirs(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, theirs.trainable_variables), theirs.trainable_variables))
    ref = np.concatenate([v.numpy().reshape(-1) for v in theirs.trainable_variables])
    np.testing.assert_allclose(b.get_weights(), ref, rtol=1e-5, atol=1e-6)


def test_fused_train_step_equals_gradient_then_apply(make_mlp, batch):
    x, y = batch
    fused = KerasBackend(make_mlp(seed=5), "categorical_crossentropy", "adam:lr=0.01")
    split = KerasBackend(make_mlp(seed=5), "categorical_crossentropy", "adam:lr=0.01")
    np.testing.assert_array_equal(fused.get_weights(), split.get_weights())
    for _ in range(4):
        m1 = fused.train_on_batch(x, onehot(y))
        g, m2 = split.compute_gradients(x, onehot(y))
        split.apply_gradients(g)
        assert m1["loss"] == pytest.approx(m2["loss"], rel=1e-5)
    np.testing.assert_allclose(fused.get_weights(), split.get_weights(), rtol=1e-5, atol=1e-6)
    assert fused.get_weights()[0] != make_mlp(seed=5).trainable_variables[0].numpy().reshape(-1)[0]


def test_training_reduces_the_loss(make_mlp, batch):
    x, y = batch
    b = KerasBackend(make_mlp(seed=6), "sparse_categorical_crossentropy", "adam:lr=0.02")
    before = b.evaluate_batch(x, y)
    for _ in range(60):
        b.train_on_batch(x, y)
    after = b.evaluate_batch(x, y)
    assert after["loss_sum"] < 0.5 * before["loss_sum"]
    assert after["correct"] > before["correct"]


def test_evaluation_returns_sums_that_add_up(make_mlp, batch, tf_keras):
    _, keras = tf_keras
    x, y = batch
    model = make_mlp(seed=7)
    b = KerasBackend(model, "categorical_crossentropy", "sgd")
    whole = b.evaluate_batch(x, onehot(y))
    parts = [b.evaluate_batch(x[:40], onehot(y[:40])), b.evaluate_batch(x[40:], onehot(y[40:]))]
    assert whole["count"] == 64 == sum(p["count"] for p in parts)
    assert whole["loss_sum"] == pytest.approx(sum(p["loss_sum"] for p in parts), rel=1e-5)
    assert whole["correct"] == sum(p["correct"] for p in parts)
    ref = float(keras.losses.CategoricalCrossentropy()(onehot(y), model(x, training=False)))
    assert whole["loss_sum"] / whole["count"] == pytest.approx(ref, rel=1e-5)
    assert whole["correct"] == float((np.asarray(model(x)).argmax(1) == y).sum())


def test_label_forms_give_the_same_loss(make_mlp, batch):
    x, y = batch
    model = make_mlp(seed=8)
    cat = KerasBackend(model, "categorical_crossentropy", "sgd")
    sparse = KerasBackend(model, "sparse_categorical_crossentropy", "sgd")
    ref = cat.evaluate_batch(x, onehot(y))
    for backend, labels in ((cat, y), (cat, y.reshape(-1, 1)), (sparse, y), (sparse, onehot(y)),
                            (sparse, y.astype(np.float32))):
        got = backend.evaluate_batch(x, labels)
        assert got["loss_sum"] == pytest.approx(ref["loss_sum"], rel=1e-5)
        assert got["correct"] == ref["correct"]


@pytest.mark.parametrize("name", ["CategoricalCrossentropy", "categorical_crossentropy", "keras-object"])
def test_loss_class_names_and_objects_are_per_sample(name, make_mlp, batch, tf_keras):
    _, keras = tf_keras
    x, y = batch
    loss = keras.losses.CategoricalCrossentropy() if name == "keras-object" else name
    b = KerasBackend(make_mlp(seed=8), loss, "sgd")
    whole, half = b.evaluate_batch(x, onehot(y)), b.evaluate_batch(x[:32], onehot(y[:32]))
    ref = float(keras.losses.CategoricalCrossentropy()(onehot(y), b.model(x)))
    assert whole["loss_sum"] == pytest.approx(64 * ref, rel=1e-5)
    assert half["loss_sum"] < whole["loss_sum"] and "correct" in whole


def test_binary_and_regression_losses(make_mlp, batch):
    x, y = batch
    target = (y > 0).astype(np.float32)
    binary = KerasBackend(make_mlp(seed=9, n_out=1, activation="sigmoid"), "binary_crossentropy", "sgd")
    out = binary.evaluate_batch(x, target)  # (batch,) labels against a (batch, 1) output
    pred = np.asarray(binary.model(x)).reshape(-1)
    assert out["correct"] == float(((pred > 0.5) == (target > 0.5)).sum())
    expected = -np.mean(target * np.log(pred) + (1 - target) * np.log(1 - pred))
    assert out["loss_sum"] / out["count"] == pytest.approx(expected, rel=1e-4)

    reg = KerasBackend(make_mlp(seed=9, n_out=1, activation=None), "mse", "sgd")
    out = reg.evaluate_batch(x, target)
    pred = np.asarray(reg.model(x)).reshape(-1)
    assert "correct" not in out
    assert out["loss_sum"] == pytest.approx(float(((pred - target) ** 2).sum()), rel=1e-5)
    assert "correct" not in reg.train_on_batch(x, target)


@pytest.mark.parametrize("name,hint", [("nll_loss", "sparse_categorical_crossentropy"),
                                       ("CrossEntropyLoss", "categorical"),
                                       ("cross_entropy", "categorical_crossentropy")])
def test_torch_loss_names_are_refused_with_the_keras_name(make_mlp, name, hint):
    with pytest.raises(ConfigError, match=f"PyTorch name.*--loss {hint}"):
        KerasBackend(make_mlp(), name, "sgd")


def test_unknown_loss_and_optimizer_are_one_line_errors(make_mlp):
    with pytest.raises(ConfigError, match="unknown Keras loss 'hinged'") as e:
        KerasBackend(make_mlp(), "hinged", "sgd")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="unknown optimizer 'adamw'"):
        KerasBackend(make_mlp(), "mse", "adamw")
    with pytest.raises(ConfigError, match="no option 'beta'"):
        KerasBackend(make_mlp(), "mse", "adam:beta=0.9")


def test_data_that_does_not_fit_the_model_is_a_model_error(make_mlp, batch):
    x, y = batch
    b = KerasBackend(make_mlp(), "categorical_crossentropy", "sgd")
    with pytest.raises(ModelError, match="failed on a batch.*--features-name") as e:
        b.train_on_batch(x[:, :5], onehot(y))
    assert "\n" not in str(e.value)


def test_unbuilt_and_foreign_models_are_refused(tf_keras):
    _, keras = tf_keras
    with pytest.raises(ModelError, match="no trainable weights yet.*keras.Input"):
        KerasBackend(keras.Sequential([keras.layers.Dense(3)]), "mse", "sgd")
    with pytest.raises(ModelError, match="object, neither a torch nn.Module nor a Keras 3 keras.Model"):
        KerasBackend(object(), "mse", "sgd")


def test_several_outputs_are_refused(tf_keras):
    _, keras = tf_keras
    inp = keras.Input((4,))
    model = keras.Model(inp, [keras.layers.Dense(2)(inp), keras.layers.Dense(3)(inp)])
    with pytest.raises(ModelError, match="has 2 outputs.*single-output"):
        KerasBackend(model, "mse", "sgd")


def test_several_inputs_train(tf_keras, batch):
    _, keras = tf_keras
    x, y = batch
    a, b = keras.Input((5,)), keras.Input((3,))
    out = keras.layers.Dense(3, activation="softmax")(keras.layers.Concatenate()([a, b]))
    backend = KerasBackend(keras.Model([a, b], out), "sparse_categorical_crossentropy", "adam:lr=0.05")
    before = backend.evaluate_batch([x[:, :5], x[:, 5:]], y)
    for _ in range(20):
        metrics = backend.train_on_batch([x[:, :5], x[:, 5:]], y)
    assert metrics["count"] == 64
    assert backend.evaluate_batch([x[:, :5], x[:, 5:]], y)["loss_sum"] < before["loss_sum"]


def test_is_keras_model(make_mlp):
    assert is_keras_model(make_mlp())
    assert not is_keras_model(object())
    assert not is_keras_model(np.zeros(3))
    torch = pytest.importorskip("torch")
    assert not is_keras_model(torch.nn.Linear(2, 2))


def test_make_backend_reads_the_train_config(make_mlp, batch):
    from nnlo.config import TrainConfig

    x, y = batch
    config = TrainConfig(model="m.json", loss="sparse_categorical_crossentropy",
                         worker_optimizer="rmsprop:lr=0.01,momentum=0.5", seed=3)
    b = make_backend(make_mlp(seed=10), config)
    assert b.loss.name == "sparse_categorical_crossentropy"
    assert b.optimizer.nnlo_name == "rmsprop" and b.optimizer.params["momentum"] == 0.5
    assert b.train_on_batch(x, y)["count"] == 64


def test_dropout_streams_follow_the_seed(make_mlp, batch):
    x, y = batch

    def run(seed: int) -> np.ndarray:
        b = KerasBackend(make_mlp(seed=11, dropout=0.5), "sparse_categorical_crossentropy", "sgd:lr=0.1", seed=seed)
        for _ in range(3):
            b.train_on_batch(x, y)
        return b.get_weights()

    np.testing.assert_array_equal(run(1), run(1))
    assert not np.array_equal(run(1), run(2))
