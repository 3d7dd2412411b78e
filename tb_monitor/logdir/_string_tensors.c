/* Optional C reader of an Event record's string tensors, the twin of the protobuf path in
 * tb_plugin/event_files.py (_record_tensors: Event.FromString, then records.tensor_strings).
 *
 * string_tensors(data, prefix) -> (step, [(tag, (strings, wall_time, batched)), ...]) or None
 *
 * data is one TFRecord's payload, a serialized tensorboard Event; the list holds each summary
 * value whose tag starts with prefix and whose value is a string tensor, in order: strings its
 * string_val (a tuple of bytes), batched whether it has a dimension. None means "not the common
 * case": the caller parses the record with protobuf instead, the single place that decides
 * everything unusual (a malformed or empty record, a field other than those our writers set, a
 * sub-message given twice, which protobuf would merge, another dtype, packed tensor_content, a
 * shape that does not list each string). It never raises for such data, so both readers keep
 * the same records (tests/plugin/test_event_files.py compares them on every case).
 *
 * Why in C: protobuf's Python objects cost ~16 us a record to parse and read the fields of (a
 * 1,024-node day holds 300k timeline records); this costs ~1 us, most of it the bytes objects.
 *
 * sound_records(buffer, offset, needle, prefix) -> ([(offset, item), ...], offset)
 *
 * The twin of the loop in tb_monitor/logdir/tfrecord.py (_walk) for a run of sound records: from
 * offset on, each whole record whose length and data checksums hold (CRC-32C, by SSE 4.2 where
 * the CPU has it, else by tables) and whose data hold needle, as its data, or with a prefix as
 * string_tensors' answer where that is not None. It stops at the first record it would have to
 * judge (a checksum that fails, a length beyond any record, the torn tail) and says where: _walk
 * decides that record, logs and counts the damage, and hands the rest back. Why: the framing
 * loop cost ~4 us a record in Python (~1.4 here), and a record read here is not copied twice.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_crc32c.h"
#include "_module.h"

enum { VARINT = 0, FIXED64 = 1, LENGTH = 2, FIXED32 = 5 };
enum { DT_STRING = 7 };

typedef struct {
    const unsigned char *p, *end;
} Reader;

typedef struct {
    uint32_t field, wire;
    uint64_t varint;            /* VARINT, FIXED64 (its bits) */
    const unsigned char *bytes; /* LENGTH */
    Py_ssize_t size;            /* LENGTH */
} Field;

/* The next varint of r, or 0 when r ends inside one or it runs past 10 bytes. */
static int
read_varint(Reader *r, uint64_t *out)
{
    uint64_t value = 0;
    for (int shift = 0; shift < 70 && r->p < r->end; shift += 7) {
        unsigned char byte = *r->p++;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = value;
            return 1;
        }
    }
    return 0;
}

/* The next field of r: 1 read, 0 at the end, -1 malformed or a wire type we leave (groups). */
static int
next_field(Reader *r, Field *f)
{
    if (r->p == r->end) {
        return 0;
    }
    uint64_t key;
    if (!read_varint(r, &key) || (key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF) {
        return -1;
    }
    f->field = (uint32_t)(key >> 3);
    f->wire = (uint32_t)(key & 7);
    switch (f->wire) {
    case VARINT:
        return read_varint(r, &f->varint) ? 1 : -1;
    case FIXED64:
        if (r->end - r->p < 8) {
            return -1;
        }
        memcpy(&f->varint, r->p, 8); /* little-endian hosts only: see PyInit below */
        r->p += 8;
        return 1;
    case FIXED32:
        if (r->end - r->p < 4) {
            return -1;
        }
        r->p += 4;
        return 1;
    case LENGTH: {
        uint64_t size;
        if (!read_varint(r, &size) || size > (uint64_t)(r->end - r->p)) {
            return -1;
        }
        f->bytes = r->p;
        f->size = (Py_ssize_t)size;
        r->p += size;
        return 1;
    }
    default:
        return -1;
    }
}

/* Whether bytes are UTF-8, as protobuf requires of a string field: ASCII (ours) at a glance. */
static int
is_utf8(const unsigned char *bytes, Py_ssize_t size)
{
    unsigned char any = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        any |= bytes[i];
    }
    if (!(any & 0x80)) {
        return 1;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)bytes, size, "strict");
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(text);
    return 1;
}

/* A PluginData (plugin_name, content) that protobuf would take as it is. */
static int
plugin_data_ok(const unsigned char *bytes, Py_ssize_t size)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int more;
    while ((more = next_field(&r, &f)) > 0) {
        if (f.wire != LENGTH || (f.field != 1 && f.field != 2)) {
            return 0;
        }
        if (f.field == 1 && !is_utf8(f.bytes, f.size)) {
            return 0;
        }
    }
    return more == 0;
}

