"""OUTLETS: remaining-length prediction from the EAGLE-3 draft backbone (trajectory features, the
``outlets`` head, its baselines and their evaluation along the trajectory)."""
