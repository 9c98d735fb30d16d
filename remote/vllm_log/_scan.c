/* The bulk path's line scanner: the lines of a vLLM log that StartupReader._lines (fold mode)
 * skips or folds without a handler, read in C. Its pure-Python twin is that loop itself, which
 * stays the reference: tests read every corpus log both ways and compare the states.
 *
 * scan(lines, start, keys, quiet, in_tb, steady, total)
 *     -> (stop, started, finished, deferred, total, last, flight)
 *
 * Reads lines[start:] until the first line that needs Python (a handler, a bare line that is not a
 * remembered quiet one, a message that may be an error); stop is its index (len(lines) if none).
 * Skipped: array dumps and padded continuations ("    "), messages that start with a digit or are
 * empty, messages with no handler and no sign of an error; bare lines in `quiet` outside a
 * traceback. Folded while `steady` (the boot compiles and its start time is known): ASCII
 * compile-step lines of the C4 shapes (vLLM 0.26+ tpu-inference compilation_manager.py):
 * "Precompile <name> --> <shape>" (started), "Compilation of ... finished in N [secs]." (finished,
 * N added to `total` in log order), "AOT lower skipped" (deferred). `last` is the last N (0.0 if
 * none); `flight` is -2 if no step was counted, -1 if the last counted step was no Precompile,
 * else the index of that Precompile line (its step is in flight).
 *
 * `keys`: the message heads that have a handler, 4 bytes each, concatenated.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static const char *
find_in(const char *hay, Py_ssize_t len, const char *needle, Py_ssize_t nlen)
{
    if (nlen > len)
        return NULL;
    return memmem(hay, (size_t)len, needle, (size_t)nlen);
}

static const char *
rfind_in(const char *hay, Py_ssize_t len, const char *needle, Py_ssize_t nlen)
{
    for (Py_ssize_t i = len - nlen; i >= 0; i--) {
        if (hay[i] == needle[0] && memcmp(hay + i, needle, (size_t)nlen) == 0)
            return hay + i;
    }
    return NULL;
}

static int
is_ascii(const char *s, Py_ssize_t len)
{
    for (Py_ssize_t i = 0; i < len; i++) {
        if ((unsigned char)s[i] & 0x80)
            return 0;
    }
    return 1;
}

/* The envelope's end as the hot loop finds it: the first "] " ending within 200 bytes, after a
 * digit, with ".py:" at most 12 bytes before it; -1 if none (a bare line). */
static Py_ssize_t
envelope_end(const char *s, Py_ssize_t len)
{
    const char *hit = find_in(s, len < 200 ? len : 200, "] ", 2);
    if (hit == NULL)
        return -1;
    Py_ssize_t p = hit - s;
    if (!(p > 1 && s[p - 1] > 47 && s[p - 1] < 58))
        return -1;
    const char *q = rfind_in(s, p, ".py:", 4);
    if (q == NULL || p - (q - s) > 12)
        return -1;
    return p;
}

static int
has_key(const char *keys, Py_ssize_t keys_len, const char *head)
{
    for (Py_ssize_t k = 0; k + 4 <= keys_len; k += 4) {
        if (memcmp(keys + k, head, 4) == 0)
            return 1;
    }
    return 0;
}

