/* Optional C accelerator for tb_monitor: the window accumulator behind Stat.add, and the
 * scalar-record encoder behind the TensorBoard writer (the second section, further down).
 *
 * Accumulator keeps count, sum, min, max and the last sample of the current window. Every
 * method runs without releasing the GIL between reading and updating its fields, so on a GIL
 * build each call is atomic and many threads can add to one Stat without a lock. Free-threaded
 * builds (Py_GIL_DISABLED) get an empty module and tb_monitor uses its pure-Python accumulator,
 * which has the same behaviour (tb_monitor/_stat.py: _PyAccumulator).
 *
 * tb_monitor.Stat subclasses it (so stat.add is this C method) and provides two hooks, called
 * with the GIL held:
 *   _on_cap(snapshot)  the window reached max_samples: snapshot is the closed window;
 *   _revive()          first add in a forked child (the timer thread must be restarted).
 * A snapshot is the tuple (count, sum, min, max, last).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef Py_GIL_DISABLED

enum { OPEN = 0, CAPPED = 1, CLOSED = 2, FORKED = 3 };

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

/* The value as a double: floats, ints and bools directly, anything else through __float__ or
 * __index__ (numpy scalars, 0-d tensors). Non-numbers raise a TypeError naming the Stat; a
 * failed conversion (an int too large for a double, a numpy array) is re-raised naming it. */
static int
as_double(Accumulator *self, PyObject *value, double *out)
{
    if (PyFloat_Check(value)) {
        *out = PyFloat_AS_DOUBLE(value);
        return 0;
    }
    if (PyLong_Check(value)) {
        *out = PyLong_AsDouble(value);
        return (*out == -1.0 && PyErr_Occurred()) ? conversion_error(self, value) : 0;
    }
    PyNumberMethods *nb = Py_TYPE(value)->tp_as_number;
    if (nb != NULL && nb->nb_float != NULL) {
        *out = PyFloat_AsDouble(value);
        return (*out == -1.0 && PyErr_Occurred()) ? conversion_error(self, value) : 0;
    }
    if (nb != NULL && nb->nb_index != NULL) {
        PyObject *index = PyNumber_Index(value);
        if (index == NULL) {
            return conversion_error(self, value);
        }
        *out = PyLong_AsDouble(index);
        Py_DECREF(index);
        return (*out == -1.0 && PyErr_Occurred()) ? conversion_error(self, value) : 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "Stat %R: add() takes a real number (int, float, bool or a numpy scalar), "
                 "got %.200R of type %.100s",
                 self->name, value, Py_TYPE(value)->tp_name);
    return -1;
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
    if (self->state == CAPPED) {
        self->state = OPEN;
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
    .tp_name = "tb_monitor._speedups.Accumulator",
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

/* ------------------------------------------------------------------------------------------
 * Scalar event records, for tb_monitor/tensorboard/writer.py (its _encode loop).
 *
 * encode_scalars(items, start, prefixes, steps, out) appends the TFRecord-framed Event of each
 * plain scalar item items[start], items[start + 1], ... to the bytearray out, and returns the
 * index of the first item it leaves to the writer's Python encoder: another kind of record, a
 * tag without a cached prefix yet, or any value outside the common case (a non-float wall time,
 * an int too large for a double, a value beyond float32, a step beyond int64). It never raises
 * for such data, so the Python encoder stays the single place that decides the unusual cases,
 * and the two produce byte-identical files (tests/tensorboard/test_writer.py checks it).
 *
 * An item is the writer's queue tuple (0, tag, value, wall_time, step or None); prefixes maps a
 * tag to the bytes of its Event after the step and before the float32 value (writer.py:
 * _scalar_prefix); steps maps a tag to its next step and is updated here.
 *
 * Why in C: the Python loop costs ~1.5 us per record and takes the GIL from the training
 * thread; this costs ~0.1 us. Why its own CRC32C rather than google_crc32c: a record is ~40
 * bytes, and calling back into Python per record would cost more than the checksum itself. The
 * table-driven loop below is the textbook one (Castagnoli polynomial, reflected); tests compare
 * it with google_crc32c through the Python encoder.
 * ------------------------------------------------------------------------------------------ */

#ifndef Py_GIL_DISABLED /* like the Accumulator: the writer's Python encoder covers these builds */

#if PY_VERSION_HEX < 0x030B0000 /* public names since 3.11 */
#define PyFloat_Pack4 _PyFloat_Pack4
#define PyFloat_Pack8 _PyFloat_Pack8
#endif

static uint32_t crc32c_table[256];

static void
crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int bit = 0; bit < 8; bit++) {
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
        }
        crc32c_table[i] = crc;
    }
}

