"""roofline's validation: real torch passes checked against the calculator (imports calc, never the reverse).

reference.py (a decoder from any ModelSpec, its layers in layers.py) and passes.py (its static KV cache);
counts.py (FlopCounterMode and cache nbytes vs calc); probes.py (device
microbenchmarks -> a measured profile); timing.py (timed prefill/decode);
kernels.py (kernel tables measured with torch); kernelfit.py (a profile's curves
fitted to kernel tables; `roofline calibrate`); profile.py (`roofline profile`);
calibrate.py (error statistics, profiles written atomically); measurements.py
(measurements.csv); runner.py and report.py (`roofline validate`); hf.py
(transformers' LlamaForCausalLM behind the same harness); comm.py (collectives).

This package imports no torch itself: the CLI reaches it lazily, and the modules
that run passes import torch when loaded.
"""
