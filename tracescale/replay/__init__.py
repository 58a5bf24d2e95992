"""Replay stage: a rank's trace and its run's collectives in -> replayed and projected step
times, serial fraction and what-ifs out (``graph`` + ``waits`` -> ``engine`` -> ``laws`` ->
``uncertainty`` -> ``fit`` -> ``project`` -> ``apply``; ``whatif``
edits the fitted study)."""
