"""Example models (importable as `examples.models` from the repository root)."""
