"""The time and memory model: operators, parallel splits, roofline, latency, sweeps (reads no files)."""