/* A SummaryMetadata that protobuf would take as it is (its strings UTF-8). */
static int
metadata_ok(const unsigned char *bytes, Py_ssize_t size)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int more, plugin_data = 0;
    while ((more = next_field(&r, &f)) > 0) {
        if (f.field == 1 && f.wire == LENGTH && !plugin_data++) {
            if (!plugin_data_ok(f.bytes, f.size)) {
                return 0;
            }
        }
        else if ((f.field == 2 || f.field == 3) && f.wire == LENGTH) {
            if (!is_utf8(f.bytes, f.size)) {
                return 0;
            }
        }
        else if (!(f.field == 4 && f.wire == VARINT)) {
            return 0;
        }
    }
    return more == 0;
}

/* A TensorShapeProto's dimensions: their count in *ndims, the first's size in *first; 0 when
 * it holds anything else (a named dimension, an unknown rank). */
static int
read_shape(const unsigned char *bytes, Py_ssize_t size, Py_ssize_t *ndims, uint64_t *first)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int more;
    *ndims = 0;
    *first = 0;
    while ((more = next_field(&r, &f)) > 0) {
        if (f.field != 2 || f.wire != LENGTH) {
            return 0;
        }
        Reader dim = {f.bytes, f.bytes + f.size};
        Field d;
        int dim_more;
        uint64_t dim_size = 0;
        while ((dim_more = next_field(&dim, &d)) > 0) {
            if (d.field != 1 || d.wire != VARINT) {
                return 0;
            }
            dim_size = d.varint;
        }
        if (dim_more < 0) {
            return 0;
        }
        if ((*ndims)++ == 0) {
            *first = dim_size;
        }
    }
    return more == 0;
}

/* A string TensorProto's strings counted: 1 with their count and whether the tensor has a
 * dimension; 0 for any other tensor. */
static int
read_tensor(const unsigned char *bytes, Py_ssize_t size, Py_ssize_t *count, int *batched)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int more, shapes = 0;
    uint64_t dtype = 0, first = 0;
    Py_ssize_t ndims = 0;
    *count = 0;
    while ((more = next_field(&r, &f)) > 0) {
        if (f.field == 1 && f.wire == VARINT) {
            dtype = f.varint;
        }
        else if (f.field == 2 && f.wire == LENGTH && !shapes++) {
            if (!read_shape(f.bytes, f.size, &ndims, &first)) {
                return 0;
            }
        }
        else if (f.field == 3 && f.wire == VARINT) {
            /* version_number: no bearing on the values */
        }
        else if (f.field == 4 && f.wire == LENGTH) {
            if (f.size) {
                return 0; /* packed content: make_ndarray's */
            }
        }
        else if (f.field == 8 && f.wire == LENGTH) {
            (*count)++;
        }
        else {
            return 0;
        }
    }
    if (more < 0 || (uint32_t)dtype != DT_STRING) {
        return 0;
    }
    if (ndims == 0 && *count == 1) {
        *batched = 0;
        return 1;
    }
    if (ndims == 1 && first == (uint64_t)*count) {
        *batched = 1;
        return 1;
    }
    return 0;
}

/* The ``count`` strings of a tensor read_tensor took, as a tuple of bytes; NULL on failure. */
static PyObject *
tensor_strings(const unsigned char *bytes, Py_ssize_t size, Py_ssize_t count)
{
    PyObject *strings = PyTuple_New(count);
    if (strings == NULL) {
        return NULL;
    }
    Reader r = {bytes, bytes + size};
    Field f;
    Py_ssize_t i = 0;
    while (i < count && next_field(&r, &f) > 0) {
        if (f.field == 8) {
            PyObject *one = PyBytes_FromStringAndSize((const char *)f.bytes, f.size);
            if (one == NULL) {
                Py_DECREF(strings);
                return NULL;
            }
            PyTuple_SET_ITEM(strings, i++, one);
        }
    }
    return strings;
}

/* One summary value: 1 with *found set to (tag, (strings, wall_time, batched)) or NULL (not a
 * string tensor under prefix), 0 to leave the record to protobuf, -1 with an exception set. */
