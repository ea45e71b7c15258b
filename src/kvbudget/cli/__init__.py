"""Command-line edge: thin commands that parse, validate, call one function and render."""
