"""Fit the simulator's step-time model to a measured engine and report its prediction error."""
