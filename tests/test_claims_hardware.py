"""The verdicts of notebooks 00–02, guarded.

Verdicts that hold on a CPU are computed here and asserted on their status and numbers. Verdicts that
only a GPU can decide are recomputed from the committed runs of the reference 2× H200
(``reference/h200x2/runs/``, named in :data:`nvtutorial.chapters.ch01_hardware.report_reference.RUNS`) and its
saved outputs (``nvtutorial/data/h200x2/``), so a code change that flips a reference conclusion fails here. When
the lead commits new reference runs, update ``RUNS`` and the numbers below.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from nvtutorial.chapters.ch00_welcome import report as welcome
from nvtutorial.chapters.ch01_hardware import lab as bwlab
from nvtutorial.chapters.ch01_hardware import report as bandwidth
from nvtutorial.chapters.ch01_hardware import report_lab as lab
from nvtutorial.chapters.ch01_hardware import report_links as linkreport
from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs
from nvtutorial.chapters.ch02_environment import report as environment
from nvtutorial.machine import doctor, hardware, links, topology
from nvtutorial.report import claims
from nvtutorial.results import RunResult
from tests.helpers.hardware_runs import run_of, sweep, sweep_row
from tests.helpers.launch import requires_two_gpus
from tests.helpers.paths import ROOT


def reference_run(name: str) -> RunResult:
    """A committed run of the reference 2× H200 (``report.reference_runs.RUNS`` names them)."""
    return reference_runs.load(name)


@pytest.fixture(scope="module")
def ab():
    return bwlab.run_lab(
        {},
        reuse={
            "default": reference_run("ab default"),
            "source's settings": reference_run("ab source's settings"),
            "P2P off": reference_run("ab P2P off"),
        },
        paths=bwlab.SOURCE_AB_PATHS,
    )


@pytest.fixture(scope="module")
def link_lab():
    return bwlab.run_lab(
        {},
        reuse={
            "default": reference_run("sweep"),
            "P2P off": reference_run("lab P2P off"),
            "P2P+SHM off": reference_run("lab P2P+SHM off"),
        },
    )


# --- the claim registry: C2–C7 are decided by the functions it names -----------------------------


def test_registered_deciders_give_the_registered_status(ab):
    evidence = {
        "C2": (),
        "C3": (),
        "C4": (doctor.reference_facts(),),
        "C5": (),
        "C6": (doctor.reference_facts(),),
        "C7": (ab,),
    }
    for cid, args in evidence.items():
        claim = claims.claim(cid)
        verdict = claim.decider()(*args)
        assert verdict.key == cid and verdict.status == claim.status, (cid, verdict)


# --- CPU-valid verdicts: vendor data, saved outputs, the doctor's rules ----------------------------


def test_c2_and_c5_from_vendor_data():
    c2 = linkreport.claim_c2()
    assert c2.status == "partly" and c2.numbers["without_nvlink"] == ["GeForce RTX 4090"]
    c5 = linkreport.claim_c5()
    assert c5.status == "wrong" and c5.numbers["nvlink_over_pcie"] == pytest.approx(1.79, abs=0.01)
    assert c5.numbers["consumer_over_pro"] == pytest.approx(56.25 / 300)


def test_c3_from_topo_outputs():
    c3 = linkreport.claim_c3()  # the reference machine's saved nvidia-smi topo -m
    assert c3.status == "holds" and c3.numbers == {"code": "NV18", "nvlinks": 18}
    pcie = linkreport.claim_c3(topology.read(ROOT / "tests" / "fixtures" / "topo" / "pcie-4gpu-nics.txt"))
    assert pcie.status == "unverifiable"


def test_c4_c6_and_the_minimums_on_the_reference_facts_and_on_a_laptop():
    facts = doctor.reference_facts()
    assert environment.claim_c4(facts).numbers == {"here": "ok", "driver_515": "fail", "torch_cuda": "13.0"}
    assert environment.claim_c6(facts).status == "unverifiable"
    laptop = dataclasses.replace(
        facts, torch="2.13.0+cpu", torch_cuda=None, nccl=None, driver=None, driver_cuda=None, gpus=(), gpus_total=0
    )
    assert environment.claim_c4(laptop).status == "wrong" and environment.claim_minimums(laptop).status == "pass"


@pytest.mark.parametrize(
    "speedup, status",
    [
        (0.12, "holds"),
        (0.07, "holds"),  # the band's edges: ±5 points of the claimed +12 %
        (0.17, "holds"),
        (0.069, "partly"),  # just outside
        (0.171, "partly"),
        (0.06, "partly"),  # half the claim: no longer enough
        (0.24, "partly"),  # twice the claim: too much
        (0.0, "wrong"),  # within the noise
        (-0.05, "wrong"),  # slower
    ],
)
def test_c6_holds_only_within_five_points_of_the_claimed_12_percent(speedup, status):
    """C6 from an A/B of the wheels (step times, the default build the baseline): a speed-up s is a candidate step
    time of 10 / (1 + s) ms, both sides with 0.1 % spread (the noise is compare's 1 % floor)."""
    from nvtutorial.report.verdict import compare

    candidate = 10.0 / (1 + speedup)
    ab = compare([10.0, 10.01], [candidate, candidate * 1.001])
    v = environment.claim_c6(doctor.reference_facts(), ab)
    assert v.status == status and v.numbers["speedup"] == pytest.approx(speedup, abs=2e-3)
    assert environment.C6_BAND == 0.05 and environment.CLAIMED_C6 == 0.12


def test_nvls_for_two_gpus_follows_ncclnvlsinit_of_the_nccl_version():
    """Review R1-1: ncclNvlsInit returned early for ``gpuCount <= 2`` up to NCCL v2.28.3-1 and for ``gpuCount < 2``
    from v2.28.7-1 (v2.28.9-1, v2.29.x, v2.30.x too): the NCCL the reference ran (2.28.9) sets NVLS up for two GPUs
    on an NVSwitch board; the course's runs keep it off."""
    from nvtutorial.machine import nccl_debug

    assert nccl_debug.NVLS_FROM_TWO_GPUS == (2, 28, 7)
    for version, least in [("2.21.5", 3), ("2.28.3", 3), ("2.28.7", 2), ("2.28.9+cuda13.0", 2), ("2.30.7", 2)]:
        assert nccl_debug.nvls_min_gpus(version) == least, version
    assert nccl_debug.nvls_min_gpus(None) is None and nccl_debug.nvls_min_gpus("") is None
    assert nccl_debug.nvls_min_gpus("2.29") == 2 and nccl_debug.nvls_min_gpus("2") is None  # major.minor is enough
    assert nccl_debug.nvls_when("2.28.9").startswith("NCCL 2.28.9 sets it up from 2 GPUs where their NVLinks reach")
    assert nccl_debug.nvls_when("2.28.3").startswith("NCCL 2.28.3 sets it up from 3 GPUs")
    assert nccl_debug.nvls_when(None).startswith("NCCL sets it up from 2 GPUs (3 before 2.28.7)")
    (row,) = [v for v in nccl_debug.VARIABLES if v.name == "NCCL_NVLS_ENABLE"]
    assert "ncclNvlsInit" in row.on_one_machine and "2.28.7" in row.on_one_machine
    assert "set NVLS up for two GPUs too" in row.on_one_machine and "none with two GPUs" not in row.on_one_machine
    ref = doctor.reference_facts()  # NCCL 2.28.9, 2× H200 on an NVSwitch board
    off = doctor.check_nccl_variable("NCCL_NVLS_ENABLE", "0", ref)
    assert (off.status, off.value) == ("ok", "NVLink SHARP off") and "NCCL 2.28.9 sets it up from 2 GPUs" in off.detail
    on = doctor.check_nccl_variable("NCCL_NVLS_ENABLE", "1", ref)
    assert (on.status, on.value) == ("ok", "NVLink SHARP allowed") and "without asking the driver" in on.detail
    asks = doctor.check_nccl_variable("NCCL_NVLS_ENABLE", "2", ref)
    assert asks.value == "NVLink SHARP allowed" and "without asking" not in asks.detail
    # both sides of the version: 2.28.3 needs three GPUs, 2.28.7 two
    old = dataclasses.replace(ref, nccl="2.28.3")
    assert doctor.check_nccl_variable("NCCL_NVLS_ENABLE", "1", old).value == "NVLink SHARP allowed; unused here"
    three = dataclasses.replace(old, gpus=("NVIDIA H200",) * 3)
    assert doctor.check_nccl_variable("NCCL_NVLS_ENABLE", "1", three).value == "NVLink SHARP allowed"
    assert doctor.check_nccl_variable("NCCL_NVLS_ENABLE", "1", dataclasses.replace(ref, nccl="2.28.7")).value == (
        "NVLink SHARP allowed"
    )
    one = dataclasses.replace(ref, gpus=("NVIDIA H200",))
    assert doctor.check_nccl_variable("NCCL_NVLS_ENABLE", "1", one).value == "NVLink SHARP allowed; unused here"
    cpu = dataclasses.replace(ref, nccl=None, gpus=())
    blind = doctor.check_nccl_variable("NCCL_NVLS_ENABLE", "1", cpu)
    assert blind.value == "NVLink SHARP allowed; unused here" and "3 before 2.28.7" in blind.detail
    assert "NVSwitches" in topology.Link("NV18").verdict


# --- GPU-only verdicts, recomputed from the committed reference runs --------------------------------


def test_c7_from_the_reference_runs(ab):
    rows = lab.c7_rows(ab)
    assert [r["size"] for r in rows] == ["16 MiB", "64 MiB", "256 MiB", "1 GiB"]
    assert {r["verdict"] for r in rows} == {"no change"}
    c7 = lab.claim_c7(ab)
    assert c7.status == "wrong" and c7.numbers["no_change"] == 4 and c7.numbers["largest_change"] < 0.01
    assert c7.numbers["control_ratio"] == pytest.approx(27.466 / 298.407, abs=1e-3)  # P2P off: the control moves
    assert "never read NCCL_NET_GDR_LEVEL" in c7.text  # NCCL's own log: only NCCL_IB_DISABLE was read
    # N1/T14 (review 2026-12-06): NCCL may route one machine's GPUs through a NIC (ncclTopoCheckNet), and a network
    # plugin can outlive NCCL_IB_DISABLE=1: neither the verdict nor the graded answer says otherwise
    graded = lab.grade_c7("c", ab)
    for text in (c7.text, graded.text):
        assert "on any machine" not in text and "one machine's GPUs" not in text and "one machine:" not in text
    assert "network plugin" in c7.text and "NCCL_NET_DISABLE_INTRA=1" in graded.text and graded.status == "right"


def test_link_lab_and_c5_measured_from_the_reference_runs(link_lab):
    assert [run.transport.summary for run in link_lab] == ["P2P/CUMEM", "SHM/direct/direct", "NET/Socket"]
    verdict = lab.lab_verdict(link_lab)
    assert verdict.status == "slower" and verdict.numbers["slowest_path"] == "P2P+SHM off"
    c5 = lab.claim_nvlink_vs_pcie(link_lab)  # at 256 MiB, the largest size both paths measured
    assert c5.numbers["size"] == 256 << 20 and c5.numbers["ratio"] == pytest.approx(297.991 / 27.604, rel=1e-3)


def test_sweep_verdicts_from_the_reference_run():
    sweep = reference_run("sweep")
    _, check = bandwidth.reference_check(sweep)
    # The committed sweep stops at 1 GiB and reached 326.76 GB/s there: 98.47 % of nccl-tests' in-place busbw
    # (331.83; dist.all_reduce is in place). Under issue 15's rule (99 % at 1 and 4 GiB) it fails, by more than
    # nccl-tests' own in-place/out-of-place difference (0.50 %). A rerun with the full profile (to 4 GiB) decides.
    assert check.status == "fail" and check.numbers["ratio at 1 GiB"] == pytest.approx(326.7605 / 331.83, abs=1e-4)
    assert check.numbers["ratio at 4 GiB"] is None and "larger than that" in check.text
    _, wire = bandwidth.wire_report(sweep)
    assert wire.status == "pass" and wire.numbers["tx_ratio"] == pytest.approx(1.0, abs=1e-3)
    assert wire.numbers["links_carrying"] == 18
    # the constants the CPU notebooks quote are this run's numbers
    saved = bandwidth.sweep_of(sweep).wire
    assert saved is not None and saved.tx_ratio is not None and saved.tx_bytes_per_link_per_op is not None
    assert bandwidth.REFERENCE_WIRE["tx_ratio"] == pytest.approx(saved.tx_ratio, abs=1e-6)
    assert bandwidth.REFERENCE_WIRE["links_read"] == saved.links_read == 18
    per_link = [v / 1e6 for v in saved.tx_bytes_per_link_per_op.values()]
    assert (min(per_link), max(per_link)) == pytest.approx(
        (bandwidth.REFERENCE_WIRE["per_link_mb_min"], bandwidth.REFERENCE_WIRE["per_link_mb_max"]), abs=0.01
    )
    assert bandwidth.REFERENCE_SWEEP["busbw"] == pytest.approx(
        bandwidth.at_size(bandwidth.sweep_rows(sweep), 1 << 30)[1], abs=0.01
    )
    small = bandwidth.small_message_cost(sweep)
    assert small.numbers["time_us_smallest"] == pytest.approx(38.3, abs=0.1)  # not "a few microseconds"
    assert small.numbers["flat_up_to"] == 4 << 20  # 37.6–40.4 µs from 1 KiB to 4 MiB; 76 µs at 16 MiB
    assert small.numbers["floor_size"] == 4096 and small.numbers["slow_sizes"] == []  # NCCL's floor: 37.55 µs
    # both sides of the factor at 16 MiB: 76.368 / 37.552 = 2.0337 times the fastest call before it
    assert bandwidth.small_message_cost(sweep, flat_factor=2.033).numbers["flat_up_to"] == 4 << 20
    assert bandwidth.small_message_cost(sweep, flat_factor=2.034).numbers["flat_up_to"] == 16 << 20


def test_duplex_from_the_reference_run():
    """Issue 11 finding 3: NCCL send/recv loses 15 % per direction with both at once; without the copy-engine
    run the verdict does not blame the link."""
    sendrecv = reference_run("sendrecv")
    nccl = bandwidth.sendrecv_duplex(sendrecv)
    assert nccl.status == "slower" and nccl.numbers["ratio"] == pytest.approx(301.12 / 355.883, abs=1e-3)
    verdict = bandwidth.duplex_verdict(sendrecv)
    assert verdict.numbers["copy_status"] is None and "share" not in verdict.text


def test_prediction_is_graded_against_the_saved_number_on_a_cpu(tmp_path):
    cpu = run_of(sweep([sweep_row(1 << 20, 1.0)]), gpu=False)
    graded = linkreport.grade_run(330.0, cpu, links.expect("NV18", "NVIDIA H200"))
    assert graded.status == "right" and graded.numbers["measured"] == bandwidth.reference_sweep_busbw(1 << 30)[1]


# --- notebook 00: the first all-reduce and the hang, with the notebook's own code, on real ranks -------


def _notebook_code(name: str) -> list[str]:
    nb = json.loads((ROOT / "notebooks" / name).read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _hang_code() -> str:
    (cell,) = [c for c in _notebook_code("00_welcome.ipynb") if c.startswith("HANG = ")]
    tree = ast.parse(cell)
    return ast.literal_eval(tree.body[0].value)


def _first_cell() -> str:
    (cell,) = [c for c in _notebook_code("00_welcome.ipynb") if c.startswith("%%ranks") and "rank + 1" in c]
    return cell.split("\n", 1)[1]


def test_first_allreduce_and_the_hang_as_notebook_00_runs_them():
    """On gloo: every rank holds the sum; the hang is caught at the line the notebook names, counted from the cell."""
    from nvtutorial.teach import ranks

    pool = ranks.start(nproc=2, backend="gloo", quiet=True)
    pids = list(pool.pids())
    try:
        assert ranks.run_code(_first_cell()).ok
        held = ranks.pull("t")
        assert welcome.first_allreduce(held, [1, 2], "CPU").status == "pass"
        assert welcome.grade_allreduce("c", held, "CPU").status == "right"
        assert welcome.grade_allreduce("b", held, "CPU").status == "off"
        hung = ranks.run_code(_hang_code(), timeout=2)
        verdict = welcome.hang(hung, backend="gloo")
        assert verdict.status == "pass", verdict
        assert verdict.numbers["stuck_line"].startswith("dist.all_reduce(t)") and verdict.numbers["others"] == {1: "ok"}
        wrong = welcome.hang(hung, backend="nccl")  # the NCCL expectation does not match a gloo stack
        assert wrong.status == "fail"
        # the prediction is graded from the stack: with gloo rank 0 waits inside all_reduce, choice (a)
        assert welcome.grade_hang("a", hung, backend="gloo").status == "right"
        graded = welcome.grade_hang("b", hung, backend="gloo")
        assert graded.status == "off" and graded.numbers["answer"] == "a"
    finally:
        ranks.stop()
    assert welcome.nothing_left(pids, "stop").status == "pass"


@requires_two_gpus
def test_the_hang_on_two_gpus_waits_at_the_first_use_of_the_result():
    from nvtutorial.teach import ranks

    ranks.start(nproc=2, backend="nccl", quiet=True)
    try:
        # As the notebook does: the first all-reduce runs before the hang. On 2x H200 (torch 2.11,
        # NCCL 2.28.9) the hang run as the group's first collective was not waiting at .item().
        assert ranks.run_code(_first_cell()).ok
        hung = ranks.run_code(_hang_code(), timeout=10)
        verdict = welcome.hang(hung, backend="nccl")
        assert verdict.status == "pass" and ".item()" in verdict.numbers["stuck_line"], (
            verdict.numbers,
            "\n".join(hung.report()),
        )
        assert welcome.grade_hang("b", hung, backend="nccl").status == "right"
    finally:
        ranks.stop()


def test_the_stuck_line_is_read_from_the_innermost_cell_frame():
    stack = (
        'Stack (most recent call last):\n  File "<ranks cell 2>", line 4, in <module>\n    total = t.sum().item()\n'
        '  File "/x/torch/_tensor.py", line 1, in item\n    return 1'
    )
    assert welcome.stuck_line(stack) == "total = t.sum().item()"
    assert welcome.stuck_line(None) is None


def test_the_launch_figure_keeps_its_label_clear_of_the_axes():
    """Issue 14: the "measured on" line printed over the axis labels of notebook 00's figure."""
    import types

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nvtutorial.chapters.ch00_welcome import plots as launch_plots
    from tests.helpers.hardware_runs import assert_readable

    run = types.SimpleNamespace(
        first_output_s=9.9,
        wall_s=11.7,
        workload="selftest",
        label="CPU, gloo, 2 processes on a-long-host-name: a simulation, not a GPU measurement",
    )
    fig, ax = launch_plots.launch_timeline([run], names=["selftest"])
    fig.canvas.draw()
    assert_readable(fig, ax)
    plt.close(fig)


def test_the_reference_data_is_where_the_tests_expect_it(runs_dir):
    assert hardware.reference_output("nvidia-smi-topo-m.txt").is_file() and reference_runs.available()
    # Without GPUs, notebook 02's A/B and notebook 01's send/recv are the reference machine's saved runs
    ab = bwlab.source_ab({})
    assert [run.result.label for run in ab] == [ab[0].result.label] * 3 and "H200" in ab[0].result.label
    assert bwlab.point_to_point({}).run_dir == reference_runs.FOLDER / reference_runs.RUNS["sendrecv"]
    assert not runs_dir.exists()  # nothing was launched


def test_c7_prediction_is_graded_against_the_runs_or_the_reference(ab):
    assert lab.c7_answer(ab) == lab.REFERENCE_C7_ANSWER == "c"  # what the committed reference runs answer
    assert lab.grade_c7("c", ab).status == "right" and lab.grade_c7("a", ab).status == "off"
    assert lab.grade_c7(None, ab).status == "no answer"


# --- the code exercises of notebooks 01 and 02 -------------------------------------------------------


@pytest.mark.parametrize("name", ["busbw", "driver_rule"])
def test_exercise_checkers_pass_the_solution_and_name_each_wrong_answer(name):
    from nvtutorial.teach import check

    solution = check.check(name)
    assert solution.passed, solution.reason
    module = check.load(name)
    for label, (candidate, word) in module.WRONG.items():
        result = check.check(name, candidate)
        assert not result.passed and word in result.reason, (label, result.reason)


def test_the_driver_exercise_is_the_doctors_rule():
    from nvtutorial.chapters.ch02_environment import exercises as driver_rule

    for driver, runtime, status in driver_rule.CASES:
        facts = dataclasses.replace(doctor.reference_facts(), driver_cuda=driver, torch_cuda=runtime)
        assert doctor.check_driver_runtime(facts).status == status == driver_rule.driver_status(driver, runtime)


def test_the_busbw_exercise_agrees_with_the_lesson_and_the_units():
    from nvtutorial import units
    from nvtutorial.chapters.ch01_hardware import exercises as exercise
    from nvtutorial.chapters.ch01_hardware.lessons import busbw as lesson_file

    for collective, size, seconds, n in exercise.CASES:
        assert exercise.bus_bandwidth(collective, size, seconds, n) == pytest.approx(
            units.busbw(size, seconds, n, collective)
        )
        if collective == "all_reduce":
            assert lesson_file.bus_bandwidth(size, seconds, n) == pytest.approx(
                exercise.bus_bandwidth(collective, size, seconds, n)
            )


def test_troubleshooting_from_the_reference_runs_compares_the_runs_own_nccl(ab):
    """The runs' torch reported NCCL 2.28.9 and loaded 2.28.9+cuda13.0: the same library, whatever this machine has."""
    laptop = dataclasses.replace(doctor.reference_facts(), torch="2.13.0+cpu", torch_cuda=None, nccl=None)
    rows = environment.troubleshooting_from_runs(laptop, ab)
    assert rows[0].status == "partly" and rows[0].numbers == {"runtime_nccl": "2.28.9+cuda13.0", "torch_nccl": "2.28.9"}
    assert rows[2].numbers["p2p_ratio"] == pytest.approx(298.407 / 27.466, rel=1e-3)


SAVED_AB = (
    "2× NVIDIA H200 · NV18 · NCCL 2.28.9 · torch 2.11.0 · CUDA 13.0: the reference 2× H200's saved run "
    "(reference/h200x2/runs/allreduce_bench-20261130-014936-7adb80), not this machine"
)
"""R5-5: the ``where`` of a verdict read from the reference's saved A/B (its default run)."""


def test_verdicts_from_the_saved_runs_say_so(ab, tmp_path):
    """R5-5: C7, its graded prediction, the troubleshooting rows and the duplex verdict read from the reference's
    saved runs say so in their ``where``, and the grade says whose runs answered; a run made here keeps its label."""
    laptop = dataclasses.replace(doctor.reference_facts(), torch="2.13.0+cpu", torch_cuda=None, nccl=None)
    graded = lab.grade_c7("c", ab)
    assert lab.claim_c7(ab).where == graded.where == SAVED_AB
    assert {v.where for v in environment.troubleshooting_from_runs(laptop, ab)} == {SAVED_AB, "primary source"}
    assert "The reference's saved runs say (c)" in graded.text and "The run says" not in graded.text
    duplex = bandwidth.duplex_verdict(reference_run("sendrecv"))
    assert duplex.where.endswith("(reference/h200x2/runs/sendrecv_bench-20261130-014839-652f0b), not this machine")
    here = [dataclasses.replace(run, result=dataclasses.replace(run.result, run_dir=tmp_path)) for run in ab]
    assert lab.grade_c7("c", here).where == here[0].result.label and "The run says (c)" in lab.grade_c7("c", here).text
    assert lab.claim_c7(here).where == here[0].result.label
    assert "The reference's saved runs say (c)" in lab.grade_c7("c", [run_cpu(ab[0])] + list(ab[1:])).text


def run_cpu(run):
    """``run`` as if it ran on the CPU here (an installed package's A/B)."""
    env = dataclasses.replace(run.result.env, backend="gloo")
    return dataclasses.replace(run, result=dataclasses.replace(run.result, env=env, run_dir=Path("here")))
