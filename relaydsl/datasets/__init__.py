"""Datasets read from their original files (no downloads at run time)."""
from relaydsl.datasets.mnist import mnist, read_idx

__all__ = ["mnist", "read_idx"]
