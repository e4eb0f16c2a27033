/* The compiled replay engine's module and core: the one loop, tally and row of sim/engine/core.py.
 *
 * `replay(args)` reads the replay's resolved steps and turn ends from one argument object (its fields named
 * by `core_args`; the model's by `managed_args` or `transcript_args`), opens the model it names and runs
 * `core_run`: at each step the model says whether the needed entry is in the window and the core tallies the
 * need, then the model applies the placement; at each turn end the model does what a turn end does and the
 * core writes the row, in sim.engine.measures.TURN_FIELDS order. The module also carries `resolve`
 * (_resolve.c), the vocabulary and field tables the Python side checks at import, and `digest_text`.
 */
#include "_engine.h"

#include <string.h>
#include <time.h>

/* The per-turn row: must equal sim.engine.measures.KEY_FIELDS + TALLY_FIELDS + END_FIELDS (checked at import),
   in the order of the Tally and TurnEnd structs. */
static const char *const key_fields[NKEY] = {"turn", "ts_ms"};
static const char *const tally_fields[] = {
    "accesses", "hits", "compulsory", "capacity", "invalidation", "accessed_bytes", "miss_bytes", "capacity_bytes",
    "invalidation_bytes",
};
static const char *const end_fields[] = {
    "evictions", "evicted_bytes", "turn_bytes", "occupancy_bytes", "entries", "evict_ns", "violations", "pinned_bytes",
    "over_window", "cache_read_bytes", "compactions", "window_bytes", "summary_calls", "summary_prompt_bytes",
    "summary_cache_read_bytes", "summary_output_bytes", "summary_dropped_bytes",
};
_Static_assert(sizeof(tally_fields) / sizeof(tally_fields[0]) == sizeof(Tally) / sizeof(long long),
               "a name for every tally field");
_Static_assert(sizeof(end_fields) / sizeof(end_fields[0]) == sizeof(TurnEnd) / sizeof(long long),
               "a name for every turn-end field");

/* The event vocabulary (traces/vocabulary.py) and the roles of strategies/policy.py, checked at import. */
static const char *const op_names[NOPS] = {"read", "edit", "write", "output", "message", "call", "overhead",
                                           "invalidate"};
static const char *const adds_names[NADDS] = {"nothing", "content", "confirmation"};
static const char *const miss_names[NMISSES] = {"no-need", "compulsory", "invalidation", "capacity"};
static const char *const role_names[NROLES] = {"overhead", "user", "assistant", "thinking", "call", "result",
                                               "summary", "placeholder", "attached"};

long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* ===== columns and arguments ================================================================== */

/* An int64 column: a C-contiguous buffer of 8-byte signed integers. */
int column_get(PyObject *obj, Column *c, int writable, const char *what)
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

void column_release(Column *c)
{
    if (c->data != NULL)
        PyBuffer_Release(&c->view);
    c->data = NULL;
}

/* Fill the struct at `base` from the fields of `from` that `specs` names; what must be released goes into
   `held` (released by args_release whatever happened). */
