"""Text, markdown and HTML renderings of results (never recomputes)."""
