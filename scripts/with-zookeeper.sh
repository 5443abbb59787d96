#!/usr/bin/env bash
# Runs the command given with a ZooKeeper server for the tests (placeholder:
# the ZooKeeper backend's work fills this in).
set -euo pipefail
exec "$@"
