"""The discrete-event core beneath the model: serial and shared queues on SimPy."""
