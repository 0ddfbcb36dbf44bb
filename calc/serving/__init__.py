"""Continuous batching: KV budget, step model, steady state, simulator, planner."""
