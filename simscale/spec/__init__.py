"""The contract everyone shares: the scenario schema and its validation, hardware presets,
the cost model and its profiles, and the key-to-server slicing realrun also uses."""
