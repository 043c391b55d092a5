"""calibration: fit the simulator to measured runs and validate it on held-out shapes.

Its commands (``simscale calibrate``, ``validate``, ``plot``) live in ``cli.py`` and join the
``simscale`` command through the entry-point group ``simscale.commands``.
"""
