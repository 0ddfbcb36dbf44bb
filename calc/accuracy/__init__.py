"""Published measurements against the model's predictions."""
