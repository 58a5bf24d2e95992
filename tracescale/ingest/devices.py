"""Which accelerator a trace ran on, and the vendor vocabulary that makes each one read alike.

Why: the analysis is written against Kineto's device-neutral categories (``kernel``,
``gpu_memcpy``, ``gpu_memset``), so another vendor's trace analyzes as a CUDA one does once its
runtime calls are known as launches and syncs. A device the tool does not know must be said,
not guessed: its events would otherwise vanish into "host" or "idle" and the run would be
called a CPU (or a GPU) run without a word.

Intel XPU (PyTorch with ``ProfilerActivity.XPU``), from pytorch/kineto
``libkineto/src/plugin/xpupti`` and ``libkineto/include/ActivityType.h``:

- device records keep the CUDA categories (``XpuptiActivityHandlers.cpp``: kernels are
  ``CONCURRENT_KERNEL`` = ``kernel``, copies ``gpu_memcpy`` named ``Memcpy M2D (Device ->
  Device)``, fills ``gpu_memset`` named ``Memset (0 -> Device)``); their ``pid`` is the device
  index and their ``tid`` the SYCL queue id (``resource = _sycl_queue_id``), and the args say
  ``sycl queue``, never ``stream`` (ingest reads the queue from ``tid``);
- host calls are ``xpu_runtime`` (Unified Runtime / PI: ``urEnqueueKernelLaunch``...) and
  ``xpu_driver`` (Level Zero: ``zeCommandListAppendLaunchKernel``...); kernels share the
  launch's ``correlation`` id, and the ``ac2g`` flow starts only at the calls of
  ``correlateRuntimeOps_`` (``XpuptiActivityProfilerSession.cpp``), the list below;
- ``xpu_sync`` records blocking waits, ``collective_comm`` holds PTI's ``xccl::<op>`` records;
- PyTorch's ProcessGroupXCCL profiles collectives as ``xccl:all_reduce``...
  (``ProcessGroupXCCL.cpp``), ``distributedInfo.backend`` is ``xccl`` (``ccl`` with IPEX's
  oneCCL bindings); oneCCL's SYCL kernels read ``oneccl_reduce_base<float, ...>``
  (intel/torch-xpu-ops issue reports), found by ``classify/comm_kernels.py``;
- ``deviceProperties`` entries come from SYCL (``getXpuDeviceProperties``): an Intel name
  such as ``Intel(R) Data Center GPU Max 1550``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from tracescale.ingest.trace import DEVICE_CATEGORIES, RankTrace

#: Host categories of XPU runtime (UR/PI/SYCL) and driver (Level Zero) calls.
XPU_RUNTIME_CATEGORIES: Final = frozenset({"xpu_runtime", "xpu_driver"})

#: XPU calls that enqueue device work: Kineto's ``correlateRuntimeOps_`` (the calls its
#: ``ac2g`` flows start at) and their Level Zero counterparts.
XPU_LAUNCH_CALLS: Final = frozenset(
    {
        "piextUSMEnqueueFill",
        "urEnqueueUSMFill",
        "piextUSMEnqueueFill2D",
        "urEnqueueUSMFill2D",
        "piextUSMEnqueueMemcpy",
        "urEnqueueUSMMemcpy",
        "piextUSMEnqueueMemset",
        "piextUSMEnqueueMemcpy2D",
        "urEnqueueUSMMemcpy2D",
        "piextUSMEnqueueMemset2D",
        "piEnqueueKernelLaunch",
        "urEnqueueKernelLaunch",
        "piextEnqueueKernelLaunchCustom",
        "urEnqueueKernelLaunchCustomExp",
        "piextEnqueueCooperativeKernelLaunch",
        "urEnqueueCooperativeKernelLaunchExp",
        "zeCommandListAppendLaunchKernel",
        "zeCommandListAppendLaunchCooperativeKernel",
        "zeCommandListAppendMemoryCopy",
        "zeCommandListAppendMemoryFill",
    }
)

#: XPU calls that block the host until the device has drained (``torch.xpu.synchronize``
#: ends in ``urQueueFinish``; Level Zero waits on events, queues, immediate lists, fences).
XPU_SYNC_CALLS: Final = frozenset(
    {
        "urQueueFinish",
        "urEventWait",
        "piQueueFinish",
        "piEventsWait",
        "zeEventHostSynchronize",
        "zeCommandQueueSynchronize",
        "zeCommandListHostSynchronize",
        "zeFenceHostSynchronize",
    }
)

#: Host-side categories Kineto writes (``ActivityType.h``) and the spellings of older traces:
#: an event of any other category on a device's process is a device kind the rules do not know.
HOST_CATEGORIES: Final = frozenset(
    {
        "cpu_op",
        "Operator",
        "user_annotation",
        "python_function",
        "cuda_runtime",
        "cuda_driver",
        "Runtime",
        "cpu_instant_event",
        "external_correlation",
        "overhead",
        "Trace",
        "cuda_profiler_range",
        "cuda_event",
        "glow_runtime",
        "mtia_runtime",
        "mtia_insight",
        "mtia_counters",
        "collective_comm",
        "privateuse1_runtime",
        "privateuse1_driver",
        "xpu_scope_profiler",
        "xpu_sync",
        *XPU_RUNTIME_CATEGORIES,
        "",
    }
)

#: Device words of ``process_labels`` (Kineto labels a device process ``GPU 0``, ``MTIA 9``).
_KNOWN_LABELS: Final = frozenset({"CPU", "GPU", "XPU", "MTIA"})
_LABEL = re.compile(r"^([A-Za-z][A-Za-z_]*)\s*\d+$")

#: Vendor families by ``deviceProperties`` name; a name with none of these and no "GPU" in it
#: is a device type the tool does not recognise.
_VENDOR_NAMES: Final = (
    ("xpu", re.compile(r"\bIntel\b", re.I)),
    ("rocm", re.compile(r"\bAMD\b|Radeon|Instinct|\bgfx\d+", re.I)),
    ("cuda", re.compile(r"NVIDIA|Tesla|GeForce|Quadro|TITAN", re.I)),
    ("mtia", re.compile(r"MTIA|ARTEMIS", re.I)),
)
_GENERIC_GPU = re.compile(r"GPU|Graphics", re.I)


#: Device categories whose ``tid`` is the stream or queue they ran on (:func:`queue_streams`).
_QUEUE_CATEGORIES: Final = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
)


def queue_streams(
    stream: npt.NDArray[np.int64],
    tid: npt.NDArray[np.int64],
    cat_ids: npt.NDArray[np.int32],
    table: tuple[str, ...],
) -> npt.NDArray[np.int64]:
    """Kernels, copies and fills without a ``stream`` arg run on the queue their ``tid``
    names: Kineto writes a device record's resource as its ``tid``, and XPU records say
    ``sycl queue`` where CUDA says ``stream``. Every reader builds its columns through here."""
    queued = np.array([t in _QUEUE_CATEGORIES for t in table], dtype=np.bool_)
    if not len(stream) or not queued.any():
        return stream
    missing = (stream < 0) & queued[cat_ids] & (tid >= 0)
    return np.where(missing, tid, stream) if missing.any() else stream


@dataclass(frozen=True)
class DeviceKind:
    """``family``: ``cuda``, ``rocm``, ``xpu``, ``mtia``, ``gpu`` (known device events, vendor
    not named), ``cpu`` (no device events) or ``unknown``; ``unknown``: what was not recognised,
    one description each (``event category 'npu_kernel'``, ``device type 'NPU'``)."""

    family: str
    unknown: tuple[str, ...] = ()


def device_kind(trace: RankTrace, main_pid: int | None = None) -> DeviceKind:
    """The accelerator family of ``trace`` from its categories, runtime names, device
    properties and process labels; unrecognised evidence makes it ``unknown`` and is listed.

    An event of an unknown category is a device's when it runs on a process that is neither
    the main one (``main_pid``) nor one with host events, or on a process labelled as a device:
    a user's own category on a host thread is no device."""
    ev = trace.events
    strings = trace.strings
    used = np.flatnonzero(np.bincount(ev.cat + 1, minlength=1)[1:])  # one pass, no sort
    cats = {strings[c] for c in used.tolist()}
    unknown = _unknown_categories(trace, cats, main_pid)
    labels = {m.group(1) for m in map(_LABEL.match, trace.meta.process_labels.values()) if m}
    unknown += [f"device type '{w}'" for w in sorted(labels - _KNOWN_LABELS)]
    vendors: list[str] = []
    for name in dict.fromkeys(trace.meta.device_names):
        if not name.strip():
            continue  # an unnamed device says nothing (ROCm traces of MI300s leave it empty)
        family = next((f for f, rx in _VENDOR_NAMES if rx.search(name)), None)
        if family is not None:
            vendors.append(family)
        elif not _GENERIC_GPU.search(name):
            unknown.append(f"device '{name}'")
    if unknown:
        return DeviceKind("unknown", tuple(dict.fromkeys(unknown)))
    if not bool(ev.is_device.any()):
        return DeviceKind("cpu")
    family = _runtime_family(trace, cats)
    if family is None and "XPU" in labels:
        family = "xpu"
    if family is None and "MTIA" in labels:
        family = "mtia"
    if family is None and vendors:
        family = vendors[0]
    backend = (trace.meta.backend or "").lower()
    if family is None and re.search(r"\b(?:x?ccl)\b", backend):
        family = "xpu"
    return DeviceKind(family or "gpu")