static int
read_value(const unsigned char *bytes, Py_ssize_t size, const char *prefix,
           Py_ssize_t prefix_size, PyObject *wall_time, PyObject **found)
{
    Reader r = {bytes, bytes + size};
    Field f;
    int more, metadata = 0, tensors = 0;
    uint32_t chosen = 0; /* the last member of the value oneof: protobuf keeps only it */
    const unsigned char *tag = (const unsigned char *)"", *tensor = NULL;
    Py_ssize_t tag_size = 0, tensor_size = 0;
    *found = NULL;
    while ((more = next_field(&r, &f)) > 0) {
        if (f.field == 1 && f.wire == LENGTH) {
            tag = f.bytes;
            tag_size = f.size;
        }
        else if (f.field == 8 && f.wire == LENGTH && !tensors++) {
            tensor = f.bytes;
            tensor_size = f.size;
            chosen = 8;
        }
        else if (f.field == 9 && f.wire == LENGTH && !metadata++) {
            if (!metadata_ok(f.bytes, f.size)) {
                return 0;
            }
        }
        else if (f.field == 2 && f.wire == FIXED32) {
            chosen = 2; /* simple_value */
        }
        else {
            return 0;
        }
    }
    if (more < 0 || !is_utf8(tag, tag_size)) {
        return 0;
    }
    Py_ssize_t count;
    int batched;
    if (chosen != 8) {
        return 1;
    }
    if (!read_tensor(tensor, tensor_size, &count, &batched)) {
        return 0;
    }
    if (tag_size < prefix_size || memcmp(tag, prefix, (size_t)prefix_size) != 0) {
        return 1;
    }
    PyObject *values = tensor_strings(tensor, tensor_size, count);
    if (values == NULL) {
        return -1;
    }
    *found = Py_BuildValue("(s#(NOO))", (const char *)tag, tag_size, values, wall_time,
                           batched ? Py_True : Py_False);
    return *found == NULL ? -1 : 1;
}

/* The string tensors under prefix of the serialized Event data[:size], as string_tensors says;
 * a new reference (Py_None: not the common case), NULL with an exception set. */
static PyObject *
event_tensors(const unsigned char *data, Py_ssize_t size, const char *prefix,
              Py_ssize_t prefix_size)
{
    Reader r = {data, data + size};
    Field f;
    int more, summaries = 0;
    double wall_time = 0.0;
    uint64_t step = 0;
    const unsigned char *summary = NULL;
    Py_ssize_t summary_size = 0;
    if (r.p == r.end) {
        Py_RETURN_NONE; /* an empty record: protobuf's reader says why it is no Event */
    }
    while ((more = next_field(&r, &f)) > 0) {
        if (f.field == 1 && f.wire == FIXED64) {
            memcpy(&wall_time, &f.varint, 8);
        }
        else if (f.field == 2 && f.wire == VARINT) {
            step = f.varint;
        }
        else if (f.field == 5 && f.wire == LENGTH && !summaries++) {
            summary = f.bytes;
            summary_size = f.size;
        }
        else {
            Py_RETURN_NONE;
        }
    }
    if (more < 0) {
        Py_RETURN_NONE;
    }
    PyObject *found = PyList_New(0);
    PyObject *time = PyFloat_FromDouble(wall_time);
    if (found == NULL || time == NULL) {
        goto fail;
    }
    Reader values = {summary, summary + summary_size};
    while ((more = next_field(&values, &f)) > 0) {
        if (f.field != 1 || f.wire != LENGTH) {
            goto unusual;
        }
        PyObject *value;
        int read = read_value(f.bytes, f.size, prefix, prefix_size, time, &value);
        if (read < 0) {
            goto fail;
        }
        if (read == 0) {
            goto unusual;
        }
        if (value != NULL) {
            int appended = PyList_Append(found, value);
            Py_DECREF(value);
            if (appended < 0) {
                goto fail;
            }
        }
    }
    if (more < 0) {
        goto unusual;
    }
    Py_DECREF(time);
    return Py_BuildValue("(LN)", (long long)step, found);
unusual:
    Py_DECREF(found);
    Py_DECREF(time);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(found);
    Py_XDECREF(time);
    return NULL;
}

static PyObject *
string_tensors(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "string_tensors(data: bytes, prefix: bytes)");
        return NULL;
    }
    return event_tensors((const unsigned char *)PyBytes_AS_STRING(args[0]),
                         PyBytes_GET_SIZE(args[0]), PyBytes_AS_STRING(args[1]),
                         PyBytes_GET_SIZE(args[1]));
}

/* -- TFRecord framing ------------------------------------------------------------------------
 * A record is length (u64 LE) | masked crc32c(length) | data | masked crc32c(data), as in
 * tb_monitor/logdir/tfrecord.py, whose _walk decides everything but a run of sound records. */

enum { HEADER = 12, FOOTER = 4 };
static const uint64_t MAX_RECORD = 0x7FFFFFFF; /* tfrecord.MAX_RECORD */

static uint32_t
load_u32(const unsigned char *p)
{
    uint32_t value;
    memcpy(&value, p, 4);
    return value;
}

