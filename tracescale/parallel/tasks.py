"""The unit of per-rank work (parse + classify one file) and its picklable outcome."""

from __future__ import annotations

from dataclasses import dataclass

from tracescale.classify.rank import RankResult, classify_rank
from tracescale.classify.rules import load_rules
from tracescale.errors import TracescaleError
from tracescale.ingest.decode import DEFAULT_MEMORY_BUDGET, load_trace


@dataclass(frozen=True)
class RankTask:
    """Everything a worker needs to process one rank file, and nothing that holds events."""

    path: str
    rank: int
    rules_file: str | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET


@dataclass(frozen=True)
class TaskError:
    """A file that could not be analyzed: the message the user sees, and its exit code."""

    path: str
    message: str
    exit_code: int


def run_task(task: RankTask) -> RankResult | TaskError:
    """Parse and classify one rank file; expected failures come back as values, not raises."""
    try:
        trace = load_trace(task.path, memory_budget=task.memory_budget)
        return classify_rank(trace, load_rules(task.rules_file), rank=task.rank)
    except TracescaleError as exc:
        return TaskError(task.path, exc.message, exc.exit_code)
