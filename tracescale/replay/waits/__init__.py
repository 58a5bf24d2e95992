"""Device columns + the host's event record/wait calls in -> cross-stream wait edges out."""
