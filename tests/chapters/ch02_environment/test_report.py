"""Chapter 2's report: C4 and C6 and the minimums on the reference's facts and a laptop's, the
troubleshooting rows from the reference's runs."""

from __future__ import annotations

import dataclasses

import pytest

from nvtutorial.chapters.ch02_environment import report as environment
from nvtutorial.machine import doctor


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


def test_troubleshooting_from_the_reference_runs_compares_the_runs_own_nccl(ab):
    """The runs' torch reported NCCL 2.28.9 and loaded 2.28.9+cuda13.0: the same library, whatever this machine has."""
    laptop = dataclasses.replace(doctor.reference_facts(), torch="2.13.0+cpu", torch_cuda=None, nccl=None)
    rows = environment.troubleshooting_from_runs(laptop, ab)
    assert rows[0].status == "partly" and rows[0].numbers == {"runtime_nccl": "2.28.9+cuda13.0", "torch_nccl": "2.28.9"}
    assert rows[2].numbers["p2p_ratio"] == pytest.approx(298.407 / 27.466, rel=1e-3)


def test_nccl_version_says_who_set_it_and_which_nccl_torch_loads():
    """RR12-7: the container image's NCCL_VERSION is not the NCCL torch loads; the doctor names both."""
    facts = dataclasses.replace(doctor.reference_facts(), nccl="2.28.9", nccl_available=True)
    check = doctor.check_nccl_variable("NCCL_VERSION", "2.28.3-1", facts)
    assert (check.name, check.status) == ("NCCL_VERSION=2.28.3-1", "ok")
    assert check.value == (
        "set by NVIDIA's CUDA container images to record the NCCL they installed; NCCL does not read it; "
        "torch loads NCCL 2.28.9"
    )
    cpu = doctor.check_nccl_variable("NCCL_VERSION", "2.28.3-1", dataclasses.replace(facts, nccl_available=False))
    assert cpu.status == "ok" and cpu.value.endswith("NCCL does not read it")
