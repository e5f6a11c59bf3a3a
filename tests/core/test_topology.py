"""`nvidia-smi topo -m` parsing, the verdicts, `nvtutorial topology`, and the saved-output inventory."""

from __future__ import annotations

import json
import sys

import pytest

from nvtutorial import cli
from nvtutorial import nvml as nvml_mod
from nvtutorial.chapters.ch01_hardware import report_links as linkreport
from nvtutorial.machine import hardware, topology
from tests.helpers.fake_nvml import fake_nvml
from tests.helpers.paths import FIXTURES

H200 = hardware.REFERENCE_DATA / "nvidia-smi-topo-m.txt"
TOPO = FIXTURES / "topo"

# What each fixture must be classified as: GPUs, NICs, and some pairs' codes and kinds.
EXPECTED = {
    H200: {
        "gpus": 2,
        "nics": 0,
        "summary": "every GPU pair is joined by 18",
        "pairs": {("GPU0", "GPU1"): ("NV18", "nvlink", 18)},
    },
    TOPO / "pcie-2gpu-phb-ansi.txt": {
        "gpus": 2,
        "nics": 0,
        "summary": "no NVLink",
        "pairs": {("GPU0", "GPU1"): ("PHB", "pcie", 0)},
    },
    TOPO / "pcie-4gpu-nics.txt": {
        "gpus": 4,
        "nics": 2,
        "summary": "no NVLink",
        "pairs": {
            ("GPU0", "GPU1"): ("PIX", "pcie", 0),
            ("GPU2", "GPU3"): ("PXB", "pcie", 0),
            ("GPU0", "GPU2"): ("SYS", "pcie", 0),
            ("GPU1", "NIC0"): ("NODE", "pcie", 0),
        },
    },
    TOPO / "nvlink-4gpu-bridged-pairs.txt": {
        "gpus": 4,
        "nics": 0,
        "summary": "2 of 6 GPU pairs have NVLink",
        "pairs": {
            ("GPU0", "GPU1"): ("NV4", "nvlink", 4),
            ("GPU2", "GPU3"): ("NV4", "nvlink", 4),
            ("GPU1", "GPU2"): ("NODE", "pcie", 0),
        },
    },
    TOPO / "nvlink-8gpu-dgx-h100.txt": {
        "gpus": 8,
        "nics": 4,
        "summary": "every GPU pair is joined by 18",
        "pairs": {("GPU0", "GPU7"): ("NV18", "nvlink", 18), ("GPU3", "NIC1"): ("PXB", "pcie", 0)},
    },
    TOPO / "nvlink-8gpu-dgx1-v100-legacy.txt": {
        "gpus": 8,
        "nics": 4,
        "summary": "16 of 28 GPU pairs have NVLink",
        "pairs": {
            ("GPU0", "GPU3"): ("NV2", "nvlink", 2),
            ("GPU0", "GPU1"): ("NV1", "nvlink", 1),
            ("GPU0", "GPU5"): ("SYS", "pcie", 0),
        },
    },
}


def test_every_topology_fixture_is_listed():
    assert set(TOPO.glob("*.txt")) | {H200} == set(EXPECTED)


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: p.name)
def test_fixture_is_classified(path):
    topo = topology.read(path)
    want = EXPECTED[path]
    assert len(topo.gpus) == want["gpus"] and len(topo.nics) == want["nics"]
    for (a, b), (code, kind, links) in want["pairs"].items():
        link = topo.link(a, b)
        assert (link.code, link.kind, link.nvlinks) == (code, kind, links)
        assert topo.link(b, a).code == code
    assert want["summary"] in topo.summary()
    assert topo.asymmetries() == []
    for d in topo.devices:
        assert topo.link(d, d).kind == "self"
    assert len(topo.pair_rows()) == want["gpus"] * (want["gpus"] - 1) // 2
    text = json.dumps(topo.to_dict())
    assert "\x1b" not in text


