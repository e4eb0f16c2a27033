/* The compiled replay engine: `resolve` and `replay`, the rules of sim/engine/rules.py in C.
 *
 * rules.py is the specification (`Resolver`, `Context`); this file must give exactly its results
 * (rows, evicted ids, counters, hook calls, violations), which the tests check on random and
 * generated sessions. The engine owns its state in its own structs; the only Python objects it
 * touches are its arguments: int64 buffers, the tables of ids and paths, the strategy's callables,
 * and `ContextEntry`, whose slots it fills (bound once by `bind`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../strategies/_slot_offset.h"

/* The per-turn row: must equal sim.engine.measures.TURN_FIELDS (checked at import). */
static const char *const turn_fields[] = {
    "turn", "ts_ms", "accesses", "hits", "compulsory", "capacity", "invalidation", "accessed_bytes",
    "miss_bytes", "capacity_bytes", "invalidation_bytes", "evictions", "evicted_bytes", "turn_bytes",
    "occupancy_bytes", "entries", "evict_ns", "violations", "pinned_bytes", "over_window", "cache_read_bytes",
    "compactions", "window_bytes",
};
enum { F_TURN, F_TS, F_ACC, F_HIT, F_COMP, F_CAP, F_INV, F_ACC_B, F_MISS_B, F_CAP_B, F_INV_B, F_EVICTIONS,
       F_EVICTED_B, F_TURN_B, F_OCC_B, F_ENTRIES, F_NS, F_VIOLATIONS, F_PINNED_B, F_OVER_WINDOW, F_CACHE_R,
       F_COMPACTIONS, F_WINDOW_B, NFIELDS };

/* Op codes and miss classes, as in rules.py. */
enum { READ, EDIT, WRITE, OUTPUT, MESSAGE, CALL, OVERHEAD, INVALIDATE };
enum { NO_NEED, COMPULSORY, INVALIDATION, CAPACITY };
/* Violation codes, as in rules.py (`VIOLATIONS`). */
enum { V_SHAPE, V_NON_STRING, V_DUPLICATE, V_UNKNOWN, V_RAISED, V_HOOK, V_OVER_BUDGET };

static PyTypeObject *entry_type, *budget_type, *view_class;
static Py_ssize_t off_id, off_path, off_ts, off_size, off_count, off_max_bytes, off_max_entries;
static PyObject *s_on_insert, *s_on_access, *s_on_remove;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* An int64 column: a C-contiguous buffer of 8-byte signed integers, at least `len` long
   (`len` < 0: any length, set into *len_out). */
typedef struct {
    Py_buffer view;
    long long *data;
    Py_ssize_t len;
} Column;

static int column_get(PyObject *obj, Column *c, int writable, const char *what)
{
    const char *f;
    c->data = NULL;
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    f = c->view.format;
    if (c->view.itemsize != 8 || f == NULL || (strcmp(f, "q") && strcmp(f, "l") && strcmp(f, "<q") &&
                                               strcmp(f, "=q") && strcmp(f, "<l") && strcmp(f, "=l"))) {
        PyBuffer_Release(&c->view);
        PyErr_Format(PyExc_TypeError, "%s must be an int64 array", what);
        return -1;
    }
    c->data = (long long *)c->view.buf;
    c->len = c->view.len / 8;
    return 0;
}

static void column_release(Column *c)
{
    if (c->data != NULL)
        PyBuffer_Release(&c->view);
    c->data = NULL;
}

/* ===== resolve ================================================================================= */

static PyObject *sorting_ids;   /* the ids `compare_resident` reads (the GIL is held while qsort runs) */

/* The id "path:revision" (new reference): the path's UTF-8 (cached by the str) and the number
   written into one buffer, a quarter of PyUnicode_FromFormat's time. */
static PyObject *revision_id(PyObject *path, long long revision)
{
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(path, &len);
    char small[256], *buf = small;
    PyObject *id;
    int digits;
    if (text == NULL) {   /* a path with lone surrogates has no UTF-8 */
        PyErr_Clear();
        return PyUnicode_FromFormat("%U:%lld", path, revision);
    }
    if (len + 24 > (Py_ssize_t)sizeof(small) && (buf = malloc(len + 24)) == NULL)
        return PyErr_NoMemory();
    memcpy(buf, text, len);
    digits = snprintf(buf + len, 24, ":%lld", revision);
    id = PyUnicode_DecodeUTF8(buf, len + digits, NULL);
    if (buf != small)
        free(buf);
    return id;
}

/* resolve(ops, paths, sizes, costs, ts, out, out_entry_slot)
       -> (steps, ids, slot_paths, slots, entries)
   `out` is 9 writable int64 columns (slot, need, need_bytes, miss, place, place_bytes, ts, count,
   event) at least as long as the events; `out_entry_slot` twice as long; `entries` maps each id
   to its entry. */
static PyObject *engine_resolve(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Column ops = {0}, sizes = {0}, costs = {0}, ts = {0}, out[9] = {{0}}, entry_slot = {0};
    PyObject *paths, *ids = NULL, *slot_paths = NULL, *slots = NULL, *entries = NULL, *result = NULL;
    long long *current = NULL, *known = NULL, *known_cost = NULL, *revisions = NULL, *placed = NULL, *count = NULL;
    char *invalid = NULL;
    Py_ssize_t n, nslots = 0, cap = 0, steps = 0, i, k;
    if (nargs != 7 || !PyList_Check(args[1]) || !PyTuple_Check(args[5]) || PyTuple_GET_SIZE(args[5]) != 9) {
        PyErr_SetString(PyExc_TypeError, "resolve(ops, paths: list, sizes, costs, ts, out: 9 columns, out_entry_slot)");
        return NULL;
    }
    paths = args[1];
    n = PyList_GET_SIZE(paths);
    if (column_get(args[0], &ops, 0, "ops") < 0 || column_get(args[2], &sizes, 0, "sizes") < 0 ||
        column_get(args[3], &costs, 0, "costs") < 0 || column_get(args[4], &ts, 0, "ts") < 0 ||
        column_get(args[6], &entry_slot, 1, "out_entry_slot") < 0)
        goto done;
    for (k = 0; k < 9; k++)
        if (column_get(PyTuple_GET_ITEM(args[5], k), &out[k], 1, "out") < 0)
            goto done;
    if (ops.len != n || sizes.len != n || costs.len != n || ts.len != n || entry_slot.len < 2 * n) {
        PyErr_SetString(PyExc_ValueError, "resolve: columns of different lengths");
        goto done;
    }
    for (k = 0; k < 9; k++)
        if (out[k].len < n) {
            PyErr_SetString(PyExc_ValueError, "resolve: an output column is too short");
            goto done;
        }
    if ((ids = PyList_New(0)) == NULL || (slot_paths = PyList_New(0)) == NULL || (slots = PyDict_New()) == NULL ||
        (entries = PyDict_New()) == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        PyObject *path = PyList_GET_ITEM(paths, i), *found;
        long long op = ops.data[i], size = sizes.data[i], cost = costs.data[i], slot, need = -1, need_bytes = 0;
        long long miss = NO_NEED, place, known_size;
        if (op == MESSAGE || op == CALL || op == OVERHEAD) {   /* pinned: no slot, no need */
            out[0].data[steps] = -1, out[1].data[steps] = -1, out[2].data[steps] = 0, out[3].data[steps] = NO_NEED;
            out[4].data[steps] = -1, out[5].data[steps] = cost, out[6].data[steps] = ts.data[i], out[7].data[steps] = 0;
            out[8].data[steps] = i;
            steps++;
            continue;
        }
        if ((found = PyDict_GetItemWithError(slots, path)) != NULL)
            slot = PyLong_AsLongLong(found);
        else {
            PyObject *number;
            if (PyErr_Occurred() || !PyUnicode_Check(path)) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "path %zd is not a str", i);
                goto done;
            }
            if (nslots == cap) {
                Py_ssize_t c = cap ? 2 * cap : 64;
#define GROW(p, type) do { void *q = realloc((p), c * sizeof(type)); if (q == NULL) { PyErr_NoMemory(); goto done; } (p) = q; } while (0)
                GROW(current, long long); GROW(known, long long); GROW(known_cost, long long); GROW(revisions, long long);
                GROW(placed, long long); GROW(count, long long); GROW(invalid, char);
#undef GROW
                cap = c;
            }
            slot = nslots++;
            current[slot] = -1, known[slot] = 0, known_cost[slot] = 0, revisions[slot] = 0, placed[slot] = -1;
            count[slot] = 0;
            invalid[slot] = 0;
            if ((number = PyLong_FromSsize_t(slot)) == NULL || PyDict_SetItem(slots, path, number) < 0 ||
                PyList_Append(slot_paths, path) < 0) {
                Py_XDECREF(number);
                goto done;
            }
            Py_DECREF(number);
        }
        /* The rules of rules.Resolver: _new_revision and _needed as macros over the slot. */
#define NEW_REVISION(sz, cst, out_entry) do {                                                     \
            PyObject *id_ = revision_id(path, revisions[slot]), *e_;                               \
            if (id_ == NULL || PyList_Append(ids, id_) < 0) { Py_XDECREF(id_); goto done; }      \
            (out_entry) = PyList_GET_SIZE(ids) - 1;                                               \
            e_ = PyLong_FromSsize_t(out_entry);                                                   \
            if (e_ == NULL || PyDict_SetItem(entries, id_, e_) < 0) {                             \
                Py_XDECREF(e_), Py_DECREF(id_);                                                   \
                goto done;                                                                        \
            }                                                                                     \
            Py_DECREF(e_), Py_DECREF(id_);                                                        \
            entry_slot.data[(out_entry)] = slot;                                                  \
            revisions[slot]++, current[slot] = (out_entry), known[slot] = (sz), known_cost[slot] = (cst); \
        } while (0)
#define NEEDED(sz, cst) do {                                                                      \
            if (current[slot] < 0) { NEW_REVISION(sz, cst, need); miss = COMPULSORY; break; }     \
            need = current[slot];                                                                 \
            if ((sz) != known[slot]) {                                                            \
                if (invalid[slot]) known[slot] = (sz), known_cost[slot] = (cst);                  \
                else NEW_REVISION(sz, cst, need);                                                 \
            }                                                                                     \
            if (placed[slot] == need) miss = CAPACITY;                                            \
            else if (invalid[slot]) { invalid[slot] = 0; miss = INVALIDATION; }                   \
            else miss = COMPULSORY;                                                               \
        } while (0)
        if (op == INVALIDATE) {
            NEW_REVISION(size, cost, place);
            if (placed[slot] >= 0)
                invalid[slot] = 1;
            continue;
        }
        count[slot]++;
        if (op == READ) {
            NEEDED(size, cost);
            need_bytes = cost, place = need;
        } else if (op == EDIT || op == WRITE || op == OUTPUT) {
            if (op == EDIT) {
                int seen = current[slot] >= 0;
                need_bytes = seen ? known_cost[slot] : cost;
                known_size = seen ? known[slot] : size;
                NEEDED(known_size, need_bytes);
            }
            NEW_REVISION(size, cost, place);
            invalid[slot] = 0;
        } else {
            PyErr_Format(PyExc_ValueError, "unknown op code %lld", op);
            goto done;
        }
