/* Compiled eviction orders of the built-in lru and importance strategies.

   `evict_order(kind, entries, max_bytes, cap, total)` gives the ids that `LruStrategy` or
   `ImportanceStrategy` (strategies/lru.py, strategies/importance.py) would evict, or None
   when the input holds anything outside what this code handles exactly (an entry that is
   not exactly `ContextEntry`, a field that is not an exact int within int64, a negative
   size, an id that is not exactly str, ...): the caller then runs the Python reference.

   Orders (ties as the Python code breaks them):
     lru:        (last_accessed_at, id, position)
     importance: (score, last_accessed_at, id, position), the score computed with the same
                 IEEE operations, in the same order, as `importance_scores`.
   Entries leave from the front of that order while the rest is over `max_bytes` or over
   `cap` entries. While few go, a binary heap built in O(n) is popped once per evicted entry;
   once more than n/16 + 32 go (or the cap alone forces that many), the rest is sorted: an LSD
   radix sort on the top 32 bits in which the primary keys (time, or the score's bits) differ,
   then each run equal in those bits by a merge sort. So O(n + k log n) for k evicted while k is
   small, O(n) plus the runs otherwise; importance's ranks come from an exact radix sort of the
   times.

   No Python code runs between reading the entries and owning the ids of the answer (ids
   compare with `PyUnicode_Compare` on exact str), so the entries cannot change under the call. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_slot_offset.h"

enum { KIND_LRU = 0, KIND_IMPORTANCE = 1 };

static PyTypeObject *entry_type = NULL;
static Py_ssize_t off_id, off_ts, off_size, off_count;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

typedef struct {
    int64_t ts;
    int64_t size;
    PyObject *id;     /* borrowed from the entry, which the entries sequence keeps alive */
} Key;

/* What the sorts move: the primary key as an unsigned integer of the same order (the time
   less the lowest for lru, the score's bits for importance) and the entry's position. */
typedef struct {
    uint64_t key;
    Py_ssize_t at;
} Rec;

