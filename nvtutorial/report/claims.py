"""The source tutorial's 23 claims (C1–C23): its words, the course's verdict, the evidence, and where it is shown.

This is the one registry of the audit. Each entry names the function that decides the claim
(``decided_by``, a ``module:function`` returning a :class:`~nvtutorial.report.verdict.Verdict`)
and the verdict the course reached (``status``); the tests recompute every decision, on the CPU
where the claim can be settled there and from the committed GPU result JSON where it cannot, and
fail when a decision no longer gives the registered status. Notebook 00, the README and the
course website show :func:`markdown_table`.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nvtutorial.report.verdict import CLAIM_STATUSES, Verdict

EVIDENCE = ("2× H200 run", "CPU run", "primary source", "vendor data", "pending a 2× H200 run")
"""How a claim is settled: a run on the reference GPUs, a run that holds on the CPU too (gloo),
a primary source (PyTorch's or NCCL's code and documentation), or vendors' published figures; or
not yet: the status is the expected one until the named GPU run backs it."""


@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    part: int
    """The source's part (1 hardware, 2 environment, 3 DDP code, 4 monitoring, 5 pitfalls, 6 collectives)."""
    source: str
    """What the source says, in English."""
    finding: str
    """What is true, in one or two sentences, as the course shows it."""
    status: str
    """The course's verdict on the claim: holds, partly, wrong or unverifiable."""
    evidence: str
    notebook: str
    decided_by: str = ""
    """``module:function`` that returns this claim's Verdict from the evidence."""

    def __post_init__(self) -> None:
        if self.status not in CLAIM_STATUSES:
            raise ValueError(f"{self.id}: status {self.status!r} is not one of {', '.join(CLAIM_STATUSES)}")
        if self.evidence not in EVIDENCE:
            raise ValueError(f"{self.id}: evidence {self.evidence!r} is not one of {', '.join(EVIDENCE)}")

    def decider(self) -> Callable[..., Any]:
        """The function named by ``decided_by``."""
        if not self.decided_by:
            raise LookupError(f"{self.id} names no function that decides it")
        module, _, name = self.decided_by.partition(":")
        return getattr(importlib.import_module(module), name)


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "C1",
        3,
        "A week of training on one GPU became 58 hours on two GPUs with NVLink.",
        "A 2.9× speed-up from a second GPU is more than linear: two GPUs can at most double the work done per "
        "second, so something else changed too (batch size, data pipeline). At a fixed per-GPU batch the course's UNet "
        "trained 1.96× as many samples per second on 2 H200s as on one (the earlier `train` workload, against a "
        "separate 1-GPU launch; the current ddp_train.py has not yet run on the reference).",
        "wrong",
        "2× H200 run",
        "03_ddp_training",
        "nvtutorial.chapters.ch03_ddp_training.report:verdict_c1",
    ),
    Claim(
        "C2",
        1,
        "RTX 3090/4090, Tesla V100/A100 and Quadro RTX 8000 support NVLink.",
        "All of them but the RTX 4090, which has no NVLink connector; the RTX 3090 has a 4-link bridge; a V100 has "
        "NVLink only in its SXM form (the V100 PCIe card has none), an A100 in its SXM form or as a PCIe card with "
        "bridges.",
        "partly",
        "vendor data",
        "01_hardware",
        "nvtutorial.chapters.ch01_hardware.report_links:claim_c2",
    ),
    Claim(
        "C3",
        1,
        "`nvidia-smi topo -m` shows NVLink between the GPUs (NV#) rather than PCIe.",
        "True: `NV18` between the two H200s of the reference machine, parsed from the real output (on that HGX "
        "board the 18 links run through NVSwitches; topo -m does not say so).",
        "holds",
        "2× H200 run",
        "01_hardware",
        "nvtutorial.chapters.ch01_hardware.report_links:claim_c3",
    ),
    Claim(
        "C4",
        1,
        "Driver 515 with CUDA 11.7 is the most stable combination.",
        "Dated advice: what matters is a driver at least as new as the CUDA runtime torch was built with; "
        "no torch build the course supports (2.11–2.15) runs on driver 515 without NVIDIA's CUDA "
        "forward-compatibility package (`cuda-compat`, for data-centre GPUs on the driver branches NVIDIA lists).",
        "wrong",
        "primary source",
        "02_environment",
        "nvtutorial.chapters.ch02_environment.report:claim_c4",
    ),
    Claim(
        "C5",
        1,
        "Consumer NVLink has 1/4 of the professional bandwidth, yet is still 3–5× faster than PCIe.",
        "RTX 3090 NVLink carries about 56 GB/s per direction against about 32 GB/s for PCIe 4.0 x16: "
        "about 1.8×, not 3–5×. The 1/4 depends on which professional card is meant: 0.19 of an A100's NVLink, "
        "0.375 of a V100 SXM2's, 1.1× a Quadro RTX 8000's.",
        "wrong",
        "vendor data",
        "01_hardware",
        "nvtutorial.chapters.ch01_hardware.report_links:claim_c5",
    ),
    Claim(
        "C6",
        2,
        "The cu117 wheel index gives 12 % more speed on AWS p4d.",
        "Not checkable (no setup is given, and no torch the course supports, 2.11–2.15, is built for CUDA 11.7); "
        "today's wheels bundle their own NCCL, and the course reports which one torch ships.",
        "unverifiable",
        "primary source",
        "02_environment",
        "nvtutorial.chapters.ch02_environment.report:claim_c6",
    ),
    Claim(
        "C7",
        2,
        "`NCCL_NET_GDR_LEVEL=3` and `NCCL_IB_DISABLE=1` help.",
        "They only concern NCCL's network transport; between two GPUs of one machine busbw is unchanged within "
        "the noise. NCCL reads NCCL_NET_GDR_LEVEL only for a NIC that supports GPUDirect RDMA: on the reference "
        "(Socket only) it was never read. NCCL_IB_DISABLE=1 turns off NCCL's own InfiniBand/RoCE transport; "
        "unless a network plugin is installed (e.g. AWS EFA's aws-ofi-nccl), only sockets then remain between "
        "nodes.",
        "wrong",
        "2× H200 run",
        "02_environment",
        "nvtutorial.chapters.ch01_hardware.report_lab:claim_c7",
    ),
    Claim(
        "C8",
        3,
        "`torch.cuda.set_enabled_lms(True)` enables a low-memory mode.",
        "No such function exists in PyTorch (it belonged to IBM's PowerAI fork): calling it raises AttributeError.",
        "wrong",
        "CPU run",
        "04_optimisations",
        "nvtutorial.chapters.ch04_optimisations.report:verdict_c8",
    ),
    Claim(
        "C9",
        3,
        "`torch.backends.cuda.enable_flash_sdp(True)` is an NVLink optimisation.",
        "It only selects a kernel for `scaled_dot_product_attention` on one device, is on by default, and the "
        "course's UNet makes no attention call (counted; UNets with attention layers, as in diffusion models, "
        "do). On the H200 the default attention kernel was cuDNN's, and the same cuDNN kernel ran with flash "
        "switched off (6.86 against 6.87 ms, medians of 10 repeats, their spread not kept).",
        "wrong",
        "2× H200 run",
        "04_optimisations",
        "nvtutorial.chapters.ch04_optimisations.report:verdict_c9",
    ),
    Claim(
        "C10",
        3,
        "`gradient_as_bucket_view=True` is gradient compression.",
        "It makes `.grad` views into DDP's communication buckets: the bytes all-reduced are the same (counted on "
        "the CPU run), "
        "and each GPU holds one gradient copy less before the optimizer step (0.130 GB on each H200); the peak, "
        "earlier in backward, does not change.",
        "wrong",
        "2× H200 run",
        "04_optimisations",
        "nvtutorial.chapters.ch04_optimisations.report:verdict_c10",
    ),
    Claim(
        "C11",
        3,
        "Mixed precision with `GradScaler` and fp16 autocast speeds training up.",
        "True as a speed-up, but not an NVLink trick, where the source files it: under autocast DDP still "
        "all-reduces fp32 gradients, so nothing it sends gets smaller. For this UNet on the 2× H200 reference, "
        "fp16 with a scaler cut the step time by 16 % and bf16 by 19 % (1.19× and 1.24× as fast) against fp32 with "
        "TF32 convolutions (PyTorch's default; strict fp32 would be slower still), with the same losses; one model "
        "on one GPU type: measure yours. bf16 needs no scaler, and the source's "
        '`torch.cuda.amp.GradScaler()` is the deprecated spelling of `torch.amp.GradScaler("cuda")`.',
        "partly",
        "2× H200 run",
        "04_optimisations",
        "nvtutorial.chapters.ch04_optimisations.report:verdict_c11",
    ),
    Claim(
        "C12",
        4,
        "NVTX ranges and Nsight Systems show where the time of a step goes.",
        "They show each rank's phases and kernels (`torch.profiler` does too, without nsys), but the "
        "communication a rank's trace shows includes waiting for the other rank: on the earlier reference run an "
        "estimated 92 % of rank 0's NCCL time was waiting (7.0 ms per step, 3.24 ms of it exposed; rank 1: "
        "0.56 ms), estimated as the least communication of any rank, not paired on one clock, and Nsight Systems "
        "has not run on the reference. Settled by notebook 05 at the lesson sizes on 2× H200 with `nsys` on PATH "
        "(`scripts/reference-run.sh build/reference 05_`): both ranks' traces paired on one clock, and nsys's "
        "split of the same run.",
        "partly",
        "pending a 2× H200 run",
        "05_profiling",
        decided_by="nvtutorial.chapters.ch05_profiling.report_traces:verdict_c12",
    ),
    Claim(
        "C13",
        4,
        '`nvidia-smi dmon -s u` monitors the run (listed under "bandwidth utilisation").',
        "It prints utilisation (the share of time a kernel ran, memory and codec activity), once a second, "
        "not NVLink traffic: during the reference run's all-reduce probe, which only moved data, sm read "
        "98–100 %; NVML's NVLink counters counted the probe's bytes (472 GiB per GPU) that dmon cannot show.",
        "wrong",
        "2× H200 run",
        "05_profiling",
        decided_by="nvtutorial.chapters.ch05_profiling.report_monitoring:verdict_c13",
    ),
    Claim(
        "C14",
        4,
        "ResNet-50 on ImageNet: 1 GPU 58 min per epoch; 2 GPUs over PCIe 34 min (18 % communication); "
        "over NVLink 29 min (9 %).",
        "Its shape depends on the model: for the course's DDP UNet on 2× H200 (the earlier `train` workload; "
        "ddp_train.py has not yet run on the reference) the gradient all-reduce hid under the backward pass, so "
        "NVLink and host-staged transfers gave the same step time within the noise; only sockets were slower "
        "(1.7×). The source's own model, ResNet-50 (bf16, synthetic data) on the same machine, took 3.4 % longer "
        "host-staged than over NVLink (one measurement each), not 17 %. The table adds up only if its "
        "communication was entirely hidden: 58 → 29 min is exactly 2.0× while 9 % of the time is called communication.",
        "partly",
        "2× H200 run",
        "03_ddp_training",
        "nvtutorial.chapters.ch03_ddp_training.report:verdict_c14",
    ),
    Claim(
        "C15",
        4,
        "Memory per GPU halves with two GPUs (24 GB → 13 GB each).",
        "Only when the per-GPU batch halves (a fixed global batch), and then to 0.53, not 0.5 (the UNet under the "
        "earlier `train` workload on 2× H200): weights, gradients and optimizer state stay whole on every GPU. "
        "With a fixed per-GPU batch it stays the same.",
        "partly",
        "2× H200 run",
        "03_ddp_training",
        "nvtutorial.chapters.ch03_ddp_training.report:verdict_c15",
    ),
    Claim(
        "C16",
        4,
        "Above 15 % communication, compress gradients or raise the batch size.",
        "A heuristic whose input must be the time on the wire: a larger batch does hide more of it, but on the "
        "earlier reference runs only the profiler's share, one rank waiting for the other in a launch-bound step, "
        "passed 15 % (24 % over NVLink at batch 2); the time on the wire stayed under 2 % of the step over NVLink "
        "and reached 14.1 % staged through host memory, in one profiled run without repeats: at the threshold. "
        "Settled by notebook 05's batch sweep with repeats (batches 2, 8, 32, three rounds each, over NVLink and "
        "host-staged) at the lesson sizes on 2× H200 (`scripts/reference-run.sh build/reference 05_`).",
        "partly",
        "pending a 2× H200 run",
        "05_profiling",
        decided_by="nvtutorial.chapters.ch05_profiling.report:verdict_c16",
    ),
    Claim(
        "C17",
        5,
        "Use `num_workers = 4 × GPUs` and `pin_memory=True`.",
        "A starting point, not a law: how many workers the training loop needs, and whether pinned memory "
        "shows at all, depend on the data pipeline, the step and the cores; measure the loop's steady rate. "
        "Not yet measured on GPUs: the 2× H200 reference predates today's loader sweep, and a CPU run cannot "
        "settle it. Settled by notebook 06 at the lesson sizes on 2× H200 (`scripts/reference-run.sh "
        "build/reference 06_`: 0–16 workers per rank, pinned and not, three windows each, on both ranks; the "
        "rule read both ways: 4 × 2 GPUs = 8 for each rank's DataLoader, and 4 per GPU process); on one GPU, "
        "notebook 06 measures one training process there (both readings: 4 workers).",
        "partly",
        "pending a 2× H200 run",
        "06_pitfalls",
        decided_by="nvtutorial.chapters.ch06_pitfalls.report_measured:verdict_c17",
    ),
    Claim(
        "C18",
        5,
        "Validating on rank 0 alone breaks the parallelism; every rank validates and `all_reduce`s the loss.",
        "While rank 0 validates alone the other ranks wait in their next collective (DDP's gradient "
        "all-reduce), and past the process group's timeout the job dies; the all-reduce must "
        "sum losses and counts (DistributedSampler pads with duplicates), then divide. Notebook 06 runs the "
        "hang and its fix; notebook 03 shows that the source's all_reduce, which never divides, gives "
        "world-size times the loss.",
        "partly",
        "CPU run",
        "06_pitfalls",
        "nvtutorial.chapters.ch06_pitfalls.report:verdict_c18",
    ),
    Claim(
        "C19",
        5,
        "`torch.cuda.empty_cache()` helps against out-of-memory errors.",
        "It returns cached, unused blocks to the driver; it frees nothing that is still referenced, and "
        "PyTorch reuses its cache anyway.",
        "wrong",
        "2× H200 run",
        "06_pitfalls",
        decided_by="nvtutorial.chapters.ch06_pitfalls.report_measured:verdict_c19",
    ),
    Claim(
        "C20",
        5,
        "Use `max_split_size_mb` against fragmentation.",
        "It works: in the fragmentation case on the 2× H200 reference the default allocator ran out of memory and "
        "`max_split_size_mb:256` (an option of `PYTORCH_CUDA_ALLOC_CONF`, set before the first CUDA allocation) "
        "made it fit; `expandable_segments:True`, the modern alternative, fixed it too.",
        "holds",
        "2× H200 run",
        "06_pitfalls",
        decided_by="nvtutorial.chapters.ch06_pitfalls.report_measured:verdict_c20",
    ),
    Claim(
        "C21",
        5,
        "Set the same random seed on every rank.",
        "DDP already broadcasts rank 0's weights when it wraps the model; with one seed every rank draws the "
        "same augmentation (and dropout) numbers: seed each rank with seed + rank.",
        "partly",
        "CPU run",
        "06_pitfalls",
        decided_by="nvtutorial.chapters.ch06_pitfalls.report:verdict_c21",
    ),
    Claim(
        "C22",
        6,
        "This `sparse_allreduce` (non-zero entries exchanged with `all_gather`) works.",
        "It does not: `nonzero()` returns an index matrix, `all_gather` needs equal sizes on every rank, and "
        "the ranks' non-zero positions differ; it is right only when every rank has the same non-zero positions.",
        "wrong",
        "CPU run",
        "07_custom_collectives",
        "nvtutorial.chapters.ch07_collectives.report:source_verdict",
    ),
    Claim(
        "C23",
        6,
        "Sparse gradient exchange cuts communication by 85 % in segmentation.",
        "The UNet's gradients are about two-thirds non-zero: sending only the non-zeros moves 1.35× (int32 index "
        "+ value) to 6.1× (one int64 coordinate per dimension with each value, as a correct version of the "
        "source's approach would need) the dense bytes. Sparsity must be made (top-k), and then needs "
        "error feedback.",
        "wrong",
        "2× H200 run",
        "07_custom_collectives",
        "nvtutorial.chapters.ch07_collectives.report_compression:density_verdict",
    ),
)

