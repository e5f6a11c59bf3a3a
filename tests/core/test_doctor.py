"""`nvtutorial doctor`: pure checks over simulated facts, exit codes, and a real collection here."""

from __future__ import annotations

import dataclasses
import json

import pytest

from nvtutorial import cli
from nvtutorial.chapters.ch02_environment import report as envreport
from nvtutorial.machine import doctor


@pytest.fixture
def healthy():
    return doctor.reference_facts()


def statuses(checks):
    return {c.name: c.status for c in checks}


def failing(checks):
    return [c for c in checks if c.status == "fail"]


def test_reference_machine_is_healthy(healthy):
    checks = doctor.run_checks(healthy)
    assert doctor.healthy(checks), [c for c in checks if c.status != "ok"]
    assert statuses(checks)["NCCL_NVLS_ENABLE=0"] == "ok"  # the course's GPU runs keep NVLS off


@pytest.mark.parametrize("label", sorted(doctor.BROKEN_SETUPS))
def test_every_broken_setup_fails_and_names_its_fix(label, healthy):
    changes = dict(doctor.BROKEN_SETUPS[label])
    checks = doctor.simulate(healthy, env=changes.pop("env", None), **changes)
    bad = failing(checks)
    assert bad, f"{label}: no check failed"
    assert all(c.fix for c in bad), f"{label}: a failing check without a fix"
    report = doctor.Report(dataclasses.replace(healthy, **changes), checks)
    assert report.exit_code == 1 and "fix:" in report.format()


def test_driver_older_than_runtime(healthy):
    major = doctor.check_driver_runtime(dataclasses.replace(healthy, driver_cuda="12.8", torch_cuda="13.0"))
    assert major.status == "fail" and "older" in major.detail and "cu128" in major.fix
    minor = doctor.check_driver_runtime(dataclasses.replace(healthy, driver_cuda="12.4", torch_cuda="12.8"))
    assert minor.status == "warn" and "minor-version" in minor.detail
    newer = doctor.check_driver_runtime(dataclasses.replace(healthy, driver_cuda="13.1", torch_cuda="13.0"))
    assert newer.status == "ok"
    assert doctor.check_driver_runtime(dataclasses.replace(healthy, torch_cuda=None)).status == "ok"


def test_cpu_only_torch(healthy):
    cpu = {
        "torch": "2.13.0+cpu",
        "torch_cuda": None,
        "nccl": None,
        "nccl_available": False,
        "cudnn": None,
        "cuda_available": False,
    }
    on_gpu_machine = doctor.run_checks(dataclasses.replace(healthy, **cpu))
    assert [c.name for c in failing(on_gpu_machine)] == ["torch build"]
    laptop = dataclasses.replace(
        healthy, **cpu, driver=None, driver_cuda=None, gpus=(), gpus_total=0, nvlinks_01=0, p2p_01=None, nccl_env={}
    )
    checks = doctor.run_checks(laptop)
    assert doctor.healthy(checks) and statuses(checks)["GPUs"] == "warn"


def test_missing_torch_fails(healthy):
    checks = doctor.run_checks(
        dataclasses.replace(healthy, torch=None, torch_error="ModuleNotFoundError: No module named 'torch'")
    )
    assert [c.name for c in failing(checks)] == ["torch"]


def test_cuda_not_usable_although_gpus_are_there(healthy):
    check = doctor.check_cuda_usable(dataclasses.replace(healthy, cuda_available=False, cuda_warning="driver too old"))
    assert check.status == "fail" and check.detail == "driver too old"


