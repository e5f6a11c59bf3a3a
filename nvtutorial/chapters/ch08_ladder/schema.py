"""What both sides of chapter 08 name alike (torch-free): each rung's label, as the progress bars, tables and figures
show it."""

from __future__ import annotations

LABELS = {
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "fsdp_zero2": "FSDP2, no reshard (ZeRO-2-like)",
    "fsdp_zero3": "FSDP2 (ZeRO-3)",
    "fsdp_checkpointing": "ZeRO-3 + act. checkpointing",
    "fsdp_offload": "ZeRO-3 + ckpt + CPU offload",
    "tensor_parallel": "tensor parallel",
}
