"""The emulated cluster: network namespaces, shaped links, the delay wire, link probes, kernel
counters and the machine-load verdict."""
