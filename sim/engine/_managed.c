/* The managed context as a model of the compiled core (sim/engine/rules.py `Managed`, the specification):
 * residency and recency per path slot, one evict call per turn end (or a built-in's kernel that runs
 * without leaving C), contract violations, directory caps, the prompt cache and compaction.
 *
 * The model owns its state in its own structs: per slot the resident entry, its fields and a link in a
 * recency list; `ContextEntry` objects are made only when a strategy or a hook reads them, and kept until
 * the entry changes; nothing is read back from them. */
#include "_engine.h"
#include "../../strategies/_slot_offset.h"

#include <stdlib.h>
#include <string.h>

static PyTypeObject *entry_type, *budget_type, *view_class;
static Py_ssize_t off_id, off_path, off_ts, off_size, off_count, off_max_bytes, off_max_entries;
static PyObject *s_on_insert, *s_on_access, *s_on_remove;
static PyObject *sorting_ids;   /* the ids `compare_resident` reads (the GIL is held while qsort runs) */

/* The kernels the engine runs itself instead of calling a strategy (sim.engine.compiled NATIVE_*): none, the
   built-in LRU, the offline Belady-Size bound. */
enum { NATIVE_NONE, NATIVE_LRU, NATIVE_BELADY_SIZE };

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


/* ===== the model ================================================================================ */

/* A record of Belady-Size's heaps: deaths keyed (turn, id rank), ranks keyed (-score, id rank). */
typedef struct {
    __int128 key;
    long long rank;
    long long entry;
} Record;

typedef struct {
    Record *at;
    Py_ssize_t n, cap;
} Heap;

/* What the Belady-Size kernel keeps (sim/analysis/bracket.py BeladySizeStrategy, its definition). */
typedef struct {
    long long *offsets, *turns; /* each entry's need turns (turn-end numbers): turns[offsets[e]:offsets[e+1]], ascending */
    long long *rank;            /* each entry's place in id order */
    long long *next;            /* each entry's next need not yet passed: an index into turns */
    long long *inserted_size;   /* each entry's size when it last entered (what its death subtracts) */
    long long *dies, *dead_next; /* per turn end, the first record of the entries that die at it; per record, the next */
    long long *dead_entry;      /* per record, its entry */
    Py_ssize_t nrecords, records_cap;
    Record *dying;              /* one turn end's dead, sorted by id */
    Py_ssize_t dying_cap;
    Heap ranks;
    Py_ssize_t *dirty;          /* slots placed or refreshed since the last turn end */
    Py_ssize_t ndirty;
    long long *dirty_at;        /* per slot: the turn end (+1) it was last marked dirty for */
} Belady;

typedef struct {
    Model base;
    State *st;
    Core *core;
    Column dirs, conversation;
    PyObject *evict, *hooks, *reset_failure, *budget, *answer_ids, *describe;
    long long max_bytes, max_count, max_dirs, trigger, summary, trim, native, native_cap;
    PyObject *turn_budget;   /* the strategy's budget: the window less what is pinned */
    long long ndirs, oversize, dir_evictions, pinned, turn_max, call;
    long long *gone;         /* per entry: the turn end (+1) its answer removed it at, for duplicates */
    /* The prompt cache: bytes placed in the prompt by the steps before each step, bytes removed from it by
       the step they had entered at (a Fenwick tree), each resident slot's entry step. */
    long long *placed, *removed, *entered;
    Py_ssize_t nprompt;
    PromptCache cache;
    /* Compaction of the conversation (rules.Compaction; trigger -1: none): the pinned messages and tool calls
       (and summary) in the window, the steps already compacted, the summary's place. */
    long long conversation_bytes, compacted_upto, summary_at;
    PyObject *hook_error;    /* how the first hook that failed this turn broke the contract (str) */
    Belady belady;
} Managed;

#define M(name, type) {#name, type, offsetof(Managed, name), 0}
const ArgSpec managed_args[] = {
    M(evict, ARG_OBJECT), M(hooks, ARG_OPT_OBJECT), M(reset_failure, ARG_OPT_OBJECT), M(budget, ARG_OBJECT),
    M(max_bytes, ARG_INT), {"max_entries", ARG_OPT_INT, offsetof(Managed, max_count), LLONG_MAX},
    M(answer_ids, ARG_OBJECT), M(describe, ARG_OBJECT), M(dirs, ARG_OPT_COLUMN),
    {"max_directories", ARG_OPT_INT, offsetof(Managed, max_dirs), -1},
    {"trigger", ARG_OPT_INT, offsetof(Managed, trigger), -1}, {"summary", ARG_OPT_INT, offsetof(Managed, summary), 0},
    M(conversation, ARG_OPT_COLUMN), {"trim", ARG_OPT_INT, offsetof(Managed, trim), 0}, M(native, ARG_INT),
    {"native_cap", ARG_OPT_INT, offsetof(Managed, native_cap), LLONG_MAX},
};
#undef M
const Py_ssize_t n_managed_args = sizeof(managed_args) / sizeof(managed_args[0]);

