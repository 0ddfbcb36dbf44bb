"""What a step costs: the exact step model fitted to calc.cost (stepmodel), the plain and speculative step timers (timer), and decode runs priced by a line in the batch's context (decodeline)."""
