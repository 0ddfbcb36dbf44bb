"""roofline's validation: real torch passes checked against the calculator (imports calc, never the reverse).

reference.py (a decoder from any ModelSpec) and passes.py (its static KV cache);
counts.py (FlopCounterMode and cache nbytes vs calc); probes.py (device
microbenchmarks -> a measured profile); timing.py (timed prefill/decode);
calibrate.py (fit efficiencies, write profiles atomically); measurements.py
(measurements.csv); runner.py, fitting.py and report.py (`roofline validate`,
`roofline calibrate`); hf.py
(transformers' LlamaForCausalLM behind the same harness); comm.py (collectives).

This package imports no torch itself: the CLI reaches it lazily, and the modules
that run passes import torch when loaded.
"""
