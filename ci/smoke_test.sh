#!/usr/bin/env bash
# The installed-wheel smoke suite, run away from the source tree (cibuildwheel test-command
# and CI): ci/smoke_test.sh PROJECT_DIR [pytest args...]
set -euo pipefail
project=$(cd "$1" && pwd)
shift
work=$(mktemp -d)
cp -r "$project/tests" "$work/"
cd "$work"
export CAKE_SOURCE_DIR="$project"  # tests that compile header-only checks from csrc/ find it here
python -c "import cake_rmsnorm as cr, os; assert not cr.__file__.startswith('$project/python'), cr.__file__; print('smoke:', cr.__version__, cr.__file__)"
python -m pytest -q -p no:cacheprovider "${@:-tests/test_smoke.py}"
