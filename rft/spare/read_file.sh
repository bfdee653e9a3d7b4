#!/bin/sh
# A file of the spare's checkout to stdout (after in_repo.sh).
# Sent as `sh -c <in_repo.sh + this> rft REPO PATH` (PATH relative to the checkout, or ~/...).
exec cat -- "$(x "$2")"