def test_reference_machine_verdict_and_affinity():
    topo = topology.read(H200)
    (row,) = topo.pair_rows()
    assert row["pair"] == "GPU0–GPU1" and row["nvlinks"] == 18
    assert row["verdict"].startswith("18 bonded NVLinks")
    assert topo.affinity["GPU0"] == {"CPU Affinity": "0-31", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    assert topo.legend["NV#"] == "Connection traversing a bonded set of # NVLinks"


def test_nic_rows_and_legends():
    topo = topology.read(TOPO / "pcie-4gpu-nics.txt")
    assert topo.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert topo.affinity["NIC0"] == {}  # nvidia-smi prints no affinity for NICs
    assert topo.affinity["GPU2"]["NUMA Affinity"] == "1"
    legacy = topology.read(TOPO / "nvlink-8gpu-dgx1-v100-legacy.txt")
    assert legacy.nics == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]
    assert set(legacy.affinity["GPU4"]) == {"CPU Affinity"}
    old = topology.read(TOPO / "nvlink-4gpu-bridged-pairs.txt")
    assert set(old.affinity["GPU0"]) == {"CPU Affinity", "NUMA Affinity"}


def test_dgx1_every_v100_has_six_links():
    topo = topology.read(TOPO / "nvlink-8gpu-dgx1-v100-legacy.txt")
    for g in topo.gpus:
        assert sum(topo.link(g, other).nvlinks for other in topo.gpus) == 6, g


def test_colour_codes_are_stripped():
    raw = (TOPO / "pcie-2gpu-phb-ansi.txt").read_text()
    assert "\x1b[" in raw
    topo = topology.parse(raw)
    assert topo.devices == ("GPU0", "GPU1")


@pytest.mark.parametrize("path", sorted(EXPECTED), ids=lambda p: p.name)
def test_pasted_text_with_spaces_and_crlf_parses_the_same(path):
    raw = path.read_text()
    pasted = raw.replace("\t", "   ").replace("\n", "\r\n")
    a, b = topology.parse(raw), topology.parse(pasted)
    assert a.matrix == b.matrix and a.devices == b.devices
    assert {k: v for k, v in a.affinity.items() if v} == {k: v for k, v in b.affinity.items() if v}


def test_bad_input_is_named():
    with pytest.raises(topology.TopologyError, match="GPU0"):
        topology.parse("Sun Nov 29 22:53:19 2026\n| NVIDIA-SMI 580 |\n")
    with pytest.raises(topology.TopologyError, match="row GPU1 has 1 cells"):
        topology.parse("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\n")
    with pytest.raises(topology.TopologyError, match="unknown link code"):
        topology.parse("\tGPU0\tGPU1\nGPU0\t X \tQPX\nGPU1\tQPX\t X \n")
    with pytest.raises(topology.TopologyError, match="no row"):
        topology.parse("\tGPU0\tGPU1\nGPU0\t X \tNV4\n")


def test_link_verdicts_in_words():
    assert topology.Link("NV1").verdict.startswith("1 bonded NVLink between the pair")
    assert "NVSwitches" in topology.Link("NV18").verdict  # not "direct GPU-to-GPU": HGX boards switch them
    assert "host bridge" in topology.Link("PHB").verdict
    assert "between CPU sockets" in topology.Link("SYS").verdict
    assert topology.Link("PIX").kind == "pcie" and topology.Link("X").kind == "self"


def test_claim_c3():
    assert linkreport.claim_c3(topology.read(H200)).status == "holds"
    assert linkreport.claim_c3(topology.read(TOPO / "pcie-4gpu-nics.txt")).status == "unverifiable"


