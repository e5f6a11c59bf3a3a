#!/usr/bin/env bash
# The test suite, as `make test` and CI run it: two pytest processes side by side, one for the tests
# that execute notebooks (each notebook once per run: tests/test_browser.py executes 00 in a real
# JupyterLab, nbval executes 01-09 and compares the cells marked `# NBVAL_CHECK_OUTPUT` with their
# committed CPU outputs (tests/nbval/), then tests/test_multinode.py and tests/test_notebooks.py read
# the executed copies back, so they stay in one process, in that order) and one for everything else. Most tests
# wait on ranks that are themselves busy, so one pytest keeps about one core busy; two use both
# cores of a CI machine. The notebooks' log is printed when both are done.
#
#   scripts/test.sh [PYTHON]        (default .venv/bin/python; NVTUTORIAL_EXECUTED_DIR is honoured)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
notebooks=(tests/test_browser.py tests/test_multinode.py tests/test_notebooks.py)
others=()
for f in tests/test_*.py; do
    case " ${notebooks[*]} " in *" $f "*) ;; *) others+=("$f") ;; esac
done
mkdir -p build
log=build/test-notebooks.log
t0=$SECONDS
# The notebooks nbval executes: as papermill would run them (parameters injected), with the committed outputs of
# their marked cells (tests/nbval_outputs.py). If the outputs are stale, nbval is left out and the notebook tests
# execute the notebooks with papermill instead (and tests/test_notebooks.py says which outputs to regenerate).
nbval=()
rm -rf build/nbval
if "$PY" -m tests.nbval_outputs prepare build/nbval > build/nbval-prepare.log 2>&1; then
    nbval=(-p tests.nbval_outputs --nbval-lax --nbval-sanitize-with tests/nbval/sanitize.cfg build/nbval/*.ipynb)
else
    cat build/nbval-prepare.log
fi
"$PY" -m pytest -ra --durations=15 -p no:cacheprovider "${notebooks[0]}" "${nbval[@]}" "${notebooks[@]:1}" > "$log" 2>&1 &
nb=$!
"$PY" -m pytest -ra --durations=15 "${others[@]}"
rc=$?
wait "$nb"
nbrc=$?
echo
echo "==== the notebooks' tests (${notebooks[*]}), run alongside: exit $nbrc ===="
cat "$log"
echo "==== both streams done in $((SECONDS - t0)) s: exit $rc (others), $nbrc (notebooks) ===="
[ "$rc" = 0 ] && [ "$nbrc" = 0 ]
