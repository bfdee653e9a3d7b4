"""`python -m rft.launch`: pre-launch checks, then OpenRLHF (rft.launch.cli)."""

from rft.launch.cli import main

raise SystemExit(main())