def test_cli_from_file(capsys):
    assert cli.main(["topology", "--from-file", str(H200)]) == 0
    out = capsys.readouterr().out
    assert "18 bonded NVLinks" in out and "NV18" in out
    assert cli.main(["topology", "--from-file", str(TOPO / "nvlink-8gpu-dgx-h100.txt"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["pairs"]) == 28 and {p["code"] for p in data["pairs"]} == {"NV18"}
    assert data["nics"]["NIC3"] == "mlx5_3"


def test_cli_errors(tmp_path, capsys, monkeypatch):
    assert cli.main(["topology", "--from-file", str(tmp_path / "missing.txt")]) == 2
    assert "no such file" in capsys.readouterr().err
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("not a topology\n")
    assert cli.main(["topology", "--from-file", str(garbage)]) == 1
    assert "cannot read" in capsys.readouterr().err
    monkeypatch.setattr(topology.shutil, "which", lambda name: None)
    assert cli.main(["topology"]) == 1
    err = capsys.readouterr().err
    assert "nvidia-smi" in err and "--from-file" in err


def test_current_or_reference_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(topology.shutil, "which", lambda name: None)
    topo, here = topology.current_or_reference()
    assert not here and "reference machine" in topo.source and topo.link(0, 1).code == "NV18"


# --- the inventory from saved outputs (simulation mode) --------------------------------------------


def test_parse_saved_nvidia_smi():
    driver, cuda, gpus = hardware.parse_nvidia_smi((hardware.REFERENCE_DATA / "nvidia-smi.txt").read_text())
    assert (driver, cuda) == ("580.159.04", "13.0")
    assert [(g.index, g.name, g.pci_bus_id, g.memory_mib) for g in gpus] == [
        (0, "NVIDIA H200", "00000000:00:06.0", 143771),
        (1, "NVIDIA H200", "00000000:00:07.0", 143771),
    ]


def test_reference_inventory():
    inv = hardware.reference_inventory()
    assert inv.simulated and "reference machine" in inv.source
    assert inv.links_between(0, 1) == 18 and inv.links_between(1, 0) == 18
    assert "18 active NVLinks through NVSwitch" in inv.describe()  # an HGX board, as NVML said there
    assert list(inv.to_frame()["nvlinks_active"]) == [18, 18] and inv.through_switch(0, 1)


def test_nvlink_status_parser():
    speeds = hardware.parse_nvlink_status((hardware.REFERENCE_DATA / "nvidia-smi-nvlink-s.txt").read_text())
    assert sorted(speeds) == [0, 1] and all(len(v) == 18 and set(v) == {26.562} for v in speeds.values())


def test_cuda_version_text():
    assert nvml_mod.cuda_version_text(13000) == "13.0" and nvml_mod.cuda_version_text(12040) == "12.4"
    assert nvml_mod.cuda_version_text(None) is None


def test_inventory_without_a_driver_is_empty():
    if hardware.gpu_count():
        pytest.skip("this machine has GPUs: the no-driver path is not reachable here")
    inv = nvml_mod.inventory()
    assert inv.gpus == () and inv.driver is None
    assert hardware.inventory_or_reference().simulated


# --- the NVML inventory, against a fake NVML (the real one needs a driver) --------------------------


def test_inventory_through_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(links=18))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inv = nvml_mod.inventory()
    assert not inv.simulated and inv.driver == "580.159.04" and inv.cuda_driver == "13.0"
    assert inv.links_between(0, 1) == 18 and inv.links_between(1, 0) == 18
    g = inv.gpus[0]
    assert (g.name, g.memory_mib, g.pcie_gen, g.pcie_width) == ("NVIDIA H200", 143771, 5, 16)
    assert {link.version for link in g.active_links} == {"4.0"} and {link.speed_mbps for link in g.active_links} == {
        26562
    }
    assert inv.p2p["0-1"] == {"read": "OK", "write": "OK", "nvlink": "OK", "atomics": "OK"}
    assert "18 active NVLinks (NVLink 4.0" in inv.describe()
    assert nvml_mod.link_label() == "NV18"


def test_nvlinks_through_nvswitch_count_like_topo(monkeypatch):
    """The reference VM: 2 H200s of an HGX board, 18 links each to NVSwitches, an old nvidia-ml-py."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(links=18, switched=True, old_pynvml=True))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inv = nvml_mod.inventory()
    assert all(link.remote_gpu is None for link in inv.gpus[0].active_links)
    assert inv.through_switch(0, 1) and inv.links_between(0, 1) == 18 and inv.links_between(1, 0) == 18
    assert "GPU 0–1: 18 active NVLinks through NVSwitch" in inv.describe()
    assert nvml_mod.link_label() == "NV18"


def test_switched_links_without_nvlink_p2p_are_not_counted(monkeypatch):
    nvml = fake_nvml(links=18, switched=True)
    nvml.nvmlDeviceGetP2PStatus = lambda a, b, index: 5  # pyright: ignore[reportAttributeAccessIssue]  # not supported: the pair does not reach each other
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_mod.inventory().links_between(0, 1) == 0
    assert nvml_mod.link_label() == "PCIe"


def test_inventory_of_a_pcie_pair(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(links=0))
    inv = nvml_mod.inventory()
    assert inv.links_between(0, 1) == 0 and inv.p2p["0-1"]["read"] == "not supported"
    assert "no active NVLink" in inv.describe()
    assert hardware.inventory_or_reference() == inv  # 2 GPUs here: no fallback