/* An exact int within int64 into *out: 0, or -1 (nothing raised) for anything else. */
static int exact_int64(PyObject *obj, int64_t *out)
{
    int overflow;
    long long v;
    if (obj == NULL || !PyLong_CheckExact(obj))
        return -1;
    v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* A double as an unsigned integer of the same order (no NaN; -0.0 counts as 0.0, as == has it). */
static inline uint64_t double_order(double d)
{
    uint64_t u;
    d += 0.0;
    memcpy(&u, &d, sizeof u);
    return (u >> 63) ? ~u : (u | 0x8000000000000000ULL);
}

/* Of two entries with equal primary keys, whether a leaves first: by time (importance), id, position. */
static int tie_before(const Key *keys, int kind, Py_ssize_t a, Py_ssize_t b)
{
    const Key *x = &keys[a], *y = &keys[b];
    if (kind == KIND_IMPORTANCE && x->ts != y->ts)
        return x->ts < y->ts;
    if (x->id != y->id) {
        int c = PyUnicode_Compare(x->id, y->id);   /* exact str: cannot fail */
        if (c != 0)
            return c < 0;
    }
    return a < b;
}

/* Whether x leaves before y: a strict total order. Equal primary keys are rare, so the common case
   compiles to a flag, not a branch the heap would mispredict half the time. */
static inline int before(Rec x, Rec y, const Key *keys, int kind)
{
    if (__builtin_expect(x.key == y.key, 0))
        return tie_before(keys, kind, x.at, y.at);
    return x.key < y.key;
}

static void sift_down(Rec *heap, Py_ssize_t size, Py_ssize_t at, const Key *keys, int kind)
{
    Rec item = heap[at];
    for (;;) {
        Py_ssize_t child = 2 * at + 1;
        if (child >= size)
            break;
        if (child + 1 < size)
            child += before(heap[child + 1], heap[child], keys, kind);
        if (!before(heap[child], item, keys, kind))
            break;
        heap[at] = heap[child];
        at = child;
    }
    heap[at] = item;
}

/* How many low bits of the keys of recs[0..m) vary: 64 less the leading bits all keys share. */
static int varying_bits(const Rec *recs, Py_ssize_t m)
{
    uint64_t differ = 0;
    for (Py_ssize_t i = 1; i < m; i++)
        differ |= recs[i].key ^ recs[0].key;
    return differ ? 64 - __builtin_clzll(differ) : 0;
}

/* Stable LSD radix sort of recs[0..m) by bits [low, low + width) of their keys (width <= 64 - low),
   one pass per byte of them that varies. */
static void radix_sort(Rec *recs, Rec *tmp, Py_ssize_t m, int low, int width)
{
    Py_ssize_t count[8][256];
    Rec *src = recs, *dst = tmp;
    Py_ssize_t i;
    const int digits = (width + 7) / 8;
    if (m < 2 || digits == 0)
        return;
    memset(count, 0, digits * sizeof count[0]);
    for (i = 0; i < m; i++) {
        uint64_t u = recs[i].key >> low;
        for (int b = 0; b < digits; b++)
            count[b][(u >> (8 * b)) & 0xff]++;
    }
    for (int b = 0; b < digits; b++) {
        Py_ssize_t sum = 0;
        Rec *swap;
        int shift = low + 8 * b;
        if (count[b][(recs[0].key >> shift) & 0xff] == m)
            continue;   /* this byte is the same in every key */
        for (int v = 0; v < 256; v++) {
            Py_ssize_t c = count[b][v];
            count[b][v] = sum;
            sum += c;
        }
        for (i = 0; i < m; i++)
            dst[count[b][(src[i].key >> shift) & 0xff]++] = src[i];
        swap = src;
        src = dst;
        dst = swap;
    }
    if (src != recs)
        memcpy(recs, src, m * sizeof *recs);
}

/* Sorts a[0..m) by `before`: a top-down merge sort, insertion sort below 16. */
static void merge_sort(Rec *a, Rec *tmp, Py_ssize_t m, const Key *keys, int kind)
{
    Py_ssize_t h = m / 2, i, j, k;
    if (m <= 16) {
        for (i = 1; i < m; i++) {
            Rec item = a[i];
            for (j = i; j > 0 && before(item, a[j - 1], keys, kind); j--)
                a[j] = a[j - 1];
            a[j] = item;
        }
        return;
    }
    merge_sort(a, tmp, h, keys, kind);
    merge_sort(a + h, tmp, m - h, keys, kind);
    if (!before(a[h], a[h - 1], keys, kind))
        return;
    memcpy(tmp, a, h * sizeof *a);
    for (i = 0, j = h, k = 0; i < h; k++) {
        if (j < m && before(a[j], tmp[i], keys, kind))
            a[k] = a[j++];
        else
            a[k] = tmp[i++];
    }
}

/* Sorts recs[0..m) by `before`: a radix sort on the top 32 bits in which the keys differ (all of
   them where they differ in fewer: lru's times), then each run equal in those bits by a merge sort.
   At most 4 passes; the runs are short unless keys agree in their first 32 varying bits. */
static void full_sort(Rec *recs, Rec *tmp, Py_ssize_t m, const Key *keys, int kind)
{
    Py_ssize_t start = 0, i;
    int width = varying_bits(recs, m), low = width > 32 ? width - 32 : 0;
    radix_sort(recs, tmp, m, low, width - low);
    for (i = 1; i <= m; i++) {
        if (i == m || (recs[i].key >> low) != (recs[start].key >> low)) {
            if (i - start > 1)
                merge_sort(recs + start, tmp, i - start, keys, kind);
            start = i;
        }
    }
}

/* importance's scores, into recs[i].key for entry i: count * ((1 + how many entries were accessed
   strictly earlier) / n) / max(size, 1), the IEEE operations of `importance_scores` in the same order.
   On entry recs holds (time less the lowest, i). */
static void importance_keys(Rec *recs, Rec *tmp, Py_ssize_t n, const Key *keys, const int64_t *counts)
{
    Py_ssize_t i, first = 0;
    radix_sort(recs, tmp, n, 0, varying_bits(recs, n));   /* exact: equal times must share a rank */
    for (i = 0; i < n; i++) {
        Py_ssize_t at = recs[i].at;
        const Key *k = &keys[at];
        if (i > 0 && recs[i].key != recs[i - 1].key)
            first = i;
        tmp[at].key = double_order(((double)counts[at] * ((double)(first + 1) / (double)n))
                                   / (double)(k->size > 1 ? k->size : 1));
        tmp[at].at = at;
    }
    memcpy(recs, tmp, n * sizeof *recs);
}

/* Takes entry `at` off the remaining bytes and entries and records it in taken[(*count)++]: 0, or -1
   when the remaining bytes would overflow (a state whose given total is far off its sizes). */
static inline int take(Py_ssize_t at, const Key *keys, Py_ssize_t *taken, Py_ssize_t *count, int64_t *total,
                       int64_t *remaining)
{
    if (__builtin_sub_overflow(*total, keys[at].size, total))
        return -1;
    taken[(*count)++] = at;
    (*remaining)--;
    return 0;
}

static PyObject *kernels_bind(PyObject *Py_UNUSED(module), PyObject *type)
{
    static const char *names[] = {"id", "last_accessed_at", "size_bytes", "access_count"};
    Py_ssize_t *offsets[] = {&off_id, &off_ts, &off_size, &off_count};
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "bind(entry_type): a class");
        return NULL;
    }
    for (int i = 0; i < 4; i++)
        if (slot_offset((PyTypeObject *)type, names[i], offsets[i]) < 0)
            return NULL;
    Py_INCREF(type);
    Py_XSETREF(entry_type, (PyTypeObject *)type);
    Py_RETURN_NONE;
}

