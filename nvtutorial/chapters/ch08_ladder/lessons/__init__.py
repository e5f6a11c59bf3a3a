"""Notebook 08's lesson: one model trained up the strategy ladder, from DDP to tensor parallelism."""
