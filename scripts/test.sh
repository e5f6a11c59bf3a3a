#!/usr/bin/env bash
# The test suite, as `make test` and CI run it: two pytest processes side by side, one for the tests
# that execute notebooks (each notebook once per run: tests/test_jupyterlab.py runs every notebook with
# Run All in a real JupyterLab where Chromium is installed and saves the executed copies, which
# tests/test_multinode.py and tests/test_notebooks.py then read (the latter compares the cells marked
# `# NBVAL_CHECK_OUTPUT` with their committed CPU outputs through nbval's comparison, tests/nbval_outputs.py);
# without Chromium they execute the notebooks with papermill themselves; so the three stay in one process, in
# that order) and two for
# everything else (the website's tests there skip until `make site` built it: `make test-site`). Most tests
# wait on ranks that are themselves busy, so one pytest keeps less than one core busy: with two streams the two
# cores of a CI machine were about 66 % busy (fresh clone, 2026-12-07: 16.4 min of CPU over 12.4 min); three fill them.
# The logs of the streams run alongside are printed when all are done; pyright runs beside them (its log after).
#
#   scripts/test.sh [PYTHON]        (default .venv/bin/python; NVTUTORIAL_EXECUTED_DIR is honoured)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
notebooks=(tests/test_jupyterlab.py tests/test_multinode.py tests/test_notebooks.py)
# the rest in two streams, alternate files each (the files that start servers or daemons stay together in the first)
together=(tests/test_slurm.py tests/test_lab.py tests/test_launcher.py tests/test_warm.py tests/test_browser.py tests/test_site.py)
others=("${together[@]}")
second=()
i=0
for f in tests/test_*.py; do
    case " ${notebooks[*]} ${together[*]} " in *" $f "*) continue ;; esac
    if [ $((i % 2)) = 0 ]; then second+=("$f"); else others+=("$f"); fi
    i=$((i + 1))
done
mkdir -p build
log=build/test-notebooks.log
t0=$SECONDS
# pyright (25 s of one core) runs beside the two streams, which leave about a third of the two cores idle
"$(dirname "$PY")/pyright" > build/pyright.log 2>&1 &
pr=$!
"$PY" -m pytest -ra --durations=15 -p no:cacheprovider "${notebooks[@]}" > "$log" 2>&1 &
nb=$!
"$PY" -m pytest -ra --durations=15 -p no:cacheprovider "${second[@]}" > build/test-second.log 2>&1 &
sc=$!
"$PY" -m pytest -ra --durations=15 "${others[@]}"
rc=$?
wait "$sc"
scrc=$?
echo
echo "==== the second stream of the other tests, run alongside: exit $scrc ===="
cat build/test-second.log
[ "$scrc" = 0 ] || rc=$scrc
wait "$nb"
nbrc=$?
echo
echo "==== the notebooks' tests (${notebooks[*]}), run alongside: exit $nbrc ===="
cat "$log"
echo "==== both streams done in $((SECONDS - t0)) s: exit $rc (others), $nbrc (notebooks) ===="
wait "$pr"
prc=$?
echo "==== pyright, run alongside: exit $prc ===="
cat build/pyright.log
[ "$rc" = 0 ] && [ "$nbrc" = 0 ] && [ "$prc" = 0 ]