/* Call a stateful strategy's hook; a failure is kept for the turn's end, a real interrupt propagates. */
static int call_hook(Managed *m, PyObject *name, PyObject *arg1, PyObject *arg2)
{
    PyObject *out = arg2 == NULL ? PyObject_CallMethodOneArg(m->hooks, name, arg1)
                                 : PyObject_CallMethodObjArgs(m->hooks, name, arg1, arg2, NULL);
    PyObject *text;
    if (out != NULL) {
        Py_DECREF(out);
        return 0;
    }
    if ((text = core_failure(m->core, PyUnicode_AsUTF8(name))) == NULL)
        return -1;
    if (m->hook_error == NULL)
        m->hook_error = text;
    else
        Py_DECREF(text);
    return 0;
}

static int hook_entry(Managed *m, PyObject *name, Py_ssize_t s)
{
    PyObject *e = entry_of(m->st, s);
    int rc;
    if (e == NULL)
        return -1;
    rc = call_hook(m, name, e, NULL);
    Py_DECREF(e);
    return rc;
}

/* Remove resident slot `s`: evicted at the end of `turn` (turn >= 0: recorded) or replaced by a new
   revision (turn < 0). */
static int remove_slot(Managed *m, Py_ssize_t s, int evicted, long long turn)
{
    State *st = m->st;
    long long e = st->entry[s], position = m->entered[s];
    PyObject *id = PyList_GET_ITEM(st->ids, e);
    unlink_slot(st, s);
    prompt_add(m->removed, m->nprompt, position, st->size[s]);   /* the cached prefix ends where it was */
    cache_change(&m->cache, position);
    st->bytes -= st->size[s];
    st->n--;
    st->entry[s] = -1;
    Py_CLEAR(st->obj[s]);
    if (evicted) {
        m->gone[e] = m->call + 1;
        if (core_removed(m->core, id, turn) < 0)
            return -1;
    }
    if (m->hooks != NULL)
        return call_hook(m, s_on_remove, id, evicted ? Py_True : Py_False);
    return 0;
}

static int belady_placed(Managed *m, Py_ssize_t s, int inserted);

static int managed_holds(Model *model, long long need)
{
    Managed *m = (Managed *)model;
    return m->st->entry[m->core->entry_slot.data[need]] == need;
}

static int managed_place(Model *model, Core *c, Py_ssize_t i)
{
    Managed *m = (Managed *)model;
    State *st = m->st;
    Py_ssize_t s = (Py_ssize_t)c->slot.data[i];
    long long place = c->place.data[i], size = c->place_bytes.data[i], old;
    m->placed[i + 1] = m->placed[i];
    if (s < 0) {   /* pinned: in the window for good, never the strategy's */
        m->pinned += size;
        m->placed[i + 1] += size;
        if (m->trigger >= 0 && m->conversation.data[i])
            m->conversation_bytes += size;
        return 0;
    }
    old = st->entry[s];
    if (old == place) {   /* a hit refreshes the resident entry */
        unlink_slot(st, s);
        if (size != st->size[s]) {   /* rewritten: it leaves the prompt and enters here */
            prompt_add(m->removed, m->nprompt, m->entered[s], st->size[s]);
            cache_change(&m->cache, m->entered[s]);
            m->entered[s] = i;
            m->placed[i + 1] += size;
        }
        st->bytes += size - st->size[s];
        st->ts[s] = c->ts_ms.data[i], st->size[s] = size, st->count[s] = c->count.data[i];
        Py_CLEAR(st->obj[s]);
        append_slot(st, s);
        if (m->native == NATIVE_BELADY_SIZE)
            return belady_placed(m, s, 0);
        return m->hooks != NULL ? hook_entry(m, s_on_access, s) : 0;
    }
    if (old >= 0 && remove_slot(m, s, 0, -1) < 0)
        return -1;
    m->entered[s] = i;
    m->placed[i + 1] += size;
    st->entry[s] = place;
    st->ts[s] = c->ts_ms.data[i], st->size[s] = size, st->count[s] = c->count.data[i];
    append_slot(st, s);
    st->bytes += size;
    st->n++;
    if (size > m->max_bytes)
        m->oversize++;
    if (m->native == NATIVE_BELADY_SIZE)
        return belady_placed(m, s, 1);
    return m->hooks != NULL ? hook_entry(m, s_on_insert, s) : 0;
}

static int over_budget(const Managed *m)
{
    return m->st->bytes > m->turn_max || m->st->n > m->max_count;
}

/* The strategy's budget for this turn's end: the window less what is pinned, at least 0 (a new
   ContextBudget only when that changes). */
