"""Exercise (notebook 10): balance two pipeline stages by the cost model, not by counting blocks.

``lessons/pipeline.py`` gives each stage an equal number of blocks, but the last stage also runs the output head,
``2 · tokens · dim · vocab`` FLOPs per forward pass: with a large vocabulary it is the slower stage, and the
slowest stage sets a pipeline's pace (``model.pipeline_time``). The learner writes
``first_stage_blocks(layers, seq_len, dim, hidden, vocab)``, returning how many of the ``layers`` blocks the first
stage should hold so that the slower of the two stages is as fast as it can be (the first stage's embeddings are
lookups: no FLOPs). :func:`check_local` compares it with the reference on several shapes and says what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable

from nvtutorial.chapters.ch10_cost_model import model

NAME = "pipeline_balance"
"""The exercise's name (``teach.check.check("pipeline_balance", ...)``)."""
NOTEBOOK = "10_cost_model"
TASK = (
    "Write first_stage_blocks(layers, seq_len, dim, hidden, vocab): the blocks stage 0 of 2 should hold so that "
    "the slower stage's forward FLOPs are as few as they can be (stage 1 also runs the head)."
)
KIND = "function"
TOKENS = 4096
"""Tokens per micro-batch the cases are costed at (the answer does not depend on it)."""


def stage_flops(k: int, layers: int, seq_len: int, dim: int, hidden: int, vocab: int) -> tuple[float, float]:
    """Forward FLOPs of the two stages when stage 0 holds ``k`` blocks and stage 1 the rest and the head."""
    block = model.forward_flops(TOKENS, seq_len, dim, hidden, 1, 0)
    head = model.forward_flops(TOKENS, seq_len, dim, hidden, 0, vocab)
    return k * block, (layers - k) * block + head


def first_stage_blocks(layers: int, seq_len: int, dim: int, hidden: int, vocab: int) -> int:
    """The reference: try every split that leaves each stage a block, keep the one whose slower stage is fastest
    (the fewer blocks on stage 0 when two tie)."""
    return min(range(1, layers), key=lambda k: (max(stage_flops(k, layers, seq_len, dim, hidden, vocab)), k))


SOLUTION = first_stage_blocks


def _half(layers, seq_len, dim, hidden, vocab):
    return layers // 2


def _head_on_first(layers, seq_len, dim, hidden, vocab):
    block = model.forward_flops(TOKENS, seq_len, dim, hidden, 1, 0)
    head = model.forward_flops(TOKENS, seq_len, dim, hidden, 0, vocab)
    return min(range(1, layers), key=lambda k: max(k * block + head, (layers - k) * block))


def _all_but_one(layers, seq_len, dim, hidden, vocab):
    return layers - 1


WRONG = {
    "equal blocks": (_half, "head"),
    "the head on the wrong stage": (_head_on_first, "last stage"),
    "everything on the first stage": (_all_but_one, "slower"),
}
"""Known wrong answers and a word their reason must contain (tests run every one)."""

CASES = [
    (8, 512, 2048, 8192, 32768),
    (8, 512, 2048, 8192, 256),
    (4, 64, 256, 1024, 256),
    (16, 1024, 1024, 4096, 131072),
    (2, 128, 512, 2048, 50000),
    (12, 2048, 4096, 16384, 32768),
]
"""(layers, seq_len, dim, hidden, vocab): the lesson's model, a small vocabulary, the CI model, a large vocabulary
against a narrow model, two blocks only, a wide model."""


def check_local(candidate: Callable[..., int]) -> tuple[bool, str]:
    """Pass when ``candidate`` matches the reference on every case, else the first case it misses and why."""
    for case in CASES:
        layers = case[0]
        want = first_stage_blocks(*case)
        try:
            got = candidate(*case)
        except Exception as exc:  # noqa: BLE001 - the learner's code: say what it raised
            return False, f"first_stage_blocks{case} raised {type(exc).__name__}: {exc}"
        if isinstance(got, bool) or not isinstance(got, int):
            return False, f"first_stage_blocks{case} returned {got!r}: return a whole number of blocks"
        if not 1 <= got <= layers - 1:
            return (
                False,
                f"first_stage_blocks{case} returned {got}: each stage needs at least one of the {layers} blocks",
            )
        if got == want:
            continue
        mine, best = max(stage_flops(got, *case)), max(stage_flops(want, *case))
        first, second = stage_flops(got, *case)
        slower = "stage 0" if first > second else "stage 1"
        case_text = (
            f"layers={case[0]}, dim={case[2]}, vocab={case[4]}: you put {got} blocks on stage 0, the best is "
            f"{want} (its slower stage {best / 1e9:.4g} GFLOP per micro-batch of {TOKENS} tokens, yours "
            f"{mine / 1e9:.4g}, on {slower})"
        )
        if got == layers // 2 and want != got:
            why = (
                "equal blocks leave the head's 2·tokens·dim·vocab FLOPs on the last stage: move blocks to stage 0 "
                "until the two are even"
            )
        elif got == _head_on_first(*case):
            why = (
                "that balances the head on stage 0; it runs on the last stage (after the final norm), so the last "
                "stage needs fewer blocks, not more"
            )
        elif got < want:
            why = "stage 1 is the slower one: it holds the head and too many blocks"
        else:
            why = "stage 0 is now the slower one: give it fewer blocks"
        return False, f"{case_text}: {why}"
    return True, "matches the FLOP-balanced split on every case: the slower stage is as fast as it can be"
