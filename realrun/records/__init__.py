"""What runs leave behind, as data: run records, timelines, progress lines, runs tables.

Nothing here launches a run (``realrun.run``, ``realrun.campaign``) or talks to a node."""
