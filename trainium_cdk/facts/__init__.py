"""Facts: instances, AWS limits, pinned versions, prices, shared names and defaults (no config)."""
