"""tracescale: where each training step's time goes, and how far the job scales."""

__version__ = "0.1.0"
