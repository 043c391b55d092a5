"""How gradients become new weights: parameter servers, all-reduce, or a local kvstore."""
