"""Datasets read from their original files (no downloads at run time)."""
from relaydsl.datasets.files import DatasetError
from relaydsl.datasets.mnist import mnist, read_idx
from relaydsl.datasets.names import names
from relaydsl.datasets.sst import sst

__all__ = ["DatasetError", "mnist", "names", "read_idx", "sst"]
