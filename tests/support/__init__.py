"""Helpers shared by several test stages and by benchmarks/: imported as `from tests.support.X import ...`."""
