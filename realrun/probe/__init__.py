"""``realrun probe``: measure a cluster's network, parameter servers, all-reduce and GPUs in
minutes, through the same launchers as a training run, into one probe record (JSON) that
``simscale calibrate --probe`` turns into a profile."""