#undef NEEDED
#undef NEW_REVISION
        placed[slot] = place;
        out[0].data[steps] = slot, out[1].data[steps] = need, out[2].data[steps] = need_bytes;
        out[3].data[steps] = miss, out[4].data[steps] = place, out[5].data[steps] = cost;
        out[6].data[steps] = ts.data[i], out[7].data[steps] = count[slot], out[8].data[steps] = i;
        steps++;
    }
    result = Py_BuildValue("nOOOO", steps, ids, slot_paths, slots, entries);
done:
    column_release(&ops), column_release(&sizes), column_release(&costs), column_release(&ts);
    column_release(&entry_slot);
    for (k = 0; k < 9; k++)
        column_release(&out[k]);
    free(current), free(known), free(known_cost), free(revisions), free(placed), free(count), free(invalid);
    Py_XDECREF(ids), Py_XDECREF(slot_paths), Py_XDECREF(slots), Py_XDECREF(entries);
    return result;
}

/* ===== the context ============================================================================= */

typedef struct {
    PyObject_HEAD
    Py_ssize_t nslots;
    long long *entry, *ts, *size, *count;   /* per slot: the resident entry (-1: none) and its fields */
    Py_ssize_t *prev, *next;                 /* the recency list over resident slots (-1 ends it) */
    PyObject **obj;                          /* per slot: the resident entry's ContextEntry, once made */
    Py_ssize_t head, tail, n;
    long long bytes;
    int unsorted;                            /* some entry is out of (last_accessed_at, id) order */
    PyObject *ids, *paths;                   /* the arm's ids (by entry) and paths (by slot) */
} State;

static void state_dealloc(State *st)
{
    Py_ssize_t s;
    if (st->obj != NULL)
        for (s = 0; s < st->nslots; s++)
            Py_XDECREF(st->obj[s]);
    free(st->entry), free(st->ts), free(st->size), free(st->count), free(st->prev), free(st->next), free(st->obj);
    Py_XDECREF(st->ids), Py_XDECREF(st->paths);
    Py_TYPE(st)->tp_free((PyObject *)st);
}

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ctxbench.sim.engine._engine.State",
    .tp_basicsize = sizeof(State),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One arm's resident entries during a compiled replay.",
    .tp_dealloc = (destructor)state_dealloc,
};

/* The ContextEntry of a resident slot (new reference), made on first use and kept until it changes. */
static PyObject *entry_of(State *st, Py_ssize_t s)
{
    PyObject *e = st->obj[s], *ts, *size, *count;
    if (e != NULL)
        return Py_NewRef(e);
    if ((e = entry_type->tp_alloc(entry_type, 0)) == NULL)
        return NULL;
    ts = PyLong_FromLongLong(st->ts[s]), size = PyLong_FromLongLong(st->size[s]);
    count = PyLong_FromLongLong(st->count[s]);
    if (ts == NULL || size == NULL || count == NULL) {
        Py_XDECREF(ts), Py_XDECREF(size), Py_XDECREF(count), Py_DECREF(e);
        return NULL;
    }
    SLOT(e, off_id) = Py_NewRef(PyList_GET_ITEM(st->ids, st->entry[s]));
    SLOT(e, off_path) = Py_NewRef(PyList_GET_ITEM(st->paths, s));
    SLOT(e, off_ts) = ts, SLOT(e, off_size) = size, SLOT(e, off_count) = count;
    st->obj[s] = Py_NewRef(e);
    return e;
}

static void prompt_add(long long *tree, Py_ssize_t n, Py_ssize_t position, long long value)
{
    for (Py_ssize_t i = position + 1; i <= n; i += i & -i)
        tree[i] += value;
}

static long long prompt_before(const long long *tree, Py_ssize_t n, Py_ssize_t position)
{
    long long total = 0;
    for (Py_ssize_t i = position < n ? position : n; i > 0; i -= i & -i)
        total += tree[i];
    return total;
}

static void unlink_slot(State *st, Py_ssize_t s)
{
    Py_ssize_t p = st->prev[s], q = st->next[s];
    if (p >= 0) st->next[p] = q; else st->head = q;
    if (q >= 0) st->prev[q] = p; else st->tail = p;
}

/* (ts, id) of slot a < that of slot b; ids are distinct exact str, so comparing them cannot fail */
static int before(const State *st, Py_ssize_t a, Py_ssize_t b)
{
    return st->ts[a] < st->ts[b] ||
           (st->ts[a] == st->ts[b] && PyUnicode_Compare(PyList_GET_ITEM(st->ids, st->entry[a]),
                                                        PyList_GET_ITEM(st->ids, st->entry[b])) < 0);
}

static void append_slot(State *st, Py_ssize_t s)
{
    st->prev[s] = st->tail, st->next[s] = -1;
    if (st->tail >= 0) {
        st->next[st->tail] = s;
        if (before(st, s, st->tail))
            st->unsorted = 1;
    } else
        st->head = s;
    st->tail = s;
}

typedef struct { long long ts, rank; Py_ssize_t slot; } SortKey;

static int compare_keys(const void *a, const void *b)
{
    const SortKey *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Keys whose `rank` is an entry: ties by the entry's id in `sorting_ids`. */
static int compare_resident(const void *a, const void *b)
{
    const SortKey *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return PyUnicode_Compare(PyList_GET_ITEM(sorting_ids, x->rank), PyList_GET_ITEM(sorting_ids, y->rank));
}

/* Restore (last_accessed_at, id) order of the recency list. */
static int sort_resident(State *st)
{
    SortKey *keys = malloc((st->n ? st->n : 1) * sizeof(SortKey));
    Py_ssize_t s, k = 0;
    if (keys == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (s = st->head; s >= 0; s = st->next[s])
        keys[k].ts = st->ts[s], keys[k].rank = st->entry[s], keys[k].slot = s, k++;
    sorting_ids = st->ids;
    qsort(keys, k, sizeof(SortKey), compare_resident);
    sorting_ids = NULL;
    st->head = st->tail = -1;
    st->unsorted = 0;
    for (s = 0; s < k; s++)
        append_slot(st, keys[s].slot);
    free(keys);
    return 0;
}

/* ===== the state view ========================================================================== */

typedef struct {
    PyObject_HEAD
    State *state;            /* while the evict call runs; NULL once closed */
    PyObject *items;         /* the entries as a tuple, once indexed or iterated */
    PyObject *total_bytes;
} View;

static const char closed_message[] = "this state was only valid during the evict call that received it";

/* The first `k` resident entries (all: k < 0), as a new tuple. */
static PyObject *leading(State *st, Py_ssize_t k)
{
    Py_ssize_t s, i = 0, len = (k < 0 || k > st->n) ? st->n : k;
    PyObject *t = PyTuple_New(len);
    if (t == NULL)
        return NULL;
    for (s = st->head; s >= 0 && i < len; s = st->next[s], i++) {
        PyObject *e = entry_of(st, s);
        if (e == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, e);
    }
    return t;
}

static PyObject *view_items(View *v)   /* borrowed */
{
    if (v->items == NULL) {
        if (v->state == NULL) {
            PyErr_SetString(PyExc_RuntimeError, closed_message);
            return NULL;
        }
        v->items = leading(v->state, -1);
    }
    return v->items;
}

static int view_traverse(View *v, visitproc visit, void *arg)
{
    Py_VISIT(v->items);
    Py_VISIT(v->total_bytes);
    return 0;
}

static int view_clear(View *v)
{
    Py_CLEAR(v->state);
    Py_CLEAR(v->items);
    Py_CLEAR(v->total_bytes);
    return 0;
}

static void view_dealloc(View *v)
{
    PyObject_GC_UnTrack(v);
    view_clear(v);
    Py_TYPE(v)->tp_free((PyObject *)v);
}

static PyObject *view_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyErr_Format(PyExc_TypeError, "%s is made by the replay engine only", type->tp_name);
    return NULL;
}

static Py_ssize_t view_length(View *v)
{
    if (v->state != NULL)
        return v->state->n;
    if (v->items == NULL) {
        PyErr_SetString(PyExc_RuntimeError, closed_message);
        return -1;
    }
    return PyTuple_GET_SIZE(v->items);
}

/* `state[i]`; `state[i:j]` from the front reads only the first j entries. */
static PyObject *view_subscript(View *v, PyObject *key)
{
    PyObject *items;
    if (PySlice_Check(key) && v->items == NULL && v->state != NULL) {
        PySliceObject *slice = (PySliceObject *)key;
        Py_ssize_t start = 0, stop = PY_SSIZE_T_MAX;
        int leading_run = slice->step == Py_None && (slice->start == Py_None || PyLong_CheckExact(slice->start)) &&
                          (slice->stop == Py_None || PyLong_CheckExact(slice->stop));
        if (leading_run && slice->start != Py_None && (start = PyLong_AsSsize_t(slice->start)) == -1 && PyErr_Occurred())
            return NULL;
        if (leading_run && slice->stop != Py_None && (stop = PyLong_AsSsize_t(slice->stop)) == -1 && PyErr_Occurred())
            return NULL;
        if (leading_run && start >= 0 && stop >= 0) {
            PyObject *front = leading(v->state, stop), *out;
            if (front == NULL || start == 0)
                return front;
            out = PyTuple_GetSlice(front, start, PY_SSIZE_T_MAX);
            Py_DECREF(front);
            return out;
        }
    }
    if ((items = view_items(v)) == NULL)
        return NULL;
    return PyObject_GetItem(items, key);
}

static PyObject *view_item(View *v, Py_ssize_t i)
{
    PyObject *items = view_items(v);
    if (items == NULL)
        return NULL;
    if (i < 0 || i >= PyTuple_GET_SIZE(items)) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return NULL;
    }
    return Py_NewRef(PyTuple_GET_ITEM(items, i));
}

static PyObject *view_iter(View *v)
{
    PyObject *items = view_items(v);
    return items == NULL ? NULL : PyObject_GetIter(items);
}

static PyObject *view_close(View *v, PyObject *unused)
{
    Py_CLEAR(v->state);
    Py_RETURN_NONE;
}

static PyObject *view_tuple(View *v, PyObject *unused)
{
    PyObject *items = view_items(v);
    return items == NULL ? NULL : Py_NewRef(items);
}

