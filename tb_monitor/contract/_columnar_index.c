/* Optional C reader of the commonest columnar record index, the twin of the JSON path in
 * tb_monitor/contract/columnar.py (parse_steps_record; json_value, then _times).
 *
 * steps_index(text) -> (t0, steps) or None
 *
 * text is a version-5 record's index exactly as our writer writes a run of alike events (a
 * node's keep-alives: most records of a long job): {"t0":<number>,"dd_le32":"<base64>","ix":{}},
 * no space, keys in that order. t0 is the number as json.loads reads it (a float: the same
 * correctly rounded double as float() of its text), steps the base64 decoded. Anything else
 * (another key, order or spacing, an integer or out-of-range t0, base64 that strict decoding
 * would refuse, steps that are no whole number of uint32) is None: the JSON path decides it,
 * the one place that says what is wrong, so both read the same records
 * (tests/test_columnar_index.py compares them).
 *
 * Why in C: the JSON parse, the base64 decode and their checks cost ~5 us a record in Python
 * (a 1,024-node day holds 300k such records); this costs a fraction of one.
 *
 * steps_run(records, start, memo) -> (stop, t0s, counts, steps, values) or None
 *
 * The records of records[start:stop] that parse_steps_record would read, at once, as columns:
 * each record a (values, wall_time, True) tuple whose values are [index, raw values], its index
 * steps_index's case and its raw values memo's, checked already. t0s (float64) and counts
 * (int64, its events) per record, steps per record a zero uint32 then its steps, values per
 * record memo's parsed values. It stops at the first record that is not one (None: the record
 * at start is not), which the Python path reads (and adds to memo). Why: the per-record Python
 * around steps_index (its calls, a ParsedRecord, the merge's lists) cost ~5 us a record.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_module.h"

static const char HEAD[] = "{\"t0\":";
static const char STEPS[] = ",\"dd_le32\":\"";
static const char TAIL[] = "\",\"ix\":{}}";

/* Each byte's base64 value, -1 for a byte that is not a base64 character ('=' included). Filled
 * once at import: a lookup per character, not a chain of comparisons (a day's 300k indexes hold
 * ~100 MB of base64). */
static signed char SEXTET[256];

static void
fill_sextets(void)
{
    static const char ALPHABET[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(SEXTET, -1, sizeof(SEXTET));
    for (int i = 0; i < 64; i++) {
        SEXTET[(unsigned char)ALPHABET[i]] = (signed char)i;
    }
}

/* Strict base64 of size bytes (padded, whole quanta) decoded into out: its size, or -1. */
static Py_ssize_t
decode_base64(const unsigned char *in, Py_ssize_t size, unsigned char *out)
{
    if (size % 4) {
        return -1;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < size; i += 4) {
        int last = i + 4 == size;
        int pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=' && in[i + 3] == '=') : 0;
        int a = SEXTET[in[i]], b = SEXTET[in[i + 1]];
        int c = pad >= 2 ? 0 : SEXTET[in[i + 2]];
        int d = pad >= 1 ? 0 : SEXTET[in[i + 3]];
        if (a < 0 || b < 0 || c < 0 || d < 0) {
            return -1;
        }
        unsigned long quantum = (unsigned long)a << 18 | (unsigned long)b << 12 |
                                (unsigned long)c << 6 | (unsigned long)d;
        out[n++] = (unsigned char)(quantum >> 16);
        if (pad < 2) {
            out[n++] = (unsigned char)(quantum >> 8);
        }
        if (pad < 1) {
            out[n++] = (unsigned char)quantum;
        }
    }
    return n;
}

/* The decimal digits at *q (up to end) passed over: how many. */
static Py_ssize_t
skip_digits(const char **q, const char *end)
{
    const char *from = *q;
    while (*q < end && **q >= '0' && **q <= '9') {
        (*q)++;
    }
    return *q - from;
}

/* The length of a JSON number with a fraction or an exponent at p (up to end), 0 for anything
 * else (an integer is json.loads's int: the JSON path's). */
static Py_ssize_t
float_length(const char *p, const char *end)
{
    const char *q = p;
    int real = 0;
    if (q < end && *q == '-') {
        q++;
    }
    if (q < end && *q == '0') {
        q++;
    }
    else if (!(q < end && *q >= '1' && *q <= '9') || !skip_digits(&q, end)) {
        return 0;
    }
    if (q < end && *q == '.') {
        q++;
        if (!skip_digits(&q, end)) {
            return 0;
        }
        real = 1;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < end && (*q == '+' || *q == '-')) {
            q++;
        }
        if (!skip_digits(&q, end)) {
            return 0;
        }
        real = 1;
    }
    return real ? q - p : 0;
}

