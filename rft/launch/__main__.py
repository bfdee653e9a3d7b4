"""`python -m rft.launch`: pre-launch checks, then OpenRLHF (rft.launch.checks)."""

from rft.launch.checks import main

raise SystemExit(main())