def _unknown_categories(trace: RankTrace, cats: set[str], main_pid: int | None) -> list[str]:
    ev = trace.events
    strange = sorted(cats - HOST_CATEGORIES - DEVICE_CATEGORIES)
    if not strange:
        return []
    known_host = np.array([trace.string_id(c) for c in cats & HOST_CATEGORIES], dtype=np.int32)
    known_host = known_host[known_host >= 0]
    host_pids = set(np.unique(ev.pid[np.isin(ev.cat, known_host)]).tolist())
    if main_pid is not None:
        host_pids.add(main_pid)
    labelled = {
        p for p, text in trace.meta.process_labels.items() if not text.upper().startswith("CPU")
    }
    out = []
    for text in strange:
        on = ev.cat == trace.string_id(text)
        pids = set(np.unique(ev.pid[on]).tolist())
        if (pids - host_pids) or (pids & labelled) or bool((ev.device[on] >= 0).any()):
            out.append(f"event category '{text}'")
    return out


def _runtime_family(trace: RankTrace, cats: set[str]) -> str | None:
    """The family the host runtime calls name: XPU categories or UR/PI/Level Zero calls, HIP
    calls, CUDA runtime/driver calls, MTIA categories; None when the trace has none."""
    if cats & XPU_RUNTIME_CATEGORIES:
        return "xpu"
    if "mtia_runtime" in cats or "mtia_ccp_events" in cats:
        return "mtia"
    ev = trace.events
    runtime = np.array(
        [trace.string_id(c) for c in ("cuda_runtime", "cuda_driver", "Runtime")], dtype=np.int32
    )
    ids = np.unique(ev.name[~ev.is_device & np.isin(ev.cat, runtime[runtime >= 0])])
    names = [trace.strings[i] for i in ids.tolist() if i >= 0]
    if any(n in XPU_LAUNCH_CALLS or n in XPU_SYNC_CALLS for n in names):
        return "xpu"
    if any(n.startswith("hip") for n in names):
        return "rocm"
    if any(n.startswith("cu") for n in names):
        return "cuda"
    return None
