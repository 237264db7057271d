#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
scripts/demo.sh