@pytest.mark.parametrize(
    "env, nvlinks, name, status",
    [
        ({"NCCL_P2P_DISABLE": "1"}, 18, "NCCL_P2P_DISABLE=1", "fail"),
        ({"NCCL_P2P_DISABLE": "1"}, 0, "NCCL_P2P_DISABLE=1", "warn"),
        ({"NCCL_P2P_DISABLE": "0"}, 18, "NCCL_P2P_DISABLE=0", "ok"),
        ({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}, 0, "NCCL_P2P_DISABLE=1", "fail"),
        ({"NCCL_SHM_DISABLE": "1"}, 18, "NCCL_SHM_DISABLE=1", "ok"),
        ({"NCCL_P2P_LEVEL": "LOC"}, 18, "NCCL_P2P_LEVEL=LOC", "fail"),
        ({"NCCL_P2P_LEVEL": "NVL"}, 18, "NCCL_P2P_LEVEL=NVL", "ok"),
        ({"NCCL_IB_DISABLE": "1"}, 18, "NCCL_IB_DISABLE=1", "ok"),
        ({"NCCL_NET_GDR_LEVEL": "3"}, 18, "NCCL_NET_GDR_LEVEL=3", "ok"),
        ({"NCCL_DEBUG": "INFO"}, 18, "NCCL_DEBUG=INFO", "warn"),
        ({"NCCL_DEBUG": "WARN"}, 18, "NCCL_DEBUG=WARN", "ok"),
        ({"NCCL_ALGO": "Tree"}, 18, "NCCL_ALGO=Tree", "warn"),
        ({"NCCL_NVLS_ENABLE": "1"}, 18, "NCCL_NVLS_ENABLE=1", "ok"),  # allowed: NCCL >= 2.28.7 may use it for 2 GPUs
        ({"NCCL_VERSION": "2.28.3-1"}, 18, "NCCL_VERSION=2.28.3-1", "ok"),  # set on purpose by NVIDIA's images
        ({"NCCL_HOSTID": "node1"}, 18, "NCCL_HOSTID=node1", "warn"),  # read, undocumented: two GPUs would see two hosts
        ({"NCCL_P2P_DISABLED": "1"}, 18, "NCCL_P2P_DISABLED=1", "warn"),  # a typo NCCL would ignore
        ({"NCCL_ASYNC_ERROR_HANDLING": "1"}, 18, "NCCL_ASYNC_ERROR_HANDLING=1", "warn"),
        ({"NCCL_SOCKET_IFNAME": "eth"}, 18, "NCCL_SOCKET_IFNAME=eth", "ok"),
        ({"NCCL_SOCKET_IFNAME": "=eth"}, 18, "NCCL_SOCKET_IFNAME==eth", "fail"),
        ({"NCCL_SOCKET_IFNAME": "^docker,lo"}, 18, "NCCL_SOCKET_IFNAME=^docker,lo", "ok"),
    ],
)
def test_nccl_variables(env, nvlinks, name, status, healthy):
    facts = dataclasses.replace(healthy, nvlinks_01=nvlinks, nccl_env=env)
    assert statuses(doctor.run_checks(facts))[name] == status


def test_one_gpu_is_told_what_runs_on_it(healthy):
    """Review R1-9: a machine with one GPU runs the one-GPU parts on it; only the two-GPU lessons are simulated."""
    one = doctor.check_gpus(dataclasses.replace(healthy, gpus=("NVIDIA H100 80GB HBM3",)))
    assert (one.status, one.value) == ("warn", "1 visible") and "one-GPU parts run on this GPU" in one.detail
    assert "with fewer they run as CPU simulations" not in one.detail and "two-GPU lessons" in one.fix
    none = doctor.check_gpus(dataclasses.replace(healthy, gpus=()))
    assert none.value == "0 visible" and "with fewer they run as CPU simulations" in none.detail
    cpu_torch = doctor.check_gpus(dataclasses.replace(healthy, gpus=("NVIDIA H100 80GB HBM3",), torch_cuda=None))
    assert "one-GPU parts" not in cpu_torch.detail  # a CPU build of torch cannot use it (the torch build check fails)
    assert doctor.check_gpus(healthy) == doctor.Check("GPUs", "ok", "2× NVIDIA H200")


