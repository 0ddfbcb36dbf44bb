"""The typer command line."""
