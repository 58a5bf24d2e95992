"""The ``inspect`` document -> its terminal tables: one per run (rank, file, size, events, span,
steps, GPUs/streams, collectives), with the mesh, the step markers, the paired execution
traces and the warnings under each.

Why apart from ``cli/inspect.py``: that module reads the traces into the document (also the
``--format json`` output); this one only lays that document out, as the report's renderers lay
out an analyze document.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click


def _colls_text(c: dict[str, Any]) -> str:
    parts = []
    if c["kernels"]:
        parts.append("kernels: " + ", ".join(f"{k} {v}" for k, v in c["kernels"].items()))
    if c["host"]:
        host = ", ".join(f"{k} {v}" for k, v in c["host"].items())
        parts.append(f"host {c['host_source']}: {host}")
    return "; ".join(parts) or "none"


def _fmt_size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _steps_text(steps: dict[str, Any]) -> str:
    if not steps["count"]:
        return "none"
    nums = steps["numbers"]
    shown = f"{nums[0]}-{nums[-1]}" if nums == list(range(nums[0], nums[-1] + 1)) else ""
    shown = shown or ",".join(map(str, nums[:6])) + ("..." if len(nums) > 6 else "")
    return f"{steps['count']} (#{shown}), mean {steps['mean_s'] * 1e3:.1f} ms"


def _rank_row(r: dict[str, Any]) -> list[str]:
    name = ", ".join(os.path.basename(f) for f in r.get("files", [r["file"]]))
    if r.get("error"):
        return [str(r["rank"]), name, _fmt_size(r["size_bytes"]), "error", "", "", "", r["error"]]
    return [
        f"{r['rank']}/{r['world_size']}",
        name,
        _fmt_size(r["size_bytes"]),
        str(r["events"]),
        f"{r['span_s']:.3f}",
        _steps_text(r["steps"]),
        f"{len(r['gpus'])}/{r['streams']}" if r["gpus"] else "CPU only",
        _colls_text(r["collectives"]),
    ]


def render_table(doc: list[dict[str, Any]]) -> None:
    """One table per run, laid out for the terminal's width like the report; warnings under it."""
    from rich.text import Text

    from tracescale.report.fmt import mesh as fmt_mesh
    from tracescale.report.sections import Section
    from tracescale.report.table import lines_to_string, section_lines
    from tracescale.report.terminal import terminal_width, wants_color

    width = terminal_width(sys.stdout)
    headers = ["rank", "file", "size", "events", "span s", "steps", "GPUs/streams", "collectives"]
    lines: list[Text] = []
    for study in doc:
        for run in study["runs"]:
            title = f"{study['path']}: world size {run['world_size']} ({run['label']})"
            notes = list(run["warnings"])
            notes.extend(
                f"{os.path.basename(r['file'])}: {w}"
                for r in run["ranks"]
                for w in r.get("warnings", ())
            )
            notes.extend(f"{r['file']}: {r['error']}" for r in run["ranks"] if r.get("error"))
            sec = Section("inspect", title, headers, left_cols=2)
            sec.rows = [_rank_row(r) for r in run["ranks"]]
            lines.extend(section_lines(sec, width)[:-1])
            if run.get("mesh"):
                lines.extend(_note_lines([fmt_mesh(run["mesh"])], width, "mesh"))
            lines.extend(_note_lines(_marker_notes(run["ranks"]), width, "step marker"))
            ets = [
                (r["rank"], r["execution_trace"]) for r in run["ranks"] if "execution_trace" in r
            ]
            et_lines = [
                f"rank {k}: {os.path.basename(e['file'])}, {e['deps']} dependencies" for k, e in ets
            ]
            lines.extend(_note_lines(et_lines, width, "execution trace"))
            lines.extend(_warning_lines(notes, width))
            lines.append(Text(""))
        lines.extend(_note_lines(list(study.get("execution_traces", ())), width, "execution trace"))
        lines.extend(_warning_lines([*study["warnings"], *study.get("mesh_warnings", ())], width))
    click.echo(lines_to_string(lines, wants_color(sys.stdout)), nl=False)


def _marker_notes(ranks: list[dict[str, Any]]) -> list[str]:
    """One line per candidate step marker of the run (ranks agree on a job's names), the
    chosen one marked; none where ProfilerStep is the marker."""
    seen: dict[str, str] = {}
    for r in ranks:
        steps = r.get("steps") or {}
        if steps.get("marker", "ProfilerStep") == "ProfilerStep":
            continue
        for c in steps.get("candidates", ()):
            mark = " (chosen)" if c["chosen"] else ""
            seen.setdefault(c["marker"], f"'{c['marker']}' x{c['count']}: {c['why']}{mark}")
        if steps.get("marker") not in {c["marker"] for c in steps.get("candidates", ())}:
            chosen = steps.get("marker")
            seen.setdefault(
                "",
                "none found: the whole traced span is one step"
                if chosen == "whole span"
                else f"chosen: {chosen} ({steps.get('count')} steps)",
            )
    return list(seen.values())


def _warning_lines(notes: list[str], width: int) -> list[Any]:
    return _note_lines(notes, width, "warning", "yellow")


def _note_lines(notes: list[str], width: int, lead: str, color: str = "cyan") -> list[Any]:
    from rich.text import Text

    from tracescale.report.table import wrap_prose

    out = []
    for note in notes:
        for line in wrap_prose(f"{lead}: {note}", width, "", "  "):
            t = Text(line)
            t.highlight_regex(rf"^{lead}:", color)
            out.append(t)
    return out
