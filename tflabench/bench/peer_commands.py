"""CLI commands of the analysis layer (placeholder; filled in by the analysis work)."""


def register(app) -> None:
    return None
