"""Options shared by the commands that analyze traces (analyze, compare), and output writing.

Every number an option takes is checked here, at the edge, against a documented range
(:data:`WHAT_IF_MAX` and friends; the README's option table repeats them): a value outside is
a one-line usage error (exit 2) naming the allowed range, never an int64 overflow, a numpy
warning or a 300-digit step time further in.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from tracescale.errors import UsageError
from tracescale.ingest.claims import MAX_WORLD_SIZE

F = TypeVar("F", bound=Callable[..., Any])

#: Largest --what-if factor: a category 1000 times slower is far past any question asked of
#: a trace, and keeps every scaled duration (ns, int64) finite.
WHAT_IF_MAX = 1000.0
#: Largest --project world size: the ceiling on a world size a trace may claim.
PROJECT_MAX = MAX_WORLD_SIZE
#: Largest --steps bound (either sign): a ProfilerStep number fits int32 in every profiler.
STEPS_MAX = (1 << 31) - 1
#: Largest --memory-budget, in GB (a petabyte): beyond it the byte count is not an integer.
MEMORY_BUDGET_MAX_GB = 1e6
#: Largest --inter-node-bandwidth (GB/s) and --inter-node-latency (us).
BANDWIDTH_MAX_GBPS = 1e6
LATENCY_MAX_US = 1e6
#: Largest --jobs and --gpus-per-node.
JOBS_MAX = 1024
GPUS_PER_NODE_MAX = PROJECT_MAX


def parse_what_if(values: tuple[str, ...]) -> dict[str, float]:
    """``dataloader=0`` -> {"dataloader": 0.0}; the factor scales that category's time."""
    from tracescale.categories import CATEGORIES

    out: dict[str, float] = {}
    for item in values:
        name, sep, factor = item.partition("=")
        if not sep or name not in CATEGORIES:
            raise UsageError(
                f"--what-if takes CATEGORY=FACTOR with CATEGORY one of {', '.join(CATEGORIES)}; "
                f"got {item!r}"
            )
        try:
            value = float(factor)
        except ValueError as exc:
            raise UsageError(f"--what-if factor must be a number, got {factor!r}") from exc
        if not math.isfinite(value) or not 0 <= value <= WHAT_IF_MAX:
            raise UsageError(
                f"--what-if factor must be a number from 0 to {WHAT_IF_MAX:g}, got {factor!r}"
            )
        out[name] = value
    return out


def parse_assume(values: tuple[str, ...]) -> dict[str, str]:
    """``sync=parallel``: a category's stated scaling (the law of a single run; on several
    runs, a law edit of its nodes in the replay, ``tracescale.replay.whatif.assumptions``)."""
    out: dict[str, str] = {}
    for item in values:
        name, sep, kind = item.partition("=")
        if not sep or kind not in ("serial", "parallel"):
            raise UsageError(f"--assume takes CATEGORY=serial|parallel, got {item!r}")
        out[name] = kind
    return out


def parse_project(value: str | None) -> list[int] | None:
    """``64,128,1024`` -> [64, 128, 1024]."""
    if not value:
        return None
    try:
        out = [int(x) for x in value.split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"--project takes world sizes like 64,128,1024, not {value!r}") from exc
    if not out or any(n < 1 or n > PROJECT_MAX for n in out):
        raise UsageError(
            f"--project takes world sizes from 1 to {PROJECT_MAX}, not {_short(value)}"
        )
    return out


