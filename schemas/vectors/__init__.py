"""Golden vectors: language-neutral JSON every SDK must reproduce (see generate.py)."""
