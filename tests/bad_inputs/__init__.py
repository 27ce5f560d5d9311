"""Rows of the table-driven bad-input test, one module per area (collect, bound, sim, predict, draft)."""
