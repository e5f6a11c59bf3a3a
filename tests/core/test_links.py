"""nvtutorial.machine.links: the physical limits, the card table, the expectations, the NVLink counters."""

from __future__ import annotations

import pytest

from nvtutorial import nvml as nvml_mod
from nvtutorial.machine import links


def test_physical_limits():
    assert links.nvlink_gbps(18, 4) == 450.0 and links.nvlink_gbps(4, per_link=14.0625) == 56.25
    assert links.pcie_gbps(4, 16) == pytest.approx(31.5, abs=0.01)
    assert links.pcie_gbps(5, 16) == pytest.approx(63.0, abs=0.02)
    assert links.pcie_gbps(3, 8) == pytest.approx(7.88, abs=0.01)
    with pytest.raises(ValueError):
        links.pcie_gbps(4, 3)
    with pytest.raises(ValueError):
        links.nvlink_gbps(4, 9)


def test_card_table_corrects_c2_and_c5():
    assert not links.card("GeForce RTX 4090").has_nvlink
    rtx3090 = links.card("GeForce RTX 3090")
    assert rtx3090.nvlink_gbps == pytest.approx(56.25) and rtx3090.ratio == pytest.approx(1.79, abs=0.01)
    frame = links.card_frame()
    assert frame.loc["H200 SXM", "NVLink GB/s per direction"] == 450
    assert frame.loc["GeForce RTX 4090", "NVLink"] == "no"


@pytest.mark.parametrize(
    "nvml_name, card",
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
        ("Tesla V100-PCIE-32GB", "Tesla V100 PCIe"),
        ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("NVIDIA H100 NVL", None),
        ("Some Other GPU", None),
    ],
)
def test_card_matching(nvml_name, card):
    found = links.find_card(nvml_name)
    assert (found.name if found else None) == card


def test_expectations():
    nv = links.expect("NV18", "NVIDIA H200")
    assert nv.physical_gbps == 450.0 and nv.practical_gbps[0] < 347.7 < nv.practical_gbps[1]
    assert "77%" in nv.describe() and "typically" not in nv.describe()  # the measured share, not a rule of thumb
    assert "for this pair" in nv.describe() and "GB/s here" not in nv.describe()  # R1-18.6: the pair, maybe not here
    assert "no measured share" in links.expect("PHB", "NVIDIA GeForce RTX 4090").describe()
    for gpus, word in ((1, "1 GPU"), (0, "0 GPUs")):  # R5-6: the reference's saved pair: its measurement, no estimate
        saved = nv.describe(gpus)
        assert saved.endswith(
            f"the reference 2× H200's pair, from its saved outputs (this machine has {word}): nccl-tests' all-reduce "
            "measured 347.7 GB/s there at 4 GiB, 77% of the limit"
        )
        assert "for this pair" not in saved and "would be" not in saved
    assert links.expect("NV4", "NVIDIA GeForce RTX 3090").physical_gbps == pytest.approx(56.25)
    assert links.expect("NV12", nvlink_generation=3).physical_gbps == 300.0
    pcie = links.expect("PHB", "NVIDIA GeForce RTX 4090")
    assert pcie.physical_gbps == pytest.approx(31.5, abs=0.01) and "PHB" in pcie.link


def test_counters_are_read_per_active_link():
    from tests.helpers.fake_nvml import FakeNVMLError, fake_nvml

    nvml = fake_nvml(
        links=4, counters={(0, 138, k): 100 + k for k in range(4)} | {(0, 139, k): 200 + k for k in range(4)}
    )
    links = nvml_mod.active_nvlinks(nvml, 0)
    assert links == [0, 1, 2, 3]
    assert nvml_mod.nvlink_counters(nvml, 0, links) == {k: (100 + k, 200 + k) for k in range(4)}
    del nvml.counters[(0, 139, 3)]  # a link whose RX counter NVML cannot read is left out
    assert sorted(nvml_mod.nvlink_counters(nvml, 0, links)) == [0, 1, 2]
    batch = nvml.nvmlDeviceGetFieldValues

    def refuse_batches(h, fields):
        if len(fields) > 1:
            raise FakeNVMLError("not supported")
        return batch(h, fields)

    nvml.nvmlDeviceGetFieldValues = refuse_batches  # pyright: ignore[reportAttributeAccessIssue]  # the fake pynvml module
    assert sorted(nvml_mod.nvlink_counters(nvml, 0, links)) == [0, 1, 2]
