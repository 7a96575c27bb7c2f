"""Checks over the project itself: docs, site, layering, types, names, pins, quality, toolchain."""
