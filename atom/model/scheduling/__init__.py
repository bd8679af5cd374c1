"""Scheduling and KV bookkeeping: which sequences run each step, and which cache
blocks hold what (torch-free)."""