int args_read(PyObject *from, const ArgSpec *specs, Py_ssize_t n, void *base, Args *held)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        const ArgSpec *s = &specs[k];
        char *at = (char *)base + s->offset;
        PyObject *value = PyObject_GetAttrString(from, s->name);
        if (value == NULL)
            return -1;
        if (held->nobjects == ARGS_HELD) {
            Py_DECREF(value);
            PyErr_SetString(PyExc_RuntimeError, "replay: too many arguments");
            return -1;
        }
        held->objects[held->nobjects++] = value;   /* the reference lives as long as the call */
        switch (s->type) {
        case ARG_OPT_COLUMN:
            if (value == Py_None) {
                ((Column *)at)->data = NULL;
                break;
            }
            /* fall through */
        case ARG_COLUMN:
        case ARG_OUT:
            if (column_get(value, (Column *)at, s->type == ARG_OUT, s->name) < 0)
                return -1;
            held->columns[held->ncolumns++] = (Column *)at;
            break;
        case ARG_OPT_INT:
            if (value == Py_None) {
                *(long long *)at = s->none;
                break;
            }
            /* fall through */
        case ARG_INT:
            if (!PyLong_Check(value)) {
                PyErr_Format(PyExc_TypeError, "replay: %s must be an int", s->name);
                return -1;
            }
            *(long long *)at = PyLong_AsLongLong(value);
            if (PyErr_Occurred())
                return -1;
            break;
        case ARG_FLOAT:
            *(double *)at = PyFloat_AsDouble(value);
            if (PyErr_Occurred())
                return -1;
            break;
        case ARG_OPT_OBJECT:
            *(PyObject **)at = value == Py_None ? NULL : value;
            break;
        case ARG_LIST:
        case ARG_DICT:
        case ARG_TUPLE:
            if (s->type == ARG_LIST ? !PyList_Check(value) : s->type == ARG_DICT ? !PyDict_Check(value)
                                                                                  : !PyTuple_Check(value)) {
                PyErr_Format(PyExc_TypeError, "replay: %s must be a %s", s->name,
                             s->type == ARG_LIST ? "list" : s->type == ARG_DICT ? "dict" : "tuple");
                return -1;
            }
            /* fall through */
        case ARG_OBJECT:
            *(PyObject **)at = value;
            break;
        }
    }
    return 0;
}

void args_release(Args *held)
{
    for (int k = 0; k < held->ncolumns; k++)
        column_release(held->columns[k]);
    for (int k = 0; k < held->nobjects; k++)
        Py_DECREF(held->objects[k]);
    held->ncolumns = held->nobjects = 0;
}

static PyObject *names_tuple(const char *const *names, Py_ssize_t n)
{
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *s = PyUnicode_FromString(names[k]);
        if (s == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, s);
    }
    return t;
}

PyObject *args_names(const ArgSpec *specs, Py_ssize_t n)
{
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *s = PyUnicode_FromString(specs[k].name);
        if (s == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, s);
    }
    return t;
}

/* What every replay gives the core (sim.engine.compiled.CoreArgs). */
#define COL(name) {#name, ARG_COLUMN, offsetof(Core, name), 0}
static const ArgSpec core_args[] = {
    {"model", ARG_OBJECT, offsetof(Core, model_name), 0},
    COL(slot), COL(need), COL(need_bytes), COL(miss), COL(place), COL(place_bytes), COL(ts_ms), COL(count),
    COL(event), COL(entry_slot), COL(ends), COL(end_turns), COL(end_ts),
    {"rows", ARG_OUT, offsetof(Core, rows), 0},
    {"ids", ARG_LIST, offsetof(Core, ids), 0},
    {"paths", ARG_LIST, offsetof(Core, paths), 0},
    {"entries", ARG_DICT, offsetof(Core, entries), 0},
    {"cache_ttl_ms", ARG_INT, offsetof(Core, cache_ttl_ms), 0},
    {"violations", ARG_OBJECT, offsetof(Core, violations), 0},
    {"failed", ARG_OBJECT, offsetof(Core, failed), 0},
};
#undef COL
static const Py_ssize_t n_core_args = sizeof(core_args) / sizeof(core_args[0]);

/* ===== what the models share ==================================================================== */

/* An id removed at the end of `turn`. */
int core_removed(Core *c, PyObject *id, long long turn)
{
    Py_ssize_t n = PyList_GET_SIZE(c->evicted);
    if (n == c->evicted_cap) {
        Py_ssize_t cap = c->evicted_cap ? 2 * c->evicted_cap : 256;
        long long *grown = realloc(c->evicted_turn, cap * sizeof(long long));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->evicted_turn = grown, c->evicted_cap = cap;
    }
    if (PyList_Append(c->evicted, id) < 0)
        return -1;
    c->evicted_turn[n] = turn;
    return 0;
}

