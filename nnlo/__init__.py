"""nnlo runtime: the MPI program whose ranks train models and search hyperparameters inside an allocation."""
__version__ = "0.1.0"
