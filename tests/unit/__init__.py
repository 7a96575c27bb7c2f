"""Tests of one part on its own, in a folder per kind of part."""
