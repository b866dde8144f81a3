"""Test model module that forgot get_model()."""


def get_name():
    return "broken"
