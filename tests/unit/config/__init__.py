"""The typed config: defaults, overrides, and input refused with one line."""