/* A contract violation at `turn` (strict: the exception Violations.report raises). */
int core_report(Core *c, long long turn, PyObject *what, PyObject *answer)
{
    PyObject *out = PyObject_CallMethod(c->violations, "report", "LOO", turn, what, answer != NULL ? answer : Py_None);
    if (out == NULL)
        return -1;
    Py_DECREF(out);
    return 0;
}

/* How a call into user code that failed with the pending exception broke the contract (new reference), or
   NULL when failed_call passes a real interrupt on. `name`: the hook, or NULL for the call itself. */
PyObject *core_failure(Core *c, const char *name)
{
    PyObject *type, *value, *tb, *text;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    if (name == NULL)
        text = PyObject_CallOneArg(c->failed, value);
    else {
        PyObject *n = PyUnicode_FromString(name);
        text = n == NULL ? NULL : PyObject_CallFunctionObjArgs(c->failed, value, n, NULL);
        Py_XDECREF(n);
    }
    Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(tb);
    return text;
}

void cache_init(PromptCache *p, long long ttl_ms)
{
    p->ttl_ms = ttl_ms, p->have_last = 0, p->last_places = 0, p->last_ts = 0, p->changed_from = LLONG_MAX;
}

void cache_change(PromptCache *p, long long place)
{
    if (place < p->changed_from)
        p->changed_from = place;
}

int cache_peek(PromptCache *p, long long ts, long long *upto)
{
    *upto = p->changed_from < p->last_places ? p->changed_from : p->last_places;
    return p->have_last && ts - p->last_ts <= p->ttl_ms;
}

int cache_read(PromptCache *p, long long ts, long long places, long long *upto, int *whole)
{
    int have = p->have_last && ts - p->last_ts <= p->ttl_ms;
    *upto = p->changed_from < p->last_places ? p->changed_from : p->last_places;
    *whole = *upto >= p->last_places;
    p->have_last = 1, p->last_places = places, p->last_ts = ts, p->changed_from = LLONG_MAX;
    return have;
}

/* ===== the core ===================================================================================== */

static void tally_need(Tally *t, long long bytes, int hit, long long miss)
{
    t->accesses++, t->accessed_bytes += bytes;
    if (hit) {
        t->hits++;
        return;
    }
    t->miss_bytes += bytes;
    if (miss == CAPACITY)
        t->capacity++, t->capacity_bytes += bytes;
    else if (miss == INVALIDATION)
        t->invalidation++, t->invalidation_bytes += bytes;
    else
        t->compulsory++;
}

/* The turn's row, in TURN_FIELDS order: its key, the tally, what the model measured. */
static void write_row(Core *c, Py_ssize_t k, const TurnEnd *end)
{
    long long *row = c->rows.data + k * NFIELDS;
    row[0] = c->end_turns.data[k], row[1] = c->end_ts.data[k];
    memcpy(row + NKEY, &c->tally, sizeof(Tally));
    memcpy(row + NKEY + NTALLY, end, sizeof(TurnEnd));
}

/* The one loop: every step through the model (need tallied, placement applied), every turn end closed. */
static int core_run(Core *c, Model *m)
{
    Py_ssize_t i = 0;
    for (Py_ssize_t k = 0; k <= c->nends; k++) {
        Py_ssize_t stop = k < c->nends ? (Py_ssize_t)c->ends.data[k] : c->nsteps;
        if (stop > c->nsteps || stop < i) {
            PyErr_SetString(PyExc_ValueError, "replay: inconsistent turn ends");
            return -1;
        }
        for (; i < stop; i++) {
            long long need = c->need.data[i];
            if (need >= 0)
                tally_need(&c->tally, c->need_bytes.data[i], m->holds(m, need), c->miss.data[i]);
            c->steps_done = i + 1;
            if (m->place(m, c, i) < 0)
                return -1;
        }
        if (k == c->nends)
            break;
        TurnEnd end;
        memset(&end, 0, sizeof end);
        if (m->end_turn(m, c, k, &end) < 0)
            return -1;
        write_row(c, k, &end);
        memset(&c->tally, 0, sizeof c->tally);
    }
    return 0;
}