def test_link_and_visibility_warnings(healthy):
    pcie = statuses(doctor.run_checks(dataclasses.replace(healthy, nvlinks_01=0, p2p_01="not supported")))
    assert pcie["GPU 0–1 link"] == "warn" and pcie["P2P 0–1"] == "warn"
    hidden = doctor.check_visible_devices(dataclasses.replace(healthy, cuda_visible_devices="0", gpus=("NVIDIA H200",)))
    assert hidden.status == "warn" and "1 of 2" in hidden.value


def test_broken_setup_rows(healthy):
    rows = doctor.broken_setup_rows(healthy)
    assert len(rows) == len(doctor.BROKEN_SETUPS) and all(r["exit code"] == 1 for r in rows)
    p2p = next(r for r in rows if r["set-up"].startswith("NCCL_P2P_DISABLE"))
    assert "NV18" in p2p["what the doctor says"] and "unset NCCL_P2P_DISABLE" in p2p["fix"]


def test_wheel_indexes_exist_for_the_torch_they_are_suggested_for(healthy):
    """Finding 10: the doctor once suggested cu122 (no such index) and cu117 (no current torch)."""
    for release, cudas in doctor.TORCH_WHEEL_INDEXES.items():
        torch_version = f"{release[0]}.{release[1]}.0+cu130"
        for driver_cuda, want in [
            ("13.2", cudas[-1]),
            ("13.0", "13.0"),
            ("12.8", "12.8" if "12.8" in cudas else "12.6"),
            ("12.6", "12.6"),
            ("12.2", "12.6"),
        ]:
            found = doctor.wheel_index(driver_cuda, torch_version)
            assert found is not None, driver_cuda
            index, compat = found
            assert index == f"cu{want.replace('.', '')}" and index[2:] in {c.replace(".", "") for c in cudas}
            assert compat == (driver_cuda == "12.2")  # 12.6 on a 12.2 driver: minor-version compatibility
        assert doctor.wheel_index("11.7", torch_version) is None
    assert "upgrade the NVIDIA driver" in doctor.install_hint("11.7", "2.11.0+cu130")
    assert "minor-version" in doctor.install_hint("12.2", "2.11.0+cu130")
    for label, changes in doctor.BROKEN_SETUPS.items():
        changes = dict(changes)
        fixes = " ".join(c.fix for c in doctor.simulate(healthy, env=changes.pop("env", None), **changes))
        assert "cu122" not in fixes and "cu117" not in fixes, label
        for index in __import__("re").findall(r"whl/(cu\d+)", fixes):
            assert index[2:] in {c.replace(".", "") for c in doctor.TORCH_WHEEL_INDEXES[(2, 11)]}, (label, index)


def test_claims(healthy):
    c4 = envreport.claim_c4(healthy)
    assert (
        c4.key == "C4"
        and c4.status == "wrong"
        and c4.numbers == {"here": "ok", "driver_515": "fail", "torch_cuda": "13.0"}
    )
    c6 = envreport.claim_c6(healthy)
    assert c6.status == "unverifiable" and c6.numbers["nccl"] == "2.28.9"
    assert envreport.claim_minimums(healthy).status == "pass"
    cpu = dataclasses.replace(healthy, torch="2.13.0+cpu", torch_cuda=None, nccl=None)
    assert envreport.claim_minimums(cpu).status == "pass"
    assert envreport.claim_c4(cpu).numbers["torch_cuda"] == "13.0"  # judged with the reference machine's torch
    old = dataclasses.replace(healthy, torch="1.12.1+cu116", nccl="2.10.3")
    assert envreport.claim_minimums(old).status == "fail"


