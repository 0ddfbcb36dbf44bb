"""What the plan report explains beside the answer: what-if steps and FP8 alternatives (whatif), prefix caching (prefixeffect), speculative decoding (speceffect)."""
