"""Matplotlib charts (imported lazily)."""
