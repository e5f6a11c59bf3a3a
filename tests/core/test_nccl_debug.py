"""nvtutorial.machine.nccl_debug: the transport read from NCCL's debug lines, the variables table."""

from __future__ import annotations

from nvtutorial.machine import nccl_debug
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
