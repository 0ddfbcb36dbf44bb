"""Errors, units and the one atomic file writer: what every layer uses."""
