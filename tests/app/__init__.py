"""The app as a whole, synthesized from a config: what crosses backends."""
