"""SimScale: predict the throughput of data-parallel training before renting the cluster."""

__version__ = "0.1.0"
