"""The `trn` CLI, run as a user types it, against moto and stand-ins."""