static int set_turn_budget(Managed *m)
{
    long long left = m->pinned >= m->max_bytes ? 0 : m->max_bytes - m->pinned;
    PyObject *b, *max_bytes, *max_entries;
    if (left == m->turn_max)
        return 0;
    if ((b = budget_type->tp_alloc(budget_type, 0)) == NULL || (max_bytes = PyLong_FromLongLong(left)) == NULL) {
        Py_XDECREF(b);
        return -1;
    }
    max_entries = SLOT(m->budget, off_max_entries);
    SLOT(b, off_max_bytes) = max_bytes;
    SLOT(b, off_max_entries) = Py_NewRef(max_entries != NULL ? max_entries : Py_None);
    Py_SETREF(m->turn_budget, b);
    m->turn_max = left;
    return 0;
}

/* Violation codes (rules.py VIOLATIONS). */
enum { V_SHAPE, V_NON_STRING, V_DUPLICATE, V_UNKNOWN, V_RAISED, V_HOOK, V_OVER_BUDGET };

/* Remove the ids of the answer; the first violation goes into (*code, *detail). */
static int remove_answer(Managed *m, PyObject *answer, long long turn, int *code, PyObject **detail)
{
    State *st = m->st;
    PyObject *seq;
    Py_ssize_t i;
    if ((PyList_CheckExact(answer) && PyList_GET_SIZE(answer) <= st->n + 1) ||
        (PyTuple_CheckExact(answer) && PyTuple_GET_SIZE(answer) <= st->n + 1))
        seq = Py_NewRef(answer);
    else {
        /* Anything else goes through strategies.contract.answer_ids: what of it is read, or why nothing. */
        PyObject *pair = PyObject_CallFunction(m->answer_ids, "On", answer, st->n);
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
        if ((found = PyDict_GetItemWithError(m->core->entries, id)) != NULL) {
            e = PyLong_AsLongLong(found);
            s = (Py_ssize_t)m->core->entry_slot.data[e];
        } else if (PyErr_Occurred())
            goto fail;
        if (e < 0 || st->entry[s] != e) {
            if (*detail == NULL)
                *code = e >= 0 && m->gone[e] == m->call + 1 ? V_DUPLICATE : V_UNKNOWN, *detail = Py_NewRef(id);
            Py_DECREF(id);
            continue;
        }
        Py_DECREF(id);
        if (remove_slot(m, s, 1, turn) < 0)
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
static int limit_directories(Managed *m, long long turn)
{
    State *st = m->st;
    long long *latest = malloc((m->ndirs ? m->ndirs : 1) * sizeof(long long)), present = 0;
    SortKey *order = NULL;
    Py_ssize_t s, d, k = 0, excess;
    int rc = -1;
    if (latest == NULL)
        return PyErr_NoMemory(), -1;
    for (d = 0; d < m->ndirs; d++)
        latest[d] = LLONG_MIN;
    for (s = st->head; s >= 0; s = st->next[s]) {
        long long dir = m->dirs.data[s];
        if (dir < 0)
            continue;
        if (latest[dir] == LLONG_MIN)
            present++;
        if (st->ts[s] > latest[dir] || latest[dir] == LLONG_MIN)
            latest[dir] = st->ts[s];
    }
    excess = (Py_ssize_t)(present - m->max_dirs);
    if (excess <= 0) {
        free(latest);
        return 0;
    }
    if ((order = malloc(present * sizeof(SortKey))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (d = 0; d < m->ndirs; d++)
        if (latest[d] != LLONG_MIN)
            order[k].ts = latest[d], order[k].rank = d, order[k].slot = d, k++;
    qsort(order, k, sizeof(SortKey), compare_keys);   /* directory numbers are in name order */
    for (d = 0; d < excess; d++) {
        Py_ssize_t next;
        for (s = st->head; s >= 0; s = next) {
            next = st->next[s];
            if (m->dirs.data[s] == order[d].slot) {
                if (remove_slot(m, s, 1, turn) < 0)
                    goto done;
                m->dir_evictions++;
            }
        }
    }
    rc = 0;
done:
    free(latest);
    free(order);
    return rc;
}

/* A call to the model at `ts` whose prompt is the window now (the first `steps` steps placed): what it reads from
   the prompt cache, the previous call's prompt up to its first change; it is then the previous call. */
static long long call_reads(Managed *m, long long ts, Py_ssize_t steps)
{
    long long upto;
    int whole;
    if (!cache_read(&m->cache, ts, steps, &upto, &whole))
        return 0;
    return m->placed[upto] - prompt_before(m->removed, m->nprompt, upto);
}

/* Whether this turn end compacts (rules.Managed._compacts). */
static int compacts(Managed *m)
{
    return m->trigger >= 0 && m->pinned >= m->trigger && m->conversation_bytes > m->summary;
}

/* The summarization call's prompt of `*prompt` bytes trimmed to the window (rules.Managed._trimmed): its oldest
   steps but the overhead leave it while it is larger; *shared: the steps it holds as they stand; *dropped: the
   conversation (and earlier summary) bytes it left out. */
static void trimmed(Managed *m, Py_ssize_t steps, long long *prompt, Py_ssize_t *shared, long long *dropped)
{
    long long before = 0;
    *shared = -1, *dropped = 0;
    for (Py_ssize_t i = 0; i < steps && *prompt > m->max_bytes; i++) {
        long long after = m->placed[i + 1] - prompt_before(m->removed, m->nprompt, i + 1), size = after - before;
        int history = m->conversation.data[i] || i == m->summary_at;
        before = after;
        if (size <= 0 || (m->core->slot.data[i] < 0 && !history))   /* gone, or the overhead */
            continue;
        if (*shared < 0)
            *shared = i;
        *prompt -= size;
        if (history)
            *dropped += size;
    }
    if (*shared < 0)
        *shared = steps;
}

/* Replace the conversation by a summary (rules.Managed._compact). A summary of more than 0 bytes is written by a
   summarization call made first, on the window as it is now (`prompt` bytes), which `end` records; or, trimmed
   (`shared` >= 0), on the steps before `shared` as they stand and not all after them: a call made aside. */
static void compact(Managed *m, Py_ssize_t steps, long long ts, long long prompt, Py_ssize_t shared, TurnEnd *end)
{
    Py_ssize_t i;
    long long first = LLONG_MAX;
    if (m->summary > 0) {
        end->summary_calls = 1, end->summary_prompt_bytes = prompt, end->summary_output_bytes = m->summary;
        if (shared < 0)
            end->summary_cache_read_bytes = call_reads(m, ts, steps);
        else {
            long long upto;
            if (cache_peek(&m->cache, ts, &upto)) {
                if (shared < upto)
                    upto = shared;
                end->summary_cache_read_bytes = m->placed[upto] - prompt_before(m->removed, m->nprompt, upto);
            }
        }
    }
    for (i = m->compacted_upto; i < steps; i++)
        if (m->conversation.data[i]) {
            prompt_add(m->removed, m->nprompt, i, m->core->place_bytes.data[i]);
            if (i < first)
                first = i;
        }
    m->compacted_upto = steps;
    if (m->summary_at >= 0) {
        prompt_add(m->removed, m->nprompt, m->summary_at, m->summary);
        if (m->summary_at < first)
            first = m->summary_at;
    }
    prompt_add(m->removed, m->nprompt, steps - 1, -m->summary);   /* the summary enters at the end */
    m->summary_at = steps - 1;
    m->pinned += m->summary - m->conversation_bytes;
    m->conversation_bytes = m->summary;
    cache_change(&m->cache, first);
}

/* LRU's answer without leaving C (strategies/lru.py LruStrategy on the recency-sorted state): the oldest
   entries leave while the rest is over the strategy's budget or over the tighter of its and the budget's cap.
   Timed when it removes anything (*elapsed; else 0: the fit test alone, no call). */
static int native_lru(Managed *m, long long turn, long long *elapsed)
{
    State *st = m->st;
    long long cap = m->native_cap < m->max_count ? m->native_cap : m->max_count, t0;
    if (st->head < 0 || (st->bytes <= m->turn_max && st->n <= cap))
        return 0;
    t0 = now_ns();
    while (st->head >= 0 && (st->bytes > m->turn_max || st->n > cap))
        if (remove_slot(m, st->head, 1, turn) < 0)
            return -1;
    *elapsed = now_ns() - t0;
    return 0;
}

/* ----- Belady-Size ------------------------------------------------------------------------------------- */
/* The offline bound's kernel (sim/analysis/bracket.py BeladySizeStrategy is its definition): "now" is the turn end
   being closed. An entry dies at the later of its last need and the turn end it entered before: at each turn end
   the dead leave first, in (death, id) order; then, while the rest is over the budget or its entry cap, the entry
   with the largest size x (next need - now), ties by id. Scores only fall between an entry's touches (it is needed
   exactly at the turns where it is placed or refreshed), so a heap of scores taken at each entry's last touch
   bounds every entry's current score from above: the top is taken once its score, computed again, is still the
   largest (an O(log n) step per touch and per entry leaving, not a sort of the resident set per turn end). */

static int heap_push(Heap *h, __int128 key, long long rank, long long entry)
{
    Py_ssize_t at;
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 256;
        Record *grown = realloc(h->at, cap * sizeof(Record));
        if (grown == NULL)
            return PyErr_NoMemory(), -1;
        h->at = grown, h->cap = cap;
    }
    at = h->n++;
    while (at > 0) {
        Py_ssize_t parent = (at - 1) / 2;
        Record *p = &h->at[parent];
        if (p->key < key || (p->key == key && p->rank <= rank))
            break;
        h->at[at] = *p;
        at = parent;
    }
    h->at[at].key = key, h->at[at].rank = rank, h->at[at].entry = entry;
    return 0;
}

static Record heap_pop(Heap *h)
{
    Record top = h->at[0], last = h->at[--h->n];
    Py_ssize_t at = 0;
    for (;;) {
        Py_ssize_t child = 2 * at + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && (h->at[child + 1].key < h->at[child].key ||
                                 (h->at[child + 1].key == h->at[child].key && h->at[child + 1].rank < h->at[child].rank)))
            child++;
        if (last.key < h->at[child].key || (last.key == h->at[child].key && last.rank <= h->at[child].rank))
            break;
        h->at[at] = h->at[child];
        at = child;
    }
    if (h->n)
        h->at[at] = last;
    return top;
}

static int compare_records(const void *x, const void *y)
{
    const Record *a = x, *b = y;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static long long belady_last_need(Belady *b, long long e)
{
    long long end = b->offsets[e + 1];
    return end > b->offsets[e] ? b->turns[end - 1] : -1;
}

/* Entry e's rank key now: -(size x turns to its next need after now), as (key, rank) orders it. */
static __int128 belady_key(Managed *m, long long e, Py_ssize_t s, long long now)
{
    Belady *b = &m->belady;
    long long end = b->offsets[e + 1], k = b->next[e];
    while (k < end && b->turns[k] <= now)
        k++;
    b->next[e] = k;
    /* resident entries with no need after now are dead and gone before ranking; 2**62 as the definition's */
    return -((__int128)m->st->size[s] * (k < end ? b->turns[k] - now : (1LL << 62)));
}

/* Slot s's entry was placed (inserted) or refreshed: its score is taken again at the turn's end. */
static int belady_placed(Managed *m, Py_ssize_t s, int inserted)
{
    Belady *b = &m->belady;
    long long e = m->st->entry[s];
    if (inserted) {   /* the definition's on_insert: its death (a record at that turn end), the size it entered with */
        long long last = belady_last_need(b, e), death = last > m->call ? last : m->call;
        b->inserted_size[e] = m->st->size[s];
        if (death < m->core->nends) {   /* a death past the last turn end never comes */
            if (b->nrecords == b->records_cap) {
                Py_ssize_t cap = b->records_cap ? 2 * b->records_cap : 1024;
                long long *next = realloc(b->dead_next, cap * sizeof(long long)), *entry;
                if (next == NULL)
                    return PyErr_NoMemory(), -1;
                b->dead_next = next;
                if ((entry = realloc(b->dead_entry, cap * sizeof(long long))) == NULL)
                    return PyErr_NoMemory(), -1;
                b->dead_entry = entry, b->records_cap = cap;
            }
            b->dead_entry[b->nrecords] = e, b->dead_next[b->nrecords] = b->dies[death];
            b->dies[death] = b->nrecords++;
        }
    }
    if (b->dirty_at[s] != m->call + 1) {
        b->dirty_at[s] = m->call + 1;
        b->dirty[b->ndirty++] = s;
    }
    return 0;
}

/* Belady-Size's answer at this turn end, removed as it is made. */
static int native_belady(Managed *m, long long turn, long long *elapsed)
{
    State *st = m->st;
    Belady *b = &m->belady;
    long long now = m->call, total = st->bytes, count = st->n, t0 = now_ns();
    int removed = 0;
    for (Py_ssize_t k = 0; k < b->ndirty; k++) {   /* a score taken at each touch */
        Py_ssize_t s = b->dirty[k];
        long long e = st->entry[s];
        if (e >= 0 && heap_push(&b->ranks, belady_key(m, e, s, now), b->rank[e], e) < 0)
            return -1;
    }
    b->ndirty = 0;
    {   /* the dead leave, by id: every record of an earlier turn end went at it, so these are all at or before now */
        Py_ssize_t ndying = 0;
        for (long long r = b->dies[now]; r >= 0; r = b->dead_next[r]) {
            long long e = b->dead_entry[r];
            if (ndying == b->dying_cap) {
                Py_ssize_t cap = b->dying_cap ? 2 * b->dying_cap : 64;
                Record *grown = realloc(b->dying, cap * sizeof(Record));
                if (grown == NULL)
                    return PyErr_NoMemory(), -1;
                b->dying = grown, b->dying_cap = cap;
            }
            b->dying[ndying].key = 0, b->dying[ndying].rank = b->rank[e], b->dying[ndying].entry = e;
            ndying++;
        }
        if (ndying > 1)
            qsort(b->dying, ndying, sizeof(Record), compare_records);
        for (Py_ssize_t k = 0; k < ndying; k++) {
            long long e = b->dying[k].entry;
            Py_ssize_t s = (Py_ssize_t)m->core->entry_slot.data[e];
            if (st->entry[s] == e) {
                total -= b->inserted_size[e], count--;
                if (remove_slot(m, s, 1, turn) < 0)
                    return -1;
                removed = 1;
            }
        }
    }
    while ((total > m->turn_max || count > m->max_count) && b->ranks.n) {   /* the largest size x distance first */
        Record top = heap_pop(&b->ranks);
        Py_ssize_t s = (Py_ssize_t)m->core->entry_slot.data[top.entry];
        __int128 key;
        if (st->entry[s] != top.entry)
            continue;   /* it left since */
        key = belady_key(m, top.entry, s, now);
        if (b->ranks.n && (key > b->ranks.at[0].key || (key == b->ranks.at[0].key && top.rank > b->ranks.at[0].rank))) {
            if (heap_push(&b->ranks, key, top.rank, top.entry) < 0)   /* its score fell: not the largest yet */
                return -1;
            continue;
        }
        total -= st->size[s], count--;
        if (remove_slot(m, s, 1, turn) < 0)
            return -1;
        removed = 1;
    }
    if (b->ranks.n > 2 * st->n + 1024) {   /* mostly records of entries that left or were touched since: rebuilt */
        b->ranks.n = 0;
        for (Py_ssize_t s = st->head; s >= 0; s = st->next[s])
            if (heap_push(&b->ranks, belady_key(m, st->entry[s], s, now), b->rank[st->entry[s]], st->entry[s]) < 0)
                return -1;
    }
    if (removed)
        *elapsed = now_ns() - t0;
    return 0;
}

/* Each entry's place in id order (the ties of Belady-Size's orders). */
static int rank_ids(Managed *m)
{
    Py_ssize_t n = m->core->nentries;
    SortKey *keys = malloc((n ? n : 1) * sizeof(SortKey));
    if (keys == NULL)
        return PyErr_NoMemory(), -1;
    for (Py_ssize_t e = 0; e < n; e++)
        keys[e].ts = 0, keys[e].rank = e, keys[e].slot = e;
    sorting_ids = m->core->ids;
    qsort(keys, n, sizeof(SortKey), compare_resident);
    sorting_ids = NULL;
    for (Py_ssize_t k = 0; k < n; k++)
        m->belady.rank[keys[k].slot] = k;
    free(keys);
    return 0;
}

/* The arm's future as the definition reads it (sim/analysis/bracket.py ArmFuture.needs): each entry's need turns,
   the number of the turn end each need comes before (steps after the last turn end: one past it). */
static int belady_open(Managed *m)
{
    Belady *b = &m->belady;
    Core *c = m->core;
    Py_ssize_t i, k = 0;
    b->offsets = calloc(c->nentries + 1, sizeof(long long)), b->turns = malloc((c->nsteps + 1) * sizeof(long long));
    b->rank = malloc((c->nentries + 1) * sizeof(long long)), b->next = malloc((c->nentries + 1) * sizeof(long long));
    b->inserted_size = calloc(c->nentries + 1, sizeof(long long));
    b->dies = malloc((c->nends + 1) * sizeof(long long));
    b->dirty = malloc((c->nslots + 1) * sizeof(Py_ssize_t)), b->dirty_at = calloc(c->nslots + 1, sizeof(long long));
    if (!b->offsets || !b->turns || !b->rank || !b->next || !b->inserted_size || !b->dies || !b->dirty || !b->dirty_at)
        return PyErr_NoMemory(), -1;
    for (i = 0; i < c->nsteps; i++)
        if (c->need.data[i] >= 0)
            b->offsets[c->need.data[i] + 1]++;
    for (Py_ssize_t e = 0; e < c->nentries; e++)
        b->offsets[e + 1] += b->offsets[e], b->next[e] = b->offsets[e];
    for (i = 0; i < c->nsteps; i++) {   /* in step order, so each entry's turns ascend */
        while (k < c->nends && c->ends.data[k] <= i)
            k++;
        if (c->need.data[i] >= 0)
            b->turns[b->next[c->need.data[i]]++] = k;
    }
    for (Py_ssize_t e = 0; e < c->nentries; e++)
        b->next[e] = b->offsets[e];
    for (i = 0; i <= c->nends; i++)
        b->dies[i] = -1;
    return rank_ids(m);
}

static void belady_free(Belady *b)
{
    free(b->offsets), free(b->turns), free(b->rank), free(b->next), free(b->inserted_size), free(b->dies);
    free(b->dead_next), free(b->dead_entry), free(b->dying), free(b->dirty), free(b->dirty_at), free(b->ranks.at);
}

/* Call the strategy with the state and the turn's budget: its answer (new reference), or NULL with *raised
   set to how the call broke the contract (NULL and nothing set: a real interrupt, passed on). */
static PyObject *call_evict(Managed *m, long long *elapsed, PyObject **raised)
{
    State *st = m->st;
    PyObject *total, *answer;
    View *view;
    long long t0;
    if ((total = PyLong_FromLongLong(st->bytes)) == NULL)
        return NULL;
    if ((view = (View *)view_class->tp_alloc(view_class, 0)) == NULL) {
        Py_DECREF(total);
        return NULL;
    }
    view->state = (State *)Py_NewRef(st), view->items = NULL, view->total_bytes = total;
    t0 = now_ns();
    answer = PyObject_CallFunctionObjArgs(m->evict, (PyObject *)view, m->turn_budget, NULL);
    *elapsed = now_ns() - t0;
    Py_CLEAR(view->state);   /* closed: valid during the call only */
    Py_DECREF(view);
    if (answer == NULL)   /* a strategy that fails breaks the contract; it does not crash the replay */
        *raised = core_failure(m->core, NULL);
    return answer;
}

static int managed_end_turn(Model *model, Core *c, Py_ssize_t k, TurnEnd *end)
{
    Managed *m = (Managed *)model;
    State *st = m->st;
    long long turn = c->end_turns.data[k], turn_bytes, elapsed = 0;
    PyObject *answer = NULL, *detail = NULL, *raised = NULL;
    Py_ssize_t before = PyList_GET_SIZE(c->evicted);
    int code = -1, rc = -1, late;
    if (st->unsorted && sort_resident(st) < 0)
        return -1;
    end->window_bytes = m->pinned + st->bytes;
    /* A summary an LLM writes is written by a call on the window before compaction, which must fit it too: the
       strategy first, its budget the window less what is pinned before compaction (rules.Managed.end_turn). */
    end->compactions = compacts(m);
    late = end->compactions && m->summary > 0;
    if (end->compactions && !late)
        compact(m, c->steps_done, c->end_ts.data[k], 0, -1, end);
    if (set_turn_budget(m) < 0)
        return -1;
    turn_bytes = st->bytes;
    if (m->native == NATIVE_LRU || m->native == NATIVE_BELADY_SIZE) {
        if ((m->native == NATIVE_LRU ? native_lru(m, turn, &elapsed) : native_belady(m, turn, &elapsed)) < 0)
            return -1;
    } else {
        answer = call_evict(m, &elapsed, &raised);
        if (answer == NULL) {
            if (raised == NULL)
                return -1;
            code = V_RAISED, detail = Py_NewRef(raised);
        } else if (!(PyList_CheckExact(answer) && PyList_GET_SIZE(answer) == 0) &&
                   remove_answer(m, answer, turn, &code, &detail) < 0)
            goto done;
    }
    if (detail == NULL && m->hook_error != NULL)
        code = V_HOOK, detail = Py_NewRef(m->hook_error);
    Py_CLEAR(m->hook_error);
    if (detail == NULL && over_budget(m)) {
        code = V_OVER_BUDGET;
        if ((detail = Py_BuildValue("(Ln)", st->bytes, st->n)) == NULL)
            goto done;
    }
    if (detail != NULL && m->native != NATIVE_NONE && answer == NULL &&   /* a kernel's answer: what it removed */
        (answer = PyList_GetSlice(c->evicted, before, PyList_GET_SIZE(c->evicted))) == NULL)
        goto done;
    if (detail != NULL) {
        PyObject *what = PyObject_CallFunction(m->describe, "iOO", code, detail, m->turn_budget);
        Py_ssize_t s, next;
        if (what == NULL)
            goto done;
        if (core_report(c, turn, what, answer) < 0) {
            Py_DECREF(what);
            goto done;
        }
        Py_DECREF(what);
        for (s = st->head; s >= 0 && over_budget(m); s = next) {   /* restore the budget, oldest first */
            next = st->next[s];
            if (remove_slot(m, s, 1, turn) < 0)
                goto done;
        }
    }
    if (m->max_dirs >= 0 && limit_directories(m, turn) < 0)
        goto done;
    if (late) {
        long long prompt = m->pinned + st->bytes;
        Py_ssize_t shared = -1;
        if (m->trim && prompt > m->max_bytes)
            trimmed(m, c->steps_done, &prompt, &shared, &end->summary_dropped_bytes);
        compact(m, c->steps_done, c->end_ts.data[k], prompt, shared, end);
    }
    end->evictions = PyList_GET_SIZE(c->evicted) - before, end->evicted_bytes = turn_bytes - st->bytes;
    end->turn_bytes = turn_bytes, end->occupancy_bytes = st->bytes, end->entries = st->n;
    end->evict_ns = elapsed, end->violations = detail != NULL;
    end->pinned_bytes = m->pinned;
    end->over_window = m->pinned > m->max_bytes || end->summary_prompt_bytes > m->max_bytes;
    end->cache_read_bytes = call_reads(m, c->end_ts.data[k], c->steps_done);
    m->call++;
    rc = 0;
done:
    Py_XDECREF(answer), Py_XDECREF(detail), Py_XDECREF(raised);
    return rc;
}

/* (oversize, directory evictions, resident ids in recency order) */
static PyObject *managed_result(Model *model, Core *c)
{
    Managed *m = (Managed *)model;
    State *st = m->st;
    PyObject *resident;
    Py_ssize_t s, k;
    if (st->unsorted && sort_resident(st) < 0)
        return NULL;
    if ((resident = PyList_New(st->n)) == NULL)
        return NULL;
    for (s = st->head, k = 0; s >= 0; s = st->next[s], k++)
        PyList_SET_ITEM(resident, k, Py_NewRef(PyList_GET_ITEM(st->ids, st->entry[s])));
    return Py_BuildValue("LLN", m->oversize, m->dir_evictions, resident);
}

static void managed_free(Model *model)
{
    Managed *m = (Managed *)model;
    free(m->placed), free(m->removed), free(m->entered), free(m->gone);
    belady_free(&m->belady);
    Py_XDECREF(m->hook_error), Py_XDECREF(m->turn_budget);
    Py_XDECREF(m->st);
    free(m);
}

int managed_open(Core *c, PyObject *args, Args *held, Model **out)
{
    Managed *m = calloc(1, sizeof(Managed));
    State *st;
    Py_ssize_t s;
    if (m == NULL)
        return PyErr_NoMemory(), -1;
    m->base.holds = managed_holds, m->base.place = managed_place, m->base.end_turn = managed_end_turn;
    m->base.result = managed_result, m->base.free = managed_free;
    *out = &m->base;
    m->core = c;
    if (entry_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind() was not called");
        return -1;
    }
    if (args_read(args, managed_args, n_managed_args, m, held) < 0)
        return -1;
    if (!PyObject_TypeCheck(m->budget, budget_type)) {
        PyErr_SetString(PyExc_TypeError, "budget must be a ContextBudget");
        return -1;
    }
    if ((m->dirs.data != NULL && m->dirs.len < c->nslots) ||
        (m->trigger >= 0 && (m->conversation.data == NULL || m->conversation.len < c->nsteps)) ||
        m->native < NATIVE_NONE || m->native > NATIVE_BELADY_SIZE) {
        PyErr_SetString(PyExc_ValueError, "replay: inconsistent managed arguments");
        return -1;
    }
    if ((st = PyObject_New(State, &StateType)) == NULL)
        return -1;
    m->st = st;
    st->nslots = c->nslots;
    st->entry = malloc((st->nslots + 1) * sizeof(long long)), st->ts = malloc((st->nslots + 1) * sizeof(long long));
    st->size = malloc((st->nslots + 1) * sizeof(long long)), st->count = malloc((st->nslots + 1) * sizeof(long long));
    st->prev = malloc((st->nslots + 1) * sizeof(Py_ssize_t)), st->next = malloc((st->nslots + 1) * sizeof(Py_ssize_t));
    st->obj = calloc(st->nslots + 1, sizeof(PyObject *));
    st->ids = Py_NewRef(c->ids), st->paths = Py_NewRef(c->paths);
    st->head = st->tail = -1, st->n = 0, st->bytes = 0, st->unsorted = 0;
    m->nprompt = c->nsteps;
    m->placed = calloc(c->nsteps + 1, sizeof(long long)), m->removed = calloc(c->nsteps + 1, sizeof(long long));
    m->entered = calloc(c->nslots + 1, sizeof(long long)), m->gone = calloc(c->nentries + 1, sizeof(long long));
    if (!st->entry || !st->ts || !st->size || !st->count || !st->prev || !st->next || !st->obj || !m->placed ||
        !m->removed || !m->entered || !m->gone)
        return PyErr_NoMemory(), -1;
    for (s = 0; s < st->nslots; s++)
        st->entry[s] = -1;
    if (m->dirs.data != NULL)
        for (s = 0; s < st->nslots; s++)
            if (m->dirs.data[s] + 1 > m->ndirs)
                m->ndirs = m->dirs.data[s] + 1;
    m->turn_budget = Py_NewRef(m->budget), m->turn_max = m->max_bytes;
    m->summary_at = -1;
    cache_init(&m->cache, c->cache_ttl_ms);
    m->hook_error = m->reset_failure != NULL ? Py_NewRef(m->reset_failure) : NULL;
    if (m->native != NATIVE_NONE && m->hooks != NULL)
        return PyErr_SetString(PyExc_ValueError, "replay: a kernel the engine runs has no hooks"), -1;
    return m->native == NATIVE_BELADY_SIZE ? belady_open(m) : 0;
}

/* bind(entry_type, budget_type, view_class): the ContextEntry and ContextBudget classes whose slots
   the engine fills, and the StateView class (a subclass of StateViewBase) it gives strategies. */
PyObject *managed_bind(PyObject *const *args, Py_ssize_t nargs)
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

/* The State and view types ready, StateViewBase added to the module. */
int managed_types_ready(PyObject *module)
{
    if (PyType_Ready(&StateType) < 0 || PyType_Ready(&ViewType) < 0)
        return -1;
    s_on_insert = PyUnicode_InternFromString("on_insert");
    s_on_access = PyUnicode_InternFromString("on_access");
    s_on_remove = PyUnicode_InternFromString("on_remove");
    if (s_on_insert == NULL || s_on_access == NULL || s_on_remove == NULL)
        return -1;
    return PyModule_AddObjectRef(module, "StateViewBase", (PyObject *)&ViewType);
}
