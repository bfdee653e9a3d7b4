#!/usr/bin/env python3
"""Build every data file the launch scripts and the evaluation read (`--help`; code: rft/data/cli.py)."""

import sys

from rft.data.cli import main

if __name__ == "__main__":
    sys.exit(main())
