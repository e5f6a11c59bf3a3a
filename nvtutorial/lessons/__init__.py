"""The code the course teaches: collectives by hand, DDP training, checkpoints, gradient compression, the strategy ladder."""
