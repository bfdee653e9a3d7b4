#!/bin/sh
# A directory on the spare, its parents too.
# Sent as `sh -c <this> rft DIR`.
mkdir -p -- "$1"
