"""The calls the patch series makes into rft, one module per patched OpenRLHF file (named for its stem)."""
