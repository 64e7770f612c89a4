"""Traffic shaping: a workload's bandwidth limits as token bucket filters (tc, IFB)."""
