"""The traps of notebook 06, each as a plain script with its broken and its fixed code side by side.

validation.py (rank-0-only validation, claim C18), collectives.py (mismatched collectives),
randomness.py (``set_epoch`` and seeds, claim C21), input_pipeline.py (DataLoader workers, claim
C17), memory.py (out-of-memory errors, claims C19 and C20). Each runs with ``torchrun`` as it is;
the notebook shows the two versions with ``teach.show_diff`` and runs them on real ranks.
"""
