"""Training on a worker: the PyTorch models, the training loop, and emulated compute (replayed
per-layer times)."""
