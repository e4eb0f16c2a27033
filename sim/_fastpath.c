/* Compiled fast path of `sim.manager.CodingContextManager`: `apply_events` and `end_turn`.
 *
 * The pure-Python methods of the manager are the reference; this file does the same work on the
 * same objects (the manager's dicts, lists and its per-turn row buffer) and must leave them
 * exactly as the Python code would. The tests replay the same sessions through both and compare
 * logs, states and counters. Scalars (`_bytes`, `_last_ts`, `_last_id`, `_tail_unsorted`,
 * `_ordered`, `oversize`, the open turn's tally) live in C locals during a call: they are written
 * back to the manager before every call into its Python methods (`_sort`, `_sort_tail`,
 * `_remove`, `_settle_turn`, `_pack_rows`) and read again after it, and written back on return.
 * Stateful strategies' hooks go through the manager's `_hook`, which touches none of them.
 * The contract's rules for a call that raised and for the shape of an answer are Python functions
 * (`strategies.calls.call_failure`, `strategies.contract.answer_ids`, given to `bind`) that both
 * paths call; this file only skips `answer_ids` for a plain list or tuple that it would read whole.
 *
 * Integer inputs (op codes, sizes, times, turn numbers) must fit in int64; the Python path
 * accepts any number, validated traces only hold int64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>
#include <time.h>

#include "../strategies/_slot_offset.h"

enum { READ, EDIT, WRITE, OUTPUT };
enum { EVICTED = 1, INVALIDATED = 2 };
enum { ACC, HIT, COMP, CAP, INV, ACC_B, MISS_B, CAP_B, INV_B, NTALLY };
#define NFIELDS 18
#define ROW_BYTES (NFIELDS * 8)

static PyTypeObject *entry_type, *view_type;
/* The manager's rules, in Python: `strategies.calls.call_failure` judges a call that raised,
 * `strategies.contract.answer_ids` the shape of an answer this file does not take as it is. */
static PyObject *call_failure_fn, *answer_ids_fn;
static Py_ssize_t off_id, off_path, off_ts, off_size, off_count, off_values, off_items, off_total;
static Py_ssize_t chunk_bytes;
static PyObject *evicted_code;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* Interned attribute and method names. */
static PyObject *s_entries, *s_resident, *s_current, *s_count, *s_revision, *s_size, *s_reason, *s_hooks,
    *s_tally, *s_row_bytes, *s_evicted_ids, *s_evict, *s_budget, *s_bytes, *s_max_bytes, *s_max_count,
    *s_last_ts, *s_last_id, *s_tail_unsorted, *s_ordered, *s_plain, *s_oversize, *s_sort, *s_sort_tail,
    *s_remove, *s_settle_turn, *s_pack_rows, *s_hook, *s_on_access, *s_on_insert, *s_on_remove;

typedef struct {
    PyObject *self, *dict;
    PyObject *entries, *resident, *current, *count, *revision, *size, *reason, *hooks, *tally_list,
        *row_bytes, *evicted_ids, *evict, *budget;
    long long bytes, last_ts, max_bytes, max_count, oversize;
    PyObject *last_id;
    int tail_unsorted, ordered, plain, has_hooks;
    int stale;   /* a call into the manager's Python code failed: its values stand, not ours */
    long long tally[NTALLY];
} Manager;

/* The pending exception, normalised, and the error indicator cleared. */
static PyObject *fetch_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

