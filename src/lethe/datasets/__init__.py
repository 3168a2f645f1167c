"""Data sets that work offline (from registry packages), with the preprocessing of the papers' experiments."""

from lethe.datasets.idx import read_idx
from lethe.datasets.mnist import data_home, load_mnist, load_mnist_binary, load_mnist_multiclass

__all__ = ["data_home", "load_mnist", "load_mnist_binary", "load_mnist_multiclass", "read_idx"]
