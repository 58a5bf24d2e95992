"""Measured arrival offsets at each collective in -> how late the slowest of N ranks arrives out."""
