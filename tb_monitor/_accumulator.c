/* Optional C accelerator for tb_monitor.Stat: the window accumulator behind Stat.add.
 *
 * Accumulator keeps count, sum, min, max and the last sample of the current window. Every
 * method runs without releasing the GIL between reading and updating its fields, so on a GIL
 * build each call is atomic and many threads can add to one Stat without a lock. Free-threaded
 * builds (Py_GIL_DISABLED) get an empty module and tb_monitor uses its pure-Python accumulator,
 * which has the same behaviour (tb_monitor/_accumulators.py: PyAccumulator).
 *
 * tb_monitor.Stat subclasses it (so stat.add is this C method) and provides two hooks, called
 * with the GIL held:
 *   _on_cap(snapshot)  the window reached max_samples: snapshot is the closed window;
 *   _revive()          first add in a forked child (the timer thread must be restarted).
 * A snapshot is the tuple (count, sum, min, max, last).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_module.h"

#ifndef Py_GIL_DISABLED

/* DEFERRED: the window holds samples that are not numbers yet (tensors): every add goes to the
 * Stat's _add_object, in order, until the window rolls (tb_monitor/_stat.py: _StatBody). */
enum { OPEN = 0, CAPPED = 1, CLOSED = 2, FORKED = 3, DEFERRED = 4 };

typedef struct {
    PyObject_HEAD
    PyObject *name;
    long long count;
    long long max_samples;
    double sum;
    double min;
    double max;
    double last;
    int state;
} Accumulator;

static PyObject *str_on_cap;
static PyObject *str_revive;
static PyObject *str_add_object;

static int
Accumulator_init(Accumulator *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "max_samples", NULL};
    PyObject *name;
    long long max_samples;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UL", kwlist, &name, &max_samples)) {
        return -1;
    }
    if (max_samples < 1) {
        PyErr_Format(PyExc_ValueError, "Stat %R: max_samples must be >= 1, got %lld", name,
                     max_samples);
        return -1;
    }
    Py_INCREF(name);
    Py_XSETREF(self->name, name);
    self->max_samples = max_samples;
    self->count = 0;
    self->sum = self->min = self->max = self->last = 0.0;
    self->state = OPEN;
    return 0;
}

