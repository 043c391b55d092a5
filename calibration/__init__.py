"""calibration: fit the simulator to measured runs and validate it on held-out shapes."""
