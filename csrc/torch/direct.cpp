// The direct binding, the Python module cake_rmsnorm._direct: the op bodies called from Python
// without the dispatcher. Its functions take the registered ops' arguments and run the same
// bodies (ops_impl.h), so outputs are the ops' bits. It is a library of its own so that _C,
// which C and C++ programs link, references no Python symbol; the C API it calls resolves
// from _C, which cake_rmsnorm/_lib.py loads into the global namespace first. Tensors cross through the
// stable ABI's Python shims where torch has them (>= 2.14, looked up at run time so the library
// still loads on older torch). On torch 2.10-2.13 they cross the way those shims do it inside
// torch: the tensor a torch.Tensor object holds (THPVariable's `cdata`, an at::Tensor right after
// the object header since 2.10) and torch's exported THPVariable_Wrap. setup() proves that layout
// on a probe tensor before turning it on; where anything differs it answers None and Python keeps
// to the registered ops.
//
// A call answers NotImplemented (the caller then takes the registered op) when an argument is
// not a plain torch.Tensor or Parameter (subclasses, fake and functional tensors go through
// the dispatcher, which serves them), or x is on neither the CPU nor a CUDA device.
#include <Python.h>

#include <dlfcn.h>

#include <exception>

#include "ops_impl.h"
#include "streams.h"

namespace {

using cake_torch::Tensor;
using torch::headeronly::ScalarType;

using FromPy = AOTITorchError (*)(void*, AtenTensorHandle*);
using ToPy = AOTITorchError (*)(AtenTensorHandle, void*, void**);
using WrapRef = PyObject* (*)(const void*);  // THPVariable_Wrap(const at::TensorBase&)

struct Shims {
  FromPy from = nullptr;  // the stable shims (torch >= 2.14) ...
  ToPy to = nullptr;
  WrapRef wrap_ref = nullptr;  // ... or the object layout and THPVariable_Wrap (2.10-2.13)
  PyTypeObject* tensor = nullptr;
  PyTypeObject* parameter = nullptr;
  PyObject* dtypes[3] = {nullptr, nullptr, nullptr};  // torch.bfloat16, torch.float16, torch.float32
} g;

struct NotServed {};  // an argument the direct path leaves to the dispatcher

bool plain(PyObject* o) { return Py_TYPE(o) == g.tensor || Py_TYPE(o) == g.parameter; }

// The at::Tensor a torch.Tensor object holds, borrowed (the layout binding).
AtenTensorHandle held(PyObject* o) {
  return reinterpret_cast<AtenTensorHandle>(reinterpret_cast<char*>(o) + sizeof(PyObject));
}

Tensor tensor(PyObject* o) {
  if (!plain(o)) throw NotServed{};
  AtenTensorHandle h = nullptr;
  const AOTITorchError err = g.from ? g.from(o, &h) : aoti_torch_new_tensor_handle(held(o), &h);
  if (err != AOTI_TORCH_SUCCESS) throw NotServed{};
  return Tensor(h);
}

std::optional<Tensor> opt_tensor(PyObject* o) {
  if (o == Py_None) return std::nullopt;
  return tensor(o);
}

std::optional<ScalarType> opt_dtype(PyObject* o) {
  if (o == Py_None) return std::nullopt;
  if (o == g.dtypes[0]) return ScalarType::BFloat16;
  if (o == g.dtypes[1]) return ScalarType::Half;
  if (o == g.dtypes[2]) return ScalarType::Float;
  throw NotServed{};
}

double number(PyObject* o) {
  const double v = PyFloat_AsDouble(o);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw NotServed{};
  }
  return v;
}

int64_t integer(PyObject* o) {
  const long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw NotServed{};
  }
  return v;
}

bool flag(PyObject* o) {
  if (o != Py_True && o != Py_False) throw NotServed{};
  return o == Py_True;
}

PyObject* wrap(const Tensor& t) {
  void* out = nullptr;
  if (g.to != nullptr) {
    if (g.to(t.get(), nullptr, &out) != AOTI_TORCH_SUCCESS) throw std::runtime_error("cannot wrap a tensor");
  } else {
    out = g.wrap_ref(t.get());  // an AtenTensorHandle is an at::Tensor*
    if (out == nullptr) throw std::runtime_error("cannot wrap a tensor");
  }
  return static_cast<PyObject*>(out);
}

PyObject* wrap_all(std::initializer_list<const Tensor*> ts) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(ts.size()));
  if (tuple == nullptr) return nullptr;
  Py_ssize_t i = 0;
  for (const Tensor* t : ts) {
    PyObject* o = wrap(*t);
    PyTuple_SetItem(tuple, i++, o);  // steals o
  }
  return tuple;
}

// x's device picks the body: CPU or CUDA (the CUDA one refuses in a CPU-only library).
template <typename Fn>
PyObject* on_device(const Tensor& x, Fn&& fn) {
  const int32_t d = cake_torch::device_type(x);
  if (d == aoti_torch_device_type_cpu()) return fn(cake_torch::Ops<cake_torch::CpuStream>{});
  if (d == aoti_torch_device_type_cuda()) return fn(cake_torch::Ops<cake_torch::CudaStream>{});
  throw NotServed{};
}

