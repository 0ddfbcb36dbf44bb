"""Specs as data: model, hardware, engine presets, workloads, catalog, HF import."""
