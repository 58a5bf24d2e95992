"""Step windows: ProfilerStep on the main thread; GPU work belongs to the step that launched it."""

from __future__ import annotations

from tracescale.ingest import load_trace
from tracescale.ingest.steps import find_steps, launch_step, main_thread


def X(name, ts, dur, *, cat="user_annotation", pid=1, tid=1, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return {**ev, "args": args} if args else ev


def test_gpu_work_goes_to_the_step_that_launched_it(write_trace):
    p = write_trace(
        [
            X("ProfilerStep#7", 0, 100),
            X("cudaLaunchKernel", 90, 2, cat="cuda_runtime", correlation=1),
            X("ProfilerStep#8", 100, 100),
            X("cudaLaunchKernel", 110, 2, cat="cuda_runtime", correlation=2),
            # launched in step 7, runs after its host window, inside step 8's host window
            X("k1", 120, 50, cat="kernel", pid=0, tid=7, correlation=1, device=0, stream=7),
            X("k2", 175, 60, cat="kernel", pid=0, tid=7, correlation=2, device=0, stream=7),
            X("other_thread", 0, 500, cat="cpu_op", tid=2),
        ]
    )
    t = load_trace(str(p))
    assert main_thread(t) == (1, 1)
    s = find_steps(t)
    assert s.numbers.tolist() == [7, 8] and not s.synthetic and s.warnings == ()
    assert s.host_start.tolist() == [0, 100_000] and s.host_end.tolist() == [100_000, 200_000]
    # step 7 runs until k1 ends (170 us); step 8 starts there and ends with k2 (235 us)
    assert s.start.tolist() == [0, 170_000] and s.end.tolist() == [170_000, 235_000]
    step = launch_step(t, s.host_start, s.host_end)
    by_name = dict(zip(t.names(t.events.name), step.tolist(), strict=True))
    assert by_name["k1"] == 0 and by_name["k2"] == 1 and by_name["cudaLaunchKernel"] in (0, 1)


def test_no_steps_gives_one_window_and_a_warning(write_trace):
    p = write_trace([X("aten::mm", 10, 5, cat="cpu_op"), X("aten::add", 30, 10, cat="cpu_op")])
    s = find_steps(load_trace(str(p)))
    assert s.synthetic and s.numbers.tolist() == [0]
    assert s.start.tolist() == [10_000] and s.end.tolist() == [40_000]
    assert any("no ProfilerStep" in w for w in s.warnings)


def test_overlapping_steps_are_ignored_with_a_warning(write_trace):
    p = write_trace(
        [X("ProfilerStep#1", 0, 1000), X("ProfilerStep#2", 10, 10), X("ProfilerStep#3", 1000, 5)]
    )
    s = find_steps(load_trace(str(p)))
    assert s.numbers.tolist() == [1, 3]
    assert any("overlapping" in w for w in s.warnings)


def test_step_that_never_ends_is_skipped_and_counted(write_trace):
    p = write_trace(
        [
            X("ProfilerStep#1", 0, 10),
            {"ph": "X", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 10},
        ]
    )
    t = load_trace(str(p))
    assert t.meta.skipped == {"events without dur": 1}
    assert find_steps(t).numbers.tolist() == [1]


def test_a_step_after_an_overlapped_one_is_kept_by_the_last_kept_end(write_trace):
    """Greedy in start order: #2 overlaps #1 and is dropped, so its long end does not drop #3
    (which starts after #1 ends); #4 overlaps #3. Numbers come from the names, odd forms too."""
    p = write_trace(
        [
            X("ProfilerStep#1", 0, 100),
            X("ProfilerStep#2", 50, 1000),
            X("ProfilerStep#0003", 100, 100),
            X("ProfilerStep#4", 150, 10),
            X("ProfilerStep#٥", 300, 10),  # an Arabic-Indic five: the regex's \d takes it
        ]
    )
    s = find_steps(load_trace(str(p)))
    assert s.numbers.tolist() == [1, 3, 5]
    assert s.host_start.tolist() == [0, 100_000, 300_000]
    assert "2 overlapping ProfilerStep windows ignored" in s.warnings


def test_windows_tile_where_gpu_work_runs_past_the_next_step(write_trace):
    """Step 1's kernel ends after steps 2 and 3 began: step 2 starts and ends there (empty),
    step 3 starts there too."""
    p = write_trace(
        [
            X("ProfilerStep#1", 0, 10),
            X("cudaLaunchKernel", 5, 1, cat="cuda_runtime", correlation=1),
            X("ProfilerStep#2", 10, 10),
            X("ProfilerStep#3", 20, 100),
            X("k", 6, 30, cat="kernel", pid=0, tid=7, correlation=1, device=0, stream=7),
        ]
    )
    s = find_steps(load_trace(str(p)))
    assert s.start.tolist() == [0, 36_000, 36_000] and s.end.tolist() == [36_000, 36_000, 120_000]


def test_string_mask_asks_once_for_the_step_names_and_agrees(write_trace):
    """``steps_alike`` asks the predicate once for all plain step names; for a predicate
    that cannot tell them apart the mask is the one a walk over every name gives."""
    p = write_trace([X(f"ProfilerStep#{k}", 10 * k, 5) for k in range(5)] + [X("gloo:x", 60, 1)])
    t = load_trace(str(p))
    asked: list[str] = []

    def pred(s: str) -> bool:
        asked.append(s)
        return s.startswith(("Profiler", "gloo:"))

    alike = t.string_mask(pred, steps_alike=True)
    assert sum(s.startswith("ProfilerStep#") for s in asked) == 1
    assert alike.tolist() == t.string_mask(pred).tolist()
