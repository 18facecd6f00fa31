"""benchmarks/bench_hook_instructions.py's reading of callgrind's report: which counts it sets
aside (the replayed operators, the clones) and which it keeps."""

from __future__ import annotations

from tests.support.benchmarks import load_benchmark

# Lines as `callgrind_annotate --inclusive=yes` prints them (names shortened): a function of a
# file with a path, functions of a library with no line information ("???"), C++ names with
# spaces and colons in their arguments.
REPORT = """\
--------------------------------------------------------------------------------
93,724,076 (100.0%)  PROGRAM TOTALS
--------------------------------------------------------------------------------
Ir                    file:function
--------------------------------------------------------------------------------
131,822,153 (140.6%)  /tmp/Python-3.11.7/Python/ceval.c:_PyEval_EvalFrameDefault'2 [/lib/libpython3.11.so]
 82,418,066 (87.94%)  ???:torch::jit::invokeOperatorFromPython(c10::ArrayRef<std::shared_ptr<torch::jit::Operator> >, pybind11::args const&) [/lib/libtorch_python.so]
  1,885,341 ( 2.01%)  ???:torch::autograd::THPVariable_clone(_object*, _object*, _object*) [/lib/libtorch_python.so]
"""


def test_the_operators_and_clones_are_read_from_their_own_lines() -> None:
    bench = load_benchmark("bench_hook_instructions")
    assert bench.inclusive(REPORT, bench.OPERATORS) == 82_418_066
    assert bench.inclusive(REPORT, bench.CLONES) == 1_885_341
    assert bench.inclusive(REPORT, "_PyEval_EvalFrameDefault") == 131_822_153
    assert bench.inclusive(REPORT, "torch::jit::Operator") == 0  # inside an argument list only
    assert bench.inclusive(REPORT, "at::native::addmm") == 0  # never ran: nothing set aside
