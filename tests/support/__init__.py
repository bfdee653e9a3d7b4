"""Helpers several test stages share and benchmarks do not: imported as `from tests.support.X import ...`."""