static void
Accumulator_dealloc(Accumulator *self)
{
    Py_CLEAR(self->name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Re-raise the pending conversion error with the same type, naming the Stat and the value,
 * and chained to the original (as `raise ... from exc` would). */
static int
conversion_error(Accumulator *self, PyObject *value)
{
    PyObject *type, *cause, *tb;
    PyErr_Fetch(&type, &cause, &tb);
    PyErr_NormalizeException(&type, &cause, &tb);
    if (tb != NULL && cause != NULL) {
        PyException_SetTraceback(cause, tb);
    }
    Py_XDECREF(tb);
    PyErr_Format(type, "Stat %R: add() got %.200R: %S", self->name, value, cause);
    Py_DECREF(type);
    PyObject *new_type, *exc, *new_tb;
    PyErr_Fetch(&new_type, &exc, &new_tb);
    PyErr_NormalizeException(&new_type, &exc, &new_tb);
    if (exc != NULL && cause != NULL) {
        PyException_SetCause(exc, cause); /* steals the reference to cause */
    }
    else {
        Py_XDECREF(cause);
    }
    PyErr_Restore(new_type, exc, new_tb);
    return -1;
}

/* An int or float sample as a double; an int too large for a double is an error naming the
 * Stat. Every other value went to the Stat's _add_object (tb_monitor/_accumulators.py:
 * as_float). */
static int
as_double(Accumulator *self, PyObject *value, double *out)
{
    if (PyFloat_Check(value)) {
        *out = PyFloat_AS_DOUBLE(value);
        return 0;
    }
    *out = PyLong_AsDouble(value);
    return (*out == -1.0 && PyErr_Occurred()) ? conversion_error(self, value) : 0;
}

/* The current window as a snapshot tuple (or None when empty), and a fresh window.
 * The fields are zeroed before the tuple is built: building allocates, allocation can run the
 * garbage collector, and that can run Python code and let other threads add. A sample added
 * then belongs to the fresh window and must not be zeroed away with the old one. */
static PyObject *
take_window(Accumulator *self)
{
    if (self->count == 0) {
        Py_RETURN_NONE;
    }
    long long count = self->count;
    double sum = self->sum, min = self->min, max = self->max, last = self->last;
    self->count = 0;
    self->sum = self->min = self->max = self->last = 0.0;
    PyObject *snapshot = Py_BuildValue("(Ldddd)", count, sum, min, max, last);
    if (snapshot == NULL && self->count == 0) {
        /* Nothing came in meanwhile: put the window back rather than lose it. */
        self->count = count;
        self->sum = sum;
        self->min = min;
        self->max = max;
        self->last = last;
    }
    return snapshot;
}

static PyObject *
closed_error(Accumulator *self)
{
    PyErr_Format(PyExc_RuntimeError, "Stat %R is closed; it accepts no more samples",
                 self->name);
    return NULL;
}

static PyObject *
Accumulator_add(Accumulator *self, PyObject *value)
{
    double x;
    /* Plain numbers stay here; anything else (a tensor, a numpy int, a Decimal) and every add of
     * a deferred window go to the Stat's _add_object, which keeps tensors unread (no host sync). */
    if (self->state == DEFERRED || !(PyFloat_Check(value) || PyLong_Check(value))) {
        return PyObject_CallMethodOneArg((PyObject *)self, str_add_object, value);
    }
    if (as_double(self, value, &x) < 0) {
        return NULL;
    }
    /* Converting may have run Python code (and let other threads in): check the state after. */
    while (self->state != OPEN) {
        if (self->state == CAPPED) {
            Py_RETURN_NONE; /* max_samples reached: discard until the window's end */
        }
        if (self->state == CLOSED) {
            return closed_error(self);
        }
        if (self->state == DEFERRED) {
            return PyObject_CallMethodOneArg((PyObject *)self, str_add_object, value);
        }
        PyObject *done = PyObject_CallMethodNoArgs((PyObject *)self, str_revive);
        if (done == NULL) {
            return NULL;
        }
        Py_DECREF(done);
        if (self->state == FORKED) {
            self->state = OPEN;
        }
    }
    /* NaN propagates to min and max as it does to sum (IEEE 754-2019 minimum/maximum). */
    if (self->count == 0) {
        self->min = self->max = x;
    }
    else {
        if (self->min == self->min && (x < self->min || x != x)) {
            self->min = x;
        }
        if (self->max == self->max && (x > self->max || x != x)) {
            self->max = x;
        }
    }
    self->count += 1;
    self->sum += x;
    self->last = x;
    if (self->count >= self->max_samples) {
        /* Capped before the snapshot is built, so adds that slip in meanwhile are discarded. */
        self->state = CAPPED;
        PyObject *snapshot = take_window(self);
        if (snapshot == NULL) {
            return NULL;
        }
        PyObject *result = PyObject_CallMethodOneArg((PyObject *)self, str_on_cap, snapshot);
        Py_DECREF(snapshot);
        if (result == NULL) {
            return NULL;
        }
        Py_DECREF(result);
    }
    Py_RETURN_NONE;
}

static PyObject *
Accumulator_roll(Accumulator *self, PyObject *Py_UNUSED(ignored))
{
    if (self->state == CAPPED || self->state == DEFERRED) {
        self->state = OPEN;
    }
    return take_window(self);
}

/* Route the rest of this window's adds to _add_object (from OPEN, or a forked child's first
 * add: the caller revives the timer); returns the state before. */
static PyObject *
Accumulator_defer(Accumulator *self, PyObject *Py_UNUSED(ignored))
{
    int before = self->state;
    if (before == OPEN || before == FORKED) {
        self->state = DEFERRED;
    }
    return PyLong_FromLong(before);
}

/* End the window now, discarding adds until it rolls: the snapshot of what it held. */
static PyObject *
Accumulator_cap(Accumulator *self, PyObject *Py_UNUSED(ignored))
{
    if (self->state == OPEN || self->state == DEFERRED) {
        self->state = CAPPED;
    }
    return take_window(self);
}

static PyObject *
Accumulator_close(Accumulator *self, PyObject *Py_UNUSED(ignored))
{
    self->state = CLOSED;
    return take_window(self);
}

static PyObject *
Accumulator_reset_after_fork(Accumulator *self, PyObject *Py_UNUSED(ignored))
{
    self->count = 0;
    self->sum = self->min = self->max = self->last = 0.0;
    if (self->state != CLOSED) {
        self->state = FORKED;
    }
    Py_RETURN_NONE;
}

static PyObject *
Accumulator_get_count(Accumulator *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->count);
}

static PyObject *
Accumulator_get_closed(Accumulator *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->state == CLOSED);
}

