// sf_torch's hot path in C: the recorder's stage boundaries as CPython vectorcall methods.
#pragma once

#include <Python.h>

namespace sf_torch {

/// Adds StageRing (the Recorder's base: begin_stage, end_stage, the ring's list and slot base)
/// and StageSpan (the `with rec.stage(name):` context manager) to `module`; -1 with a Python
/// error set on failure.
int add_hot_path(PyObject* module);

}  // namespace sf_torch
