"""Workload and hardware models that emit an `Instance` (roofline timing, Sec. 4.1)."""