def test_troubleshooting_rows(healthy):
    gpu = envreport.troubleshooting(
        healthy, runtime_nccl="2.28.9+cuda13.0", is_gpu=True, p2p_ratio=11.9, topo_code="NV18"
    )
    assert [v.key for v in gpu] == [
        "troubleshooting: NCCL error",
        "troubleshooting: out of memory",
        "troubleshooting: no speed-up",
    ]
    assert [v.status for v in gpu] == ["partly", "partly", "partly"]
    assert gpu[2].numbers["p2p_ratio"] == 11.9
    # the variable a learner copies from the advice is spelled as NCCL reads it (names are case-sensitive)
    assert "NCCL_DEBUG=INFO" in gpu[0].text and "NCCL_DEBUG=INFO" in gpu[2].text
    other = envreport.troubleshooting(healthy, runtime_nccl="2.21.5", is_gpu=True, p2p_ratio=1.1, topo_code="PHB")
    assert other[0].status == "holds" and other[2].status == "info"  # another NCCL loaded; P2P off changed little
    cpu = envreport.troubleshooting(
        healthy, runtime_nccl=None, is_gpu=False, p2p_ratio=None, topo_code=None, reference_ratio=11.9
    )
    assert cpu[2].numbers["reference_ratio"] == 11.9 and cpu[2].numbers["p2p_ratio"] is None


def test_cli_exit_codes_follow_the_checks(monkeypatch, capsys, healthy):
    broken = dataclasses.replace(healthy, nccl_env={"NCCL_P2P_DISABLE": "1"})
    monkeypatch.setattr(doctor, "collect", lambda probe=True: broken)
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "fail  NCCL_P2P_DISABLE=1" in out and "unset NCCL_P2P_DISABLE" in out
    monkeypatch.setattr(doctor, "collect", lambda probe=True: healthy)
    assert cli.main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["healthy"] is True and data["facts"]["nvlinks_01"] == 18 and data["exit_code"] == 0


def test_collect_on_this_machine_without_initialising_cuda():
    import torch

    report = doctor.run()
    facts = report.facts
    assert facts.torch == torch.__version__ and facts.torch_cuda == torch.version.cuda
    assert facts.probe_error is None and facts.torch_error is None
    assert facts.nccl_env == {k: v for k, v in __import__("os").environ.items() if k.startswith("NCCL_")}
    assert not torch.cuda.is_initialized(), "the doctor created a CUDA context in the calling process"
    json.dumps(report.to_dict())  # pasteable into a bug report
    assert report.exit_code == (0 if report.healthy else 1)


def test_p2p_is_ok_when_nvml_cannot_read_one_capability():
    """On the reference VM NVML answers the read capability with an error but write and NVLink with OK."""
    assert (
        doctor._p2p_summary({"read": "no answer from NVML", "write": "OK", "nvlink": "OK", "atomics": "OK"})
        == "OK (write, nvlink, atomics)"
    )
    assert doctor._p2p_summary({"read": "not supported", "write": "not supported"}) == "not supported"
    assert doctor._p2p_summary(None) is None


def test_nccl_hostid_is_read_but_not_documented(healthy):
    """The doctor's list of documented variables does not hold NCCL_HOSTID (notebook 09: "an undocumented variable");
    it is still recognised as read by NCCL, a warning with two GPUs (NCCL then refuses P2P and SHM between ranks
    that differ in it), fine with one."""
    assert "NCCL_HOSTID" not in doctor.KNOWN_NCCL and "NCCL_HOSTID" in doctor.READ_UNDOCUMENTED
    one = dataclasses.replace(healthy, gpus=healthy.gpus[:1], nvlinks_01=0, nccl_env={"NCCL_HOSTID": "a"})
    check = next(c for c in doctor.run_checks(one) if c.name == "NCCL_HOSTID=a")
    assert check.status == "ok" and check.value == "read by NCCL, not documented"


def test_p2p_disable_names_the_measured_ratio(healthy):
    facts = dataclasses.replace(healthy, nccl_env={"NCCL_P2P_DISABLE": "1"})
    check = next(c for c in doctor.run_checks(facts) if c.name == "NCCL_P2P_DISABLE=1")
    assert check.status == "fail" and "10.9×" in check.detail and "12×" not in check.detail.replace("11.9×", "")