def _short(value: str, width: int = 40) -> str:
    """An option value quoted for a one-line message, cut in the middle when long."""
    text = repr(value)
    return text if len(text) <= width else text[: width // 2] + "…" + text[-width // 2 :]


def check_steps(value: str | None) -> str | None:
    """``value`` when each bound of the --steps range is within ±:data:`STEPS_MAX`."""
    if value:
        from tracescale.preflight import parse_steps

        sel = parse_steps(value)
        bounds = [b for b in (sel.start, sel.stop) if b is not None] if sel else []
        if any(abs(b) > STEPS_MAX for b in bounds):
            raise UsageError(
                f"--steps bounds are ProfilerStep numbers from -{STEPS_MAX} to {STEPS_MAX}, "
                f"not {_short(value)}"
            )
    return value


def output_options(func: F) -> F:
    """--format, -o and --force, shared by every command that writes a report."""
    from tracescale.report import FORMATS

    opts = [
        click.option(
            "--format",
            "-f",
            "fmt",
            type=click.Choice(list(FORMATS)),
            help="table (default), json, markdown or html; guessed from -o's extension.",
        ),
        click.option(
            "--output",
            "-o",
            type=click.Path(dir_okay=False, allow_dash=True),
            help="Write the report here ('-': standard output).",
        ),
        click.option(
            "--force",
            is_flag=True,
            help="Let -o replace a trace, write beside the inputs, follow a symlink, fill a FIFO.",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def pick_format(fmt: str | None, output: str | None) -> str:
    """Explicit --format, else guessed from -o's extension, else the terminal table.

    An extension no format claims (``-o report.pdf``) is a usage error rather than a text
    table under a misleading name; a name without extension gets the table.
    """
    from pathlib import Path

    from tracescale.report import guess_format
    from tracescale.report.render import known_extensions

    if fmt:
        return fmt
    guessed = guess_format(output)
    if guessed:
        return guessed
    suffix = Path(str(output)).suffix if output else ""
    if suffix and output != "-":
        raise UsageError(
            f"-o {output}: unknown extension {suffix!r}; use {', '.join(known_extensions())} "
            "or give --format"
        )
    return "table"


def table_style(output: str | None) -> dict[str, Any]:
    """Width and colour of the terminal table: the terminal's own on stdout, plain in files."""
    from tracescale.report.terminal import DEFAULT_WIDTH, terminal_width, wants_color

    if output is None:
        return {"width": terminal_width(sys.stdout), "color": wants_color(sys.stdout)}
    env = os.environ.get("COLUMNS", "")
    return {"width": int(env) if env.isdigit() and int(env) > 0 else DEFAULT_WIDTH}


DEFAULT_MEMORY_BUDGET_GB = 8.0


class FiniteFloat(click.ParamType):  # type: ignore[type-arg]
    """A finite number (no nan/inf), positive or non-negative: anything else is a usage error."""

    name = "NUMBER"

    def __init__(
        self, *, allow_zero: bool = False, unit: str = "", max_value: float | None = None
    ) -> None:
        self.allow_zero = allow_zero
        self.unit = unit
        self.max_value = max_value
        self.of = f" of{unit}" if unit else ""

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number{self.of}", param, ctx)
        ok = number >= 0 if self.allow_zero else number > 0
        if not math.isfinite(number) or not ok:
            sign = "non-negative" if self.allow_zero else "positive"
            self.fail(f"{value!r} must be a {sign}, finite number{self.of}", param, ctx)
        if self.max_value is not None and number > self.max_value:
            low = "from 0" if self.allow_zero else "above 0"
            top = f"{self.max_value:,.0f}" if self.max_value.is_integer() else f"{self.max_value}"
            self.fail(f"{value!r} is out of range: {low} to {top}{self.unit}", param, ctx)
        return number


class GigabytesType(FiniteFloat):
    """A positive, finite number of gigabytes (10^9 bytes), at least one byte."""

    name = "GB"

    def __init__(self) -> None:
        super().__init__(unit=" GB", max_value=MEMORY_BUDGET_MAX_GB)

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        number = super().convert(value, param, ctx)
        if number * 1e9 < 1:
            self.fail(f"{value!r} GB is less than one byte", param, ctx)
        return number


def memory_budget_option() -> Callable[[F], F]:
    """--memory-budget in GB, the same option (unit, default, checks) for every command."""
    return click.option(
        "--memory-budget",
        type=GigabytesType(),
        default=DEFAULT_MEMORY_BUDGET_GB,
        show_default=True,
        metavar="GB",
        help=f"Largest decompressed trace file accepted (GB, at most "
        f"{MEMORY_BUDGET_MAX_GB:,.0f}): bounds memory per worker.",
    )


def analysis_options(func: F) -> F:
    """Decorate a command with the analysis options."""
    opts = [
        click.option(
            "--mode",
            type=click.Choice(["auto", "strong", "weak"]),
            default="auto",
            show_default=True,
            help="Strong (fixed global batch) or weak scaling.",
        ),
        click.option(
            "--project",
            metavar="N,N,...",
            help=f"World sizes to project to, 1 to {PROJECT_MAX} (default 2x, 4x, 8x the largest "
            "measured).",
        ),
        click.option(
            "--what-if",
            "what_if",
            multiple=True,
            metavar="CATEGORY=FACTOR",
            help=f"Scale a category's measured time by FACTOR (0 to {WHAT_IF_MAX:g}) before "
            "fitting, e.g. dataloader=0.",
        ),
        click.option(
            "--assume",
            multiple=True,
            metavar="CATEGORY=serial|parallel",
            help="State how a category's work scales. One run: its law. Several runs: its "
            "nodes follow a + b (serial) or (a + b)/N (parallel) instead of the fitted law.",
        ),
        click.option(
            "--rules",
            type=click.Path(dir_okay=False),
            help="TOML file of name rules applied before the defaults.",
        ),
        click.option(
            "--step-marker",
            metavar="REGEX",
            help="Name of the event that marks a step where ProfilerStep is absent or not the "
            "step (e.g. 'execute_model'); inspect lists the candidates.",
        ),
        click.option(
            "--steps",
            metavar="START:END",
            help="ProfilerStep numbers to keep, as inspect shows them: 12: or #12: from #12 on, "
            "10:14 for #10-#13, #12 alone; negative counts from the last step (:-1 drops it); "
            f"bounds within ±{STEPS_MAX}.",
        ),
        click.option(
            "--jobs",
            "-j",
            type=click.IntRange(min=1, max=JOBS_MAX),
            help=f"Worker processes, 1 to {JOBS_MAX} (default: the cores; one process below "
            "16 MB of trace JSON).",
        ),
        click.option(
            "--strict", is_flag=True, help="Fail (exit 3) on any bad rank file instead of warning."
        ),
        click.option(
            "--cache-dir",
            type=click.Path(file_okay=False),
            help="Where per-rank results are cached (default: user cache dir).",
        ),
        click.option("--no-cache", is_flag=True, help="Do not read or write the cache."),
        click.option(
            "--scheduler",
            metavar="ADDRESS|local",
            help="Run per-rank work on a Dask cluster (needs the dask extra).",
        ),
        memory_budget_option(),
        click.option(
            "--gpus-per-node",
            type=click.IntRange(min=1, max=GPUS_PER_NODE_MAX),
            metavar="G",
            help="Ranks per node for the intra/inter-node collective tiers (default: "
            "deviceProperties, else the hosts in the rank file names, else one tier).",
        ),
        click.option(
            "--inter-node-bandwidth",
            type=FiniteFloat(unit=" GB/s", max_value=BANDWIDTH_MAX_GBPS),
            metavar="GB/S",
            help="Inter-node bus bandwidth to assume when no inter-node collective was measured "
            f"(above 0 to {BANDWIDTH_MAX_GBPS:,.0f}).",
        ),
        click.option(
            "--inter-node-latency",
            type=FiniteFloat(allow_zero=True, unit=" us", max_value=LATENCY_MAX_US),
            metavar="US",
            help=f"Inter-node per-hop latency (microseconds, 0 to {LATENCY_MAX_US:,.0f}) to assume "
            "when none was measured.",
        ),
        click.option("--quiet", "-q", is_flag=True, help="No progress bar."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def analysis_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for :func:`tracescale.api.analyze` from the parsed options."""
    kwargs: dict[str, Any] = {
        "mode": options["mode"],
        "project": parse_project(options.get("project")),
        "what_if": parse_what_if(options.get("what_if", ())) or None,
        "assumptions": parse_assume(options.get("assume", ())) or None,
        "rules": options.get("rules"),
        "steps": check_steps(options.get("steps")),
        "jobs": options.get("jobs"),
        "strict": options.get("strict", False),
        "memory_budget": int(options.get("memory_budget", DEFAULT_MEMORY_BUDGET_GB) * 1e9),
    }
    if options.get("step_marker"):
        from tracescale.classify.rules import with_step_marker

        kwargs["rules"] = with_step_marker(kwargs["rules"], str(options["step_marker"]))
    for key in ("cache_dir", "no_cache", "scheduler", "gpus_per_node"):
        if options.get(key):
            kwargs[key] = options[key]
    if options.get("inter_node_bandwidth"):
        kwargs["inter_node_bandwidth"] = float(options["inter_node_bandwidth"]) * 1e9
    if options.get("inter_node_latency") is not None:
        kwargs["inter_node_latency"] = float(options["inter_node_latency"]) * 1e-6
    return kwargs


def show_progress(quiet: bool) -> bool:
    """A progress bar only on a terminal, and never with --quiet."""
    return not quiet and sys.stderr.isatty()


_UNDECODABLE = re.compile("[\ud800-\udfff]")


def emit(text: str, output: str | None, *, inputs: list[str], force: bool) -> None:
    """Write to ``-o`` atomically (refusing to clobber traces), else (or ``-o -``) to stdout.

    Bytes of a non-UTF-8 path (kept by Python as lone surrogates) become U+FFFD, so every
    report is valid UTF-8.
    """
    if not text.isascii():
        text = _UNDECODABLE.sub("\ufffd", text)
    if output is None or output == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    from tracescale.atomic import check_output_path, write_output

    check_output_path(output, inputs, force)
    write_output(output, text if text.endswith("\n") else text + "\n")
