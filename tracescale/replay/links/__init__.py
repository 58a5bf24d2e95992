"""Collective rows and process groups per run in -> link models, group roles and the mesh out."""
