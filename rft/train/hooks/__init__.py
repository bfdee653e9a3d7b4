"""The functions OpenRLHF 0.9.3's patched files call: one module per upstream file, named for its stem.

Each patch imports only from here; the hooks call the rest of `rft.train` (docs/patches.md lists them).
"""
