// _braid_torch: the Python extension module behind python/braid/torch.py. It exposes
// ProcessGroupBraid as a subclass of torch's ProcessGroup (so Python sees a ProcessGroup that
// torch.distributed and DDP use like any other) with the two constructors the backend's creator
// calls. Loaded by python/braid/_library.py after libbraid.so, which it links.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group_braid.h"

namespace py = pybind11;
using braid_torch::ProcessGroupBraid;

PYBIND11_MODULE(_braid_torch, m) {
  m.doc() = "braid's torch.distributed backend (see python/braid/torch.py)";
  // torch's ProcessGroup and Store must be registered before the subclass refers to them.
  py::module::import("torch.distributed");
  int version = 0;
  braidGetVersion(&version);
  m.attr("braid_version") = version;
  py::class_<ProcessGroupBraid, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupBraid>>(
      m, "ProcessGroupBraid")
      .def_static("create", &ProcessGroupBraid::Create, py::arg("store"), py::arg("rank"),
                  py::arg("size"), py::arg("timeout"),
                  "A group of `size` ranks that meet through `store` (collective over them).",
                  py::call_guard<py::gil_scoped_release>())
      .def_static("create_view", &ProcessGroupBraid::CreateView, py::arg("parent"),
                  py::arg("ranks"), py::arg("name"),
                  "A view of `parent` on `ranks` (its ranks), made by those ranks only.",
                  py::call_guard<py::gil_scoped_release>())
      .def("describe", &ProcessGroupBraid::describe,
           "braidCommDescribe: rank, host, pid and transports of this group's communicator.")
      .def_property_readonly(
          "comm_handle",
          [](const ProcessGroupBraid& pg) { return reinterpret_cast<uintptr_t>(pg.comm()); },
          "The braidComm_t, for ctypes calls into libbraid.so (python/braid).");
}
