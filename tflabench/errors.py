"""Errors that the CLI turns into a one-line message and exit code 2."""


class InputError(ValueError):
    """Bad user input (unknown GPU, invalid dimension, malformed sweep file, ...).

    Raised anywhere in tflabench; `tflabench.cli.main` prints ``error: <message>`` and exits with 2.
    Subclasses ValueError so library callers can catch it the usual way.
    """
