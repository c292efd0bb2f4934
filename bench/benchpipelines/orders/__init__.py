"""Orders of a web shop as a platform pipeline: a wide bronze with nested fields (see bench/wide.py)."""
