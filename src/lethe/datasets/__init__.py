"""Data sets that work offline (from registry packages), with the preprocessing of the papers' experiments."""

from lethe.datasets.adult import adult_files, load_adult, read_adult_csv
from lethe.datasets.german import load_german_credit
from lethe.datasets.idx import read_idx
from lethe.datasets.mnist import data_home, load_mnist, load_mnist_binary, load_mnist_multiclass

__all__ = ["adult_files", "data_home", "load_adult", "load_german_credit", "load_mnist", "load_mnist_binary",
           "load_mnist_multiclass", "read_adult_csv", "read_idx"]