static PyObject *
scan(PyObject *self, PyObject *args)
{
    PyObject *lines, *quiet;
    Py_ssize_t start, keys_len;
    const char *keys;
    int in_tb, steady;
    double total;
    if (!PyArg_ParseTuple(args, "O!ny#O!ppd", &PyList_Type, &lines, &start, &keys, &keys_len,
                          &PySet_Type, &quiet, &in_tb, &steady, &total))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines);
    Py_ssize_t started = 0, finished = 0, deferred = 0, flight = -2;
    double last = 0.0;
    Py_ssize_t i = start < 0 ? 0 : start;
    for (; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(lines, i);
        if (!PyBytes_Check(item))
            break;                                      /* Python reads what is not bytes */
        const char *s = PyBytes_AS_STRING(item);
        Py_ssize_t len = PyBytes_GET_SIZE(item);
        Py_ssize_t p = envelope_end(s, len);
        if (p < 0) {                                    /* a bare line: skipped if known quiet */
            if (in_tb)
                break;
            int known = PySet_Contains(quiet, item);
            if (known < 0)
                return NULL;
            if (known)
                continue;
            break;
        }
        p += 2;
        const char *msg = s + p;
        Py_ssize_t mlen = len - p;
        int keyed = mlen >= 4 && has_key(keys, keys_len, msg);
        if (keyed && steady && is_ascii(s, len)) {
            if (memcmp(msg, "Prec", 4) == 0) {          /* "Precompile <name> --> <shape>" */
                if (find_in(msg, mlen, " --> ", 5) != NULL) {
                    started++;
                    flight = i;
                }
                continue;
            }
            if (memcmp(msg, "AOT ", 4) == 0) {
                if (mlen >= 17 && memcmp(msg, "AOT lower skipped", 17) == 0) {
                    deferred++;
                    flight = -1;
                }
                continue;
            }
            if (memcmp(msg, "Comp", 4) == 0 && mlen >= 15 && memcmp(msg, "Compilation of ", 15) == 0) {
                const char *f = rfind_in(msg, mlen, " finished in ", 13);
                if (f != NULL) {
                    const char *a = f + 13;
                    const char *end = s + len;
                    const char *b = find_in(a, end - a, " ", 1);
                    if (b != NULL && !(end - a >= 3 && memcmp(a, "in ", 3) == 0)) {
                        PyObject *text = PyBytes_FromStringAndSize(a, b - a);
                        if (text == NULL)
                            return NULL;
                        PyObject *value = PyFloat_FromString(text);
                        Py_DECREF(text);
                        if (value == NULL) {
                            if (!PyErr_ExceptionMatches(PyExc_ValueError))
                                return NULL;
                            PyErr_Clear();              /* the handler ignores the line too */
                            continue;
                        }
                        last = PyFloat_AS_DOUBLE(value);
                        Py_DECREF(value);
                        total += last;
                        finished++;
                        flight = -1;
                        continue;
                    }
                }
            }
        }
        if (keyed)
            break;                                      /* a handler reads it */
        if (mlen == 0)
            continue;
        unsigned char c = (unsigned char)msg[0];
        if (c == ' ') {
            if (mlen >= 4 && memcmp(msg, "    ", 4) == 0)
                continue;                               /* array dumps, padded continuations */
            break;
        }
        if (c >= '0' && c <= '9')
            continue;
        if (find_in(s, len, "rror", 4) != NULL || find_in(s, len, "xception", 8) != NULL || c == 0xe2 || in_tb)
            break;
        continue;
    }
    return Py_BuildValue("nnnnddn", i, started, finished, deferred, total, last, flight);
}

/* run_end(buf, pos, end, head) -> (stop, lines, lone_cr)
 *
 * The run of lines of buf[pos:end] (complete lines, each ending in LF) that start with `head`,
 * byte for byte (the lines of one array dump): stop is the offset after the run's last LF (pos if
 * the line at pos does not start with head), lines how many, lone_cr whether a CR in them is not
 * part of a CRLF ending (a redraw: the run must then be read line by line). */
static PyObject *
run_end(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos, end, head_len;
    const char *head;
    if (!PyArg_ParseTuple(args, "y*nny#", &buf, &pos, &end, &head, &head_len))
        return NULL;
    const char *s = buf.buf;
    if (end > buf.len)
        end = buf.len;
    if (pos < 0)
        pos = 0;
    Py_ssize_t lines = 0;
    int lone_cr = 0;
    while (pos < end && end - pos >= head_len && memcmp(s + pos, head, (size_t)head_len) == 0) {
        const char *nl = memchr(s + pos, '\n', (size_t)(end - pos));
        if (nl == NULL)
            break;                                      /* not a complete line: not in the run */
        const char *cr = memchr(s + pos, '\r', (size_t)(nl - (s + pos)));
        if (cr != NULL && cr != nl - 1)
            lone_cr = 1;
        pos = (nl - s) + 1;
        lines++;
    }
    PyBuffer_Release(&buf);
    return Py_BuildValue("nnO", pos, lines, lone_cr ? Py_True : Py_False);
}

static PyMethodDef scan_methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(lines, start, keys, quiet, in_tb, steady, total) -> "
     "(stop, started, finished, deferred, total, last, flight): see remote/vllm_log/_scan.c."},
    {"run_end", run_end, METH_VARARGS,
     "run_end(buf, pos, end, head) -> (stop, lines, lone_cr): see remote/vllm_log/_scan.c."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "_scan", "The bulk path's line scanner (see StartupReader._lines).", -1,
    scan_methods,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    return PyModule_Create(&scan_module);
}