/* Every index the loop follows, checked once. */
static int core_check(Core *c)
{
    Column *steps[] = {&c->slot, &c->need, &c->need_bytes, &c->miss, &c->place, &c->place_bytes, &c->ts_ms,
                       &c->count, &c->event};
    c->nsteps = c->slot.len, c->nends = c->ends.len;
    c->nentries = PyList_GET_SIZE(c->ids), c->nslots = PyList_GET_SIZE(c->paths);
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++)
        if (steps[k]->len != c->nsteps)
            goto bad;
    if (c->end_turns.len != c->nends || c->end_ts.len != c->nends || c->rows.len < c->nends * NFIELDS ||
        c->entry_slot.len < c->nentries)
        goto bad;
    for (Py_ssize_t e = 0; e < c->nentries; e++)
        if (c->entry_slot.data[e] < 0 || c->entry_slot.data[e] >= c->nslots)
            goto bad;
    for (Py_ssize_t i = 0; i < c->nsteps; i++) {
        long long slot = c->slot.data[i], place = c->place.data[i], need = c->need.data[i];
        if (slot == -1 ? (place != -1 || need != -1)
                       : (slot < 0 || slot >= c->nslots || place < 0 || place >= c->nentries ||
                          need >= c->nentries || c->entry_slot.data[place] != slot ||
                          (need >= 0 && c->entry_slot.data[need] != slot)))
            goto bad;
    }
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "replay: inconsistent resolved columns");
    return -1;
}

/* replay(args) -> (evicted ids, their turns as int64 bytes, the model's result) */
static PyObject *engine_replay(PyObject *module, PyObject *args)
{
    Core c;
    Args held;
    Model *model = NULL;
    PyObject *result = NULL, *extra = NULL, *turns = NULL;
    memset(&c, 0, sizeof c);
    memset(&held, 0, sizeof held);
    if (args_read(args, core_args, n_core_args, &c, &held) < 0 || core_check(&c) < 0)
        goto done;
    if ((c.evicted = PyList_New(0)) == NULL)
        goto done;
    if (PyUnicode_Check(c.model_name) && PyUnicode_CompareWithASCIIString(c.model_name, "managed") == 0) {
        if (managed_open(&c, args, &held, &model) < 0)
            goto done;
    } else if (PyUnicode_Check(c.model_name) && PyUnicode_CompareWithASCIIString(c.model_name, "transcript") == 0) {
        if (transcript_open(&c, args, &held, &model) < 0)
            goto done;
    } else {
        PyErr_SetString(PyExc_ValueError, "replay: model must be 'managed' or 'transcript'");
        goto done;
    }
    if (core_run(&c, model) < 0 || (extra = model->result(model, &c)) == NULL)
        goto done;
    turns = PyBytes_FromStringAndSize((const char *)c.evicted_turn,
                                      (Py_ssize_t)(PyList_GET_SIZE(c.evicted) * sizeof(long long)));
    if (turns != NULL)
        result = PyTuple_Pack(3, c.evicted, turns, extra);
done:
    if (model != NULL)
        model->free(model);
    Py_XDECREF(extra), Py_XDECREF(turns), Py_XDECREF(c.evicted);
    free(c.evicted_turn);
    args_release(&held);
    return result;
}

/* digest_text(turns, ids) -> bytes: "turn:id,id\n" for each run of equal turn numbers, in the order given
   (what sim.engine.measures.TurnLog.digest hashes after the rows). */
