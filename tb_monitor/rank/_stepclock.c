/* Optional C step clock for tb_monitor's rank health: torch's optimizer step post-hook.
 *
 * Every optimizer step of a training job calls the hook. Inside torch's step wrapper each
 * Python-level call costs ~0.4 µs (the caches are cold between steps), so the hook is a C
 * callable that makes none: StepClock(optimizer, args, kwargs) reads the clock into a growing
 * buffer when `optimizer` is the one whose steps count (the first seen), and returns. The Stat
 * work happens off the training thread: drain() hands the times over to the timer thread at each
 * window's end (tb_monitor/rank/health.py: RankHealth._drain_steps).
 *
 * Times are CLOCK_MONOTONIC seconds, what time.perf_counter() reads on Linux; elsewhere the
 * module is empty and tb_monitor uses the pure-Python hook, as on free-threaded builds (every
 * method runs without releasing the GIL, which is what makes them atomic).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_module.h"

#if defined(__linux__) && !defined(Py_GIL_DISABLED)
#define HAVE_STEPCLOCK 1
#include <time.h>
#endif

#ifdef HAVE_STEPCLOCK

/* Whose steps count: none seen yet, one optimizer (by address, as id() gives it), or only
 * manual steps (tb_monitor.step()). */
enum { UNSET = 0, OPTIMIZER = 1, MANUAL = 2 };

typedef struct {
    PyObject_HEAD
    double *times;
    Py_ssize_t length;
    Py_ssize_t capacity;
    Py_ssize_t max_pending;
    void *owner;
    int owner_kind;
} StepClock;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Keep one time. Past max_pending (no drain for that long: the timer thread, which drains at
 * every window's end, is gone, and nothing would record them) or out of memory, it is not
 * kept: never an exception in the training loop. */
static void
keep(StepClock *self, double t)
{
    if (self->length == self->capacity) {
        if (self->capacity >= self->max_pending) {
            return;
        }
        Py_ssize_t capacity = self->capacity ? self->capacity * 2 : 256;
        if (capacity > self->max_pending) {
            capacity = self->max_pending;
        }
        double *grown = PyMem_Realloc(self->times, (size_t)capacity * sizeof(double));
        if (grown == NULL) {
            return;
        }
        self->times = grown;
        self->capacity = capacity;
    }
    self->times[self->length++] = t;
}

static int
StepClock_init(StepClock *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_pending", NULL};
    Py_ssize_t max_pending;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kwlist, &max_pending)) {
        return -1;
    }
    if (max_pending < 1) {
        PyErr_Format(PyExc_ValueError, "max_pending must be >= 1, got %zd", max_pending);
        return -1;
    }
    self->max_pending = max_pending;
    self->owner = NULL;
    self->owner_kind = UNSET;
    return 0;
}

static void
StepClock_dealloc(StepClock *self)
{
    PyMem_Free(self->times);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The hook: (optimizer, args, kwargs), as torch calls it. */
static PyObject *
StepClock_call(StepClock *self, PyObject *args, PyObject *Py_UNUSED(kwds))
{
    if (PyTuple_GET_SIZE(args) < 1) {
        PyErr_SetString(PyExc_TypeError, "StepClock(optimizer, args, kwargs) needs an optimizer");
        return NULL;
    }
    void *optimizer = (void *)PyTuple_GET_ITEM(args, 0);
    if (self->owner_kind == UNSET) {
        self->owner = optimizer;
        self->owner_kind = OPTIMIZER;
    }
    if (self->owner_kind == OPTIMIZER && optimizer == self->owner) {
        keep(self, now());
    }
    Py_RETURN_NONE;
}

static PyObject *
StepClock_manual(StepClock *self, PyObject *Py_UNUSED(ignored))
{
    self->owner_kind = MANUAL;
    self->owner = NULL;
    keep(self, now());
    Py_RETURN_NONE;
}

static PyObject *
StepClock_drain(StepClock *self, PyObject *Py_UNUSED(ignored))
{
    /* Building the list may collect garbage, run finalizers and so let the training thread
     * keep more times: hand over the first n, keep the rest for the next drain. */
    Py_ssize_t n = self->length;
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyFloat_FromDouble(self->times[i]);
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    Py_ssize_t rest = self->length - n;
    if (rest > 0) {
        memmove(self->times, self->times + n, (size_t)rest * sizeof(double));
    }
    self->length = rest;
    return out;
}

static PyObject *
StepClock_clear(StepClock *self, PyObject *Py_UNUSED(ignored))
{
    self->length = 0;
    Py_RETURN_NONE;
}

static PyObject *
StepClock_now(PyObject *Py_UNUSED(cls), PyObject *Py_UNUSED(ignored))
{
    return PyFloat_FromDouble(now());
}

static PyMethodDef StepClock_methods[] = {
    {"manual", (PyCFunction)StepClock_manual, METH_NOARGS,
     "A step boundary by hand (tb_monitor.step()): from now on only these count."},
    {"drain", (PyCFunction)StepClock_drain, METH_NOARGS,
     "The step times kept since the last drain, oldest first, and forget them."},
    {"clear", (PyCFunction)StepClock_clear, METH_NOARGS,
     "Forget the times kept (a forked child's are its parent's)."},
    {"now", (PyCFunction)StepClock_now, METH_NOARGS | METH_CLASS,
     "The clock the times are read from (CLOCK_MONOTONIC seconds, as time.perf_counter)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StepClockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tb_monitor.rank._stepclock.StepClock",
    .tp_doc = PyDoc_STR("StepClock(max_pending): torch's optimizer step post-hook, in C."),
    .tp_basicsize = sizeof(StepClock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)StepClock_init,
    .tp_dealloc = (destructor)StepClock_dealloc,
    .tp_call = (ternaryfunc)StepClock_call,
    .tp_methods = StepClock_methods,
};

#endif /* HAVE_STEPCLOCK */

static struct PyModuleDef stepclock_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tb_monitor.rank._stepclock",
    .m_doc = "Optional C step clock for tb_monitor's rank health (see rank/health.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__stepclock(void)
{
#ifdef HAVE_STEPCLOCK
    return tb_monitor_module(&stepclock_module, &StepClockType);
#else
    return tb_monitor_module(&stepclock_module, NULL);
#endif
}
