// The work of a fast step's first pack of a swapped or recomputed tensor, written in C++ for
// `bench_pack_in_cpp.py`: how long that work takes inside a training step when no Python runs
// it. The runtime does not use this file.
//
// Per pack, as `slackswap.runtime.training.fast.FastStep._pack` does for such a pack (the copy
// to the host and the random operators' RNG notes aside): the pack program's checks (shape,
// dtype, storage bytes against the first step's), whether the tensor is its whole storage, the
// entry's state, the storage counted until it is freed (as `SavedBytesTracker` counts it: live
// bytes and the peak with the operator's transient bytes; a freed storage found by its weak
// reference instead of a callback), and a handle for autograd (here a tuple).
#include <torch/extension.h>
#include <torch/csrc/autograd/python_variable.h>

#include <vector>

namespace {

struct Pack {
  std::vector<int64_t> shape;
  c10::ScalarType dtype;
  int64_t nbytes;
  int64_t entry;
  int64_t op;  // the operator that made it: its transient bytes count at the peak
};

struct Entry {
  int state = 0;  // 0 not saved, 1 saved
  int64_t handles = 0;
};

struct Counted {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  int64_t nbytes;
};

std::vector<Pack> program;
std::vector<Entry> entries;
std::vector<Counted> counted;
std::vector<int64_t> transient;
int64_t peak = 0;
int64_t peak_op = -1;

// pack_at(k, tensor): the k-th pack of the step; a handle (entry, whole), or an error.
PyObject* pack_at(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "pack_at(k, tensor)");
    return nullptr;
  }
  const long k = PyLong_AsLong(args[0]);
  if (k < 0 || k >= static_cast<long>(program.size())) {
    PyErr_SetString(PyExc_IndexError, "more packs than the program has");
    return nullptr;
  }
  const at::Tensor& t = THPVariable_Unpack(args[1]);
  const Pack& p = program[k];
  if (t.sizes() != c10::IntArrayRef(p.shape) || t.scalar_type() != p.dtype) {
    PyErr_SetString(PyExc_RuntimeError, "another shape or dtype than the first step's");
    return nullptr;
  }
  const c10::Storage& storage = t.storage();
  if (static_cast<int64_t>(storage.nbytes()) != p.nbytes) {
    PyErr_SetString(PyExc_RuntimeError, "another storage size than the first step's");
    return nullptr;
  }
  const bool whole = t.is_contiguous() && t.storage_offset() == 0;
  Entry& e = entries[p.entry];
  e.state = 1;
  e.handles += 1;
  // Live bytes now: the storages still alive, this one added.
  int64_t live = 0;
  size_t kept = 0;
  for (auto& c : counted) {
    if (!c.storage.expired()) {
      live += c.nbytes;
      counted[kept++] = std::move(c);
    }
  }
  counted.erase(counted.begin() + kept, counted.end());
  counted.push_back({storage.getWeakStorageImpl(), p.nbytes});
  live += p.nbytes;
  if (live + transient[p.op] > peak) {
    peak = live + transient[p.op];
    peak_op = p.op;
  }
  return Py_BuildValue("(lO)", static_cast<long>(p.entry), whole ? Py_True : Py_False);
}

PyMethodDef pack_at_def = {"pack_at", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(pack_at)),
                           METH_FASTCALL, "pack_at(k, tensor): the k-th pack's work; a handle"};

// start(program, entries, transient): a new step of the plan whose pack program this is, as
// (shape, dtype, storage bytes, entry, operator) per pack.
void start(py::list packs, int64_t n_entries, std::vector<int64_t> transient_bytes) {
  program.clear();
  for (auto item : packs) {
    auto p = item.cast<py::tuple>();
    program.push_back({p[0].cast<std::vector<int64_t>>(),
                       torch::python::detail::py_object_to_dtype(p[1]), p[2].cast<int64_t>(),
                       p[3].cast<int64_t>(), p[4].cast<int64_t>()});
  }
  entries.assign(n_entries, Entry{});
  counted.clear();
  transient = std::move(transient_bytes);
  peak = 0;
  peak_op = -1;
}

int64_t peak_bytes() { return peak; }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("start", &start);
  m.def("peak_bytes", &peak_bytes);
  m.add_object("pack_at", py::reinterpret_steal<py::object>(PyCFunction_New(&pack_at_def, nullptr)));
}
