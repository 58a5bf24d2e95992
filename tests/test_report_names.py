"""Shortened op names keep what tells two ops apart: leading qualifiers go first."""

from __future__ import annotations

from tracescale.report.names import short_name, short_names

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def test_dataloader_iterators_stay_distinguishable() -> None:
    assert short_names([SINGLE, MULTI]) == [
        "…_SingleProcessDataLoaderIter.__next__",
        "…_MultiProcessingDataLoaderIter.__next__",
    ]
    assert short_name(SINGLE) == SINGLE  # fits a sentence whole
    assert short_name(MULTI) == "…_MultiProcessingDataLoaderIter.__next__"


def test_qualifiers_go_before_a_middle_cut() -> None:
    name = "autograd::engine::evaluate_function: AddmmBackward0"
    assert short_name(name, 48) == "…engine::evaluate_function: AddmmBackward0"
    # never down to a bare last part when the name has several qualifiers
    assert short_name(SINGLE, 30) == "enumerate(Data…erIter.__next__"
    # no qualifier at all: cut in the middle, as long as asked
    assert short_name("k" * 30 + "_" + "z" * 30, 21) == "k" * 10 + "…" + "z" * 10
    kernel = (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel"
        "<at::native::TensorListMetadata<4>, float>(int, float*)"
    )
    assert short_name(kernel, 48) == "at::native::(anon)::multi_tensor_apply_kernel<…>"
    assert short_name(kernel, 40) == "…(anon)::multi_tensor_apply_kernel<…>"
