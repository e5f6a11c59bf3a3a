"""The machine, read from the notebook kernel without CUDA: NVML, topology, link limits,
NCCL's debug lines, the doctor, live telemetry."""
