"""nvtutorial.machine.nccl_debug: the transport read from NCCL's debug lines, the variables table."""

from __future__ import annotations

import dataclasses

from nvtutorial.machine import doctor, nccl_debug, topology
from tests.helpers.bandwidth_runs import FIX


def test_transport_from_the_reference_lines():
    lines = (FIX / "nccl-debug-transport-lines.txt").read_text().splitlines()
    p2p, shm, sock = (
        nccl_debug.parse_lines(lines[0:4]),
        nccl_debug.parse_lines(lines[4:6]),
        nccl_debug.parse_lines(lines[6:8]),
    )
    assert (p2p.transport, p2p.summary) == ("P2P", "P2P/direct pointer")
    assert (shm.transport, shm.summary) == ("SHM", "SHM/direct/direct")
    assert (sock.transport, sock.summary) == ("NET/Socket", "NET/Socket")
    assert "over NVLink" in p2p.describe("NV18") and "PCIe" in p2p.describe("PHB")
    everything = nccl_debug.parse_lines(lines)
    assert everything.version == "2.28.9+cuda13.0" and everything.transport == "P2P"
    assert nccl_debug.nccl_version_number(everything.version) == (2, 28, 9)


def test_transport_variants_and_logs(tmp_path):
    rank0 = tmp_path / "rank0.log"
    rank0.write_text(
        "h:1:2 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.\n"
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
        "h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    )
    (tmp_path / "rank1.log").write_text("h:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA\n")
    report = nccl_debug.read_logs({0: rank0, 1: tmp_path / "rank1.log", 2: tmp_path / "missing.log"})
    assert report.families == {"P2P": 2, "NET/IB": 1} and report.summary == "P2P/CUMEM/read"
    assert report.env_set == {"NCCL_P2P_DISABLE": "1"}
    assert "NET/IB" in report.describe()
    assert nccl_debug.parse_lines([], backend="gloo").summary == "gloo: no NCCL"
    assert nccl_debug.parse_lines([]).summary == "not reported"


def test_variables_table():
    rows = nccl_debug.variables_rows({"NCCL_IB_DISABLE": "1"})
    names = [r["variable"] for r in rows]
    for name in (
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_P2P_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_SOCKET_IFNAME",
        "NCCL_NVLS_ENABLE",
    ):
        assert name in names
    assert next(r for r in rows if r["variable"] == "NCCL_IB_DISABLE")["here"] == "1"
    assert nccl_debug.affects("NCCL_P2P_DISABLE", "P2P") and not nccl_debug.affects("NCCL_IB_DISABLE", "P2P")
    # N1 (review 2026-12-06): within a PCIe server NCCL may route a GPU pair through a NIC (ncclTopoCheckNet), so the
    # network variables are "none" only between GPUs joined by NVLink, and the table says how to forbid the route
    for name in ("NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL"):
        effect = next(r for r in rows if r["variable"] == name)["effect on one machine with NVLink"]
        assert effect.startswith("none between GPUs joined by NVLink") and "one machine's GPUs talk" not in effect
    assert (
        "NCCL_NET_DISABLE_INTRA=1"
        in next(r for r in rows if r["variable"] == "NCCL_IB_DISABLE")["effect on one machine with NVLink"]
    )


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
