// sf_torch's stage boundaries as C functions called through CPython's vectorcall, so a boundary
// costs about what a bare time.perf_counter_ns() costs (issue 44, part 3): the same clock read
// and one store into the recorder's ring, with no Python frame, no argument tuple and no
// pybind11 dispatch.
//
// The ring stays the Python list recorder.py has always kept (slot layout in its docstring):
// StageRing, the Recorder's C base, holds that list and the current slot's base, and its
// begin_stage/end_stage write the clock into the list. Everything off the hot path (begin_step,
// safe_point, the gather) still reads and writes the same list and `_base` from Python.
// StageSpan is the `with rec.stage(name):` block: __enter__ and __exit__ are C methods.
#include "hot_path.h"

#include <structmember.h>

#include <cstddef>
#include <cstdint>

namespace sf_torch {
namespace {

/// The clock time.perf_counter_ns() reads, without building its int first.
inline std::int64_t perf_counter_ns() {
#if PY_VERSION_HEX >= 0x030D0000
  PyTime_t t = 0;
  (void)PyTime_PerfCounterRaw(&t);  // cannot fail once the interpreter has started
  return t;
#else
  return _PyTime_GetPerfCounter();
#endif
}

// Offsets of a stage's cells in a slot (recorder.py): [3 + 2s] begin, [4 + 2s] end.
constexpr Py_ssize_t kBeginCell = 3;
constexpr Py_ssize_t kEndCell = 4;

struct StageRing {
  PyObject_HEAD
  PyObject* buf;    // the ring's list (recorder.py's _buf); nullptr until _init_ring sets it
  Py_ssize_t base;  // first cell of the slot the boundaries write (ring, pending or scratch)
  Py_ssize_t k;     // explicit stages in the schema
  PyObject* clock;  // a test's stand-in for perf_counter_ns (recorder._now replaced); nullptr: the clock
};

struct StageSpan {
  PyObject_HEAD
  StageRing* ring;
  Py_ssize_t s;
  PyObject* bound[2];  // __enter__ and __exit__ bound to this span, made once (see SpanMethod)
};

PyObject* stage_out_of_range(const StageRing* r, Py_ssize_t s) {
  PyErr_Format(PyExc_IndexError, "stage index %zd is outside the schema's %zd stages (0..%zd)", s, r->k, r->k - 1);
  return nullptr;
}

/// The stand-in clock's time (tests replace recorder._now with a function of the call count).
[[gnu::noinline]] std::int64_t stand_in_now(PyObject* clock) {
  PyObject* t = PyObject_CallNoArgs(clock);
  if (t == nullptr) return -1;
  const long long now = PyLong_AsLongLong(t);
  Py_DECREF(t);
  return now;
}

/// The clock stored at cell `cell` + 2s of the current slot: the whole boundary.
inline PyObject* store_now(StageRing* r, Py_ssize_t s, Py_ssize_t cell) {
  std::int64_t now = 0;
  if (r->clock == nullptr) [[likely]] {
    now = perf_counter_ns();
  } else if ((now = stand_in_now(r->clock)) == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  if (static_cast<std::size_t>(s) >= static_cast<std::size_t>(r->k)) [[unlikely]]
    return stage_out_of_range(r, s);
  const Py_ssize_t i = r->base + cell + 2 * s;
  if (r->buf == nullptr || static_cast<std::size_t>(i) >= static_cast<std::size_t>(PyList_GET_SIZE(r->buf)))
      [[unlikely]] {
    PyErr_SetString(PyExc_RuntimeError, "the recorder's ring is not set up (Recorder.__init__ has not run)");
    return nullptr;
  }
  PyObject* value = PyLong_FromLongLong(now);
  if (value == nullptr) [[unlikely]]
    return nullptr;
  PyObject* old = PyList_GET_ITEM(r->buf, i);
  PyList_SET_ITEM(r->buf, i, value);
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

/// A stage index as list indexing took it: an int or anything with __index__.
inline Py_ssize_t stage_arg(PyObject* arg) {
  if (PyLong_CheckExact(arg)) [[likely]]
    return PyLong_AsSsize_t(arg);
  return PyNumber_AsSsize_t(arg, PyExc_IndexError);
}

// ---- StageRing -----------------------------------------------------------------------------

PyObject* ring_begin_stage(PyObject* self, PyObject* arg) {
  const Py_ssize_t s = stage_arg(arg);
  if (s == -1 && PyErr_Occurred()) return nullptr;
  return store_now(reinterpret_cast<StageRing*>(self), s, kBeginCell);
}

PyObject* ring_end_stage(PyObject* self, PyObject* arg) {
  const Py_ssize_t s = stage_arg(arg);
  if (s == -1 && PyErr_Occurred()) return nullptr;
  return store_now(reinterpret_cast<StageRing*>(self), s, kEndCell);
}

PyObject* ring_get_buf(PyObject* self, void*) {
  auto* r = reinterpret_cast<StageRing*>(self);
  if (r->buf == nullptr) {
    PyErr_SetString(PyExc_AttributeError, "_buf");
    return nullptr;
  }
  return Py_NewRef(r->buf);
}

int ring_set_buf(PyObject* self, PyObject* value, void*) {
  if (value == nullptr || !PyList_Check(value)) {
    PyErr_SetString(PyExc_TypeError, "the recorder's ring (_buf) must be a list of ints");
    return -1;
  }
  auto* r = reinterpret_cast<StageRing*>(self);
  Py_XSETREF(r->buf, Py_NewRef(value));
  return 0;
}

PyObject* ring_get_clock(PyObject* self, void*) {
  PyObject* clock = reinterpret_cast<StageRing*>(self)->clock;
  return Py_NewRef(clock != nullptr ? clock : Py_None);
}

int ring_set_clock(PyObject* self, PyObject* value, void*) {
  if (value != nullptr && value != Py_None && !PyCallable_Check(value)) {
    PyErr_SetString(PyExc_TypeError, "the recorder's clock (_clock) must be None or a callable returning int ns");
    return -1;
  }
  auto* r = reinterpret_cast<StageRing*>(self);
  Py_XSETREF(r->clock, value == nullptr || value == Py_None ? nullptr : Py_NewRef(value));
  return 0;
}

int ring_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* r = reinterpret_cast<StageRing*>(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(r->buf);
  Py_VISIT(r->clock);
  return 0;
}

int ring_clear(PyObject* self) {
  auto* r = reinterpret_cast<StageRing*>(self);
  Py_CLEAR(r->buf);
  Py_CLEAR(r->clock);
  return 0;
}

void ring_dealloc(PyObject* self) {
  PyTypeObject* tp = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  ring_clear(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

PyMethodDef ring_methods[] = {
    {"begin_stage", ring_begin_stage, METH_O,
     "begin_stage($self, s, /)\n--\n\nStage s (its index in the schema) begins now: one perf_counter_ns() read "
     "and one store into the current slot. IndexError for an index outside the schema."},
    {"end_stage", ring_end_stage, METH_O,
     "end_stage($self, s, /)\n--\n\nStage s ends now: one perf_counter_ns() read and one store into the current "
     "slot. IndexError for an index outside the schema."},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef ring_members[] = {
    {"K", T_PYSSIZET, offsetof(StageRing, k), 0, "explicit stages in the schema"},
    {"_base", T_PYSSIZET, offsetof(StageRing, base), 0, "first cell of the slot the boundaries write"},
    {nullptr, 0, 0, 0, nullptr}};

PyGetSetDef ring_getset[] = {
    {"_buf", ring_get_buf, ring_set_buf, "the ring's slots (a list of ints, recorder.py's layout)", nullptr},
    {"_clock", ring_get_clock, ring_set_clock,
     "None (the boundaries read perf_counter_ns) or a test's stand-in clock, called instead", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot ring_slots[] = {
    {Py_tp_doc, const_cast<char*>("The stage recorder's hot path (sf_torch.Recorder's base): begin_stage and "
                                  "end_stage write the clock into the ring's current slot.")},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(ring_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(ring_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(ring_clear)},
    {Py_tp_methods, ring_methods},
    {Py_tp_members, ring_members},
    {Py_tp_getset, ring_getset},
    {0, nullptr}};

PyType_Spec ring_spec = {"sf_torch._core.StageRing", sizeof(StageRing), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, ring_slots};

// ---- StageSpan -------------------------------------------------------------------------------
//
// A `with` statement looks __enter__ and __exit__ up on the type and binds each to the object
// (_PyObject_LookupSpecial), which for a C method makes a new bound method object every time: two
// allocations per block, a third of its cost. StageSpan's type holds SpanMethod descriptors
// instead, whose binding hands out the span's own bound methods, made once with the span.

PyTypeObject* ring_type = nullptr;  // set once by add_hot_path, never released
PyTypeObject* span_type = nullptr;  // likewise

PyObject* span_enter(PyObject* self, PyObject*) {
  auto* sp = reinterpret_cast<StageSpan*>(self);
  return store_now(sp->ring, sp->s, kBeginCell);
}

PyObject* span_exit(PyObject* self, PyObject* const*, Py_ssize_t) {
  auto* sp = reinterpret_cast<StageSpan*>(self);
  PyObject* done = store_now(sp->ring, sp->s, kEndCell);
  if (done == nullptr) return nullptr;
  Py_DECREF(done);
  Py_RETURN_FALSE;  // an exception in the block goes on
}

PyMethodDef span_methods[] = {
    {"__enter__", span_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nThe stage begins: rec.begin_stage(s)."},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(span_exit)), METH_FASTCALL,
     "__exit__($self, /, *exc)\n--\n\nThe stage ends: rec.end_stage(s); returns False (an exception goes on)."},
    {nullptr, nullptr, 0, nullptr}};

PyObject* span_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"ring", "s", nullptr};
  PyObject* ring = nullptr;
  Py_ssize_t s = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!n:StageSpan", const_cast<char**>(names), ring_type, &ring, &s))
    return nullptr;
  auto* r = reinterpret_cast<StageRing*>(ring);
  if (s < 0 || s >= r->k) return stage_out_of_range(r, s);
  auto* self = reinterpret_cast<StageSpan*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->ring = reinterpret_cast<StageRing*>(Py_NewRef(ring));
  self->s = s;
  for (int i = 0; i < 2; ++i) {
    self->bound[i] = PyCFunction_NewEx(&span_methods[i], reinterpret_cast<PyObject*>(self), nullptr);
    if (self->bound[i] == nullptr) {
      Py_DECREF(self);
      return nullptr;
    }
  }
  return reinterpret_cast<PyObject*>(self);
}

int span_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* sp = reinterpret_cast<StageSpan*>(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(sp->ring);
  Py_VISIT(sp->bound[0]);
  Py_VISIT(sp->bound[1]);
  return 0;
}

int span_clear(PyObject* self) {
  auto* sp = reinterpret_cast<StageSpan*>(self);
  Py_CLEAR(sp->ring);
  Py_CLEAR(sp->bound[0]);
  Py_CLEAR(sp->bound[1]);
  return 0;
}

void span_dealloc(PyObject* self) {
  PyTypeObject* tp = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  span_clear(self);
  tp->tp_free(self);
  Py_DECREF(tp);
}

PyMemberDef span_members[] = {{"s", T_PYSSIZET, offsetof(StageSpan, s), READONLY, "the stage's index"},
                              {nullptr, 0, 0, 0, nullptr}};

PyType_Slot span_slots[] = {
    {Py_tp_doc, const_cast<char*>("StageSpan(ring, s)\n--\n\nThe `with rec.stage(name):` block of stage s: "
                                  "reusable, no allocation; __enter__/__exit__ are the ring's two boundaries.")},
    {Py_tp_new, reinterpret_cast<void*>(span_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(span_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(span_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(span_clear)},
    {Py_tp_members, span_members},
    {0, nullptr}};

PyType_Spec span_spec = {"sf_torch._core.StageSpan", sizeof(StageSpan), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                         span_slots};

// ---- SpanMethod: StageSpan.__enter__ / __exit__ ------------------------------------------------

struct SpanMethod {
  PyObject_HEAD
  PyObject* unbound;  // the plain method descriptor: what StageSpan.__enter__ is on the class
  int which;          // 0 __enter__, 1 __exit__
};

PyObject* span_method_get(PyObject* self, PyObject* obj, PyObject*) {
  auto* m = reinterpret_cast<SpanMethod*>(self);
  if (obj == nullptr || Py_TYPE(obj) != span_type) return Py_NewRef(m->unbound);
  PyObject* bound = reinterpret_cast<StageSpan*>(obj)->bound[m->which];
  if (bound == nullptr) {  // cleared by the collector while something still holds the span
    PyErr_SetString(PyExc_RuntimeError, "the stage's context manager was cleared");
    return nullptr;
  }
  return Py_NewRef(bound);
}

void span_method_dealloc(PyObject* self) {
  PyTypeObject* tp = Py_TYPE(self);
  Py_CLEAR(reinterpret_cast<SpanMethod*>(self)->unbound);
  tp->tp_free(self);
  Py_DECREF(tp);
}

PyType_Slot span_method_slots[] = {
    {Py_tp_doc, const_cast<char*>("StageSpan's __enter__/__exit__: binds to the span's own bound method.")},
    {Py_tp_descr_get, reinterpret_cast<void*>(span_method_get)},
    {Py_tp_dealloc, reinterpret_cast<void*>(span_method_dealloc)},
    {0, nullptr}};

PyType_Spec span_method_spec = {"sf_torch._core._SpanMethod", sizeof(SpanMethod), 0, Py_TPFLAGS_DEFAULT,
                                span_method_slots};

/// StageSpan.__enter__ and __exit__ as SpanMethod descriptors.
int add_span_methods() {
  PyObject* type = PyType_FromSpec(&span_method_spec);
  if (type == nullptr) return -1;
  int rc = 0;
  for (int i = 0; i < 2 && rc == 0; ++i) {
    auto* m = PyObject_New(SpanMethod, reinterpret_cast<PyTypeObject*>(type));
    if (m == nullptr) {
      rc = -1;
      break;
    }
    m->which = i;
    m->unbound = PyDescr_NewMethod(span_type, &span_methods[i]);
    if (m->unbound == nullptr ||
        PyObject_SetAttrString(reinterpret_cast<PyObject*>(span_type), span_methods[i].ml_name,
                               reinterpret_cast<PyObject*>(m)) < 0)
      rc = -1;
    Py_DECREF(m);
  }
  Py_DECREF(type);  // each descriptor holds its type
  return rc;
}

int add_type(PyObject* module, PyType_Spec* spec, PyTypeObject** out) {
  PyObject* type = PyType_FromSpec(spec);
  if (type == nullptr) return -1;
  if (PyModule_AddObjectRef(module, spec->name + sizeof("sf_torch._core.") - 1, type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  *out = reinterpret_cast<PyTypeObject*>(type);  // a reference of our own: the module is never unloaded
  return 0;
}

}  // namespace

int add_hot_path(PyObject* module) {
  if (add_type(module, &ring_spec, &ring_type) < 0 || add_type(module, &span_spec, &span_type) < 0) return -1;
  return add_span_methods();
}

}  // namespace sf_torch
