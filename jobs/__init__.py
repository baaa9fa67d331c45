"""Ray job entry points: each parses a typed config and calls one library function."""
