#!/usr/bin/env python
"""Drive the spare node: sync, verify, run eval jobs there in tmux (`--help`; code: rft/spare/cli.py)."""

import sys

from rft.spare.cli import main

if __name__ == "__main__":
    sys.exit(main())