/* The index text[:size] as steps_index reads it: 1 with *t0 and the base64 of its steps (b64,
 * b64_size; not decoded yet), 0 for any other index, -1 with an exception set. */
static int
read_index(const char *p, Py_ssize_t size, double *t0, const unsigned char **b64,
           Py_ssize_t *b64_size)
{
    const char *end = p + size;
    const Py_ssize_t head = sizeof(HEAD) - 1, steps = sizeof(STEPS) - 1, tail = sizeof(TAIL) - 1;
    if (end - p < head + steps + tail || memcmp(p, HEAD, head) != 0 ||
        memcmp(end - tail, TAIL, tail) != 0) {
        return 0;
    }
    p += head;
    Py_ssize_t number = float_length(p, end - tail);
    if (number == 0 || number > 64 || end - tail - (p + number) < steps ||
        memcmp(p + number, STEPS, steps) != 0) {
        return 0;
    }
    char text[65];
    memcpy(text, p, number);
    text[number] = '\0';
    *t0 = PyOS_string_to_double(text, NULL, NULL); /* float()'s rounding; inf on overflow */
    if (*t0 == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    if (!(*t0 > -4611686018427387904.0 && *t0 < 4611686018427387904.0)) { /* |t0| < 2**62 */
        return 0;
    }
    *b64 = (const unsigned char *)(p + number + steps);
    *b64_size = (const unsigned char *)(end - tail) - *b64;
    return *b64_size % 4 == 0;
}

static PyObject *
steps_index(PyObject *Py_UNUSED(module), PyObject *arg)
{
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "steps_index(text: bytes)");
        return NULL;
    }
    double t0;
    const unsigned char *b64;
    Py_ssize_t b64_size;
    int read = read_index(PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg), &t0, &b64, &b64_size);
    if (read <= 0) {
        if (read < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, b64_size / 4 * 3);
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t size = decode_base64(b64, b64_size, (unsigned char *)PyBytes_AS_STRING(out));
    if (size < 0 || size % 4) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    if (size != PyBytes_GET_SIZE(out) && _PyBytes_Resize(&out, size) < 0) {
        return NULL;
    }
    return Py_BuildValue("(dN)", t0, out);
}

/* A growing byte buffer. */
typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Buffer;

