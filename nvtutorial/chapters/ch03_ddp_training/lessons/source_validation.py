"""The source tutorial's validation across ranks, as it wrote it (notebook 03, claim C18).

The source's part 5 says every rank must validate, and shows (punctuation restored)::

    val_loss = validate(model)
    torch.distributed.all_reduce(val_loss)

It does not show ``validate``; :func:`validate` is the usual one: the mean of the batch losses of the
rank's own validation loader. ``all_reduce`` without an ``op`` is a SUM, and the source never
divides: on W ranks its ``val_loss`` is the sum of W per-rank means, about W times the loss. Dividing by
W (what a careful reader adds) gives a mean of means, still off when ranks hold different numbers of
samples or DistributedSampler pads the set with duplicates. ``ddp_train.evaluate`` sums losses and
counts instead, skipping the padding.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F


# %% the source's validation
@torch.no_grad()
def validate(model, loader, device, amp=torch.bfloat16):
    """The mean of this rank's batch losses (padding included: DistributedSampler's duplicates count too)."""
    model.eval()
    losses = []
    for images, masks in loader:
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            logits = model(images.to(device))
        losses.append(F.cross_entropy(logits.float(), masks.to(device)))
    model.train()
    return torch.stack(losses).mean()


def validate_as_the_source_does(model, loader, device, amp=torch.bfloat16):
    val_loss = validate(model, loader, device, amp)
    dist.all_reduce(val_loss)  # the source's line: a SUM over the ranks, never divided
    return val_loss