static PyMemberDef view_members[] = {
    {"total_bytes", T_OBJECT_EX, offsetof(View, total_bytes), READONLY, "bytes of all entries"},
    {NULL},
};

static PyMethodDef view_methods[] = {
    {"close", (PyCFunction)view_close, METH_NOARGS, "End the view's validity (entries already copied stay readable)."},
    {"_tuple", (PyCFunction)view_tuple, METH_NOARGS, "The entries as a tuple."},
    {NULL},
};

static PySequenceMethods view_as_sequence = {
    .sq_length = (lenfunc)view_length,
    .sq_item = (ssizeargfunc)view_item,
};

static PyMappingMethods view_as_mapping = {
    .mp_length = (lenfunc)view_length,
    .mp_subscript = (binaryfunc)view_subscript,
};

static PyTypeObject ViewType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ctxbench.sim.engine._engine.StateViewBase",
    .tp_basicsize = sizeof(View),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The sequence protocol of sim.engine.StateView over a compiled replay's context.",
    .tp_new = view_new,
    .tp_dealloc = (destructor)view_dealloc,
    .tp_traverse = (traverseproc)view_traverse,
    .tp_clear = (inquiry)view_clear,
    .tp_as_sequence = &view_as_sequence,
    .tp_as_mapping = &view_as_mapping,
    .tp_iter = (getiterfunc)view_iter,
    .tp_members = view_members,
    .tp_methods = view_methods,
};

/* ===== replay ================================================================================== */

typedef struct {
    State *st;
    Column step[8], ends[3], entry_slot, dirs, rows, conversation;
    PyObject *entries, *evict, *hooks, *budget, *answer_ids, *judge, *violation, *evicted_ids;
    PyObject *turn_budget;   /* the strategy's budget: the window less what is pinned */
    long long max_bytes, max_count, max_dirs, ndirs, oversize, dir_evictions, pinned, turn_max;
    /* The prompt cache: bytes placed in the prompt by the steps before each step, bytes removed
       from it by the step they had entered at (a Fenwick tree), each resident slot's entry step,
       the first position changed since the previous call, and that call's steps and time. */
    long long *placed, *removed, *entered, changed_from, last_steps, last_ts, ttl_ms;
    Py_ssize_t nprompt, steps_done;
    int have_last;
    /* Compaction of the conversation (rules.Compaction; trigger -1: none): the pinned messages and
       tool calls (and summary) in the window, the steps already compacted, the summary's place. */
    long long trigger, summary, conversation_bytes, compacted_upto, summary_at;
    long long tally[NFIELDS];
    PyObject *hook_error;    /* how the first hook that failed this turn broke the contract (str) */
} Replay;

/* How a call that failed with the pending exception broke the contract (new reference; NULL when
   `judge`, rules.failed_call, passes a real interrupt on). `name`: the hook, or NULL for evict. */
static PyObject *judged_failure(Replay *r, PyObject *name)
{
    PyObject *type, *value, *tb, *text;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    text = name == NULL ? PyObject_CallOneArg(r->judge, value)
                        : PyObject_CallFunctionObjArgs(r->judge, value, name, NULL);
    Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
    return text;
}

/* Call a stateful strategy's hook; a failure is kept for the turn's end, a real interrupt propagates. */
static int call_hook(Replay *r, PyObject *name, PyObject *arg1, PyObject *arg2)
{
    PyObject *out = arg2 == NULL ? PyObject_CallMethodOneArg(r->hooks, name, arg1)
                                 : PyObject_CallMethodObjArgs(r->hooks, name, arg1, arg2, NULL);
    PyObject *text;
    if (out != NULL) {
        Py_DECREF(out);
        return 0;
    }
    if ((text = judged_failure(r, name)) == NULL)
        return -1;
    if (r->hook_error == NULL)
        r->hook_error = text;
    else
        Py_DECREF(text);
    return 0;
}

static int hook_entry(Replay *r, PyObject *name, Py_ssize_t s)
{
    PyObject *e = entry_of(r->st, s);
    int rc;
    if (e == NULL)
        return -1;
    rc = call_hook(r, name, e, NULL);
    Py_DECREF(e);
    return rc;
}

/* Remove resident slot `s`: evicted (its id appended to `evicted`) or replaced by a new revision. */
static int remove_slot(Replay *r, Py_ssize_t s, PyObject *evicted)
{
    State *st = r->st;
    PyObject *id = PyList_GET_ITEM(st->ids, st->entry[s]);
    long long position = r->entered[s];
    unlink_slot(st, s);
    prompt_add(r->removed, r->nprompt, position, st->size[s]);   /* the cached prefix ends where it was */
    if (position < r->changed_from)
        r->changed_from = position;
    st->bytes -= st->size[s];
    st->n--;
    st->entry[s] = -1;
    Py_CLEAR(st->obj[s]);
    if (evicted != NULL && PyList_Append(evicted, id) < 0)
        return -1;
    if (r->hooks != NULL)
        return call_hook(r, s_on_remove, id, evicted != NULL ? Py_True : Py_False);
    return 0;
}

static int apply_step(Replay *r, Py_ssize_t i)
{
    State *st = r->st;
    long long *t = r->tally;
    Py_ssize_t s = (Py_ssize_t)r->step[0].data[i];
    long long need = r->step[1].data[i], place = r->step[4].data[i], old;
    r->steps_done = i + 1;
    r->placed[i + 1] = r->placed[i];
    if (s < 0) {   /* pinned: in the window for good, never the strategy's */
        r->pinned += r->step[5].data[i];
        r->placed[i + 1] += r->step[5].data[i];
        if (r->trigger >= 0 && r->conversation.data[i])
            r->conversation_bytes += r->step[5].data[i];
        return 0;
    }
    old = st->entry[s];
    if (need >= 0) {
        long long bytes = r->step[2].data[i];
        t[F_ACC]++, t[F_ACC_B] += bytes;
        if (old == need)
            t[F_HIT]++;
        else {
            long long miss = r->step[3].data[i];
            t[F_MISS_B] += bytes;
            if (miss == CAPACITY)
                t[F_CAP]++, t[F_CAP_B] += bytes;
            else if (miss == INVALIDATION)
                t[F_INV]++, t[F_INV_B] += bytes;
            else
                t[F_COMP]++;
        }
    }
    if (old == place) {   /* a hit refreshes the resident entry */
        unlink_slot(st, s);
        if (r->step[5].data[i] != st->size[s]) {   /* rewritten: it leaves the prompt and enters here */
            prompt_add(r->removed, r->nprompt, r->entered[s], st->size[s]);
            if (r->entered[s] < r->changed_from)
                r->changed_from = r->entered[s];
            r->entered[s] = i;
            r->placed[i + 1] += r->step[5].data[i];
        }
        st->bytes += r->step[5].data[i] - st->size[s];
        st->ts[s] = r->step[6].data[i], st->size[s] = r->step[5].data[i], st->count[s] = r->step[7].data[i];
        Py_CLEAR(st->obj[s]);
        append_slot(st, s);
        return r->hooks != NULL ? hook_entry(r, s_on_access, s) : 0;
    }
    if (old >= 0 && remove_slot(r, s, NULL) < 0)
        return -1;
    r->entered[s] = i;
    r->placed[i + 1] += r->step[5].data[i];
    st->entry[s] = place;
    st->ts[s] = r->step[6].data[i], st->size[s] = r->step[5].data[i], st->count[s] = r->step[7].data[i];
    append_slot(st, s);
    st->bytes += st->size[s];
    st->n++;
    if (st->size[s] > r->max_bytes)
        r->oversize++;
    return r->hooks != NULL ? hook_entry(r, s_on_insert, s) : 0;
}

static int over_budget(const Replay *r)
{
    return r->st->bytes > r->turn_max || r->st->n > r->max_count;
}

/* The strategy's budget for this turn's end: the window less what is pinned, at least 0 (a new
   ContextBudget only when that changes). */
static int set_turn_budget(Replay *r)
{
    long long left = r->pinned >= r->max_bytes ? 0 : r->max_bytes - r->pinned;
    PyObject *b, *max_bytes, *max_entries;
    if (left == r->turn_max)
        return 0;
    if ((b = budget_type->tp_alloc(budget_type, 0)) == NULL || (max_bytes = PyLong_FromLongLong(left)) == NULL) {
        Py_XDECREF(b);
        return -1;
    }
    max_entries = SLOT(r->budget, off_max_entries);
    SLOT(b, off_max_bytes) = max_bytes;
    SLOT(b, off_max_entries) = Py_NewRef(max_entries != NULL ? max_entries : Py_None);
    Py_SETREF(r->turn_budget, b);
    r->turn_max = left;
    return 0;
}

/* Remove the ids of the answer; the first violation goes into (*code, *detail). */
static int remove_answer(Replay *r, PyObject *answer, PyObject *evicted, int *code, PyObject **detail)
{
    State *st = r->st;
    PyObject *seq;
    Py_ssize_t i;
    if ((PyList_CheckExact(answer) && PyList_GET_SIZE(answer) <= st->n + 1) ||
        (PyTuple_CheckExact(answer) && PyTuple_GET_SIZE(answer) <= st->n + 1))
        seq = Py_NewRef(answer);
    else {
        /* Anything else goes through strategies.contract.answer_ids: what of it is read, or why nothing. */
        PyObject *pair = PyObject_CallFunction(r->answer_ids, "On", answer, st->n);
        if (pair == NULL)
            return -1;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(pair);
            PyErr_SetString(PyExc_TypeError, "answer_ids must return a pair");
            return -1;
        }
        if (PyTuple_GET_ITEM(pair, 1) != Py_None) {
            *code = V_SHAPE, *detail = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
            Py_DECREF(pair);
            return 0;
        }
        seq = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
        Py_DECREF(pair);
        if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq)) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "answer_ids must give a list or a tuple");
            return -1;
        }
    }
    /* By index, the length read again each time: hooks run Python code between the ids. */
    for (i = 0; i < (PyList_Check(seq) ? PyList_GET_SIZE(seq) : PyTuple_GET_SIZE(seq)); i++) {
        PyObject *id = Py_NewRef(PyList_Check(seq) ? PyList_GET_ITEM(seq, i) : PyTuple_GET_ITEM(seq, i)), *found;
        long long e = -1;
        Py_ssize_t s = -1;
        if (!PyUnicode_CheckExact(id)) {
            if (!PyUnicode_Check(id)) {
                if (*detail == NULL)
                    *code = V_NON_STRING, *detail = Py_NewRef(id);
                Py_DECREF(id);
                continue;
            }
            Py_SETREF(id, PyUnicode_FromObject(id));   /* the plain string: none of the subclass's methods run */
            if (id == NULL)
                goto fail_seq;
        }
        if ((found = PyDict_GetItemWithError(r->entries, id)) != NULL) {
            e = PyLong_AsLongLong(found);
            s = (Py_ssize_t)r->entry_slot.data[e];
        } else if (PyErr_Occurred())
            goto fail;
        if (e < 0 || st->entry[s] != e) {
            if (*detail == NULL) {
                int twice = PySequence_Contains(evicted, id);
                if (twice < 0)
                    goto fail;
                *code = twice ? V_DUPLICATE : V_UNKNOWN, *detail = Py_NewRef(id);
            }
            Py_DECREF(id);
            continue;
        }
        Py_DECREF(id);
        if (remove_slot(r, s, evicted) < 0)
            goto fail_seq;
        continue;
fail:
        Py_DECREF(id);
fail_seq:
        Py_DECREF(seq);
        return -1;
    }
    Py_DECREF(seq);
    return 0;
}

