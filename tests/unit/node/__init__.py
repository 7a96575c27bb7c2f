"""What runs on nodes: every node program, run here against stand-ins."""
