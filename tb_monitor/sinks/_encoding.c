/* Optional C encoder of scalar event records, the twin of tb_monitor/sinks/encoding.py
 * (append_scalars), used by the writer's _encode loop (tb_monitor/sinks/writer.py).
 *
 * encode_scalars(items, start, prefixes, steps, out) appends the TFRecord-framed Event of each
 * plain scalar item items[start], items[start + 1], ... to the bytearray out, and returns the
 * index of the first item it leaves to the writer's Python encoder: another kind of record, a
 * tag without a cached prefix yet, or any value outside the common case (a non-float wall time,
 * an int too large for a double, a value beyond float32, a step beyond int64). It never raises
 * for such data, so the Python encoder stays the single place that decides the unusual cases,
 * and the two produce byte-identical files (tests/sinks/test_writer.py checks it).
 *
 * An item is the writer's queue tuple (0, tag, value, wall_time, step or None); prefixes maps a
 * tag to the bytes of its Event after the step and before the float32 value (encoding.py:
 * _scalar_prefix); steps maps a tag to its next step and is updated here.
 *
 * Why in C: the Python loop costs ~1.5 us per record and takes the GIL from the training
 * thread; this costs ~0.1 us. Its CRC32C is tb_monitor/_crc32c.h's (why not google_crc32c:
 * see there); tests compare the files with the Python encoder's, checksummed by google_crc32c.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_module.h"

#ifndef Py_GIL_DISABLED /* atomic per call only with the GIL: encoding.py covers these builds */

#if PY_VERSION_HEX < 0x030B0000 /* public names since 3.11 */
#define PyFloat_Pack4 _PyFloat_Pack4
#define PyFloat_Pack8 _PyFloat_Pack8
#endif

#include "_crc32c.h"

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

static PyMethodDef encoding_methods[] = {
    {"encode_scalars", (PyCFunction)(void (*)(void))encode_scalars, METH_FASTCALL,
     "encode_scalars(items, start, prefixes, steps, out) -> index of the first item not "
     "encoded.\n\nAppend the framed Event of each plain scalar item from items[start] to the "
     "bytearray out (see tb_monitor/sinks/encoding.py)."},
    {NULL, NULL, 0, NULL},
};

#endif /* !Py_GIL_DISABLED */

static struct PyModuleDef encoding_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tb_monitor.sinks._encoding",
    .m_doc = "Optional C encoder of scalar records (see tb_monitor/sinks/encoding.py).",
    .m_size = -1,
#ifndef Py_GIL_DISABLED
    .m_methods = encoding_methods,
#endif
};

PyMODINIT_FUNC
PyInit__encoding(void)
{
#ifndef Py_GIL_DISABLED
    crc32c_init();
#endif
    return tb_monitor_module(&encoding_module, NULL);
}
