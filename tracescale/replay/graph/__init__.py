"""A rank's trace in -> its execution graph out (host, device, CUDA-graph nodes)."""
