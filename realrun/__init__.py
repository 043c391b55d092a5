"""realrun: a real parameter-server training backend (pyzmq transport, PyTorch compute)."""