static PyObject *engine_digest_text(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Column turns = {0};
    PyObject *ids, *out = NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    Py_ssize_t n, i;
    if (nargs != 2 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "digest_text(turns, ids: list)");
        return NULL;
    }
    if (column_get(args[0], &turns, 0, "turns") < 0)
        return NULL;
    ids = args[1];
    n = PyList_GET_SIZE(ids);
    if (turns.len != n) {
        PyErr_SetString(PyExc_ValueError, "digest_text: a turn for every id");
        goto done;
    }
    for (i = 0; i < n; i++) {
        Py_ssize_t size;
        const char *text;
        PyObject *id = PyList_GET_ITEM(ids, i);
        int first = i == 0 || turns.data[i] != turns.data[i - 1], last = i == n - 1 || turns.data[i + 1] != turns.data[i];
        if (!PyUnicode_Check(id) || (text = PyUnicode_AsUTF8AndSize(id, &size)) == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "digest_text: ids must be str");
            goto done;
        }
        if (len + (size_t)size + 32 > cap) {
            size_t grown = cap ? 2 * cap : 4096;
            char *more;
            while (grown < len + (size_t)size + 32)
                grown *= 2;
            if ((more = realloc(buf, grown)) == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            buf = more, cap = grown;
        }
        if (first) {
            char digits[24];
            int d = 0;
            unsigned long long v = turns.data[i] < 0 ? 0ULL - (unsigned long long)turns.data[i]
                                                     : (unsigned long long)turns.data[i];
            do
                digits[d++] = (char)('0' + v % 10);
            while ((v /= 10) != 0);
            if (turns.data[i] < 0)
                buf[len++] = '-';
            while (d > 0)
                buf[len++] = digits[--d];
            buf[len++] = ':';
        }
        else
            buf[len++] = ',';
        memcpy(buf + len, text, (size_t)size);
        len += (size_t)size;
        if (last)
            buf[len++] = '\n';
    }
    out = PyBytes_FromStringAndSize(buf ? buf : "", (Py_ssize_t)len);
done:
    free(buf);
    column_release(&turns);
    return out;
}

/* log_totals(table) -> (sums, peaks, prompt sum, cache-read sum, peak prompt): over the rows of a per-turn log
   (nturns x NFIELDS int64), each field's exact sum and largest value, and of the prompts (occupancy + pinned bytes
   of each row) their exact sum, the cache reads' sum and the largest prompt; one pass (what
   sim.engine.measures.log_totals computes with numpy). */
static PyObject *engine_log_totals(PyObject *module, PyObject *table)
{
    Column rows = {0};
    __int128 sums[NFIELDS], prompts = 0, reads = 0, peak_prompt = 0;
    long long peaks[NFIELDS];
    const Py_ssize_t occ = NKEY + NTALLY + offsetof(TurnEnd, occupancy_bytes) / sizeof(long long),
                     pinned = NKEY + NTALLY + offsetof(TurnEnd, pinned_bytes) / sizeof(long long),
                     read = NKEY + NTALLY + offsetof(TurnEnd, cache_read_bytes) / sizeof(long long);
    PyObject *out = NULL, *s = NULL, *p = NULL;
    Py_ssize_t n, i, f;
    if (column_get(table, &rows, 0, "table") < 0)
        return NULL;
    n = rows.len / NFIELDS;
    if (rows.len != n * NFIELDS) {
        PyErr_SetString(PyExc_ValueError, "log_totals: a table of whole rows");
        goto done;
    }
    for (f = 0; f < NFIELDS; f++)
        sums[f] = 0, peaks[f] = n ? rows.data[f] : 0;
    for (i = 0; i < n; i++) {
        const long long *row = rows.data + i * NFIELDS;
        __int128 prompt = (__int128)row[occ] + row[pinned];
        for (f = 0; f < NFIELDS; f++) {
            sums[f] += row[f];
            if (row[f] > peaks[f])
                peaks[f] = row[f];
        }
        prompts += prompt, reads += row[read];
        if (i == 0 || prompt > peak_prompt)
            peak_prompt = prompt;
    }
    if ((s = PyTuple_New(NFIELDS)) == NULL || (p = PyTuple_New(NFIELDS)) == NULL)
        goto done;
    for (f = 0; f < NFIELDS; f++) {
        PyObject *sum = _PyLong_FromByteArray((const unsigned char *)&sums[f], sizeof(__int128), 1, 1),
                 *peak = PyLong_FromLongLong(peaks[f]);
        if (sum == NULL || peak == NULL) {
            Py_XDECREF(sum), Py_XDECREF(peak);
            goto done;
        }
        PyTuple_SET_ITEM(s, f, sum), PyTuple_SET_ITEM(p, f, peak);
    }
    out = Py_BuildValue("OONNN", s, p, _PyLong_FromByteArray((const unsigned char *)&prompts, sizeof(__int128), 1, 1),
                        _PyLong_FromByteArray((const unsigned char *)&reads, sizeof(__int128), 1, 1),
                        _PyLong_FromByteArray((const unsigned char *)&peak_prompt, sizeof(__int128), 1, 1));
done:
    Py_XDECREF(s), Py_XDECREF(p);
    column_release(&rows);
    return out;
}