#define OVER (total > max_bytes || (cap >= 0 && remaining > cap))

static PyObject *kernels_evict_order(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    long kind;
    PyObject *seq, **items, *out = NULL;
    Py_ssize_t n, i, limit, size;
    int64_t max_bytes, cap = -1, total = 0, remaining, sum = 0, lowest = INT64_MAX;
    Key *keys = NULL;
    int64_t *counts = NULL;
    Rec *recs = NULL, *tmp = NULL;
    Py_ssize_t *taken = NULL, k = 0;

    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "evict_order(kind, entries, max_bytes, cap, total)");
        return NULL;
    }
    kind = PyLong_AsLong(args[0]);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    if (kind != KIND_LRU && kind != KIND_IMPORTANCE) {
        PyErr_Format(PyExc_ValueError, "unknown kernel %ld", kind);
        return NULL;
    }
    if (entry_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind(entry_type) was not called");
        return NULL;
    }
    seq = args[1];
    if (PyList_CheckExact(seq)) {
        n = PyList_GET_SIZE(seq);
        items = ((PyListObject *)seq)->ob_item;
    } else if (PyTuple_CheckExact(seq)) {
        n = PyTuple_GET_SIZE(seq);
        items = ((PyTupleObject *)seq)->ob_item;
    } else {
        Py_RETURN_NONE;
    }
    if (exact_int64(args[2], &max_bytes) < 0)
        Py_RETURN_NONE;
    if (args[3] != Py_None && (exact_int64(args[3], &cap) < 0 || cap < 0))
        Py_RETURN_NONE;
    if (args[4] != Py_None && exact_int64(args[4], &total) < 0)
        Py_RETURN_NONE;

    keys = PyMem_Malloc((n ? n : 1) * sizeof *keys);
    recs = PyMem_Malloc((n ? n : 1) * sizeof *recs);
    tmp = PyMem_Malloc((n ? n : 1) * sizeof *tmp);
    taken = PyMem_Malloc((n ? n : 1) * sizeof *taken);
    if (kind == KIND_IMPORTANCE)
        counts = PyMem_Malloc((n ? n : 1) * sizeof *counts);
    if (keys == NULL || recs == NULL || tmp == NULL || taken == NULL || (kind == KIND_IMPORTANCE && counts == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *e = items[i], *id;
        Key *k = &keys[i];
        if (!Py_IS_TYPE(e, entry_type))
            goto fallback;
        id = SLOT(e, off_id);
        if (id == NULL || !PyUnicode_CheckExact(id) || exact_int64(SLOT(e, off_ts), &k->ts) < 0 ||
            exact_int64(SLOT(e, off_size), &k->size) < 0 || k->size < 0 ||
            __builtin_add_overflow(sum, k->size, &sum))
            goto fallback;
        k->id = id;
        if (k->ts < lowest)
            lowest = k->ts;
        if (kind == KIND_IMPORTANCE) {
            PyObject *c = SLOT(e, off_count);
            if (c == NULL)
                goto fallback;
            if (c == Py_None)
                counts[i] = 1;
            else if (exact_int64(c, &counts[i]) < 0)
                goto fallback;
        }
    }
    if (args[4] == Py_None)
        total = sum;
    remaining = n;
    if (!OVER) {
        out = PyList_New(0);
        goto done;
    }
    for (i = 0; i < n; i++) {
        recs[i].key = (uint64_t)keys[i].ts - (uint64_t)lowest;   /* exact: ts >= lowest */
        recs[i].at = i;
    }
    if (kind == KIND_IMPORTANCE)
        importance_keys(recs, tmp, n, keys, counts);
    /* A heap while few entries go; once more than `limit` have gone, the rest sorted. */
    limit = n / 16 + 32;
    size = n;
    if (cap >= 0 && n - cap >= limit) {
        full_sort(recs, tmp, n, keys, (int)kind);
    } else {
        Py_ssize_t popped = 0;
        for (i = n / 2 - 1; i >= 0; i--)
            sift_down(recs, n, i, keys, (int)kind);
        while (size > 0 && OVER) {
            if (popped++ == limit) {
                full_sort(recs, tmp, size, keys, (int)kind);
                break;
            }
            if (take(recs[0].at, keys, taken, &k, &total, &remaining) < 0)
                goto fallback;
            recs[0] = recs[--size];
            sift_down(recs, size, 0, keys, (int)kind);
        }
    }
    for (i = 0; i < size && OVER; i++)
        if (take(recs[i].at, keys, taken, &k, &total, &remaining) < 0)
            goto fallback;
    /* Own the ids first: allocating the list may run a garbage collection, and with it Python code. */
    for (i = 0; i < k; i++)
        Py_INCREF(keys[taken[i]].id);
    out = PyList_New(k);
    for (i = 0; i < k; i++) {
        if (out == NULL)
            Py_DECREF(keys[taken[i]].id);
        else
            PyList_SET_ITEM(out, i, keys[taken[i]].id);
    }
    goto done;

fallback:
    out = Py_NewRef(Py_None);
done:
    PyMem_Free(keys);
    PyMem_Free(recs);
    PyMem_Free(tmp);
    PyMem_Free(taken);
    PyMem_Free(counts);
    return out;
}

