"""Starting a job: the role commands, the job's life cycle, and the local, ssh and netns
launchers."""
