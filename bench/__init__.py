"""Benchmarks: ``make bench`` (see run.py) and the two reference apps it compares against."""