/* Evict whole directories, least recently used first, until at most max_dirs remain. */
static int limit_directories(Replay *r, PyObject *evicted)
{
    State *st = r->st;
    long long *latest = malloc((r->ndirs ? r->ndirs : 1) * sizeof(long long)), present = 0;
    SortKey *order = NULL;
    Py_ssize_t s, d, k = 0, excess;
    int rc = -1;
    if (latest == NULL)
        return PyErr_NoMemory(), -1;
    for (d = 0; d < r->ndirs; d++)
        latest[d] = LLONG_MIN;
    for (s = st->head; s >= 0; s = st->next[s]) {
        long long dir = r->dirs.data[s];
        if (dir < 0)
            continue;
        if (latest[dir] == LLONG_MIN)
            present++;
        if (st->ts[s] > latest[dir] || latest[dir] == LLONG_MIN)
            latest[dir] = st->ts[s];
    }
    excess = (Py_ssize_t)(present - r->max_dirs);
    if (excess <= 0) {
        free(latest);
        return 0;
    }
    if ((order = malloc(present * sizeof(SortKey))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (d = 0; d < r->ndirs; d++)
        if (latest[d] != LLONG_MIN)
            order[k].ts = latest[d], order[k].rank = d, order[k].slot = d, k++;
    qsort(order, k, sizeof(SortKey), compare_keys);   /* directory numbers are in name order */
    for (d = 0; d < excess; d++) {
        Py_ssize_t next;
        for (s = st->head; s >= 0; s = next) {
            next = st->next[s];
            if (r->dirs.data[s] == order[d].slot) {
                if (remove_slot(r, s, evicted) < 0)
                    goto done;
                r->dir_evictions++;
            }
        }
    }
    rc = 0;
done:
    free(latest);
    free(order);
    return rc;
}

/* Replace the conversation by a summary when the pinned content reached the trigger (rules.Context._compact). */
static int compact(Replay *r)
{
    Py_ssize_t i, steps = r->steps_done;
    long long first = LLONG_MAX;
    if (r->trigger < 0 || r->pinned < r->trigger || r->conversation_bytes <= r->summary)
        return 0;
    for (i = r->compacted_upto; i < steps; i++)
        if (r->conversation.data[i]) {
            prompt_add(r->removed, r->nprompt, i, r->step[5].data[i]);
            if (i < first)
                first = i;
        }
    r->compacted_upto = steps;
    if (r->summary_at >= 0) {
        prompt_add(r->removed, r->nprompt, r->summary_at, r->summary);
        if (r->summary_at < first)
            first = r->summary_at;
    }
    prompt_add(r->removed, r->nprompt, steps - 1, -r->summary);   /* the summary enters at the end */
    r->summary_at = steps - 1;
    r->pinned += r->summary - r->conversation_bytes;
    r->conversation_bytes = r->summary;
    if (first < r->changed_from)
        r->changed_from = first;
    return 1;
}

static int end_turn(Replay *r, Py_ssize_t k)
{
    State *st = r->st;
    long long turn = r->ends[1].data[k], turn_bytes, t0, elapsed, *row, window;
    PyObject *answer, *evicted = NULL, *detail = NULL, *raised = NULL, *total;
    View *view;
    int code = -1, rc = -1, compacted;
    if (st->unsorted && sort_resident(st) < 0)
        return -1;
    window = r->pinned + st->bytes;
    compacted = compact(r);
    if (set_turn_budget(r) < 0)
        return -1;
    turn_bytes = st->bytes;
    if ((total = PyLong_FromLongLong(turn_bytes)) == NULL)
        return -1;
    if ((view = (View *)view_class->tp_alloc(view_class, 0)) == NULL) {
        Py_DECREF(total);
        return -1;
    }
    view->state = (State *)Py_NewRef(st), view->items = NULL, view->total_bytes = total;
    t0 = now_ns();
    answer = PyObject_CallFunctionObjArgs(r->evict, (PyObject *)view, r->turn_budget, NULL);
    elapsed = now_ns() - t0;
    Py_CLEAR(view->state);   /* closed: valid during the call only */
    Py_DECREF(view);
    if (answer == NULL) {   /* a strategy that fails breaks the contract; it does not crash the replay */
        if ((raised = judged_failure(r, NULL)) == NULL)
            return -1;
        answer = Py_NewRef(Py_None);
    }
    if ((evicted = PyList_New(0)) == NULL)
        goto done;
    if (raised != NULL)
        code = V_RAISED, detail = Py_NewRef(raised);
    else if (!(PyList_CheckExact(answer) && PyList_GET_SIZE(answer) == 0) &&
             remove_answer(r, answer, evicted, &code, &detail) < 0)
        goto done;
    if (detail == NULL && r->hook_error != NULL)
        code = V_HOOK, detail = Py_NewRef(r->hook_error);
    Py_CLEAR(r->hook_error);
    if (detail == NULL && over_budget(r)) {
        code = V_OVER_BUDGET;
        if ((detail = Py_BuildValue("(Ln)", st->bytes, st->n)) == NULL)
            goto done;
    }
    if (detail != NULL) {
        PyObject *out = PyObject_CallFunction(r->violation, "LiOOO", turn, code, detail, answer, r->turn_budget);
        Py_ssize_t s, next;
        if (out == NULL)
            goto done;
        Py_DECREF(out);
        for (s = st->head; s >= 0 && over_budget(r); s = next) {   /* restore the budget, oldest first */
            next = st->next[s];
            if (remove_slot(r, s, evicted) < 0)
                goto done;
        }
    }
    if (r->max_dirs >= 0 && limit_directories(r, evicted) < 0)
        goto done;
    if (PyList_GET_SIZE(evicted)) {
        PyObject *key = PyLong_FromLongLong(turn), *earlier;
        if (key == NULL)
            goto done;
        earlier = PyDict_GetItemWithError(r->evicted_ids, key);
        if ((earlier == NULL && (PyErr_Occurred() || PyDict_SetItem(r->evicted_ids, key, evicted) < 0)) ||
            (earlier != NULL && PyList_SetSlice(earlier, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, evicted) < 0)) {
            Py_DECREF(key);
            goto done;
        }
        Py_DECREF(key);
    }
    row = r->rows.data + k * NFIELDS;
    memcpy(row, r->tally, sizeof(r->tally));
    row[F_TURN] = turn, row[F_TS] = r->ends[2].data[k];
    row[F_EVICTIONS] = PyList_GET_SIZE(evicted), row[F_EVICTED_B] = turn_bytes - st->bytes;
    row[F_TURN_B] = turn_bytes, row[F_OCC_B] = st->bytes, row[F_ENTRIES] = st->n;
    row[F_NS] = elapsed, row[F_VIOLATIONS] = detail != NULL;
    row[F_PINNED_B] = r->pinned, row[F_OVER_WINDOW] = r->pinned > r->max_bytes;
    {   /* this call's prompt read from the cache: the previous call's up to its first change */
        long long now = r->ends[2].data[k], upto = r->changed_from < r->last_steps ? r->changed_from : r->last_steps;
        row[F_CACHE_R] = r->have_last && now - r->last_ts <= r->ttl_ms
                         ? r->placed[upto] - prompt_before(r->removed, r->nprompt, upto) : 0;
        r->have_last = 1, r->last_steps = r->steps_done, r->last_ts = now, r->changed_from = LLONG_MAX;
    }
    row[F_COMPACTIONS] = compacted, row[F_WINDOW_B] = window;
    memset(r->tally, 0, sizeof(r->tally));
    rc = 0;
done:
    Py_XDECREF(answer), Py_XDECREF(evicted), Py_XDECREF(detail), Py_XDECREF(raised);
    return rc;
}

static long long as_ll(PyObject *o, long long none)
{
    return o == Py_None ? none : PyLong_AsLongLong(o);
}

/* replay(steps, ends, ids, paths, entries, entry_slot, dirs, max_dirs, evict, hooks, budget, max_bytes,
          max_entries, answer_ids, judge, violation, hook_error, rows, cache_ttl_ms, trigger, summary, conversation)
   -> (evicted_ids, oversize, directory_evictions, resident_ids); trigger None: no compaction */
static PyObject *engine_replay(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Replay r = {0};
    State *st = NULL;
    PyObject *result = NULL, *resident = NULL;
    Py_ssize_t k, i = 0, nsteps, nends, s;
    if (nargs != 22 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 8 || !PyTuple_Check(args[1]) ||
        PyTuple_GET_SIZE(args[1]) != 3 || !PyList_Check(args[2]) || !PyList_Check(args[3]) || !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "replay(steps: 8 columns, ends: 3 columns, ids: list, paths: list, "
                                         "entries: dict, entry_slot, dirs, max_dirs, evict, hooks, budget, "
                                         "max_bytes, max_entries, answer_ids, judge, violation, hook_error, rows, "
                                         "cache_ttl_ms, trigger, summary, conversation)");
        return NULL;
    }
    if (entry_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind() was not called");
        return NULL;
    }
    for (k = 0; k < 8; k++)
        if (column_get(PyTuple_GET_ITEM(args[0], k), &r.step[k], 0, "steps") < 0)
            goto done;
    for (k = 0; k < 3; k++)
        if (column_get(PyTuple_GET_ITEM(args[1], k), &r.ends[k], 0, "ends") < 0)
            goto done;
    if (column_get(args[5], &r.entry_slot, 0, "entry_slot") < 0 || column_get(args[17], &r.rows, 1, "rows") < 0)
        goto done;
    if (args[6] != Py_None && column_get(args[6], &r.dirs, 0, "dirs") < 0)
        goto done;
    r.trigger = as_ll(args[19], -1), r.summary = as_ll(args[20], 0), r.summary_at = -1;
    if (PyErr_Occurred())
        goto done;
    if (r.trigger >= 0 && column_get(args[21], &r.conversation, 0, "conversation") < 0)
        goto done;
    nsteps = r.step[0].len, nends = r.ends[0].len;
    for (k = 1; k < 8; k++)
        if (r.step[k].len != nsteps)
            goto lengths;
    if (r.ends[1].len != nends || r.ends[2].len != nends || r.rows.len < nends * NFIELDS ||
        (r.trigger >= 0 && r.conversation.len < nsteps) ||
        r.entry_slot.len < PyList_GET_SIZE(args[2]))
        goto lengths;
    if ((st = PyObject_New(State, &StateType)) == NULL)
        goto done;
    st->nslots = PyList_GET_SIZE(args[3]);
    st->entry = malloc((st->nslots + 1) * sizeof(long long)), st->ts = malloc((st->nslots + 1) * sizeof(long long));
    st->size = malloc((st->nslots + 1) * sizeof(long long)), st->count = malloc((st->nslots + 1) * sizeof(long long));
    st->prev = malloc((st->nslots + 1) * sizeof(Py_ssize_t)), st->next = malloc((st->nslots + 1) * sizeof(Py_ssize_t));
    st->obj = calloc(st->nslots + 1, sizeof(PyObject *));
    st->ids = Py_NewRef(args[2]), st->paths = Py_NewRef(args[3]);
    st->head = st->tail = -1, st->n = 0, st->bytes = 0, st->unsorted = 0;
    if (!st->entry || !st->ts || !st->size || !st->count || !st->prev || !st->next || !st->obj) {
        PyErr_NoMemory();
        goto done;
    }
    for (s = 0; s < st->nslots; s++)
        st->entry[s] = -1;
    if (r.dirs.data != NULL && r.dirs.len < st->nslots)
        goto lengths;
    for (k = 0; k < nsteps; k++) {   /* every index the loop follows, checked once */
        long long slot = r.step[0].data[k], place = r.step[4].data[k], need = r.step[1].data[k];
        if (slot == -1 ? (place != -1 || need != -1)
                       : (slot < 0 || slot >= st->nslots || place < 0 || place >= PyList_GET_SIZE(args[2]) ||
                          need >= PyList_GET_SIZE(args[2])))
            goto lengths;
    }
    r.st = st;
    r.entries = args[4], r.evict = args[8], r.hooks = args[9] == Py_None ? NULL : args[9], r.budget = args[10];
    r.max_dirs = as_ll(args[7], -1);
    r.ndirs = 0;
    if (r.dirs.data != NULL)
        for (s = 0; s < st->nslots; s++)
            if (r.dirs.data[s] + 1 > r.ndirs)
                r.ndirs = r.dirs.data[s] + 1;
    r.max_bytes = PyLong_AsLongLong(args[11]), r.max_count = as_ll(args[12], LLONG_MAX);
    if (PyErr_Occurred())
        goto done;
    if (!PyObject_TypeCheck(r.budget, budget_type)) {
        PyErr_SetString(PyExc_TypeError, "budget must be a ContextBudget");
        goto done;
    }
    r.turn_budget = Py_NewRef(r.budget), r.turn_max = r.max_bytes;
    r.ttl_ms = PyLong_AsLongLong(args[18]);
    if (PyErr_Occurred())
        goto done;
    r.nprompt = nsteps, r.changed_from = LLONG_MAX;
    r.placed = calloc(nsteps + 1, sizeof(long long)), r.removed = calloc(nsteps + 1, sizeof(long long));
    r.entered = calloc(st->nslots + 1, sizeof(long long));
    if (r.placed == NULL || r.removed == NULL || r.entered == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    r.answer_ids = args[13], r.judge = args[14], r.violation = args[15];
    r.hook_error = args[16] == Py_None ? NULL : Py_NewRef(args[16]);
    if ((r.evicted_ids = PyDict_New()) == NULL)
        goto done;
    for (k = 0; k <= nends; k++) {
        Py_ssize_t stop = k < nends ? (Py_ssize_t)r.ends[0].data[k] : nsteps;
        if (stop > nsteps || stop < i)
            goto lengths;
        for (; i < stop; i++)
            if (apply_step(&r, i) < 0)
                goto done;
        if (k < nends && end_turn(&r, k) < 0)
            goto done;
    }
    if (st->unsorted && sort_resident(st) < 0)
        goto done;
    if ((resident = PyList_New(st->n)) == NULL)
        goto done;
    for (s = st->head, k = 0; s >= 0; s = st->next[s], k++)
        PyList_SET_ITEM(resident, k, Py_NewRef(PyList_GET_ITEM(st->ids, st->entry[s])));
    result = Py_BuildValue("OLLO", r.evicted_ids, r.oversize, r.dir_evictions, resident);
    goto done;
lengths:
    PyErr_SetString(PyExc_ValueError, "replay: inconsistent resolved columns");
done:
    for (k = 0; k < 8; k++)
        column_release(&r.step[k]);
    for (k = 0; k < 3; k++)
        column_release(&r.ends[k]);
    column_release(&r.entry_slot), column_release(&r.rows), column_release(&r.dirs);
    column_release(&r.conversation);
    free(r.placed), free(r.removed), free(r.entered);
    Py_XDECREF(r.evicted_ids), Py_XDECREF(r.hook_error), Py_XDECREF(resident), Py_XDECREF(r.turn_budget);
    Py_XDECREF(st);
    return result;
}

/* ===== transcript ============================================================================== */
/* The transcript model of sim/engine/transcript.py (`_Transcript`), which is its specification: an
   append-only list of TranscriptItem objects (the policy's view) with, per item, its bytes, prefix
   sums, role, tokens and the entry it holds; per entry, its copies in the window and the most tokens
   a copy had. Edits of the usual shapes are judged and applied here; anything else is judged by
   strategies.policy.judge_edits (through `judge`), whose message a violation carries. */

static PyTypeObject *item_type, *replace_type, *append_type;
static Py_ssize_t off_i_id, off_i_role, off_i_kind, off_i_tokens, off_i_turn, off_i_path, off_i_ref;
static Py_ssize_t off_r_ids, off_r_tokens, off_r_role, off_a_role, off_a_tokens, off_a_ref;

enum { R_OVERHEAD, R_USER, R_ASSISTANT, R_THINKING, R_CALL, R_RESULT, R_SUMMARY, R_PLACEHOLDER, R_ATTACHED, NROLES };

typedef struct {
    PyObject *items, *index_of, *roles, *kinds, *ids, *entries, *removed;
    long long *size, *cum, *holds, *tokens;
    char *role;
    Py_ssize_t n, cap;
    long long *copies, *seen;
    Py_ssize_t nentries;
    long long bytes, evictable, made, compactions;
    double reference;
} Tx;

static int tx_grow(Tx *t)
{
    Py_ssize_t cap = t->cap ? 2 * t->cap : 256;
    long long *size = realloc(t->size, cap * sizeof(long long)), *cum;
    if (size == NULL)
        return -1;
    t->size = size;
    if ((cum = realloc(t->cum, (cap + 1) * sizeof(long long))) == NULL)
        return -1;
    t->cum = cum;
    if ((size = realloc(t->holds, cap * sizeof(long long))) == NULL)
        return -1;
    t->holds = size;
    if ((size = realloc(t->tokens, cap * sizeof(long long))) == NULL)
        return -1;
    t->tokens = size;
    char *role = realloc(t->role, cap);
    if (role == NULL)
        return -1;
    t->role = role;
    t->cap = cap;
    return 0;
}

static int evictable_role(int role)
{
    return role == R_RESULT || role == R_ATTACHED;
}

/* A new TranscriptItem (new reference); `tokens` as a Python int. */
static PyObject *new_item(PyObject *id, PyObject *role, PyObject *kind, long long tokens, long long turn,
                          PyObject *path, PyObject *ref)
{
    PyObject *item = item_type->tp_alloc(item_type, 0), *tk, *tn;
    if (item == NULL)
        return NULL;
    if ((tk = PyLong_FromLongLong(tokens)) == NULL || (tn = PyLong_FromLongLong(turn)) == NULL) {
        Py_XDECREF(tk);
        Py_DECREF(item);
        return NULL;
    }
    SLOT(item, off_i_id) = Py_NewRef(id), SLOT(item, off_i_role) = Py_NewRef(role);
    SLOT(item, off_i_kind) = Py_NewRef(kind), SLOT(item, off_i_tokens) = tk, SLOT(item, off_i_turn) = tn;
    SLOT(item, off_i_path) = Py_NewRef(path), SLOT(item, off_i_ref) = Py_NewRef(ref);
    return item;
}

/* Append `item` (a reference is taken) of `size` bytes, role code `role`, holding entry `holds` (-1: none). */
static int tx_append(Tx *t, PyObject *item, long long size, int role, long long holds, long long tokens)
{
    PyObject *at;
    if (t->n == t->cap && tx_grow(t) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    if ((at = PyLong_FromSsize_t(t->n)) == NULL)
        return -1;
    if (PyDict_SetItem(t->index_of, SLOT(item, off_i_id), at) < 0) {
        Py_DECREF(at);
        return -1;
    }
    Py_DECREF(at);
    if (PyList_Append(t->items, item) < 0)
        return -1;
    t->size[t->n] = size, t->holds[t->n] = holds, t->role[t->n] = (char)role, t->tokens[t->n] = tokens;
    t->cum[t->n + 1] = t->cum[t->n] + size;
    t->n++;
    t->bytes += size;
    if (evictable_role(role))
        t->evictable += size;
    if (holds >= 0) {
        t->copies[holds]++;
        if (tokens > t->seen[holds])
            t->seen[holds] = tokens;
    }
    return 0;
}

/* Item `at` leaves the window (the caller refills or removes its place). */
static void tx_forget(Tx *t, Py_ssize_t at)
{
    t->bytes -= t->size[at];
    if (evictable_role(t->role[at]))
        t->evictable -= t->size[at];
    if (t->holds[at] >= 0)
        t->copies[t->holds[at]]--;
}

static int role_code(Tx *t, PyObject *role)
{
    for (int k = 0; k < NROLES; k++) {
        PyObject *name = PyTuple_GET_ITEM(t->roles, k);
        if (role == name)
            return k;
        int eq = PyUnicode_Check(role) ? PyUnicode_Compare(role, name) : -1;
        if (eq == 0)
            return k;
    }
    PyErr_Clear();
    return -1;
}

static long long as_count(PyObject *o)   /* an exact int >= 0, else -1 */
{
    long long v;
    if (!PyLong_CheckExact(o))
        return -1;
    v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return v < 0 ? -1 : v;
}

/* The entry a ref names (-1: none). */
static long long entry_of_ref(Tx *t, PyObject *ref)
{
    PyObject *e = PyUnicode_CheckExact(ref) ? PyDict_GetItemWithError(t->entries, ref) : NULL;
    if (e == NULL) {
        PyErr_Clear();
        return -1;
    }
    return PyLong_AsLongLong(e);
}

/* 1 when `edits` are of the usual shapes and keep the contract (rules of judge_edits), 0 when they do not
   (or are of another shape: the caller asks judge_edits), -1 on an error. `mark` has room for every item. */
static int tx_fast_judge(Tx *t, PyObject *edits, long long *mark, long long generation)
{
    Py_ssize_t k, j, count;
    long long net = 0;
    if (!PyList_CheckExact(edits) && !PyTuple_CheckExact(edits))
        return 0;
    count = PySequence_Fast_GET_SIZE(edits);
    for (k = 0; k < count; k++) {
        PyObject *edit = PySequence_Fast_GET_ITEM(edits, k);
        if (Py_IS_TYPE(edit, replace_type)) {
            PyObject *ids = SLOT(edit, off_r_ids);
            long long removed = 0, tokens;
            int role;
            if (ids == NULL || !PyTuple_CheckExact(ids) || PyTuple_GET_SIZE(ids) == 0)
                return 0;
            for (j = 0; j < PyTuple_GET_SIZE(ids); j++) {
                PyObject *id = PyTuple_GET_ITEM(ids, j), *at;
                Py_ssize_t i;
                if (!PyUnicode_CheckExact(id))
                    return 0;
                if ((at = PyDict_GetItemWithError(t->index_of, id)) == NULL)
                    return PyErr_Occurred() ? -1 : 0;
                i = PyLong_AsSsize_t(at);
                if (mark[i] == generation || t->role[i] == R_OVERHEAD)
                    return 0;
                mark[i] = generation;
                removed += t->tokens[i];
            }
            tokens = SLOT(edit, off_r_tokens) == NULL ? -1 : as_count(SLOT(edit, off_r_tokens));
            role = SLOT(edit, off_r_role) == NULL || !PyUnicode_CheckExact(SLOT(edit, off_r_role)) ? -1
                   : role_code(t, SLOT(edit, off_r_role));
            if (tokens < 0 || role < 0 || role == R_OVERHEAD || tokens > removed)
                return 0;
            net += tokens - removed;
        }
        else if (Py_IS_TYPE(edit, append_type)) {
            PyObject *r = SLOT(edit, off_a_role), *ref = SLOT(edit, off_a_ref);
            long long tokens = SLOT(edit, off_a_tokens) == NULL ? -1 : as_count(SLOT(edit, off_a_tokens));
            int role = r == NULL || !PyUnicode_CheckExact(r) ? -1 : role_code(t, r);
            if (tokens < 0 || (role != R_SUMMARY && role != R_ATTACHED) || ref == NULL || !PyUnicode_CheckExact(ref))
                return 0;
            if (role == R_ATTACHED) {
                long long e = entry_of_ref(t, ref);
                if (e < 0 || t->seen[e] < 0 || tokens > t->seen[e])
                    return 0;
            }
            net += tokens;
        }
        else
            return 0;
    }
    return net <= 0;
}

static PyObject *s_empty, *s_prose, *s_code, *s_summary;

/* Apply judged edits (tx_fast_judge said yes). `*first`: the first place changed; `*compacted`. */
static int tx_apply(Tx *t, PyObject *edits, long long calls, Py_ssize_t *first, int *compacted)
{
    Py_ssize_t k, count = PySequence_Fast_GET_SIZE(edits);
    for (k = 0; k < count; k++) {
        PyObject *edit = PySequence_Fast_GET_ITEM(edits, k), *id, *item;
        if (Py_IS_TYPE(edit, replace_type)) {
            PyObject *ids = SLOT(edit, off_r_ids), *role = SLOT(edit, off_r_role);
            long long tokens = PyLong_AsLongLong(SLOT(edit, off_r_tokens));
            Py_ssize_t nids = PyTuple_GET_SIZE(ids), j, low = t->n;
            int code = role_code(t, role);
            for (j = 0; j < nids; j++) {
                PyObject *gone = PyTuple_GET_ITEM(ids, j);
                Py_ssize_t at = PyLong_AsSsize_t(PyDict_GetItem(t->index_of, gone));
                if (at < low)
                    low = at;
                tx_forget(t, at);
                if (PyList_Append(t->removed, gone) < 0 || PyDict_DelItem(t->index_of, gone) < 0)
                    return -1;
            }
            *compacted |= nids > 1 || (code == R_SUMMARY && tokens > 0);
            if (low < *first)
                *first = low;
            item = NULL;
            if (tokens) {
                if ((id = PyUnicode_FromFormat("p%lld", ++t->made)) == NULL)
                    return -1;
                item = new_item(id, role, s_prose, tokens, calls, s_empty, s_empty);
                Py_DECREF(id);
                if (item == NULL)
                    return -1;
            }
            if (nids == 1 && item != NULL) {   /* in place: nothing moves */
                PyObject *at = PyLong_FromSsize_t(low);
                long long size = (long long)nearbyint((double)tokens * t->reference);
                if (at == NULL || PyDict_SetItem(t->index_of, SLOT(item, off_i_id), at) < 0) {
                    Py_XDECREF(at), Py_DECREF(item);
                    return -1;
                }
                Py_DECREF(at);
                PyList_SetItem(t->items, low, item);   /* steals */
                t->size[low] = size, t->holds[low] = -1, t->role[low] = (char)code, t->tokens[low] = tokens;
                t->bytes += size;
                if (evictable_role(code))
                    t->evictable += size;
            }
            else {   /* the items named leave; the new one, if any, takes the first one's place */
                Py_ssize_t w = low, r;
                PyObject *list = t->items;
                for (r = low; r < t->n; r++) {
                    PyObject *keep = PyList_GET_ITEM(list, r);
                    if (r == low && item != NULL) {
                        long long size = (long long)nearbyint((double)tokens * t->reference);
                        PyList_SET_ITEM(list, w, item);   /* the slot's reference was the gone item's */
                        Py_DECREF(keep);
                        t->size[w] = size, t->holds[w] = -1, t->role[w] = (char)code, t->tokens[w] = tokens;
                        t->bytes += size;
                        if (evictable_role(code))
                            t->evictable += size;
                        item = NULL;
                        w++;
                        continue;
                    }
                    if (PyDict_Contains(t->index_of, SLOT(keep, off_i_id)) != 1) {   /* replaced */
                        PyList_SET_ITEM(list, r, NULL);
                        Py_DECREF(keep);
                        continue;
                    }
                    PyList_SET_ITEM(list, w, keep);
                    if (w != r)
                        PyList_SET_ITEM(list, r, NULL);
                    t->size[w] = t->size[r], t->holds[w] = t->holds[r], t->role[w] = t->role[r];
                    t->tokens[w] = t->tokens[r];
                    w++;
                }
                if (PyList_SetSlice(list, w, t->n, NULL) < 0)
                    return -1;
                t->n = w;
                for (r = low; r < t->n; r++) {
                    PyObject *at = PyLong_FromSsize_t(r);
                    if (at == NULL || PyDict_SetItem(t->index_of, SLOT(PyList_GET_ITEM(list, r), off_i_id), at) < 0) {
                        Py_XDECREF(at);
                        return -1;
                    }
                    Py_DECREF(at);
                }
            }
        }
        else {
            PyObject *role = SLOT(edit, off_a_role), *ref = SLOT(edit, off_a_ref), *path = s_empty, *held = s_empty;
            long long tokens = PyLong_AsLongLong(SLOT(edit, off_a_tokens)), e = -1;
            int code = role_code(t, role);
            if (code == R_ATTACHED) {
                Py_ssize_t len = PyUnicode_GET_LENGTH(ref), colon = PyUnicode_FindChar(ref, ':', 0, len, -1);
                e = entry_of_ref(t, ref);
                path = colon >= 0 ? PyUnicode_Substring(ref, 0, colon) : Py_NewRef(s_empty);
                if (path == NULL)
                    return -1;
                if (tokens >= t->seen[e])
                    held = ref;
                else
                    e = -1;
            }
            else
                Py_INCREF(path);
            if ((id = PyUnicode_FromFormat("p%lld", ++t->made)) == NULL) {
                Py_DECREF(path);
                return -1;
            }
            item = new_item(id, role, code == R_SUMMARY ? s_prose : s_code, tokens, calls, path, held);
            Py_DECREF(id), Py_DECREF(path);
            if (item == NULL)
                return -1;
            if (tx_append(t, item, (long long)nearbyint((double)tokens * t->reference), code, e, tokens) < 0) {
                Py_DECREF(item);
                return -1;
            }
            Py_DECREF(item);
        }
    }
    return 0;
}

static PyObject *engine_transcript(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    /* transcript(steps(need, need_bytes, miss, place, place_bytes, event), ends(ends, turns, ts), event_role,
                  event_kind, event_op, paths, ids, entries, first_rev, roles, kinds, edit, admit, judge, failed,
                  violation, view_class, window_type, confirmation, reference, max_bytes, cache_ttl_ms, rows)
       -> (evicted_ids, item_ids) */
    Column step[6], ends[3], ev_role, ev_kind, ev_op, first_rev, rows;
    Tx t = {0};
    PyObject *result = NULL, *evicted = NULL, *edit, *admit, *judge, *failed, *violation, *view_class, *window_type;
    PyObject *paths, *ids, *admit_problem = NULL;
    long long confirmation, max_bytes, ttl, *mark = NULL, generation = 0, last_n = -1, last_ts = 0;
    long long tally[9] = {0};
    Py_ssize_t nsteps, nends, k, i = 0, changed_from = PY_SSIZE_T_MAX, nevents, mark_cap = 0;
    int have_last = 0;
    memset(step, 0, sizeof(step)), memset(ends, 0, sizeof(ends));
    memset(&ev_role, 0, sizeof(Column)), memset(&ev_kind, 0, sizeof(Column)), memset(&ev_op, 0, sizeof(Column));
    memset(&first_rev, 0, sizeof(Column)), memset(&rows, 0, sizeof(Column));
    if (nargs != 23 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 6 || !PyTuple_Check(args[1]) ||
        PyTuple_GET_SIZE(args[1]) != 3 || !PyList_Check(args[5]) || !PyList_Check(args[6]) || !PyDict_Check(args[7]) ||
        !PyTuple_Check(args[9]) || PyTuple_GET_SIZE(args[9]) != NROLES || !PyTuple_Check(args[10])) {
        PyErr_SetString(PyExc_TypeError, "transcript(steps: 6 columns, ends: 3 columns, event_role, event_kind, "
                                         "event_op, paths, ids, entries, first_rev, roles, kinds, edit, admit, judge, "
                                         "failed, violation, view_class, window_type, confirmation, reference, "
                                         "max_bytes, cache_ttl_ms, rows)");
        return NULL;
    }
    if (item_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_transcript() was not called");
        return NULL;
    }
    for (k = 0; k < 6; k++)
        if (column_get(PyTuple_GET_ITEM(args[0], k), &step[k], 0, "steps") < 0)
            goto done;
    for (k = 0; k < 3; k++)
        if (column_get(PyTuple_GET_ITEM(args[1], k), &ends[k], 0, "ends") < 0)
            goto done;
    if (column_get(args[2], &ev_role, 0, "event_role") < 0 || column_get(args[3], &ev_kind, 0, "event_kind") < 0 ||
        column_get(args[4], &ev_op, 0, "event_op") < 0 || column_get(args[8], &first_rev, 0, "first_rev") < 0 ||
        column_get(args[22], &rows, 1, "rows") < 0)
        goto done;
    paths = args[5], ids = args[6];
    t.entries = args[7], t.roles = args[9], t.kinds = args[10], t.ids = ids;
    edit = args[11], admit = args[12] == Py_None ? NULL : args[12], judge = args[13], failed = args[14];
    violation = args[15], view_class = args[16], window_type = args[17];
    confirmation = PyLong_AsLongLong(args[18]), t.reference = PyFloat_AsDouble(args[19]);
    max_bytes = PyLong_AsLongLong(args[20]), ttl = PyLong_AsLongLong(args[21]);
    if (PyErr_Occurred())
        goto done;
    nsteps = step[0].len, nends = ends[0].len, nevents = ev_op.len;
    t.nentries = PyList_GET_SIZE(ids);
    for (k = 1; k < 6; k++)
        if (step[k].len != nsteps)
            goto lengths;
    if (ends[1].len != nends || ends[2].len != nends || rows.len < nends * NFIELDS || ev_role.len != nevents ||
        ev_kind.len != nevents || PyList_GET_SIZE(paths) != nevents || first_rev.len < t.nentries)
        goto lengths;
    for (k = 0; k < nsteps; k++)   /* every index the loop follows, checked once */
        if (step[5].data[k] < 0 || step[5].data[k] >= nevents || step[0].data[k] >= t.nentries ||
            step[3].data[k] >= t.nentries || ev_role.data[step[5].data[k]] < 0 ||
            ev_role.data[step[5].data[k]] >= NROLES || ev_kind.data[step[5].data[k]] < 0 ||
            ev_kind.data[step[5].data[k]] >= PyTuple_GET_SIZE(t.kinds))
            goto lengths;
    t.copies = calloc(t.nentries + 1, sizeof(long long)), t.seen = malloc((t.nentries + 1) * sizeof(long long));
    if (t.copies == NULL || t.seen == NULL || tx_grow(&t) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (k = 0; k < t.nentries; k++)
        t.seen[k] = -1;
    t.cum[0] = 0;
    if ((t.items = PyList_New(0)) == NULL || (t.index_of = PyDict_New()) == NULL ||
        (t.removed = PyList_New(0)) == NULL || (evicted = PyDict_New()) == NULL)
        goto done;
    for (k = 0; k <= nends; k++) {
        Py_ssize_t stop = k < nends ? (Py_ssize_t)ends[0].data[k] : nsteps;
        long long calls = k;
        if (stop > nsteps || stop < i)
            goto lengths;
        for (; i < stop; i++) {   /* the steps: each need, then the item appended */
            long long need = step[0].data[i], place = step[3].data[i], ev = step[5].data[i], size, tokens;
            long long op = ev_op.data[ev];
            int role = (int)ev_role.data[ev];
            PyObject *id, *item, *ref;
            if (need >= 0) {
                long long nb = step[1].data[i];
                tally[0]++, tally[5] += nb;
                if (t.copies[need] > 0)
                    tally[1]++;
                else {
                    long long miss = step[2].data[i];
                    tally[6] += nb;
                    if (miss == CAPACITY)
                        tally[3]++, tally[7] += nb;
                    else if (miss == INVALIDATION)
                        tally[4]++, tally[8] += nb;
                    else
                        tally[2]++;
                }
            }
            ref = place >= 0 ? PyList_GET_ITEM(ids, place) : s_empty;
            size = op < 0 ? 0   /* a change whose call and returned text are events of their own */
                   : op == EDIT || (op == WRITE && place >= 0 && first_rev.data[place]) ? confirmation
                                                                                         : step[4].data[i];
            tokens = (long long)nearbyint((double)size / t.reference);
            if ((id = PyLong_FromLongLong(ev)) == NULL)
                goto done;
            Py_SETREF(id, PyObject_Str(id));
            if (id == NULL)
                goto done;
            item = new_item(id, PyTuple_GET_ITEM(t.roles, role), PyTuple_GET_ITEM(t.kinds, ev_kind.data[ev]), tokens,
                            calls, PyList_GET_ITEM(paths, ev), ref);
            Py_DECREF(id);
            if (item == NULL)
                goto done;
            if (admit != NULL) {   /* at most the item's tokens, an integer >= 0, else a violation at the turn's end */
                PyObject *got = PyObject_CallOneArg(admit, item);
                long long value = got == NULL ? -1 : as_count(got);
                if (got == NULL || value < 0 || value > tokens) {
                    if (admit_problem == NULL) {
                        if (got == NULL) {
                            PyObject *type, *exc, *tb, *name = PyUnicode_FromString("admit");
                            PyErr_Fetch(&type, &exc, &tb);
                            PyErr_NormalizeException(&type, &exc, &tb);
                            if (tb != NULL)
                                PyException_SetTraceback(exc, tb);
                            admit_problem = name == NULL ? NULL : PyObject_CallFunctionObjArgs(failed, exc, name, NULL);
                            Py_XDECREF(name), Py_XDECREF(type), Py_XDECREF(exc), Py_XDECREF(tb);
                        }
                        else
                            admit_problem = PyUnicode_FromFormat("admit gave %.40R for item %R of %lld tokens", got,
                                                                 SLOT(item, off_i_id), tokens);
                        if (admit_problem == NULL) {
                            Py_XDECREF(got), Py_DECREF(item);
                            goto done;
                        }
                    }
                    else if (got == NULL)
                        PyErr_Clear();
                }
                else if (value < tokens) {
                    PyObject *smaller = new_item(SLOT(item, off_i_id), SLOT(item, off_i_role), SLOT(item, off_i_kind),
                                                 value, calls, SLOT(item, off_i_path), ref);
                    Py_SETREF(item, smaller);
                    tokens = value, size = (long long)nearbyint((double)value * t.reference);
                }
                Py_XDECREF(got);
                if (item == NULL)
                    goto done;
            }
            if (tx_append(&t, item, size, role, place, tokens) < 0) {
                Py_DECREF(item);
                goto done;
            }
            Py_DECREF(item);
        }
        if (k == nends)
            break;
        {   /* the turn's end: the policy's call, its edits, the row */
            long long turn = ends[1].data[k], now = ends[2].data[k], window_bytes = t.bytes, before = t.evictable, t0;
            long long elapsed, cached, *row;
            PyObject *view, *window, *answer, *problem = NULL;
            Py_ssize_t nremoved = PyList_GET_SIZE(t.removed), first = t.n;
            int compacted = 0;
            window = PyObject_CallFunction((PyObject *)window_type, "LLLL",
                                           (long long)nearbyint((double)max_bytes / t.reference),
                                           (long long)nearbyint((double)window_bytes / t.reference), calls,
                                           t.compactions);
            if (window == NULL || (view = PyObject_CallOneArg(view_class, t.items)) == NULL) {
                Py_XDECREF(window);
                goto done;
            }
            t0 = now_ns();
            answer = PyObject_CallFunctionObjArgs(edit, view, window, NULL);
            elapsed = now_ns() - t0;
            Py_DECREF(window);
            {
                PyObject *type = NULL, *exc = NULL, *tb = NULL, *closed;
                if (answer == NULL)   /* kept while the view is closed */
                    PyErr_Fetch(&type, &exc, &tb);
                closed = PyObject_CallMethod(view, "close", NULL);
                Py_DECREF(view);
                if (closed == NULL) {
                    Py_XDECREF(answer), Py_XDECREF(type), Py_XDECREF(exc), Py_XDECREF(tb);
                    goto done;
                }
                Py_DECREF(closed);
                if (answer == NULL) {   /* a policy that fails breaks the contract; a real interrupt goes on */
                    PyErr_NormalizeException(&type, &exc, &tb);
                    if (tb != NULL)
                        PyException_SetTraceback(exc, tb);
                    problem = PyObject_CallOneArg(failed, exc);
                    Py_XDECREF(type), Py_XDECREF(exc), Py_XDECREF(tb);
                    if (problem == NULL)
                        goto done;
                }
            }
            if (answer != NULL && !(PyList_CheckExact(answer) && PyList_GET_SIZE(answer) == 0)) {
                int ok;
                if (mark_cap < t.cap) {   /* one mark per item, a new generation per judgement */
                    long long *grown = realloc(mark, (t.cap + 1) * sizeof(long long));
                    if (grown == NULL) {
                        Py_DECREF(answer);
                        PyErr_NoMemory();
                        goto done;
                    }
                    memset(grown + mark_cap, 0, (t.cap + 1 - mark_cap) * sizeof(long long));
                    mark = grown, mark_cap = t.cap;
                }
                ok = tx_fast_judge(&t, answer, mark, ++generation);
                if (ok < 0) {
                    Py_DECREF(answer);
                    goto done;
                }
                if (!ok) {   /* judge_edits decides: a violation, or edits of another shape that keep it */
                    PyObject *seen = PyDict_New(), *verdict;
                    Py_ssize_t e;
                    if (seen == NULL) {
                        Py_DECREF(answer);
                        goto done;
                    }
                    for (e = 0; e < t.nentries; e++) {
                        PyObject *v;
                        if (t.seen[e] < 0)
                            continue;
                        if ((v = PyLong_FromLongLong(t.seen[e])) == NULL ||
                            PyDict_SetItem(seen, PyList_GET_ITEM(ids, e), v) < 0) {
                            Py_XDECREF(v), Py_DECREF(seen), Py_DECREF(answer);
                            goto done;
                        }
                        Py_DECREF(v);
                    }
                    verdict = PyObject_CallFunctionObjArgs(judge, answer, t.items, seen, NULL);
                    Py_DECREF(seen);
                    if (verdict == NULL || !PyTuple_Check(verdict) || PyTuple_GET_SIZE(verdict) != 2) {
                        if (verdict != NULL)
                            PyErr_SetString(PyExc_TypeError, "judge must return (problem, edits)");
                        Py_XDECREF(verdict), Py_DECREF(answer);
                        goto done;
                    }
                    if (PyTuple_GET_ITEM(verdict, 0) != Py_None)
                        problem = Py_NewRef(PyTuple_GET_ITEM(verdict, 0));
                    else {
                        Py_SETREF(answer, Py_NewRef(PyTuple_GET_ITEM(verdict, 1)));
                        ok = tx_fast_judge(&t, answer, mark, ++generation);
                        if (ok != 1) {
                            if (ok == 0)
                                PyErr_SetString(PyExc_RuntimeError,
                                                "transcript: edits judge_edits accepts were refused");
                            Py_DECREF(verdict), Py_DECREF(answer);
                            goto done;
                        }
                    }
                    Py_DECREF(verdict);
                }
                if (problem == NULL && tx_apply(&t, answer, calls, &first, &compacted) < 0) {
                    Py_DECREF(answer);
                    goto done;
                }
            }
            Py_XDECREF(answer);
            if (problem == NULL && admit_problem != NULL)
                problem = Py_NewRef(admit_problem);
            Py_CLEAR(admit_problem);
            if (problem != NULL) {
                PyObject *out = PyObject_CallFunction(violation, "LO", turn, problem);
                if (out == NULL) {
                    Py_DECREF(problem);
                    goto done;
                }
                Py_DECREF(out);
            }
            if (PyList_GET_SIZE(t.removed) > nremoved) {
                PyObject *key = PyLong_FromLongLong(turn), *earlier, *part;
                if (key == NULL)
                    goto done;
                part = PyList_GetSlice(t.removed, nremoved, PyList_GET_SIZE(t.removed));
                earlier = part == NULL ? NULL : PyDict_GetItemWithError(evicted, key);
                if (part == NULL || (earlier == NULL && (PyErr_Occurred() || PyDict_SetItem(evicted, key, part) < 0)) ||
                    (earlier != NULL && PyList_SetSlice(earlier, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, part) < 0)) {
                    Py_XDECREF(part), Py_DECREF(key), Py_XDECREF(problem);
                    goto done;
                }
                Py_DECREF(part), Py_DECREF(key);
            }
            t.compactions += compacted;
            if (first < t.n) {   /* the prefix sums from the first place changed on */
                Py_ssize_t r;
                for (r = first; r < t.n; r++)
                    t.cum[r + 1] = t.cum[r] + t.size[r];
            }
            if (first < changed_from)
                changed_from = first;
            if (!have_last || now - last_ts > ttl)
                cached = 0;
            else
                cached = t.cum[changed_from < last_n ? changed_from : last_n];
            have_last = 1, last_n = t.n, last_ts = now, changed_from = PY_SSIZE_T_MAX;
            row = rows.data + k * NFIELDS;
            memcpy(row + F_ACC, tally, sizeof(tally));
            row[F_TURN] = turn, row[F_TS] = now;
            row[F_EVICTIONS] = PyList_GET_SIZE(t.removed) - nremoved;
            row[F_EVICTED_B] = window_bytes > t.bytes ? window_bytes - t.bytes : 0;
            row[F_TURN_B] = before, row[F_OCC_B] = t.evictable, row[F_ENTRIES] = t.n, row[F_NS] = elapsed;
            row[F_VIOLATIONS] = problem != NULL, row[F_PINNED_B] = t.bytes - t.evictable;
            row[F_OVER_WINDOW] = t.bytes > max_bytes, row[F_CACHE_R] = cached, row[F_COMPACTIONS] = compacted;
            row[F_WINDOW_B] = window_bytes;
            Py_XDECREF(problem);
            memset(tally, 0, sizeof(tally));
        }
    }
    {
        PyObject *item_ids = PyList_New(t.n);
        if (item_ids == NULL)
            goto done;
        for (k = 0; k < t.n; k++)
            PyList_SET_ITEM(item_ids, k, Py_NewRef(SLOT(PyList_GET_ITEM(t.items, k), off_i_id)));
        result = Py_BuildValue("ON", evicted, item_ids);
    }
    goto done;
lengths:
    PyErr_SetString(PyExc_ValueError, "transcript: inconsistent resolved columns");
done:
    for (k = 0; k < 6; k++)
        column_release(&step[k]);
    for (k = 0; k < 3; k++)
        column_release(&ends[k]);
    column_release(&ev_role), column_release(&ev_kind), column_release(&ev_op), column_release(&first_rev);
    column_release(&rows);
    free(t.size), free(t.cum), free(t.holds), free(t.tokens), free(t.role), free(t.copies), free(t.seen), free(mark);
    Py_XDECREF(t.items), Py_XDECREF(t.index_of), Py_XDECREF(t.removed), Py_XDECREF(evicted), Py_XDECREF(admit_problem);
    return result;
}

/* bind_transcript(item_type, replace_type, append_type): the TranscriptItem class whose slots the engine fills,
   and the Replace and Append classes it reads. */
static PyObject *engine_bind_transcript(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyTypeObject *items, *replaces, *appends;
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "bind_transcript(item_type, replace_type, append_type)");
        return NULL;
    }
    items = (PyTypeObject *)args[0], replaces = (PyTypeObject *)args[1], appends = (PyTypeObject *)args[2];
    if (slot_offset(items, "id", &off_i_id) < 0 || slot_offset(items, "role", &off_i_role) < 0 ||
        slot_offset(items, "kind", &off_i_kind) < 0 || slot_offset(items, "tokens", &off_i_tokens) < 0 ||
        slot_offset(items, "turn", &off_i_turn) < 0 || slot_offset(items, "path", &off_i_path) < 0 ||
        slot_offset(items, "ref", &off_i_ref) < 0 || slot_offset(replaces, "ids", &off_r_ids) < 0 ||
        slot_offset(replaces, "tokens", &off_r_tokens) < 0 || slot_offset(replaces, "role", &off_r_role) < 0 ||
        slot_offset(appends, "role", &off_a_role) < 0 || slot_offset(appends, "tokens", &off_a_tokens) < 0 ||
        slot_offset(appends, "ref", &off_a_ref) < 0)
        return NULL;
    if (s_empty == NULL && ((s_empty = PyUnicode_InternFromString("")) == NULL ||
                            (s_prose = PyUnicode_InternFromString("prose")) == NULL ||
                            (s_code = PyUnicode_InternFromString("code")) == NULL ||
                            (s_summary = PyUnicode_InternFromString("summary")) == NULL))
        return NULL;
    Py_XSETREF(item_type, (PyTypeObject *)Py_NewRef(items));
    Py_XSETREF(replace_type, (PyTypeObject *)Py_NewRef(replaces));
    Py_XSETREF(append_type, (PyTypeObject *)Py_NewRef(appends));
    Py_RETURN_NONE;
}

/* bind(entry_type, budget_type, view_class): the ContextEntry and ContextBudget classes whose slots
   the engine fills, and the StateView class (a subclass of StateViewBase) it gives strategies. */
static PyObject *engine_bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyTypeObject *entries, *budgets, *views;
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2]) ||
        !PyType_IsSubtype((PyTypeObject *)args[2], &ViewType)) {
        PyErr_SetString(PyExc_TypeError, "bind(entry_type, budget_type, view_class: a StateViewBase subclass)");
        return NULL;
    }
    entries = (PyTypeObject *)args[0], budgets = (PyTypeObject *)args[1], views = (PyTypeObject *)args[2];
    if (slot_offset(entries, "id", &off_id) < 0 || slot_offset(entries, "path", &off_path) < 0 ||
        slot_offset(entries, "last_accessed_at", &off_ts) < 0 || slot_offset(entries, "size_bytes", &off_size) < 0 ||
        slot_offset(entries, "access_count", &off_count) < 0 || slot_offset(budgets, "max_bytes", &off_max_bytes) < 0 ||
        slot_offset(budgets, "max_entries", &off_max_entries) < 0)
        return NULL;
    Py_XSETREF(entry_type, (PyTypeObject *)Py_NewRef(entries));
    Py_XSETREF(budget_type, (PyTypeObject *)Py_NewRef(budgets));
    Py_XSETREF(view_class, (PyTypeObject *)Py_NewRef(views));
    Py_RETURN_NONE;
}

