"""Replay stage: a rank's trace and its run's collectives -> execution graph -> replayed and
projected step times (``graph`` -> ``engine`` -> ``laws``/``comm`` -> ``project`` -> ``apply``)."""