static void restore_exception(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static PyObject *get_attr(Manager *m, PyObject *name)
{
    PyObject *v = PyDict_GetItemWithError(m->dict, name);
    if (v == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_AttributeError, "manager has no attribute %R", name);
    return v;
}

static int get_ll(Manager *m, PyObject *name, long long *out)
{
    PyObject *v = get_attr(m, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int get_bool(Manager *m, PyObject *name, int *out)
{
    PyObject *v = get_attr(m, name);
    if (v == NULL)
        return -1;
    *out = PyObject_IsTrue(v);
    return *out < 0 ? -1 : 0;
}

/* The scalars, read from the manager (at the start, and after a call into its Python code). */
static int load_scalars(Manager *m)
{
    PyObject *last_id;
    Py_ssize_t k;
    if (get_ll(m, s_bytes, &m->bytes) < 0 || get_ll(m, s_last_ts, &m->last_ts) < 0 ||
        get_ll(m, s_oversize, &m->oversize) < 0 || get_bool(m, s_tail_unsorted, &m->tail_unsorted) < 0 ||
        get_bool(m, s_ordered, &m->ordered) < 0 || (last_id = get_attr(m, s_last_id)) == NULL)
        return -1;
    Py_INCREF(last_id);
    Py_XSETREF(m->last_id, last_id);
    if (!PyList_CheckExact(m->tally_list) || PyList_GET_SIZE(m->tally_list) != NTALLY) {
        PyErr_SetString(PyExc_TypeError, "manager's _tally must be a list of 9 ints");
        return -1;
    }
    for (k = 0; k < NTALLY; k++) {
        m->tally[k] = PyLong_AsLongLong(PyList_GET_ITEM(m->tally_list, k));
        if (m->tally[k] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

static int set_ll(Manager *m, PyObject *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    int rc;
    if (v == NULL)
        return -1;
    rc = PyDict_SetItem(m->dict, name, v);
    Py_DECREF(v);
    return rc;
}

/* The scalars, written back to the manager (before a call into its Python code, and on return). */
static int store_scalars(Manager *m)
{
    Py_ssize_t k;
    if (set_ll(m, s_bytes, m->bytes) < 0 || set_ll(m, s_last_ts, m->last_ts) < 0 ||
        set_ll(m, s_oversize, m->oversize) < 0 ||
        PyDict_SetItem(m->dict, s_tail_unsorted, m->tail_unsorted ? Py_True : Py_False) < 0 ||
        PyDict_SetItem(m->dict, s_ordered, m->ordered ? Py_True : Py_False) < 0 ||
        PyDict_SetItem(m->dict, s_last_id, m->last_id) < 0)
        return -1;
    for (k = 0; k < NTALLY; k++) {
        PyObject *v = PyLong_FromLongLong(m->tally[k]);
        if (v == NULL)
            return -1;
        PyList_SetItem(m->tally_list, k, v);
    }
    return 0;
}

static void release(Manager *m)
{
    Py_CLEAR(m->entries); Py_CLEAR(m->resident); Py_CLEAR(m->current); Py_CLEAR(m->count);
    Py_CLEAR(m->revision); Py_CLEAR(m->size); Py_CLEAR(m->reason); Py_CLEAR(m->hooks);
    Py_CLEAR(m->tally_list); Py_CLEAR(m->row_bytes); Py_CLEAR(m->evicted_ids); Py_CLEAR(m->evict);
    Py_CLEAR(m->budget); Py_CLEAR(m->last_id); Py_CLEAR(m->dict);
}

static int take(Manager *m, PyObject *name, PyObject **out)
{
    PyObject *v = get_attr(m, name);
    if (v == NULL)
        return -1;
    Py_INCREF(v);
    *out = v;
    return 0;
}

static int load(Manager *m, PyObject *self)
{
    memset(m, 0, sizeof(*m));
    m->self = self;
    m->dict = PyObject_GenericGetDict(self, NULL);
    if (m->dict == NULL)
        return -1;
    if (take(m, s_entries, &m->entries) < 0 || take(m, s_resident, &m->resident) < 0 ||
        take(m, s_current, &m->current) < 0 || take(m, s_count, &m->count) < 0 ||
        take(m, s_revision, &m->revision) < 0 || take(m, s_size, &m->size) < 0 ||
        take(m, s_reason, &m->reason) < 0 || take(m, s_hooks, &m->hooks) < 0 ||
        take(m, s_tally, &m->tally_list) < 0 || take(m, s_row_bytes, &m->row_bytes) < 0 ||
        take(m, s_evicted_ids, &m->evicted_ids) < 0 || take(m, s_evict, &m->evict) < 0 ||
        take(m, s_budget, &m->budget) < 0 || get_ll(m, s_max_bytes, &m->max_bytes) < 0 ||
        get_ll(m, s_max_count, &m->max_count) < 0 || get_bool(m, s_plain, &m->plain) < 0)
        return -1;
    if (!PyDict_CheckExact(m->entries) || !PyDict_CheckExact(m->current) || !PyDict_CheckExact(m->count) ||
        !PyDict_CheckExact(m->revision) || !PyDict_CheckExact(m->size) || !PyDict_CheckExact(m->reason) ||
        !PyDict_CheckExact(m->evicted_ids) || !PyByteArray_CheckExact(m->row_bytes)) {
        PyErr_SetString(PyExc_TypeError, "manager state is not laid out as the compiled fast path expects");
        return -1;
    }
    m->has_hooks = m->hooks != Py_None;
    return load_scalars(m);
}

/* Calls a method of the manager with the scalars written back first and read again after. */
static PyObject *call_manager(Manager *m, PyObject *name, PyObject *a, PyObject *b, PyObject *c, PyObject *d)
{
    PyObject *result;
    if (store_scalars(m) < 0)
        return NULL;
    result = PyObject_CallMethodObjArgs(m->self, name, a, b, c, d, NULL);
    if (result == NULL) {
        m->stale = 1;
        return NULL;
    }
    if (load_scalars(m) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static int call_hook(Manager *m, PyObject *name, PyObject *a, PyObject *b)
{
    PyObject *r = PyObject_CallMethodObjArgs(m->self, s_hook, name, a, b, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static int equal(PyObject *a, PyObject *b)
{
    return a == b ? 1 : PyObject_RichCompareBool(a, b, Py_EQ);
}

static long long as_ll(PyObject *v, int *failed)
{
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        *failed = 1;
    return x;
}

/* `_order`: note where an entry about to be appended falls in (ts, id) order. */
static int order(Manager *m, long long ts, PyObject *id)
{
    if (ts > m->last_ts) {
        if (m->tail_unsorted && m->ordered) {
            PyObject *r = call_manager(m, s_sort_tail, NULL, NULL, NULL, NULL);
            if (r == NULL)
                return -1;
            Py_DECREF(r);
        }
        m->last_ts = ts;
        Py_INCREF(id);
        Py_SETREF(m->last_id, id);
    }
    else if (ts == m->last_ts) {
        int ge = PyObject_RichCompareBool(id, m->last_id, Py_GE);
        if (ge < 0)
            return -1;
        if (ge) {
            Py_INCREF(id);
            Py_SETREF(m->last_id, id);
        }
        else
            m->tail_unsorted = 1;
    }
    else
        m->ordered = 0;
    return 0;
}

static PyObject *new_entry(PyObject *id, PyObject *path, PyObject *ts, PyObject *size, PyObject *count)
{
    PyObject *e = entry_type->tp_alloc(entry_type, 0);
    if (e == NULL)
        return NULL;
    Py_INCREF(id); SLOT(e, off_id) = id;
    Py_INCREF(path); SLOT(e, off_path) = path;
    Py_INCREF(ts); SLOT(e, off_ts) = ts;
    Py_INCREF(size); SLOT(e, off_size) = size;
    Py_INCREF(count); SLOT(e, off_count) = count;
    return e;
}

/* `_absent_reason.pop(path, None)` as 0 (absent), EVICTED or INVALIDATED; -1 on error. */
static int pop_reason(Manager *m, PyObject *path)
{
    PyObject *v = PyDict_GetItemWithError(m->reason, path);
    long r;
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    r = PyLong_AsLong(v);
    if (r == -1 && PyErr_Occurred())
        return -1;
    if (PyDict_DelItem(m->reason, path) < 0)
        return -1;
    return (int)r;
}

/* `f"{path}:{rev}"`, without the format parser (a third of a hit-free event's cost when it was used). */
static PyObject *make_id(PyObject *path, long long rev)
{
    char digits[24];
    int n = 0, k;
    unsigned long long r = rev < 0 ? 0ULL - (unsigned long long)rev : (unsigned long long)rev;
    Py_ssize_t length;
    PyObject *id;
    int kind;
    void *data;
    if (!PyUnicode_CheckExact(path) || rev < 0)
        return PyUnicode_FromFormat("%S:%lld", path, rev);
    do {
        digits[n++] = (char)('0' + r % 10);
        r /= 10;
    } while (r);
    length = PyUnicode_GET_LENGTH(path);
    id = PyUnicode_New(length + 1 + n, PyUnicode_MAX_CHAR_VALUE(path));
    if (id == NULL)
        return NULL;
    if (PyUnicode_CopyCharacters(id, 0, path, 0, length) < 0) {
        Py_DECREF(id);
        return NULL;
    }
    kind = PyUnicode_KIND(id);
    data = PyUnicode_DATA(id);
    PyUnicode_WRITE(kind, data, length, ':');
    for (k = 0; k < n; k++)
        PyUnicode_WRITE(kind, data, length + 1 + k, digits[n - 1 - k]);
    return id;
}

/* `_new_revision`: the path's next revision, of `size`; a new reference to its id. */
static PyObject *new_revision(Manager *m, PyObject *path, PyObject *size)
{
    PyObject *rev_obj = PyDict_GetItemWithError(m->revision, path), *id;
    long long rev = 0;
    int failed = 0;
    if (rev_obj == NULL && PyErr_Occurred())
        return NULL;
    if (rev_obj != NULL) {
        rev = as_ll(rev_obj, &failed) + 1;
        if (failed)
            return NULL;
    }
    rev_obj = PyLong_FromLongLong(rev);
    if (rev_obj == NULL)
        return NULL;
    if (PyDict_SetItem(m->revision, path, rev_obj) < 0) {
        Py_DECREF(rev_obj);
        return NULL;
    }
    Py_DECREF(rev_obj);
    id = make_id(path, rev);
    if (id == NULL)
        return NULL;
    if (PyDict_SetItem(m->current, path, id) < 0 || PyDict_SetItem(m->size, path, size) < 0) {
        Py_DECREF(id);
        return NULL;
    }
    return id;
}

/* `_need`: the current revision of `path` is needed (a hit or a miss); a new reference to its id. */
static PyObject *need(Manager *m, PyObject *path, long long size, PyObject *size_obj)
{
    PyObject *id = PyDict_GetItemWithError(m->current, path), *known, *entry;
    int failed = 0, reason;
    m->tally[ACC] += 1;
    m->tally[ACC_B] += size;
    if (id == NULL) {
        if (PyErr_Occurred())
            return NULL;
        m->tally[COMP] += 1;
        m->tally[MISS_B] += size;
        return new_revision(m, path, size_obj);
    }
    Py_INCREF(id);
    known = PyDict_GetItemWithError(m->size, path);
    if (known == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, path);
        goto error;
    }
    long long known_size = as_ll(known, &failed);
    if (failed)
        goto error;
    if (known_size != size) {
        PyObject *r = PyDict_GetItemWithError(m->reason, path);
        long code = 0;
        if (r == NULL && PyErr_Occurred())
            goto error;
        if (r != NULL && (code = PyLong_AsLong(r)) == -1 && PyErr_Occurred())
            goto error;
        if (code == INVALIDATED) {
            if (PyDict_SetItem(m->size, path, size_obj) < 0)
                goto error;
        }
        else {
            Py_SETREF(id, new_revision(m, path, size_obj));
            if (id == NULL || pop_reason(m, path) < 0)
                goto error;
        }
    }
    entry = PyDict_GetItemWithError(m->entries, path);
    if (entry == NULL && PyErr_Occurred())
        goto error;
    if (entry != NULL) {
        int same = equal(SLOT(entry, off_id), id);
        if (same < 0)
            goto error;
        if (same) {
            m->tally[HIT] += 1;
            return id;
        }
    }
    if ((reason = pop_reason(m, path)) < 0)
        goto error;
    m->tally[MISS_B] += size;
    if (reason == EVICTED) {
        m->tally[CAP] += 1;
        m->tally[CAP_B] += size;
    }
    else if (reason == INVALIDATED) {
        m->tally[INV] += 1;
        m->tally[INV_B] += size;
    }
    else
        m->tally[COMP] += 1;
    return id;
error:
    Py_XDECREF(id);
    return NULL;
}

/* `_apply_other`: every event but a hit. */
static int apply_other(Manager *m, PyObject *op_obj, long op, PyObject *path, long long size_in, PyObject *size_in_obj,
                       long long ts, PyObject *ts_obj)
{
    PyObject *count_obj = PyDict_GetItemWithError(m->count, path), *id = NULL, *size_obj = NULL, *old, *entry;
    long long count = 1, size;
    int failed = 0, refreshed = 0;
    if (count_obj == NULL && PyErr_Occurred())
        return -1;
    if (count_obj != NULL && (count = as_ll(count_obj, &failed) + 1, failed))
        return -1;
    if ((count_obj = PyLong_FromLongLong(count)) == NULL)
        return -1;
    if (PyDict_SetItem(m->count, path, count_obj) < 0)
        goto error;
    if (op == READ) {
        if ((id = need(m, path, size_in, size_in_obj)) == NULL)
            goto error;
        size_obj = PyDict_GetItemWithError(m->size, path);
        if (size_obj == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, path);
            goto error;
        }
        Py_INCREF(size_obj);
    }
    else {
        if (op == EDIT) {
            PyObject *known = PyDict_GetItemWithError(m->size, path), *needed;
            if (known == NULL && PyErr_Occurred())
                goto error;
            if (known == NULL)
                needed = need(m, path, size_in, size_in_obj);
            else {
                long long k = as_ll(known, &failed);
                Py_INCREF(known);   /* `need` may replace it in the size map */
                needed = failed ? NULL : need(m, path, k, known);
                Py_DECREF(known);
            }
            if (needed == NULL)
                goto error;
            Py_DECREF(needed);
        }
        else if (op != WRITE && op != OUTPUT) {
            PyErr_Format(PyExc_ValueError, "unknown op code %R", op_obj);
            goto error;
        }
        if ((id = new_revision(m, path, size_in_obj)) == NULL || pop_reason(m, path) < 0)
            goto error;
        size_obj = size_in_obj;
        Py_INCREF(size_obj);
    }
    size = as_ll(size_obj, &failed);
    if (failed)
        goto error;
    old = PyDict_GetItemWithError(m->entries, path);
    if (old == NULL && PyErr_Occurred())
        goto error;
    if (old != NULL) {
        PyObject *old_id = SLOT(old, off_id);
        long long old_size = as_ll(SLOT(old, off_size), &failed);
        if (failed)
            goto error;
        Py_INCREF(old_id);
        refreshed = equal(old_id, id);
        if (refreshed < 0 || PyDict_DelItem(m->entries, path) < 0 ||
            (m->has_hooks && !refreshed && call_hook(m, s_on_remove, old_id, Py_False) < 0)) {
            Py_DECREF(old_id);
            goto error;
        }
        Py_DECREF(old_id);
        m->bytes -= old_size;
    }
    if (ts > m->last_ts && !m->tail_unsorted) {
        m->last_ts = ts;
        Py_INCREF(id);
        Py_SETREF(m->last_id, id);
    }
    else if (order(m, ts, id) < 0)
        goto error;
    if ((entry = new_entry(id, path, ts_obj, size_obj, count_obj)) == NULL)
        goto error;
    if (PyDict_SetItem(m->entries, path, entry) < 0) {
        Py_DECREF(entry);
        goto error;
    }
    m->bytes += size;
    if (size > m->max_bytes && !refreshed)
        m->oversize += 1;
    if (m->has_hooks && call_hook(m, refreshed ? s_on_access : s_on_insert, entry, NULL) < 0) {
        Py_DECREF(entry);
        goto error;
    }
    Py_DECREF(entry);
    Py_DECREF(id);
    Py_DECREF(size_obj);
    Py_DECREF(count_obj);
    return 0;
error:
    Py_XDECREF(id);
    Py_XDECREF(size_obj);
    Py_DECREF(count_obj);
    return -1;
}

/* `_remove` for a list or tuple of ids without hooks; the rest of the answer from the first id that
 * is not a resident id goes to the Python method, which describes the violation. */
static PyObject *remove_answer(Manager *m, PyObject *answer, PyObject *evicted)
{
    Py_ssize_t i, n;
    PyObject **items, *rest, *problem;
    long long removed = 0;
    if ((!PyList_CheckExact(answer) && !PyTuple_CheckExact(answer)) || m->has_hooks)
        return call_manager(m, s_remove, answer, evicted, NULL, NULL);
    n = PySequence_Fast_GET_SIZE(answer);
    items = PySequence_Fast_ITEMS(answer);
    for (i = 0; i < n; i++) {
        PyObject *id = items[i], *path, *entry, *entry_id, *current;
        Py_ssize_t colon;
        int same, failed = 0;
        long long size;
        if (!PyUnicode_CheckExact(id))
            break;   /* a str subclass, or no string: the Python method reads or reports it */
        colon = PyUnicode_FindChar(id, ':', 0, PyUnicode_GET_LENGTH(id), -1);
        if (colon == -2)
            return NULL;
        path = PyUnicode_Substring(id, 0, colon < 0 ? 0 : colon);
        if (path == NULL)
            return NULL;
        entry = PyDict_GetItemWithError(m->entries, path);
        if (entry == NULL) {
            Py_DECREF(path);
            if (PyErr_Occurred())
                return NULL;
            break;
        }
        entry_id = SLOT(entry, off_id);
        if ((same = equal(entry_id, id)) <= 0) {
            Py_DECREF(path);
            if (same < 0)
                return NULL;
            break;
        }
        Py_INCREF(entry_id);
        size = as_ll(SLOT(entry, off_size), &failed);
        if (failed || PyDict_DelItem(m->entries, path) < 0)
            goto error;
        removed += size;
        current = PyDict_GetItemWithError(m->current, path);
        if (current == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, path);
            goto error;
        }
        if ((same = equal(entry_id, current)) < 0 ||
            (same && PyDict_SetItem(m->reason, path, evicted_code) < 0) || PyList_Append(evicted, entry_id) < 0)
            goto error;
        Py_DECREF(entry_id);
        Py_DECREF(path);
        continue;
    error:
        Py_DECREF(entry_id);
        Py_DECREF(path);
        m->bytes -= removed;
        return NULL;
    }
    m->bytes -= removed;
    if (i == n)
        Py_RETURN_NONE;
    rest = PyList_CheckExact(answer) ? PyList_GetSlice(answer, i, n) : PyTuple_GetSlice(answer, i, n);
    if (rest == NULL)
        return NULL;
    problem = call_manager(m, s_remove, rest, evicted, NULL, NULL);
    Py_DECREF(rest);
    return problem;
}

static int record_row(Manager *m, long long *row)
{
    Py_ssize_t at = PyByteArray_GET_SIZE(m->row_bytes);
    /* bytearray grows by an eighth; growing it by doubling first, then shrinking by less than half
     * (which keeps the allocation), copies each row a bounded number of times. */
    if (at + ROW_BYTES + 1 > ((PyByteArrayObject *)m->row_bytes)->ob_alloc &&
        PyByteArray_Resize(m->row_bytes, 2 * (at + ROW_BYTES)) < 0)
        return -1;
    if (PyByteArray_Resize(m->row_bytes, at + ROW_BYTES) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(m->row_bytes) + at, row, ROW_BYTES);
    if (at + ROW_BYTES >= chunk_bytes) {
        PyObject *r = call_manager(m, s_pack_rows, NULL, NULL, NULL, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* `end_turn`: call the strategy once, remove its answer, record the turn. */
static int end_turn(Manager *m, PyObject *turn_obj, long long ts)
{
    long long turn_bytes = m->bytes, t0, elapsed, row[NFIELDS], turn, removed = 0, left;
    PyObject *state, *total, *answer, *args[2], *raised = NULL, *evicted = NULL, *violation = NULL;
    Py_ssize_t count;
    int violated = 0, failed = 0, k;
    turn = as_ll(turn_obj, &failed);
    if (failed)
        return -1;
    if (!m->ordered || m->tail_unsorted) {
        PyObject *r = call_manager(m, s_sort, NULL, NULL, NULL, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    if ((total = PyLong_FromLongLong(turn_bytes)) == NULL)
        return -1;
    if ((state = view_type->tp_alloc(view_type, 0)) == NULL) {
        Py_DECREF(total);
        return -1;
    }
    Py_INCREF(m->resident); SLOT(state, off_values) = m->resident;
    Py_INCREF(Py_None); SLOT(state, off_items) = Py_None;
    SLOT(state, off_total) = total;
    args[0] = state;
    args[1] = m->budget;
    t0 = now_ns();
    answer = PyObject_Vectorcall(m->evict, args, 2, NULL);
    elapsed = now_ns() - t0;
    Py_INCREF(Py_None);
    Py_SETREF(SLOT(state, off_values), Py_None);   /* the view is valid during `evict` only */
    Py_DECREF(state);
    if (answer == NULL) {
        /* `call_failure(exc)[1]`; it raises again for a real interrupt */
        PyObject *exc = fetch_exception(), *failure;
        failure = PyObject_CallOneArg(call_failure_fn, exc);
        Py_DECREF(exc);
        if (failure == NULL)
            return -1;
        if (!PyTuple_Check(failure) || PyTuple_GET_SIZE(failure) != 2) {
            Py_DECREF(failure);
            PyErr_SetString(PyExc_TypeError, "call_failure must return (kind, description)");
            return -1;
        }
        raised = Py_NewRef(PyTuple_GET_ITEM(failure, 1));
        Py_DECREF(failure);
        answer = Py_NewRef(Py_None);   /* no answer: nothing to remove or to show */
    }
    if (raised != NULL || (PyList_CheckExact(answer) && PyList_GET_SIZE(answer) == 0)) {
        violation = raised;
        Py_XINCREF(violation);
    }
    else {
        PyObject *problem, *ids;
        Py_ssize_t size = PyDict_GET_SIZE(m->entries);
        if ((PyList_CheckExact(answer) || PyTuple_CheckExact(answer)) && PySequence_Fast_GET_SIZE(answer) <= size + 1) {
            ids = Py_NewRef(answer);   /* what `answer_ids` would read whole */
            problem = Py_NewRef(Py_None);
        }
        else {
            PyObject *n = PyLong_FromSsize_t(size), *checked;
            if (n == NULL)
                goto error;
            checked = PyObject_CallFunctionObjArgs(answer_ids_fn, answer, n, NULL);
            Py_DECREF(n);
            if (checked == NULL)
                goto error;
            if (!PyTuple_Check(checked) || PyTuple_GET_SIZE(checked) != 2) {
                Py_DECREF(checked);
                PyErr_SetString(PyExc_TypeError, "answer_ids must return (ids, problem)");
                goto error;
            }
            ids = Py_NewRef(PyTuple_GET_ITEM(checked, 0));
            problem = Py_NewRef(PyTuple_GET_ITEM(checked, 1));
            Py_DECREF(checked);
        }
        if ((evicted = PyList_New(0)) == NULL) {
            Py_DECREF(ids);
            Py_DECREF(problem);
            goto error;
        }
        if (ids == Py_None) {
            violation = problem;   /* refused whole: nothing of it is applied */
            Py_DECREF(ids);
        }
        else {
            Py_DECREF(problem);
            problem = remove_answer(m, ids, evicted);
            Py_DECREF(ids);
            if (problem == NULL)
                goto error;
            if (problem != Py_None)
                violation = problem;
            else
                Py_DECREF(problem);
        }
    }
    if (violation != NULL || !m->plain || m->bytes > m->max_bytes || PyDict_GET_SIZE(m->entries) > m->max_count) {
        PyObject *r;
        if (evicted == NULL && (evicted = PyList_New(0)) == NULL)
            goto error;
        r = call_manager(m, s_settle_turn, turn_obj, answer, violation != NULL ? violation : Py_None, evicted);
        if (r == NULL)
            goto error;
        violated = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (violated < 0)
            goto error;
    }
    left = m->bytes;
    count = PyDict_GET_SIZE(m->entries);
    if (evicted != NULL && PyList_GET_SIZE(evicted) > 0) {
        PyObject *earlier = PyDict_GetItemWithError(m->evicted_ids, turn_obj);
        removed = PyList_GET_SIZE(evicted);
        if (earlier == NULL) {
            if (PyErr_Occurred() || PyDict_SetItem(m->evicted_ids, turn_obj, evicted) < 0)
                goto error;
        }
        else if (PyList_SetSlice(earlier, PyList_GET_SIZE(earlier), PyList_GET_SIZE(earlier), evicted) < 0)
            goto error;
    }
    row[0] = turn;
    row[1] = ts;
    for (k = 0; k < NTALLY; k++)
        row[2 + k] = m->tally[k];
    row[11] = removed;
    row[12] = turn_bytes - left;
    row[13] = turn_bytes;
    row[14] = left;
    row[15] = count;
    row[16] = elapsed;
    row[17] = violated;
    memset(m->tally, 0, sizeof(m->tally));
    Py_DECREF(answer);
    Py_XDECREF(raised);
    Py_XDECREF(evicted);
    Py_XDECREF(violation);
    return record_row(m, row);
error:
    Py_XDECREF(answer);
    Py_XDECREF(raised);
    Py_XDECREF(evicted);
    Py_XDECREF(violation);
    return -1;
}

/* Writes the scalars back on the way out, after an error too (the manager keeps what was applied
 * before it), unless the error came from the manager's own Python code; keeps a pending exception. */
static PyObject *finish(Manager *m, int ok)
{
    if (ok)
        ok = store_scalars(m) == 0;
    else if (!m->stale) {
        PyObject *exc = fetch_exception();
        store_scalars(m);
        PyErr_Clear();
        restore_exception(exc);
    }
    release(m);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *fast_apply_events(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Manager m;
    PyObject *seq[5] = {NULL, NULL, NULL, NULL, NULL}, **col[5], *this_turn = NULL;
    Py_ssize_t n, i, k, ncols;
    long long this_turn_value = 0, last = 0;
    int closing, ok = 0, loaded = 0;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "apply_events(manager, ops, paths, sizes, ts_ms, turns)");
        return NULL;
    }
    closing = args[5] != Py_None;
    ncols = closing ? 5 : 4;
    for (k = 0; k < ncols; k++) {
        /* Tuples: Python code called back during the loop cannot resize what the loop reads. */
        seq[k] = PySequence_Tuple(args[1 + k]);
        if (seq[k] == NULL)
            goto done;
        col[k] = PySequence_Fast_ITEMS(seq[k]);
    }
    n = PY_SSIZE_T_MAX;
    for (k = 0; k < ncols; k++)
        if (PySequence_Fast_GET_SIZE(seq[k]) < n)
            n = PySequence_Fast_GET_SIZE(seq[k]);
    if (closing && PySequence_Fast_GET_SIZE(seq[4]) == 0) {
        ok = 1;
        goto done;
    }
    if (load(&m, args[0]) < 0) {
        release(&m);
        goto done;
    }
    loaded = 1;
    if (closing) {
        int failed = 0;
        this_turn = col[4][0];
        Py_INCREF(this_turn);
        this_turn_value = as_ll(this_turn, &failed);
        if (failed)
            goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *op_obj = col[0][i], *path = col[1][i], *size_obj = col[2][i], *ts_obj = col[3][i], *old;
        long long size, ts;
        long op;
        int failed = 0;
        if (closing) {
            PyObject *turn = col[4][i];
            long long value = as_ll(turn, &failed);
            if (failed)
                goto done;
            if (value != this_turn_value) {
                if (end_turn(&m, this_turn, last) < 0)
                    goto done;
                Py_INCREF(turn);
                Py_SETREF(this_turn, turn);
                this_turn_value = value;
            }
        }
        size = as_ll(size_obj, &failed);
        ts = as_ll(ts_obj, &failed);
        if (failed)
            goto done;
        last = ts;
        op = PyIndex_Check(op_obj) ? (long)PyNumber_AsSsize_t(op_obj, NULL) : -1;
        if (op == -1 && PyErr_Occurred())
            PyErr_Clear();   /* an op that is no integer is an unknown op code */
        if (op == READ && (old = PyDict_GetItemWithError(m.entries, path)) != NULL) {
            long long old_size = as_ll(SLOT(old, off_size), &failed);
            PyObject *current, *id;
            int same;
            if (failed)
                goto done;
            if (old_size == size) {
                current = PyDict_GetItemWithError(m.current, path);
                if (current == NULL) {
                    if (!PyErr_Occurred())
                        PyErr_SetObject(PyExc_KeyError, path);
                    goto done;
                }
                id = SLOT(old, off_id);
                if ((same = equal(id, current)) < 0)
                    goto done;
                if (same) {   /* a hit: the entry moves to the recency end with its count + 1 */
                    PyObject *count_obj, *entry;
                    long long count;
                    m.tally[ACC] += 1;
                    m.tally[HIT] += 1;
                    m.tally[ACC_B] += size;
                    Py_INCREF(id);
                    if (PyDict_DelItem(m.entries, path) < 0) {
                        Py_DECREF(id);
                        goto done;
                    }
                    if (ts > m.last_ts && !m.tail_unsorted) {
                        m.last_ts = ts;
                        Py_INCREF(id);
                        Py_SETREF(m.last_id, id);
                    }
                    else if (order(&m, ts, id) < 0) {
                        Py_DECREF(id);
                        goto done;
                    }
                    count_obj = PyDict_GetItemWithError(m.count, path);
                    count = count_obj == NULL ? -1 : as_ll(count_obj, &failed);
                    if (count_obj == NULL || failed || (count_obj = PyLong_FromLongLong(count + 1)) == NULL) {
                        if (!PyErr_Occurred())
                            PyErr_SetObject(PyExc_KeyError, path);
                        Py_DECREF(id);
                        goto done;
                    }
                    entry = PyDict_SetItem(m.count, path, count_obj) < 0 ? NULL
                            : new_entry(id, path, ts_obj, size_obj, count_obj);
                    Py_DECREF(count_obj);
                    Py_DECREF(id);
                    if (entry == NULL)
                        goto done;
                    if (PyDict_SetItem(m.entries, path, entry) < 0 ||
                        (m.has_hooks && call_hook(&m, s_on_access, entry, NULL) < 0)) {
                        Py_DECREF(entry);
                        goto done;
                    }
                    Py_DECREF(entry);
                    continue;
                }
            }
        }
        else if (PyErr_Occurred())
            goto done;
        if (apply_other(&m, op_obj, op, path, size, size_obj, ts, ts_obj) < 0)
            goto done;
    }
    if (closing && end_turn(&m, this_turn, last) < 0)
        goto done;
    ok = 1;
done:
    Py_XDECREF(this_turn);
    for (k = 0; k < 5; k++)
        Py_XDECREF(seq[k]);
    if (!loaded)
        return ok ? Py_NewRef(Py_None) : NULL;
    return finish(&m, ok);
}

static PyObject *fast_end_turn(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Manager m;
    long long ts;
    int failed = 0;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "end_turn(manager, turn, ts_ms)");
        return NULL;
    }
    ts = as_ll(args[2], &failed);
    if (failed)
        return NULL;
    if (load(&m, args[0]) < 0) {
        release(&m);
        return NULL;
    }
    return finish(&m, end_turn(&m, args[1], ts) == 0);
}

static PyObject *fast_bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long rows_per_chunk;
    if (nargs != 5 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyCallable_Check(args[3]) ||
        !PyCallable_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "bind(entry_type, view_type, rows_per_chunk, call_failure, answer_ids)");
        return NULL;
    }
    rows_per_chunk = PyLong_AsLong(args[2]);
    if (rows_per_chunk == -1 && PyErr_Occurred())
        return NULL;
    if (rows_per_chunk < 1) {
        PyErr_SetString(PyExc_ValueError, "rows_per_chunk must be positive");
        return NULL;
    }
    if (slot_offset((PyTypeObject *)args[0], "id", &off_id) < 0 ||
        slot_offset((PyTypeObject *)args[0], "path", &off_path) < 0 ||
        slot_offset((PyTypeObject *)args[0], "last_accessed_at", &off_ts) < 0 ||
        slot_offset((PyTypeObject *)args[0], "size_bytes", &off_size) < 0 ||
        slot_offset((PyTypeObject *)args[0], "access_count", &off_count) < 0 ||
        slot_offset((PyTypeObject *)args[1], "_values", &off_values) < 0 ||
        slot_offset((PyTypeObject *)args[1], "_items", &off_items) < 0 ||
        slot_offset((PyTypeObject *)args[1], "total_bytes", &off_total) < 0)
        return NULL;
    Py_INCREF(args[0]);
    Py_XSETREF(entry_type, (PyTypeObject *)args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(view_type, (PyTypeObject *)args[1]);
    Py_XSETREF(call_failure_fn, Py_NewRef(args[3]));
    Py_XSETREF(answer_ids_fn, Py_NewRef(args[4]));
    chunk_bytes = rows_per_chunk * ROW_BYTES;
    Py_RETURN_NONE;
}


/* ----- StateViewBase: the slots and sequence protocol of `sim.state_view.StateView` ------------ */

typedef struct {
    PyObject_HEAD
    PyObject *values;        /* the manager's live values view, None once closed */
    PyObject *items;         /* the entries as a tuple, once a strategy iterates or indexes */
    PyObject *total_bytes;
} View;

static const char closed_message[] = "this state was only valid during the evict call that received it";

/* The entries as a tuple (borrowed), copied from the live view on first use. */
static PyObject *view_items(View *v)
{
    if (v->items == NULL || v->items == Py_None) {
        PyObject *t;
        if (v->values == NULL || v->values == Py_None) {
            PyErr_SetString(PyExc_RuntimeError, closed_message);
            return NULL;
        }
        if ((t = PySequence_Tuple(v->values)) == NULL)
            return NULL;
        Py_XSETREF(v->items, t);
    }
    return v->items;
}

static PyObject *view_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"values", "total_bytes", NULL};
    PyObject *values = Py_None, *total = Py_None;
    View *v;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:StateView", names, &values, &total))
        return NULL;
    if ((v = (View *)type->tp_alloc(type, 0)) == NULL)
        return NULL;
    v->values = Py_NewRef(values);
    v->items = Py_NewRef(Py_None);
    v->total_bytes = Py_NewRef(total);
    return (PyObject *)v;
}

static int view_traverse(View *v, visitproc visit, void *arg)
{
    Py_VISIT(v->values);
    Py_VISIT(v->items);
    Py_VISIT(v->total_bytes);
    return 0;
}

static int view_clear(View *v)
{
    Py_CLEAR(v->values);
    Py_CLEAR(v->items);
    Py_CLEAR(v->total_bytes);
    return 0;
}

/* A static type: a heap subclass's own dealloc releases the reference to its type. */
static void view_dealloc(View *v)
{
    PyObject_GC_UnTrack(v);
    view_clear(v);
    Py_TYPE(v)->tp_free((PyObject *)v);
}

static Py_ssize_t view_length(View *v)
{
    if (v->values != NULL && v->values != Py_None)
        return PyObject_Size(v->values);
    if (v->items == NULL || v->items == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, closed_message);
        return -1;
    }
    return PyObject_Size(v->items);
}

/* `state[i]`, and `state[i:j]` from the front (O(j) before the entries are copied). */
static PyObject *view_subscript(View *v, PyObject *key)
{
    PyObject *items;
    if (PySlice_Check(key) && (v->items == NULL || v->items == Py_None) && v->values != NULL && v->values != Py_None) {
        PySliceObject *slice = (PySliceObject *)key;
        Py_ssize_t start = 0, stop = PY_SSIZE_T_MAX, step = 1;
        int plain = 1;
        if (slice->start != Py_None && (start = PyNumber_AsSsize_t(slice->start, NULL)) == -1 && PyErr_Occurred())
            plain = 0;
        if (plain && slice->stop != Py_None && (stop = PyNumber_AsSsize_t(slice->stop, NULL)) == -1 && PyErr_Occurred())
            plain = 0;
        if (plain && slice->step != Py_None && (step = PyNumber_AsSsize_t(slice->step, NULL)) == -1 && PyErr_Occurred())
            plain = 0;
        if (!plain)
            PyErr_Clear();   /* the tuple's own indexing gives the error */
        else if (start >= 0 && stop >= 0 && step == 1) {
            /* A leading run (what LRU-like strategies take) without copying the whole state. */
            PyObject *it = PyObject_GetIter(v->values), *out, *entry;
            Py_ssize_t k = 0;
            if (it == NULL)
                return NULL;
            if ((out = PyList_New(0)) == NULL) {
                Py_DECREF(it);
                return NULL;
            }
            while (k < stop && (entry = PyIter_Next(it)) != NULL) {
                if (k >= start && PyList_Append(out, entry) < 0) {
                    Py_DECREF(entry);
                    break;
                }
                Py_DECREF(entry);
                k++;
            }
            Py_DECREF(it);
            if (PyErr_Occurred()) {
                Py_DECREF(out);
                return NULL;
            }
            Py_SETREF(out, PyList_AsTuple(out));
            return out;
        }
    }
    if ((items = view_items(v)) == NULL)
        return NULL;
    if (PyLong_CheckExact(key) && PyTuple_CheckExact(items)) {
        Py_ssize_t i = PyLong_AsSsize_t(key), n = PyTuple_GET_SIZE(items);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        if (i < 0)
            i += n;
        if (i < 0 || i >= n) {
            PyErr_SetString(PyExc_IndexError, "tuple index out of range");
            return NULL;
        }
        return Py_NewRef(PyTuple_GET_ITEM(items, i));
    }
    return PyObject_GetItem(items, key);
}

static PyObject *view_iter(View *v)
{
    PyObject *items = view_items(v);
    return items == NULL ? NULL : PyObject_GetIter(items);
}

static PyObject *view_close(View *v, PyObject *unused)
{
    Py_XSETREF(v->values, Py_NewRef(Py_None));
    Py_RETURN_NONE;
}

static PyObject *view_tuple(View *v, PyObject *unused)
{
    PyObject *items = view_items(v);
    return items == NULL ? NULL : Py_NewRef(items);
}

static PyMemberDef view_members[] = {
    {"_values", T_OBJECT_EX, offsetof(View, values), 0, "the manager's live values view (None once closed)"},
    {"_items", T_OBJECT_EX, offsetof(View, items), 0, "the entries as a tuple, once copied"},
    {"total_bytes", T_OBJECT_EX, offsetof(View, total_bytes), 0, "bytes of all entries"},
    {NULL},
};

static PyMethodDef view_methods[] = {
    {"close", (PyCFunction)view_close, METH_NOARGS, "End the view's validity (entries already copied stay readable)."},
    {"_tuple", (PyCFunction)view_tuple, METH_NOARGS, "The entries as a tuple."},
    {NULL},
};

static PyMappingMethods view_mapping = {(lenfunc)view_length, (binaryfunc)view_subscript, NULL};
static PySequenceMethods view_sequence = {(lenfunc)view_length};

static PyTypeObject ViewType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sim._fastpath.StateViewBase",
    .tp_basicsize = sizeof(View),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The slots and sequence protocol of sim.state_view.StateView, in C.",
    .tp_new = view_new,
    .tp_dealloc = (destructor)view_dealloc,
    .tp_traverse = (traverseproc)view_traverse,
    .tp_clear = (inquiry)view_clear,
    .tp_as_mapping = &view_mapping,
    .tp_as_sequence = &view_sequence,
    .tp_iter = (getiterfunc)view_iter,
    .tp_members = view_members,
    .tp_methods = view_methods,
};

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))fast_bind, METH_FASTCALL,
     "bind(entry_type, view_type, rows_per_chunk, call_failure, answer_ids): the classes whose slots the fast "
     "path fills, and the rules it calls for a call that raised and an answer it does not take as it is."},
    {"apply_events", (PyCFunction)(void (*)(void))fast_apply_events, METH_FASTCALL,
     "apply_events(manager, ops, paths, sizes, ts_ms, turns): CodingContextManager.apply_events."},
    {"end_turn", (PyCFunction)(void (*)(void))fast_end_turn, METH_FASTCALL,
     "end_turn(manager, turn, ts_ms): CodingContextManager.end_turn."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "sim._fastpath",
    "Compiled fast path of CodingContextManager (the Python methods are the reference).", -1, methods,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    struct { PyObject **slot; const char *name; } names[] = {
        {&s_entries, "_entries"}, {&s_resident, "_resident"}, {&s_current, "_current_id"}, {&s_count, "_count"},
        {&s_revision, "_revision"}, {&s_size, "_size"}, {&s_reason, "_absent_reason"}, {&s_hooks, "_hooks"},
        {&s_tally, "_tally"}, {&s_row_bytes, "_row_bytes"}, {&s_evicted_ids, "_evicted_ids"}, {&s_evict, "_evict"},
        {&s_budget, "budget"}, {&s_bytes, "_bytes"}, {&s_max_bytes, "_max_bytes"}, {&s_max_count, "_max_count"},
        {&s_last_ts, "_last_ts"}, {&s_last_id, "_last_id"}, {&s_tail_unsorted, "_tail_unsorted"},
        {&s_ordered, "_ordered"}, {&s_plain, "_plain"}, {&s_oversize, "oversize"}, {&s_sort, "_sort"},
        {&s_sort_tail, "_sort_tail"}, {&s_remove, "_remove"}, {&s_settle_turn, "_settle_turn"},
        {&s_pack_rows, "_pack_rows"}, {&s_hook, "_hook"}, {&s_on_access, "on_access"},
        {&s_on_insert, "on_insert"}, {&s_on_remove, "on_remove"},
    };
    size_t k;
    for (k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if ((*names[k].slot = PyUnicode_InternFromString(names[k].name)) == NULL)
            return NULL;
    PyObject *module;
    if ((evicted_code = PyLong_FromLong(EVICTED)) == NULL || PyType_Ready(&ViewType) < 0)
        return NULL;
    if ((module = PyModule_Create(&module_def)) == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "StateViewBase", (PyObject *)&ViewType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