static PyMethodDef engine_methods[] = {
    {"resolve", (PyCFunction)(void (*)(void))engine_resolve, METH_FASTCALL,
     "resolve(ops, paths, sizes, costs, ts, out, out_entry_slot) -> (steps, ids, slot_paths, slots, entries)"},
    {"replay", (PyCFunction)(void (*)(void))engine_replay, METH_FASTCALL,
     "replay(steps, ends, ids, paths, entries, entry_slot, dirs, max_dirs, evict, hooks, budget, max_bytes, "
     "max_entries, answer_ids, judge, violation, hook_error, rows, cache_ttl_ms, trigger, summary, conversation) "
     "-> (evicted_ids, oversize, "
     "directory_evictions, resident_ids)"},
    {"bind", (PyCFunction)(void (*)(void))engine_bind, METH_FASTCALL,
     "bind(entry_type, budget_type, view_class): the classes the engine makes instances of."},
    {"transcript", (PyCFunction)(void (*)(void))engine_transcript, METH_FASTCALL,
     "transcript(steps, ends, event_role, event_kind, event_op, paths, ids, entries, first_rev, roles, kinds, edit, "
     "admit, judge, failed, violation, view_class, window_type, confirmation, reference, max_bytes, cache_ttl_ms, "
     "rows) -> (evicted_ids, item_ids): the transcript model of sim/engine/transcript.py"},
    {"bind_transcript", (PyCFunction)(void (*)(void))engine_bind_transcript, METH_FASTCALL,
     "bind_transcript(item_type, replace_type, append_type): the classes the transcript model makes and reads."},
    {NULL},
};

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "ctxbench.sim.engine._engine", "The compiled replay engine (see sim/engine/rules.py).", -1,
    engine_methods,
};

