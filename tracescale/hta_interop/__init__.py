"""HTA (Holistic Trace Analysis) interop: loaded HTA traces in -> a Study; a Study -> HTA frames.

HTA users already hold their traces as one pandas frame per rank
(``hta.trace_analysis.TraceAnalysis``); :func:`from_hta` turns those frames into tracescale's
columnar :class:`~tracescale.ingest.trace.RankTrace` (µs -> int64 ns, :mod:`.convert`) and runs
the same classify -> per-run merge -> scaling -> document path as ``tracescale analyze``
(:mod:`.study`), except the replay: HTA's frames are no rank files to rebuild an execution
graph from, so ``from_hta`` projects with the closed-form per-category model (the one
``analyze`` keeps beside its replayed headline as ``closed_form_total``). :func:`to_hta_frames`
goes the other way (:mod:`.frames`). HTA itself
(package ``traceinsight``, import name ``hta``) is never imported here.

**HTA-compatible figures.** Every study JSON carries, per GPU rank, ``gpu_idle_pct`` and
``comm_comp_overlap_pct`` with HTA's definitions at nanosecond precision, and the interval
measures behind them (``gpu_time_s``; classify/gpu_metrics.py). ``to_hta_frames`` exports those,
so its ``idle_time_pctg`` is HTA's, and so is ``from_hta``'s ``gpu_idle_pct``. Checked against
traceinsight 0.6.1 on every trace under ``../shared/traces`` it can analyze (tests/
test_hta_agreement.py); where the figures differ, HTA is the one that is off:

- HTA rounds ``ts`` and ``dur`` to whole µs. ``hta/ns_resolution_trace`` (ns timestamps):
  HTA 2.63% idle, the exact ns union 1.68%; ``from_hta`` reads HTA's rounded frames and
  reports HTA's 2.63%.
- HTA counts a ``cuda_sync`` event on a stream (``Event Sync``) as GPU work;
  ``hta/critical_path/cuda_event_sync``: HTA 78.71% idle, tracescale 80.61% (the GPU waits).
- With several ProfilerSteps, HTA drops kernels whose launch is not in the trace (launched
  before profiling began) although they run inside the first step; with one step it keeps
  everything. ``hta/negative_queue_length_values_check``: HTA 69.44% idle, tracescale 63.86%
  (on HTA's event set tracescale gives HTA's figure); ``hta/trace_diff/test`` 7.47 vs 3.58%;
  ``hta/trace_compare`` keeps one kernel in HTA (0% idle) against 99.54%.
- HTA types MTIA's ``pe_exe``/``job_exe``/``packet`` events ``OTHER`` (neither compute
  nor communication), so its compute share is lower there; the idle shares agree.
- ``TraceAnalysis(trace_dir=...)`` keeps one file per rank: of tb_plugin's two profiling
  windows of one process it analyzes one; tracescale pools both.
- HTA cannot break down traces without GPU kernels (``IndexError``: ``hta/cpu_only``,
  ``cupti_profiler``, ``rank_non_gpu``, ...); tracescale reports those as CPU runs, with the
  GPU fields null.

What HTA's loader drops, ``from_hta`` does not see. By default ``TraceAnalysis`` drops the
**last** ProfilerStep (``include_last_profiler_step=False``) and every GPU kernel not launched
from a kept CPU event (tracescale's GPU measures drop kernels launched before the trace began,
too), plus ``python_function`` and ``gpu_user_annotation`` events. On the kept steps the
breakdown equals ``tracescale analyze``'s on the same files (``analyze(path, steps=":-1")`` for
the default loader), up to the µs rounding.

Category mapping (:data:`HTA_CATEGORY_MAP`), for reading tracescale's categories in HTA terms:

============== ========================= ===================== ===================
tracescale     HTA temporal breakdown    HTA idle category     HTA kernel type
============== ========================= ===================== ===================
compute        ``compute_time``          --                    ``COMPUTATION``
memcpy         ``non_compute_time``      --                    ``MEMORY``
communication  ``non_compute_time``      --                    ``COMMUNICATION``
dataloader     ``idle_time``             ``host_wait``         --
sync           ``idle_time``             ``host_wait``         --
reduction      ``idle_time``             ``host_wait``         --
host           ``idle_time``             ``host_wait``         --
idle           ``idle_time``             ``other``             --
============== ========================= ===================== ===================

The categories answer a different question than HTA's breakdown: *why* the GPU is idle (what
the host was doing), with a rank's wait for a late peer moved to the late rank's category.
HTA's third idle category, ``kernel_wait`` (gaps between back-to-back kernels), is inside the
busy union and is never reported separately.
"""

from __future__ import annotations

from tracescale.hta_interop.convert import hta_trace_to_rank_trace
from tracescale.hta_interop.frames import to_hta_frames
from tracescale.hta_interop.mapping import (
    HTA_CATEGORY_MAP,
    HTA_IDLE_CATEGORIES,
    HTA_KERNEL_TYPES,
    HTA_TEMPORAL,
)
from tracescale.hta_interop.study import from_hta

__all__ = [
    "HTA_CATEGORY_MAP",
    "HTA_IDLE_CATEGORIES",
    "HTA_KERNEL_TYPES",
    "HTA_TEMPORAL",
    "from_hta",
    "hta_trace_to_rank_trace",
    "to_hta_frames",
]