/* TFRecord's masked CRC32C (records.masked_crc32c). */
static uint32_t
masked_crc32c(const unsigned char *data, size_t size)
{
    uint32_t crc = 0xFFFFFFFFu;
    while (size--) {
        crc = crc32c_table[(crc ^ *data++) & 0xFF] ^ (crc >> 8);
    }
    crc ^= 0xFFFFFFFFu;
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

static unsigned char *
put_u32_le(unsigned char *p, uint32_t value)
{
    for (int i = 0; i < 4; i++) {
        *p++ = (unsigned char)(value >> (8 * i));
    }
    return p;
}

/* Protobuf varint; an int64 is encoded as its 64-bit two's complement, as protobuf does. */
static unsigned char *
put_varint(unsigned char *p, uint64_t value)
{
    while (value >= 0x80) {
        *p++ = (unsigned char)((value & 0x7F) | 0x80);
        value >>= 7;
    }
    *p++ = (unsigned char)value;
    return p;
}

/* An int step as int64; 0 (leave it to Python) when it is not an int or is out of range. */
static int
as_step(PyObject *obj, long long *out)
{
    int overflow;
    if (!PyLong_Check(obj)) {
        return 0;
    }
    *out = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return *out < LLONG_MAX; /* the next step must fit too */
}

/* The value as float32 bytes, as struct.pack("<f") makes them; 0 when Python must decide. */
static int
pack_value(PyObject *value, unsigned char *out)
{
    double x;
    if (PyFloat_CheckExact(value)) {
        x = PyFloat_AS_DOUBLE(value);
    }
    else if (PyLong_CheckExact(value)) {
        x = PyLong_AsDouble(value);
        if (x == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
    }
    else {
        return 0;
    }
    if (PyFloat_Pack4(x, (void *)out, 1) < 0) { /* beyond float32; (void *): char * since 3.11 */
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* Frame one Event at the end of out. Returns -1 (MemoryError) or 0. */
static int
append_record(PyObject *out, double wall_time, long long step, PyObject *prefix,
              const unsigned char *value)
{
    Py_ssize_t prefix_size = PyBytes_GET_SIZE(prefix);
    unsigned char step_field[11];
    Py_ssize_t step_size = put_varint(step_field, (uint64_t)step) - step_field;
    Py_ssize_t data_size = 1 + 8 + 1 + step_size + prefix_size + 4;
    Py_ssize_t old_size = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, old_size + 8 + 4 + data_size + 4) < 0) {
        return -1;
    }
    unsigned char *p = (unsigned char *)PyByteArray_AS_STRING(out) + old_size;
    unsigned char *length = p;
    p = put_u32_le(p, (uint32_t)data_size);
    p = put_u32_le(p, 0); /* the high half of the u64 length */
    p = put_u32_le(p, masked_crc32c(length, 8));
    unsigned char *data = p;
    *p++ = 0x09; /* Event.wall_time: double */
    if (PyFloat_Pack8(wall_time, (void *)p, 1) < 0) {
        return -1;
    }
    p += 8;
    *p++ = 0x10; /* Event.step: varint */
    memcpy(p, step_field, step_size);
    p += step_size;
    memcpy(p, PyBytes_AS_STRING(prefix), prefix_size); /* Event.summary up to simple_value */
    p += prefix_size;
    memcpy(p, value, 4);
    p += 4;
    put_u32_le(p, masked_crc32c(data, data_size));
    return 0;
}

static PyObject *
encode_scalars(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[2]) ||
        !PyDict_CheckExact(args[3]) || !PyByteArray_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_scalars(items: list, start: int, prefixes: dict, steps: dict, "
                        "out: bytearray)");
        return NULL;
    }
    PyObject *items = args[0], *prefixes = args[2], *steps = args[3], *out = args[4];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start < 0) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "start must be >= 0, got %zd", start);
        }
        return NULL;
    }
    Py_ssize_t i = start;
    for (; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 5) {
            break;
        }
        PyObject *kind = PyTuple_GET_ITEM(item, 0), *tag = PyTuple_GET_ITEM(item, 1);
        PyObject *wall_time = PyTuple_GET_ITEM(item, 3), *step = PyTuple_GET_ITEM(item, 4);
        /* Exact str tags only: their hash and == run no Python code, so the borrowed
         * references taken from the dicts below stay valid. */
        int overflow;
        if (!PyLong_CheckExact(kind) || PyLong_AsLongAndOverflow(kind, &overflow) != 0 ||
            overflow || !PyUnicode_CheckExact(tag) || !PyFloat_CheckExact(wall_time)) {
            break;
        }
        unsigned char value[4];
        if (!pack_value(PyTuple_GET_ITEM(item, 2), value)) {
            break;
        }
        PyObject *prefix = PyDict_GetItemWithError(prefixes, tag);
        if (prefix == NULL || !PyBytes_CheckExact(prefix)) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            break;
        }
        long long this_step = 0;
        if (step == Py_None) {
            PyObject *next = PyDict_GetItemWithError(steps, tag);
            if (next == NULL && PyErr_Occurred()) {
                return NULL;
            }
            if (next != NULL && !as_step(next, &this_step)) {
                break;
            }
        }
        else if (!as_step(step, &this_step)) {
            break;
        }
        PyObject *next_step = PyLong_FromLongLong(this_step + 1);
        if (next_step == NULL) {
            return NULL;
        }
        Py_INCREF(prefix); /* setting steps[tag] below must not be able to free it */
        int failed = PyDict_SetItem(steps, tag, next_step) < 0 ||
                     append_record(out, PyFloat_AS_DOUBLE(wall_time), this_step, prefix, value) < 0;
        Py_DECREF(prefix);
        Py_DECREF(next_step);
        if (failed) {
            return NULL;
        }
    }
    return PyLong_FromSsize_t(i);
}

