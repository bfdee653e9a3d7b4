"""Node provisioning, stdlib only: host facts, prerequisites, the training venv, caches, the model download.

Runs before any environment exists (`make train-env`, `python -m rft.provision.download`).
"""
