"""p2p_copy: device-to-device copy bandwidth, GPU 0 → GPU 1 and back (tensor.copy_, no NCCL).

Used in notebook 01. Run it with one process that sees both GPUs: rank 0 times ``dst.copy_(src)``
between ``cuda:src`` and ``cuda:dst`` with CUDA events on the source device's current stream
(where PyTorch issues a cross-device copy). With NVLink and peer access this is the copy engine
moving data over the link: the closest a program gets to the link's physical rate. Other ranks,
if any, only wait.

Without 2 GPUs it says so: on a CPU run it times a host ``memcpy`` between two buffers instead,
labelled as a simulation; on a machine with one GPU it returns a single "needs 2 GPUs" row.

    torchrun --standalone --nproc-per-node 1 -m nvtutorial.workloads.p2p_copy --set max_bytes=1073741824
    nvtutorial run p2p_copy --nproc 1
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from nvtutorial import runtime
from nvtutorial.params import require
from nvtutorial.units import size_sweep


@dataclasses.dataclass(frozen=True)
class Params:
    min_bytes: int = 1 << 20
    max_bytes: int = 1 << 30
    factor: int = 4
    sizes: tuple[int, ...] = ()
    src: int = 0
    dst: int = 1
    warmup: int = 2
    iters: int = 10
    repeats: int = 5
    target_s: float = 0.1

    def __post_init__(self) -> None:
        require(self.min_bytes >= 1 and self.max_bytes >= self.min_bytes, "need 1 <= min_bytes <= max_bytes")
        require(self.factor >= 2, f"factor={self.factor} must be at least 2")
        require(self.src >= 0 and self.dst >= 0 and self.src != self.dst, f"src={self.src} and dst={self.dst} must differ")
        require(self.warmup >= 1 and self.iters >= 1 and self.repeats >= 1, "warmup, iters and repeats must be >= 1")
        require(self.target_s > 0, f"target_s={self.target_s} must be positive")

    def size_list(self) -> list[int]:
        return sorted(set(self.sizes)) if self.sizes else size_sweep(self.min_bytes, self.max_bytes, self.factor)


def copy_rows(p: Params, src: Any, dst: Any, label: str, stream: Any = None) -> list[dict[str, Any]]:
    """Time ``dst[:n].copy_(src[:n])`` over the sizes; one row per size (GB/s = bytes / s / 1e9)."""
    rows = []
    for size in p.size_list():
        n = size  # uint8 buffers: one element per byte
        a, b = src[:n], dst[:n]

        def op(a: Any = a, b: Any = b) -> None:
            b.copy_(a)

        op()
        estimate = runtime.time_calls(op, p.warmup, stream=stream)
        iters = max(1, min(p.iters, int(p.target_s / max(estimate, 1e-9))))
        times = [runtime.time_calls(op, iters, stream=stream) for _ in range(p.repeats)]
        # compare on the host: the two buffers live on different devices
        if not (a[:16].cpu().equal(b[:16].cpu()) and a[-16:].cpu().equal(b[-16:].cpu())):
            raise AssertionError(f"{label}: the copy of {size} B does not match its source")
        med = statistics.median(times)
        rows.append({"path": label, "size": size, "time_us": med * 1e6, "gbps": size / med / 1e9,
                     "gbps_min": size / max(times) / 1e9, "gbps_max": size / min(times) / 1e9, "iters": iters})
    return rows


def run(ctx: runtime.Context, p: Params) -> dict:
    import torch

    sizes = p.size_list()
    if not ctx.is_main:
        return {"role": "waits while rank 0 copies"}
    if not ctx.is_gpu:
        a = torch.randint(0, 255, (max(sizes),), dtype=torch.uint8)
        b = torch.empty_like(a)
        rows = copy_rows(p, a, b, "host memcpy (simulation, not a GPU link)")
        return {"mode": "simulation", "rows": rows,
                "note": "CPU run: a copy between two host buffers stands in for the GPU-to-GPU copy"}
    count = torch.cuda.device_count()
    if max(p.src, p.dst) >= count:
        return {"mode": "skipped", "note": f"needs 2 GPUs: this process sees {count}",
                "rows": [{"path": f"cuda:{p.src} → cuda:{p.dst}", "size": None, "gbps": None,
                          "note": f"skipped: needs 2 GPUs, {count} visible"}]}
    devices = (torch.device("cuda", p.src), torch.device("cuda", p.dst))
    peer = {f"{a.index}->{b.index}": bool(torch.cuda.can_device_access_peer(a, b)) for a, b in (devices, devices[::-1])}
    bufs = {}
    for d in devices:
        with torch.cuda.device(d):
            bufs[d.index] = torch.randint(0, 255, (max(sizes),), dtype=torch.uint8, device=d)
    rows = []
    for a, b in (devices, devices[::-1]):
        with torch.cuda.device(a):  # PyTorch runs a cross-device copy on the source's current stream
            stream = torch.cuda.current_stream(a)
            rows += copy_rows(p, bufs[a.index], bufs[b.index], f"cuda:{a.index} → cuda:{b.index}", stream)
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
        ctx.progress(len(rows), 2 * len(sizes), "device-to-device copy")
    return {"mode": "gpu", "rows": rows, "peer_access": peer,
            "devices": [torch.cuda.get_device_name(d) for d in devices]}


if __name__ == "__main__":
    runtime.main(run, Params)
