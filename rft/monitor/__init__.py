"""Monitor stage: tolerant log readers, the tuning playbook's diagnosis, early stop, tables, the dashboard.

Driven by `monitor.sh` (`python -m rft.monitor`).
"""