/* Room for n more bytes at the end of b: its first, or NULL with MemoryError set. */
static char *
grow(Buffer *b, Py_ssize_t n)
{
    if (b->size + n > b->capacity) {
        Py_ssize_t capacity = (b->size + n) * 2;
        char *data = PyMem_Realloc(b->data, (size_t)capacity);
        if (data == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        b->data = data;
        b->capacity = capacity;
    }
    return b->data + b->size;
}

static PyObject *CHECKED; /* "checked", interned */

/* The values memo holds for record's (values, wall_time, batched) when it is steps_run's case,
 * checked already, with its index's text in *index (borrowed); else NULL, and anything odd
 * (an unhashable value, an attribute that fails) left to the Python path. */
static PyObject *
known_values(PyObject *record, PyObject *memo, PyObject **index)
{
    if (!PyTuple_CheckExact(record) || PyTuple_GET_SIZE(record) != 3 ||
        PyTuple_GET_ITEM(record, 2) != Py_True) {
        return NULL;
    }
    PyObject *strings = PyTuple_GET_ITEM(record, 0);
    PyObject *raw_values;
    if (PyTuple_CheckExact(strings) && PyTuple_GET_SIZE(strings) == 2) {
        *index = PyTuple_GET_ITEM(strings, 0);
        raw_values = PyTuple_GET_ITEM(strings, 1);
    }
    else if (PyList_CheckExact(strings) && PyList_GET_SIZE(strings) == 2) {
        *index = PyList_GET_ITEM(strings, 0);
        raw_values = PyList_GET_ITEM(strings, 1);
    }
    else {
        return NULL;
    }
    if (!PyBytes_CheckExact(*index)) {
        return NULL;
    }
    PyObject *found = PyDict_GetItemWithError(memo, raw_values); /* borrowed */
    PyObject *checked = found == NULL ? NULL : PyObject_GetAttr(found, CHECKED);
    if (checked == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(checked);
    return checked == Py_True ? found : NULL;
}

static PyObject *
steps_run(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyLong_Check(args[1]) ||
        !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "steps_run(records: list, start: int, memo: dict)");
        return NULL;
    }
    PyObject *records = args[0], *memo = args[2];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (start < 0 || start > PyList_GET_SIZE(records)) {
        PyErr_Format(PyExc_ValueError, "start %zd is outside the %zd records", start,
                     PyList_GET_SIZE(records));
        return NULL;
    }
    Buffer t0s = {NULL, 0, 0}, counts = {NULL, 0, 0}, steps = {NULL, 0, 0};
    PyObject *values = PyList_New(0), *out = NULL;
    if (values == NULL) {
        return NULL;
    }
    Py_ssize_t at = start;
    for (; at < PyList_GET_SIZE(records); at++) {
        PyObject *index;
        PyObject *found = known_values(PyList_GET_ITEM(records, at), memo, &index);
        if (found == NULL) {
            break;
        }
        double t0;
        const unsigned char *b64;
        Py_ssize_t b64_size;
        int read = read_index(PyBytes_AS_STRING(index), PyBytes_GET_SIZE(index), &t0, &b64,
                              &b64_size);
        if (read < 0) {
            goto done;
        }
        if (read == 0) {
            break; /* steps_index's None: the JSON path's to judge */
        }
        char *room = grow(&steps, 4 + b64_size / 4 * 3);
        if (room == NULL) {
            goto done;
        }
        Py_ssize_t size = decode_base64(b64, b64_size, (unsigned char *)room + 4);
        if (size < 0 || size % 4) {
            break; /* likewise */
        }
        memset(room, 0, 4); /* the record's first event: at its t0 */
        steps.size += 4 + size;
        int64_t events = size / 4 + 1;
        char *t0_room = grow(&t0s, 8), *count_room = grow(&counts, 8);
        if (t0_room == NULL || count_room == NULL || PyList_Append(values, found) < 0) {
            goto done;
        }
        memcpy(t0_room, &t0, 8);
        t0s.size += 8;
        memcpy(count_room, &events, 8);
        counts.size += 8;
    }
    if (at == start) {
        out = Py_NewRef(Py_None);
    }
    else {
        out = Py_BuildValue("(ny#y#y#O)", at, t0s.data, t0s.size, counts.data, counts.size,
                            steps.data, steps.size, values);
    }
done:
    PyMem_Free(t0s.data);
    PyMem_Free(counts.data);
    PyMem_Free(steps.data);
    Py_DECREF(values);
    return out;
}

static PyMethodDef columnar_index_methods[] = {
    {"steps_index", steps_index, METH_O,
     "steps_index(text) -> (t0, steps) or None\n\nThe t0 and decoded dd_le32 of a columnar "
     "index written as our writer writes a run of alike events; None for any other "
     "(see tb_monitor/contract/columnar.py)."},
    {"steps_run", (PyCFunction)(void (*)(void))steps_run, METH_FASTCALL,
     "steps_run(records, start, memo) -> (stop, t0s, counts, steps, values) or None\n\nThe "
     "records from start on, up to stop, that parse_steps_record would read, as columns: "
     "None when the first is not one (see tb_monitor/contract/columnar.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef columnar_index_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tb_monitor.contract._columnar_index",
    .m_doc = "Optional C reader of the commonest columnar index (see contract/columnar.py).",
    .m_size = -1,
    .m_methods = columnar_index_methods,
};

PyMODINIT_FUNC
PyInit__columnar_index(void)
{
    fill_sextets();
    CHECKED = PyUnicode_InternFromString("checked");
    if (CHECKED == NULL) {
        return NULL;
    }
    return tb_monitor_module(&columnar_index_module, NULL);
}
