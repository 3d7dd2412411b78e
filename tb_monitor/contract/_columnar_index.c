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

static PyObject *
steps_index(PyObject *Py_UNUSED(module), PyObject *arg)
{
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "steps_index(text: bytes)");
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(arg), *end = p + PyBytes_GET_SIZE(arg);
    const Py_ssize_t head = sizeof(HEAD) - 1, steps = sizeof(STEPS) - 1, tail = sizeof(TAIL) - 1;
    if (end - p < head + steps + tail || memcmp(p, HEAD, head) != 0 ||
        memcmp(end - tail, TAIL, tail) != 0) {
        Py_RETURN_NONE;
    }
    p += head;
    Py_ssize_t number = float_length(p, end - tail);
    if (number == 0 || number > 64 || end - tail - (p + number) < steps ||
        memcmp(p + number, STEPS, steps) != 0) {
        Py_RETURN_NONE;
    }
    char text[65];
    memcpy(text, p, number);
    text[number] = '\0';
    double t0 = PyOS_string_to_double(text, NULL, NULL); /* float()'s rounding; inf on overflow */
    if (t0 == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (!(t0 > -4611686018427387904.0 && t0 < 4611686018427387904.0)) { /* |t0| < 2**62 */
        Py_RETURN_NONE;
    }
    const unsigned char *b64 = (const unsigned char *)(p + number + steps);
    Py_ssize_t b64_size = (const unsigned char *)(end - tail) - b64;
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

static PyMethodDef columnar_index_methods[] = {
    {"steps_index", steps_index, METH_O,
     "steps_index(text) -> (t0, steps) or None\n\nThe t0 and decoded dd_le32 of a columnar "
     "index written as our writer writes a run of alike events; None for any other "
     "(see tb_monitor/contract/columnar.py)."},
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
    return tb_monitor_module(&columnar_index_module, NULL);
}