static PyMethodDef speedups_methods[] = {
    {"encode_scalars", (PyCFunction)(void (*)(void))encode_scalars, METH_FASTCALL,
     "encode_scalars(items, start, prefixes, steps, out) -> index of the first item not "
     "encoded.\n\nAppend the framed Event of each plain scalar item from items[start] to the "
     "bytearray out (see tb_monitor/tensorboard/writer.py)."},
    {NULL, NULL, 0, NULL},
};

#endif /* !Py_GIL_DISABLED */

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tb_monitor._speedups",
    .m_doc = "Optional C accelerator for tb_monitor.Stat (see tb_monitor/_stat.py) and the "
             "TensorBoard writer (see tb_monitor/tensorboard/writer.py).",
    .m_size = -1,
#ifndef Py_GIL_DISABLED
    .m_methods = speedups_methods,
#endif
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
#ifdef Py_GIL_DISABLED
    /* No Accumulator here: its atomicity relies on the GIL. */
    PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED);
#else
    crc32c_init();
    str_on_cap = PyUnicode_InternFromString("_on_cap");
    str_revive = PyUnicode_InternFromString("_revive");
    if (str_on_cap == NULL || str_revive == NULL || PyType_Ready(&AccumulatorType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&AccumulatorType);
    if (PyModule_AddObject(module, "Accumulator", (PyObject *)&AccumulatorType) < 0) {
        Py_DECREF(&AccumulatorType);
        Py_DECREF(module);
        return NULL;
    }
#endif
    return module;
}
