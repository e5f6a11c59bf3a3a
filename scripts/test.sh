#!/usr/bin/env bash
# The test suite, as `make test` and CI run it: two pytest processes side by side, one for the tests
# that execute notebooks (each notebook once per run: tests/notebooks/test_jupyterlab.py runs every notebook with
# Run All in a real JupyterLab where Chromium is installed and saves the executed copies, which
# tests/notebooks/test_multinode.py and tests/notebooks/test_notebooks.py then read (the latter compares the cells marked
# `# NBVAL_CHECK_OUTPUT` with their committed CPU outputs through nbval's comparison, tests/helpers/nbval_outputs.py);
# without Chromium they execute the notebooks with papermill themselves; so the three stay in one process, in
# that order) and one for
# everything else (the website's tests there skip until `make site` built it: `make test-site`). Most tests
# wait on ranks that are themselves busy, so one pytest keeps about one core busy; two use both
# cores of a CI machine. The notebooks' log is printed when both are done; pyright runs beside them (its log after).
#
#   scripts/test.sh [PYTHON]        (default .venv/bin/python; NVTUTORIAL_EXECUTED_DIR is honoured)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
notebooks=(tests/notebooks/test_jupyterlab.py tests/notebooks/test_multinode.py tests/notebooks/test_notebooks.py)
others=(tests --ignore=tests/notebooks)  # every other test (tests/README.md: where each kind lives)
mkdir -p build
log=build/test-notebooks.log
t0=$SECONDS
# pyright (25 s of one core) runs beside the two streams, which leave about a third of the two cores idle
"$(dirname "$PY")/pyright" > build/pyright.log 2>&1 &
pr=$!
# The two streams one after the other, not side by side: alone on a 2-core machine the others took 246 s (about 0.8
# of a core: most tests wait on ranks) and the notebooks' Run All 213 s, side by side each took about 605 s
# (2026-12-07): the notebooks' JupyterLab, Chromium and ranks and the others' ranks slowed each other more than
# the overlap gained. (Earlier, the others split into two xdist workers beside the notebooks: 16.5 min in all.)
"$PY" -m pytest -ra --durations=15 "${others[@]}"
rc=$?
t1=$SECONDS
"$PY" -m pytest -ra --durations=15 -p no:cacheprovider "${notebooks[@]}" > "$log" 2>&1
nbrc=$?
echo
echo "==== the notebooks' tests (${notebooks[*]}), after the others ($((t1 - t0)) s): exit $nbrc, $((SECONDS - t1)) s ===="
cat "$log"
echo "==== both streams done in $((SECONDS - t0)) s: exit $rc (others), $nbrc (notebooks) ===="
wait "$pr"
prc=$?
echo "==== pyright, run alongside: exit $prc ===="
cat build/pyright.log
[ "$rc" = 0 ] && [ "$nbrc" = 0 ] && [ "$prc" = 0 ]