/* ===== read-only slots ========================================================================= */

/* read_only_slot(owner, member): a member descriptor of `owner` for the same object slot as `member` but marked
   READONLY, so that every write, object.__setattr__ included, is refused with AttributeError, while a read costs
   what a slot's read costs (the interpreter specialises reads of member descriptors). Its PyMemberDef lives as
   long as the process, as a class's own do. */
static PyObject *kernels_read_only_slot(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyMemberDef *def, *copy;
    char *name;
    if (nargs != 2 || !PyType_Check(args[0]) || !Py_IS_TYPE(args[1], &PyMemberDescr_Type)) {
        PyErr_SetString(PyExc_TypeError, "read_only_slot(owner: type, member: a member descriptor)");
        return NULL;
    }
    def = ((PyMemberDescrObject *)args[1])->d_member;
    if (def->type != T_OBJECT_EX) {
        PyErr_SetString(PyExc_TypeError, "read_only_slot: not an object slot");
        return NULL;
    }
    if ((copy = PyMem_RawMalloc(sizeof(PyMemberDef))) == NULL || (name = PyMem_RawMalloc(strlen(def->name) + 1)) == NULL) {
        PyMem_RawFree(copy);
        return PyErr_NoMemory();
    }
    strcpy(name, def->name);
    *copy = *def;
    copy->name = name;
    copy->flags |= READONLY;
    return PyDescr_NewMember((PyTypeObject *)args[0], copy);
}

static PyMethodDef kernels_methods[] = {
    {"read_only_slot", (PyCFunction)(void (*)(void))kernels_read_only_slot, METH_FASTCALL,
     "read_only_slot(owner, member): a read-only descriptor of an object slot."},
    {"bind", (PyCFunction)kernels_bind, METH_O,
     "bind(entry_type): the class whose slots the kernels read (ContextEntry)."},
    {"evict_order", (PyCFunction)(void (*)(void))kernels_evict_order, METH_FASTCALL,
     "evict_order(kind, entries, max_bytes, cap, total): the ids to evict (kind 0: lru, 1: importance), "
     "or None when the input needs the Python reference."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kernels_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ctxbench.strategies._kernels",
    .m_doc = "Compiled eviction orders of the built-in lru and importance strategies.",
    .m_size = -1,
    .m_methods = kernels_methods,
};

PyMODINIT_FUNC PyInit__kernels(void)
{
    return PyModule_Create(&kernels_module);
}