BY_ID = {c.id: c for c in CLAIMS}


def claim(claim_id: str) -> Claim:
    try:
        return BY_ID[claim_id]
    except KeyError:
        raise KeyError(f"unknown claim {claim_id!r}: the source's claims are C1–C{len(CLAIMS)}") from None


def markdown_table(link: Callable[[Claim], str] | None = None) -> str:
    """The 23 claims as a markdown table; ``link(claim)`` may turn the notebook name into a link."""
    rows = [
        "| # | the source says | verdict | what is true | evidence | shown in |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in CLAIMS:
        where = link(c) if link else f"`{c.notebook}`"
        rows.append(f"| {c.id} | {_cell(c.source)} | **{c.status}** | {_cell(c.finding)} | {c.evidence} | {where} |")
    return "\n".join(rows)


def frame():  # -> pandas.DataFrame
    """The registry as a DataFrame (notebook 00)."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "claim": c.id,
                "the source says": c.source,
                "verdict": c.status,
                "what is true": c.finding,
                "evidence": c.evidence,
                "notebook": c.notebook,
            }
            for c in CLAIMS
        ]
    ).set_index("claim")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


LESSON_FAILS: Mapping[tuple[str, str], str] = {}
"""Checks whose ``fail`` is what a notebook teaches, ``(notebook, verdict key) → why``; none so far. Any other
verdict with status ``fail`` in an executed notebook makes it a failed notebook (``make course``, the tests)."""


def failed_checks(notebook: str, verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts of an executed notebook (``notebook``: its name, with or without ``.ipynb``) that failed
    where failing is not the lesson (:data:`LESSON_FAILS`)."""
    name = notebook.removesuffix(".ipynb")
    return [v for v in verdicts if v.status == "fail" and (name, v.key) not in LESSON_FAILS]


def decider_calls(sources: Mapping[str, str]) -> dict[str, list[str]]:
    """Where test code calls each claim's decider: claim id → ``["file:line", ...]`` (``sources``: file → text).

    A call counts when the decider itself is called, through the module it lives in
    (``from nvtutorial.chapters.ch03_ddp_training import report`` ... ``report.verdict_c1(...)``;
    ``import nvtutorial.chapters.ch03_ddp_training.report`` ...
    ``nvtutorial.chapters.ch03_ddp_training.report.verdict_c1(...)``), by its imported name
    (``from nvtutorial.chapters.ch03_ddp_training.report import verdict_c1`` ... ``verdict_c1(...)``) or through the
    registry with the claim's id written out (``claims.claim("C1").decider()(...)``). A name in a comment or a string,
    a function of the same name in another module, or ``claim.decider()`` not called, does not count.
    """
    wanted: dict[tuple[str, str], list[str]] = {}
    for c in CLAIMS:
        if c.decided_by:
            module, _, name = c.decided_by.partition(":")
            wanted.setdefault((module, name), []).append(c.id)
    found: dict[str, list[str]] = {c.id: [] for c in CLAIMS}
    for path, text in sources.items():
        tree = ast.parse(text, filename=path)
        modules: dict[str, str] = {}  # local name -> module it names
        names: dict[str, tuple[str, str]] = {}  # local name -> (module, function) imported by name
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        modules[a.asname] = a.name
                    else:
                        modules.setdefault(a.name.split(".")[0], a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    modules[a.asname or a.name] = full
                    names[a.asname or a.name] = (node.module, a.name)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            ids: list[str] = []
            func = node.func
            if isinstance(func, ast.Name) and func.id in names:
                ids = wanted.get(names[func.id], [])
            elif isinstance(func, ast.Attribute):
                owner = _dotted(func.value, modules)
                ids = wanted.get((owner, func.attr), []) if owner else []
            elif isinstance(func, ast.Call) and isinstance(func.func, ast.Attribute) and func.func.attr == "decider":
                target = func.func.value  # claims.claim("C1") / claims.BY_ID["C1"] / claim("C1")
                literal = next(
                    (
                        n.value
                        for n in ast.walk(target)
                        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in BY_ID
                    ),
                    None,
                )
                ids = [literal] if literal else []
            for cid in ids:
                found[cid].append(f"{path}:{node.lineno}")
    return found


def _dotted(node: ast.expr, modules: Mapping[str, str]) -> str | None:
    """The module an expression such as ``report`` or ``nvtutorial.chapters.ch03_ddp_training.report`` names, if any."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in modules:
        return None
    return ".".join([modules[node.id], *reversed(parts)])


README_START = "<!-- claims-table: start (generated by `python -m nvtutorial.report.claims --readme`; do not edit) -->"
README_END = "<!-- claims-table: end -->"


def update_readme(path: str = "README.md") -> bool:
    """Write :func:`markdown_table` between the README's markers; True when the file changed."""
    from pathlib import Path

    readme = Path(path)
    text = readme.read_text()
    if README_START.split(" (")[0] not in text or README_END not in text:
        raise SystemExit(f"{path} has no claims-table markers ({README_START!r} ... {README_END!r})")
    head, rest = text.split(README_START.split(" (")[0], 1)
    _, tail = rest.split(README_END, 1)
    new = f"{head}{README_START}\n{markdown_table()}\n{README_END}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--readme"]:
        print("README.md updated" if update_readme() else "README.md already up to date")
    else:
        print(markdown_table())
