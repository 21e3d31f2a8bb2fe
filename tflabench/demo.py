"""`tflabench demo`: the main job on any machine (placeholder)."""


def register(app) -> None:
    return None
