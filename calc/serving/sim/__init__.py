"""The discrete-event simulation of continuous batching: the scheduler's state and steps (scheduler), the entry point and arrivals (simulate), and what a run measured (simresult)."""
