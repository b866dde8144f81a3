"""Test model module whose get_model() raises."""


def get_model():
    raise ValueError("hidden size must be positive")