/* Whether needle[:n] occurs in p[:size]. */
static int
holds(const unsigned char *p, Py_ssize_t size, const unsigned char *needle, Py_ssize_t n)
{
    if (n == 0) {
        return 1;
    }
    for (const unsigned char *end = p + size - n; p <= end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) + 1);
        if (p == NULL) {
            return 0;
        }
        if (memcmp(p, needle, (size_t)n) == 0) {
            return 1;
        }
    }
    return 0;
}

static PyObject *
sound_records(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t offset;
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1]) ||
        !PyBytes_Check(args[2]) || !(args[3] == Py_None || PyBytes_Check(args[3]))) {
        PyErr_SetString(PyExc_TypeError, "sound_records(buffer: bytes, offset: int, needle: "
                                         "bytes, prefix: bytes | None)");
        return NULL;
    }
    offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    const unsigned char *buffer = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    const unsigned char *needle = (const unsigned char *)PyBytes_AS_STRING(args[2]);
    const Py_ssize_t needle_size = PyBytes_GET_SIZE(args[2]);
    const int parse = args[3] != Py_None;
    const char *prefix = parse ? PyBytes_AS_STRING(args[3]) : NULL;
    const Py_ssize_t prefix_size = parse ? PyBytes_GET_SIZE(args[3]) : 0;
    if (offset < 0 || offset > size) {
        PyErr_Format(PyExc_ValueError, "offset %zd is outside the buffer of %zd bytes", offset,
                     size);
        return NULL;
    }
    PyObject *found = PyList_New(0);
    if (found == NULL) {
        return NULL;
    }
    while (size - offset >= HEADER) {
        const unsigned char *head = buffer + offset;
        uint64_t length;
        memcpy(&length, head, 8);
        if (length > MAX_RECORD || masked_crc32c(head, 8) != load_u32(head + 8) ||
            (uint64_t)(size - offset - HEADER) < length + FOOTER) {
            break; /* damage, or the torn tail: tfrecord._walk's to decide */
        }
        const unsigned char *data = head + HEADER;
        Py_ssize_t next = offset + HEADER + (Py_ssize_t)length + FOOTER;
        if (!holds(data, (Py_ssize_t)length, needle, needle_size)) {
            offset = next; /* passed over, neither copied nor checksummed */
            continue;
        }
        if (masked_crc32c(data, (size_t)length) != load_u32(data + length)) {
            break;
        }
        PyObject *item = NULL;
        if (parse) {
            item = event_tensors(data, (Py_ssize_t)length, prefix, prefix_size);
            if (item == Py_None) {
                Py_DECREF(item);
                item = NULL;
            }
            else if (item == NULL) {
                Py_DECREF(found);
                return NULL;
            }
        }
        if (item == NULL) {
            item = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)length);
        }
        PyObject *pair = item == NULL ? NULL : Py_BuildValue("(nN)", offset, item);
        if (pair == NULL || PyList_Append(found, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(found);
            return NULL;
        }
        Py_DECREF(pair);
        offset = next;
    }
    return Py_BuildValue("(Nn)", found, offset);
}

static PyMethodDef string_tensors_methods[] = {
    {"string_tensors", (PyCFunction)(void (*)(void))string_tensors, METH_FASTCALL,
     "string_tensors(data, prefix) -> (step, [(tag, (strings, wall_time, batched)), ...]) or "
     "None\n\nThe string tensors under tags starting with prefix of one serialized Event; None "
     "where protobuf must decide (see tb_plugin/event_files.py)."},
    {"sound_records", (PyCFunction)(void (*)(void))sound_records, METH_FASTCALL,
     "sound_records(buffer, offset, needle, prefix) -> ([(offset, item), ...], offset)\n\nThe "
     "run of sound TFRecords of buffer from offset holding needle, up to the first it leaves "
     "to tfrecord._walk (damage, the torn tail); each item its data, or with a prefix its "
     "string_tensors where that is not None (see tb_monitor/logdir/tfrecord.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef string_tensors_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tb_monitor.logdir._string_tensors",
    .m_doc = "Optional C reader of an Event's string tensors (see tb_plugin/event_files.py).",
    .m_size = -1,
    .m_methods = string_tensors_methods,
};

PyMODINIT_FUNC
PyInit__string_tensors(void)
{
    const uint16_t one = 1;
    if (*(const unsigned char *)&one != 1) { /* protobuf's fixed64 is little-endian */
        PyErr_SetString(PyExc_ImportError, "string_tensors reads little-endian hosts only");
        return NULL;
    }
    crc32c_init();
    return tb_monitor_module(&string_tensors_module, NULL);
}
