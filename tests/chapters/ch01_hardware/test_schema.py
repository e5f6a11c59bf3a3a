"""Chapter 1's schemas: the committed layouts upgraded, the rows' samples old and new."""

from __future__ import annotations

import dataclasses

from nvtutorial.chapters.ch01_hardware import schema_allreduce, schema_p2p, schema_sendrecv
from nvtutorial.results import typed
from tests.helpers.hardware_runs import copy_row, sendrecv_row, sweep_row


def test_samples_of_old_and_new_rows():
    """compare() reads each repeat; rows saved before the repeats were kept give min, median, max (same spread)."""
    assert sweep_row(1024, 2.0, samples=(1.0, 2.0, 3.5)).samples() == (1.0, 2.0, 3.5)
    old = dataclasses.replace(sweep_row(1024, 100.0, spread=0.01), busbw_repeats=())
    assert old.samples() == (99.0, 100.0, 101.0)
    assert sendrecv_row(1024, "one way", 2.0, samples=(1.0, 3.0)).samples() == (1.0, 3.0)
    old_copy = copy_row("cuda:0 → cuda:1", "one way", 1024, 5.0, samples=(4.0, 6.0))
    assert dataclasses.replace(old_copy, gbps_repeats=()).samples() == (4.0, 5.0, 6.0) and old_copy.samples() == (
        4.0,
        6.0,
    )


def test_the_schemas_upgrade_the_committed_layouts():
    """Older layouts read typed: rows without every repeat, a wire count with only its case's fields, copies timed
    one way only without a mode, a skipped copy's row of Nones and a waiting rank's role."""
    row = {
        "size": 1024,
        "count": 256,
        "dtype": "float32",
        "iters": 20,
        "correct": True,
        "time_us": 38.3,
        "algbw": 0.027,
        "busbw": 0.027,
        "busbw_min": 0.026,
        "busbw_max": 0.029,
        "repeats": 5,
    }
    wire = {"size": 1024, "iters": 2, "expected_bytes_per_op": 1024.0, "available": True, "links_read": 18}
    old = {
        "rows": [row],
        "collective": "all_reduce",
        "world_size": 2,
        "dtype": "float32",
        "timer": "cuda events",
        "largest_size": 1024,
        "busbw_at_largest": 0.027,
        "wire": wire,
    }
    sweep = typed(schema_allreduce.Rank, old)
    assert sweep.rows[0].busbw_repeats == () and sweep.rows[0].samples() == (0.026, 0.027, 0.029)
    assert sweep.wire == schema_allreduce.Wire(1024, 2, 1024.0, True, reason=None, links_read=18)
    missing = typed(schema_allreduce.Rank, dict(old, wire={**wire, "available": False, "reason": "CPU run"}))
    assert missing.wire is not None and missing.wire.reason == "CPU run" and missing.wire.tx_ratio is None
    sent = {k: v for k, v in row.items() if k not in ("count", "correct")} | {"direction": "one way", "total_gbps": 1}
    pair = typed(
        schema_sendrecv.Rank,
        {**{k: old[k] for k in ("world_size", "dtype", "timer")}, "rows": [sent]} | {"collective": "sendrecv"},
    )
    assert pair.rows[0].busbw_repeats == () and pair.rows[0].samples() == (0.026, 0.027, 0.029)
    copied = {"path": "cuda:0 → cuda:1", "size": 1 << 20, "time_us": 21.3, "gbps": 49.2, "gbps_min": 48.4}
    copied |= {"gbps_max": 50.4, "iters": 10}
    gpu = typed(schema_p2p.Rank, {"mode": "gpu", "peer_access": {"0->1": True}, "devices": ["H200"], "rows": [copied]})
    assert gpu.rows[0].mode == "one way" and gpu.rows[0].gbps_repeats == () and gpu.rows[0].busy_share is None
    assert gpu.timer is None and gpu.note == "" and gpu.peer_access == {"0->1": True} and gpu.devices == ("H200",)
    skipped: dict[str, object] = {"mode": "skipped", "note": "needs 2 GPUs: this process sees 1"}
    skipped["rows"] = [{"path": "cuda:0 → cuda:1", "size": None, "gbps": None, "note": "skipped: needs 2 GPUs"}]
    assert typed(schema_p2p.Rank, skipped) == schema_p2p.Rank("skipped", note="needs 2 GPUs: this process sees 1")
    waits = typed(schema_p2p.Rank, {"role": "waits while rank 0 copies"})
    assert waits == schema_p2p.Rank("waits", note="waits while rank 0 copies")
