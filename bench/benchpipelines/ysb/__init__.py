"""The Yahoo Streaming Benchmark as a platform pipeline (see bench/ysb.py)."""
