"""What runs on a worker host: the cluster layout, the iteration, compute, the input
pipeline, stragglers, and the symmetric reduction of identical workers."""
