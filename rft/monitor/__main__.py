"""`python -m rft.monitor`: the monitor's command line (rft.monitor.cli)."""

from rft.monitor.cli import run

run()
