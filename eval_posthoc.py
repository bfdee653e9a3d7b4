#!/usr/bin/env python
"""Post-hoc evaluation of checkpoints against a baseline, in labelled modes (`--help`; code: rft/eval/cli.py)."""

import sys

from rft.eval.cli import main

if __name__ == "__main__":
    sys.exit(main())