PyMODINIT_FUNC PyInit__engine(void)
{
    PyObject *module, *fields;
    Py_ssize_t k;
    if (PyType_Ready(&StateType) < 0 || PyType_Ready(&ViewType) < 0)
        return NULL;
    s_on_insert = PyUnicode_InternFromString("on_insert");
    s_on_access = PyUnicode_InternFromString("on_access");
    s_on_remove = PyUnicode_InternFromString("on_remove");
    if (s_on_insert == NULL || s_on_access == NULL || s_on_remove == NULL)
        return NULL;
    if ((module = PyModule_Create(&engine_module)) == NULL)
        return NULL;
    if ((fields = PyTuple_New(NFIELDS)) == NULL)
        goto fail;
    for (k = 0; k < NFIELDS; k++) {
        PyObject *name = PyUnicode_FromString(turn_fields[k]);
        if (name == NULL) {
            Py_DECREF(fields);
            goto fail;
        }
        PyTuple_SET_ITEM(fields, k, name);
    }
    if (PyModule_AddObject(module, "TURN_FIELDS", fields) < 0) {
        Py_DECREF(fields);
        goto fail;
    }
    if (PyModule_AddObjectRef(module, "StateViewBase", (PyObject *)&ViewType) < 0)
        goto fail;
    return module;
fail:
    Py_DECREF(module);
    return NULL;
}