static PyObject *engine_bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return managed_bind(args, nargs);
}

static PyObject *engine_bind_transcript(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return transcript_bind(args, nargs);
}

static PyMethodDef engine_methods[] = {
    {"resolve", (PyCFunction)(void (*)(void))engine_resolve, METH_FASTCALL,
     "resolve(ops, paths, sizes, costs, ts, out, out_entry_slot) -> (steps, ids, slot_paths, slots, entries)"},
    {"replay", (PyCFunction)engine_replay, METH_O,
     "replay(args) -> (evicted_ids, evicted_turns, model_result): one replay through the core and the model "
     "args.model names, its fields those of ARGS"},
    {"digest_text", (PyCFunction)(void (*)(void))engine_digest_text, METH_FASTCALL,
     "digest_text(turns, ids) -> bytes: the evicted ids as the log's digest reads them"},
    {"log_totals", (PyCFunction)engine_log_totals, METH_O,
     "log_totals(table) -> (sums, peaks, prompt sum, cache-read sum, peak prompt) of a per-turn log, in one pass"},
    {"bind", (PyCFunction)(void (*)(void))engine_bind, METH_FASTCALL,
     "bind(entry_type, budget_type, view_class): the classes the managed model makes instances of."},
    {"bind_transcript", (PyCFunction)(void (*)(void))engine_bind_transcript, METH_FASTCALL,
     "bind_transcript(item_type, item_slots, replace_type, append_type): the classes the transcript model makes "
     "and reads."},
    {NULL},
};

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "ctxbench.sim.engine._engine", "The compiled replay engine (see sim/engine/core.py).", -1,
    engine_methods,
};

static int add(PyObject *module, const char *name, PyObject *value)
{
    if (value == NULL)
        return -1;
    if (PyModule_AddObject(module, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__engine(void)
{
    PyObject *module, *args;
    if ((module = PyModule_Create(&engine_module)) == NULL)
        return NULL;
    if (managed_types_ready(module) < 0 ||
        add(module, "KEY_FIELDS", names_tuple(key_fields, NKEY)) < 0 ||
        add(module, "TALLY_FIELDS", names_tuple(tally_fields, NTALLY)) < 0 ||
        add(module, "END_FIELDS", names_tuple(end_fields, NEND)) < 0 ||
        add(module, "OPS", names_tuple(op_names, NOPS)) < 0 || add(module, "ADDS", names_tuple(adds_names, NADDS)) < 0 ||
        add(module, "MISSES", names_tuple(miss_names, NMISSES)) < 0 ||
        add(module, "ROLES", names_tuple(role_names, NROLES)) < 0 || (args = PyDict_New()) == NULL)
        goto fail;
    if (add(module, "ARGS", args) < 0)
        goto fail;
    {
        PyObject *core = args_names(core_args, n_core_args), *managed = args_names(managed_args, n_managed_args),
                 *transcript = args_names(transcript_args, n_transcript_args);
        int rc = core == NULL || managed == NULL || transcript == NULL || PyDict_SetItemString(args, "core", core) < 0 ||
                 PyDict_SetItemString(args, "managed", managed) < 0 ||
                 PyDict_SetItemString(args, "transcript", transcript) < 0;
        Py_XDECREF(core), Py_XDECREF(managed), Py_XDECREF(transcript);
        if (rc)
            goto fail;
    }
    return module;
fail:
    Py_DECREF(module);
    return NULL;
}
