"""The run's store, as torchrun's agent holds it: a ``TCPStore`` server the ranks join as clients.

A warm run (:mod:`nvtutorial.launch.runner`) forks this from the warm interpreter before its ranks
(``python -c "from nvtutorial.launch._store import main; main()"``): it serves on a free port,
writes the port to descriptor 3, and lives until descriptor 0 (a pipe the launcher holds) closes,
that is until the run ends or the launcher dies. The ranks then get exactly what torchrun gives
its workers: ``MASTER_ADDR``/``MASTER_PORT`` naming this store and
``TORCHELASTIC_USE_AGENT_STORE=True``, so ``init_process_group`` connects to it instead of
starting a store on rank 0.
"""

from __future__ import annotations

# torch.distributed re-exports its documented TCPStore without __all__, which pyright reads as private:
# pyright: reportPrivateImportUsage=false
import datetime
import os

PORT_FD = 3


def main() -> None:
    import torch.distributed as dist

    world_size = int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(
        "localhost", 0, world_size, True, timeout=datetime.timedelta(seconds=900), wait_for_workers=False
    )
    os.write(PORT_FD, f"{store.port}\n".encode())
    os.close(PORT_FD)
    while True:  # until the launcher closes its end of the lifeline (or dies)
        try:
            if not os.read(0, 1):
                break
        except InterruptedError:
            continue
    os._exit(0)
