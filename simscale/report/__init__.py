"""What a run reduces to: the Result, traces, output files, and the run-time budget."""