template <typename Body>
PyObject* guarded(Py_ssize_t nargs, Py_ssize_t want, Body&& body) {
  if (nargs != want) {
    PyErr_Format(PyExc_TypeError, "expected %zd arguments, got %zd", want, nargs);
    return nullptr;
  }
  try {
    return body();
  } catch (const NotServed&) {
    Py_RETURN_NOTIMPLEMENTED;
  } catch (const std::exception& e) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// A body's outputs as Python: one tensor, or a tuple of them.
PyObject* give(const Tensor& t) { return wrap(t); }
template <typename... Ts>
PyObject* give(const std::tuple<Ts...>& ts) {
  return std::apply([](const auto&... t) { return wrap_all({&t...}); }, ts);
}

#define CAKE_FAST(name, doc) {#name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(name)), METH_FASTCALL, doc}
#include "gen/direct_ops.h"  // one function an op, from the op table

void* torch_symbol(const char* lib_name, const char* name) {
  void* sym = dlsym(RTLD_DEFAULT, name);
  if (sym == nullptr) {
    if (void* lib = dlopen(lib_name, RTLD_LAZY | RTLD_NOLOAD)) sym = dlsym(lib, name);
  }
  return sym;
}

// The layout binding holds where the probe's object carries its TensorImpl (Tensor._cdata) right
// after the header, and a tensor taken from it wraps back to the very same object.
bool layout_holds(PyObject* probe, PyObject* cdata) {
  g.wrap_ref = reinterpret_cast<WrapRef>(torch_symbol("libtorch_python.so", "_Z16THPVariable_WrapRKN2at10TensorBaseE"));
  const auto impl = PyLong_AsVoidPtr(cdata);
  if (g.wrap_ref == nullptr || impl == nullptr || *reinterpret_cast<void**>(held(probe)) != impl) {
    PyErr_Clear();
    return false;
  }
  AtenTensorHandle h = nullptr;
  if (aoti_torch_new_tensor_handle(held(probe), &h) != AOTI_TORCH_SUCCESS) return false;
  PyObject* back = g.wrap_ref(h);
  aoti_torch_delete_tensor_object(h);
  const bool same = back == probe;
  Py_XDECREF(back);
  if (back == nullptr) PyErr_Clear();
  return same;
}

// setup(torch.Tensor, torch.nn.Parameter, (torch.bfloat16, torch.float16, torch.float32), probe,
// probe._cdata, binding) -> the binding turned on ("shims" or "layout"), or None (the registered
// ops serve every call). binding: "auto" (the shims where torch has them, else the layout),
// "shims", "layout" or "off".
PyObject* setup(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (n != 6 || !PyType_Check(a[0]) || !PyType_Check(a[1]) || !PyTuple_Check(a[2]) || PyTuple_Size(a[2]) != 3 ||
      Py_TYPE(a[3]) != reinterpret_cast<PyTypeObject*>(a[0]) || !PyUnicode_Check(a[5])) {
    PyErr_SetString(PyExc_TypeError, "setup(Tensor, Parameter, (bfloat16, float16, float32), probe, probe._cdata, binding)");
    return nullptr;
  }
  const auto is = [&](const char* name) { return PyUnicode_CompareWithASCIIString(a[5], name) == 0; };
  g = Shims{};
  if (is("auto") || is("shims")) {
    g.from = reinterpret_cast<FromPy>(torch_symbol("libtorch_cpu.so", "torch_tensor_from_pyobject"));
    g.to = reinterpret_cast<ToPy>(torch_symbol("libtorch_cpu.so", "torch_tensor_to_pyobject"));
    if (g.from == nullptr || g.to == nullptr) g.from = nullptr, g.to = nullptr;
  }
  const char* on = g.from ? "shims" : nullptr;
  if (on == nullptr && (is("auto") || is("layout")) && layout_holds(a[3], a[4])) on = "layout";
  if (on == nullptr) {
    g = Shims{};
    Py_RETURN_NONE;
  }
  // Module-lifetime references: the types and dtypes are compared by identity.
  Py_INCREF(a[0]);
  Py_INCREF(a[1]);
  g.tensor = reinterpret_cast<PyTypeObject*>(a[0]);
  g.parameter = reinterpret_cast<PyTypeObject*>(a[1]);
  for (Py_ssize_t i = 0; i < 3; ++i) {
    g.dtypes[i] = PyTuple_GetItem(a[2], i);
    Py_INCREF(g.dtypes[i]);
  }
  return PyUnicode_FromString(on);
}


PyMethodDef kMethods[] = {
    CAKE_FAST(setup, "Choose how tensors cross (the stable shims or the object layout); None where neither can."),
    CAKE_DIRECT_METHODS,
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "cake_rmsnorm._direct", "The ops' bodies without the dispatcher.", -1,
                       kMethods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

extern "C" __attribute__((visibility("default"))) PyObject* PyInit__direct(void) { return PyModule_Create(&kModule); }
