"""The probe's steps, in the order it runs them: a module of its own so that the command line
can list them without importing the steps' code (pyzmq, torch), which a simulator-only install
lacks (realrun.extra)."""

STEPS = ("rtt", "tcp", "aggregate", "incast", "server", "allreduce", "gpu", "psrtt")