static PyObject *
Accumulator_get_name(Accumulator *self, void *Py_UNUSED(closure))
{
    if (self->name == NULL) {
        Py_RETURN_NONE;
    }
    Py_INCREF(self->name);
    return self->name;
}

static PyMethodDef Accumulator_methods[] = {
    {"add", (PyCFunction)Accumulator_add, METH_O,
     "Add one sample to the current window (discarded once max_samples is reached)."},
    {"_defer", (PyCFunction)Accumulator_defer, METH_NOARGS,
     "Route this window's further adds to _add_object; returns the state before."},
    {"_cap", (PyCFunction)Accumulator_cap, METH_NOARGS,
     "End the window now (adds are discarded until it rolls); returns its snapshot."},
    {"_roll", (PyCFunction)Accumulator_roll, METH_NOARGS,
     "End the window: return its snapshot (or None when empty) and open the next one."},
    {"_close", (PyCFunction)Accumulator_close, METH_NOARGS,
     "End the last window: return its snapshot (or None) and refuse further samples."},
    {"_reset_after_fork", (PyCFunction)Accumulator_reset_after_fork, METH_NOARGS,
     "In a forked child: drop the parent's samples; the next add calls _revive()."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Accumulator_getset[] = {
    {"count", (getter)Accumulator_get_count, NULL, "Samples in the current window.", NULL},
    {"closed", (getter)Accumulator_get_closed, NULL, "True once close() was called.", NULL},
    {"name", (getter)Accumulator_get_name, NULL, "Name of the Stat, for error messages.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject AccumulatorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tb_monitor._accumulator.Accumulator",
    .tp_doc = PyDoc_STR("Accumulator(name, max_samples): one Stat's current window, in C."),
    .tp_basicsize = sizeof(Accumulator),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Accumulator_init,
    .tp_dealloc = (destructor)Accumulator_dealloc,
    .tp_methods = Accumulator_methods,
    .tp_getset = Accumulator_getset,
};

#endif /* !Py_GIL_DISABLED */

static struct PyModuleDef accumulator_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tb_monitor._accumulator",
    .m_doc = "Optional C accumulator for tb_monitor.Stat (see tb_monitor/_stat.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__accumulator(void)
{
#ifdef Py_GIL_DISABLED
    /* No Accumulator here: its atomicity relies on the GIL. */
    return tb_monitor_module(&accumulator_module, NULL);
#else
    str_on_cap = PyUnicode_InternFromString("_on_cap");
    str_revive = PyUnicode_InternFromString("_revive");
    str_add_object = PyUnicode_InternFromString("_add_object");
    if (str_on_cap == NULL || str_revive == NULL || str_add_object == NULL) {
        return NULL;
    }
    return tb_monitor_module(&accumulator_module, &AccumulatorType);
#endif
}
