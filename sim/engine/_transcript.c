/* The append-only transcript as a model of the compiled core (sim/engine/transcript.py `Transcript`, the
 * specification): a list of TranscriptItem objects (the policy's view) with, per item, its bytes, prefix sums,
 * role, tokens and the entry it holds; per entry, its copies in the window and the most tokens a copy had.
 *
 * A policy's answer is read once into plain values (`Edit` structs; an answer of any other shape first through
 * strategies.policy.read_edits), and those values are judged (the rules of strategies.policy.judge_edits,
 * which gives a refusal its message) and applied. */
#include "_engine.h"
#include "../../strategies/_slot_offset.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static PyTypeObject *item_type, *replace_type, *append_type, *request_type;
static Py_ssize_t off_i_id, off_i_role, off_i_kind, off_i_tokens, off_i_turn, off_i_path, off_i_ref;
static Py_ssize_t off_r_ids, off_r_tokens, off_r_role, off_a_role, off_a_tokens, off_a_ref;
static Py_ssize_t off_q_ids, off_q_tokens, off_q_fit;
static PyObject *s_empty, *s_prose, *s_code;

/* One edit of an answer, read once: a Replace (ids, tokens, role), an Append (role, tokens, ref) or a Request
   (ids or None, tokens, fit). */
enum { E_REPLACE, E_APPEND, E_REQUEST };
typedef struct {
    int append;           /* E_REPLACE, E_APPEND or E_REQUEST */
    PyObject *ids;        /* Replace, Request: a tuple of exact str (borrowed from the answer read); Request: or None */
    long long tokens;
    int role;             /* a role code (a Request: -1) */
    PyObject *role_name;  /* the role as the exact str the new item carries */
    PyObject *ref;        /* Append: an exact str */
    int fit;              /* Request */
} Edit;

typedef struct {
    Model base;
    Core *core;
    /* read from the arguments (`transcript_args`) */
    Column role_of, kind_of, adds_of;   /* per event */
    PyObject *event_paths, *roles, *kinds, *edit, *admit, *read, *judge, *view_class, *window_type;
    long long confirmation, max_bytes;
    double reference;
    /* the transcript */
    PyObject *items, *index_of;
    long long *size, *cum, *holds, *tokens;
    char *role;
    Py_ssize_t n, cap;
    long long *copies, *seen;
    long long bytes, evictable, made, compactions, calls;
    long long *mark, *held, generation; /* per item: replaced, and held by the request, in this judgement */
    Py_ssize_t mark_cap;
    Edit *edits;
    Py_ssize_t edits_cap;
    PyObject *admit_problem;            /* how admit first broke the contract this turn (str) */
    PromptCache cache;
} Transcript;

#define T(name, type) {#name, type, offsetof(Transcript, name), 0}
const ArgSpec transcript_args[] = {
    T(role_of, ARG_COLUMN), T(kind_of, ARG_COLUMN), T(adds_of, ARG_COLUMN), T(event_paths, ARG_LIST),
    T(roles, ARG_TUPLE), T(kinds, ARG_TUPLE), T(edit, ARG_OBJECT), T(admit, ARG_OPT_OBJECT), T(read, ARG_OBJECT),
    T(judge, ARG_OBJECT), T(view_class, ARG_OBJECT), T(window_type, ARG_OBJECT), T(confirmation, ARG_INT),
    T(reference, ARG_FLOAT), T(max_bytes, ARG_INT),
};
#undef T
const Py_ssize_t n_transcript_args = sizeof(transcript_args) / sizeof(transcript_args[0]);

static int grow(Transcript *t)
{
    Py_ssize_t cap = t->cap ? 2 * t->cap : 256;
    void *p;
#define GROW(field, count) do { if ((p = realloc(t->field, (count) * sizeof(*t->field))) == NULL) return -1; \
                                t->field = p; } while (0)
    GROW(size, cap);
    GROW(cum, cap + 1);
    GROW(holds, cap);
    GROW(tokens, cap);
    GROW(role, cap);
    GROW(mark, cap);
    GROW(held, cap);
#undef GROW
    memset(t->mark + t->cap, 0, (cap - t->cap) * sizeof(long long));
    memset(t->held + t->cap, 0, (cap - t->cap) * sizeof(long long));
    t->cap = cap;
    return 0;
}

static int evictable_role(int role)
{
    return role == R_RESULT || role == R_ATTACHED;
}

static long long tokens_of(Transcript *t, long long size)
{
    return (long long)nearbyint((double)size / t->reference);
}

static long long size_of(Transcript *t, long long tokens)
{
    return (long long)nearbyint((double)tokens * t->reference);
}

/* A new TranscriptItem (new reference). */
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
static int append_item(Transcript *t, PyObject *item, long long size, int role, long long holds, long long tokens)
{
    PyObject *at;
    if (t->n == t->cap && grow(t) < 0) {
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
static void forget(Transcript *t, Py_ssize_t at)
{
    t->bytes -= t->size[at];
    if (evictable_role(t->role[at]))
        t->evictable -= t->size[at];
    if (t->holds[at] >= 0)
        t->copies[t->holds[at]]--;
}

static int transcript_holds(Model *model, long long need)
{
    return ((Transcript *)model)->copies[need] > 0;
}

/* Step `i`'s event appends its item: its content, the tool's confirmation, or nothing (`adds_of`). */
static int transcript_place(Model *model, Core *c, Py_ssize_t i)
{
    Transcript *t = (Transcript *)model;
    long long place = c->place.data[i], event = c->event.data[i], adds = t->adds_of.data[event], size, tokens;
    int role = (int)t->role_of.data[event];
    PyObject *id, *item, *ref = place >= 0 ? PyList_GET_ITEM(c->ids, place) : s_empty;
    size = adds == ADDS_CONTENT ? c->place_bytes.data[i] : adds == ADDS_CONFIRMATION ? t->confirmation : 0;
    tokens = tokens_of(t, size);
    if ((id = PyLong_FromLongLong(event)) == NULL)
        return -1;
    Py_SETREF(id, PyObject_Str(id));
    if (id == NULL)
        return -1;
    item = new_item(id, PyTuple_GET_ITEM(t->roles, role), PyTuple_GET_ITEM(t->kinds, t->kind_of.data[event]), tokens,
                    t->calls, PyList_GET_ITEM(t->event_paths, event), ref);
    Py_DECREF(id);
    if (item == NULL)
        return -1;
    if (t->admit != NULL) {   /* at most the item's tokens, an integer >= 0, else a violation at the turn's end */
        PyObject *got = PyObject_CallOneArg(t->admit, item);
        long long value = -1;
        if (got != NULL && PyLong_CheckExact(got)) {
            value = PyLong_AsLongLong(got);
            if (value == -1 && PyErr_Occurred())
                PyErr_Clear();
        }
        if (got == NULL || value < 0 || value > tokens) {
            if (t->admit_problem == NULL) {
                t->admit_problem = got == NULL ? core_failure(c, "admit")
                                               : PyUnicode_FromFormat("admit gave %.40R for item %R of %lld tokens",
                                                                      got, SLOT(item, off_i_id), tokens);
                if (t->admit_problem == NULL) {
                    Py_XDECREF(got), Py_DECREF(item);
                    return -1;
                }
            }
            else if (got == NULL)
                PyErr_Clear();
        }
        else if (value < tokens) {
            PyObject *smaller = new_item(SLOT(item, off_i_id), SLOT(item, off_i_role), SLOT(item, off_i_kind), value,
                                         t->calls, SLOT(item, off_i_path), ref);
            Py_SETREF(item, smaller);
            tokens = value, size = size_of(t, value);
        }
        Py_XDECREF(got);
        if (item == NULL)
            return -1;
    }
    if (append_item(t, item, size, role, place, tokens) < 0) {
        Py_DECREF(item);
        return -1;
    }
    Py_DECREF(item);
    return 0;
}

/* ----- the policy's answer ------------------------------------------------------------------------------- */

static int role_code(Transcript *t, PyObject *role)   /* an exact str of ROLES, else -1 */
{
    if (!PyUnicode_CheckExact(role))
        return -1;
    for (int k = 0; k < NROLES; k++) {
        PyObject *name = PyTuple_GET_ITEM(t->roles, k);
        if (role == name || PyUnicode_Compare(role, name) == 0)
            return k;
    }
    return -1;
}

static long long count_of(PyObject *o)   /* an exact int >= 0 within int64, else -1 */
{
    long long v;
    if (o == NULL || !PyLong_CheckExact(o))
        return -1;
    v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return v < 0 ? -1 : v;
}

/* Read `answer` into t->edits: 1 when it is a list or tuple of Replace and Append whose fields all hold plain
   values of the contract's types, 0 when it is not (the answer is then read by strategies.policy.read_edits,
   and what is still not readable is refused by the judge), -1 on an error. */
static int read_edits(Transcript *t, PyObject *answer, Py_ssize_t *count)
{
    Py_ssize_t k, n;
    if (!PyList_CheckExact(answer) && !PyTuple_CheckExact(answer))
        return 0;
    n = PySequence_Fast_GET_SIZE(answer);
    if (n > t->edits_cap) {
        Edit *grown = realloc(t->edits, n * sizeof(Edit));
        if (grown == NULL)
            return PyErr_NoMemory(), -1;
        t->edits = grown, t->edits_cap = n;
    }
    for (k = 0; k < n; k++) {
        PyObject *edit = PySequence_Fast_GET_ITEM(answer, k);
        Edit *e = &t->edits[k];
        if (Py_IS_TYPE(edit, replace_type)) {
            PyObject *ids = SLOT(edit, off_r_ids), *role = SLOT(edit, off_r_role);
            e->append = E_REPLACE, e->ids = ids, e->tokens = count_of(SLOT(edit, off_r_tokens)), e->ref = NULL;
            if (ids == NULL || !PyTuple_CheckExact(ids) || role == NULL || !PyUnicode_CheckExact(role) ||
                (e->role = role_code(t, role)) < 0 || e->tokens < 0)
                return 0;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ids); j++)
                if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(ids, j)))
                    return 0;
            e->role_name = role;
        }
        else if (Py_IS_TYPE(edit, append_type)) {
            PyObject *role = SLOT(edit, off_a_role), *ref = SLOT(edit, off_a_ref);
            e->append = E_APPEND, e->ids = NULL, e->tokens = count_of(SLOT(edit, off_a_tokens)), e->ref = ref;
            if (role == NULL || !PyUnicode_CheckExact(role) || (e->role = role_code(t, role)) < 0 || e->tokens < 0 ||
                ref == NULL || !PyUnicode_CheckExact(ref))
                return 0;
            e->role_name = role;
        }
        else if (Py_IS_TYPE(edit, request_type)) {
            PyObject *ids = SLOT(edit, off_q_ids), *fit = SLOT(edit, off_q_fit);
            e->append = E_REQUEST, e->ids = ids, e->tokens = count_of(SLOT(edit, off_q_tokens)), e->ref = NULL;
            e->role = -1, e->role_name = NULL;
            if (ids == NULL || (ids != Py_None && !PyTuple_CheckExact(ids)) || e->tokens < 0 ||
                (fit != Py_True && fit != Py_False))
                return 0;
            e->fit = fit == Py_True;
            if (ids != Py_None)
                for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ids); j++)
                    if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(ids, j)))
                        return 0;
        }
        else
            return 0;
    }
    *count = n;
    return 1;
}

/* The entry a ref names (-1: none). */
static long long entry_of_ref(Core *c, PyObject *ref)
{
    PyObject *e = PyDict_GetItemWithError(c->entries, ref);
    if (e == NULL) {
        PyErr_Clear();
        return -1;
    }
    return PyLong_AsLongLong(e);
}

/* Whether the edits read keep the contract (the rules of strategies.policy.judge_edits): 1, 0, or -1. The items
   replaced are marked (`mark`) with the judgement's generation, and those a Request names (`held`). */
static int judge(Transcript *t, Py_ssize_t count)
{
    long long net = 0, generation = ++t->generation;
    int requests = 0, summary = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        Edit *e = &t->edits[k];
        if (e->append == E_REQUEST) {
            if (requests++)
                return 0;
            if (e->ids == Py_None)
                continue;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(e->ids); j++) {
                PyObject *at = PyDict_GetItemWithError(t->index_of, PyTuple_GET_ITEM(e->ids, j));
                Py_ssize_t i;
                if (at == NULL)
                    return PyErr_Occurred() ? -1 : 0;
                i = PyLong_AsSsize_t(at);
                if (t->held[i] == generation)
                    return 0;
                t->held[i] = generation;
            }
            continue;
        }
        if (e->role == R_SUMMARY && e->tokens > 0)
            summary = 1;
        if (e->append == E_REPLACE) {
            long long removed = 0;
            Py_ssize_t nids = PyTuple_GET_SIZE(e->ids);
            if (nids == 0)
                return 0;
            for (Py_ssize_t j = 0; j < nids; j++) {
                PyObject *at = PyDict_GetItemWithError(t->index_of, PyTuple_GET_ITEM(e->ids, j));
                Py_ssize_t i;
                if (at == NULL)
                    return PyErr_Occurred() ? -1 : 0;
                i = PyLong_AsSsize_t(at);
                if (t->mark[i] == generation || t->role[i] == R_OVERHEAD)
                    return 0;
                t->mark[i] = generation;
                removed += t->tokens[i];
            }
            if (e->role == R_OVERHEAD || e->tokens > removed)
                return 0;
            net += e->tokens - removed;
        }
        else {
            if (e->role != R_SUMMARY && e->role != R_ATTACHED)
                return 0;
            if (e->role == R_ATTACHED) {
                long long entry = entry_of_ref(t->core, e->ref);
                if (entry < 0 || t->seen[entry] < 0 || e->tokens > t->seen[entry])
                    return 0;
            }
            net += e->tokens;
        }
    }
    return net <= 0 && (!requests || summary);
}

/* Apply judged edits, the removed ids recorded at `turn`. `*first`: the first place changed; `*compacted`. */
static int apply(Transcript *t, Py_ssize_t count, long long turn, Py_ssize_t *first, int *compacted)
{
    for (Py_ssize_t k = 0; k < count; k++) {
        Edit *e = &t->edits[k];
        PyObject *id, *item;
        if (e->append == E_REQUEST)   /* what the summarization call read: nothing to apply */
            continue;
        if (e->append == E_REPLACE) {
            Py_ssize_t nids = PyTuple_GET_SIZE(e->ids), j, low = t->n;
            for (j = 0; j < nids; j++) {
                PyObject *gone = PyTuple_GET_ITEM(e->ids, j);
                Py_ssize_t at = PyLong_AsSsize_t(PyDict_GetItem(t->index_of, gone));
                if (at < low)
                    low = at;
                forget(t, at);
                if (core_removed(t->core, gone, turn) < 0 || PyDict_DelItem(t->index_of, gone) < 0)
                    return -1;
            }
            *compacted |= nids > 1 || (e->role == R_SUMMARY && e->tokens > 0);
            if (low < *first)
                *first = low;
            item = NULL;
            if (e->tokens) {
                if ((id = PyUnicode_FromFormat("p%lld", ++t->made)) == NULL)
                    return -1;
                item = new_item(id, e->role_name, s_prose, e->tokens, t->calls, s_empty, s_empty);
                Py_DECREF(id);
                if (item == NULL)
                    return -1;
            }
            if (nids == 1 && item != NULL) {   /* in place: nothing moves */
                PyObject *at = PyLong_FromSsize_t(low);
                long long size = size_of(t, e->tokens);
                if (at == NULL || PyDict_SetItem(t->index_of, SLOT(item, off_i_id), at) < 0) {
                    Py_XDECREF(at), Py_DECREF(item);
                    return -1;
                }
                Py_DECREF(at);
                PyList_SetItem(t->items, low, item);   /* steals */
                t->size[low] = size, t->holds[low] = -1, t->role[low] = (char)e->role, t->tokens[low] = e->tokens;
                t->bytes += size;
                if (evictable_role(e->role))
                    t->evictable += size;
            }
            else {   /* the items named leave; the new one, if any, takes the first one's place */
                Py_ssize_t w = low, r;
                PyObject *list = t->items;
                for (r = low; r < t->n; r++) {
                    PyObject *keep = PyList_GET_ITEM(list, r);
                    if (r == low && item != NULL) {
                        long long size = size_of(t, e->tokens);
                        PyList_SET_ITEM(list, w, item);   /* the slot's reference was the gone item's */
                        Py_DECREF(keep);
                        t->size[w] = size, t->holds[w] = -1, t->role[w] = (char)e->role, t->tokens[w] = e->tokens;
                        t->bytes += size;
                        if (evictable_role(e->role))
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
            PyObject *path = s_empty, *held = s_empty;
            long long entry = -1;
            if (e->role == R_ATTACHED) {
                Py_ssize_t len = PyUnicode_GET_LENGTH(e->ref), colon = PyUnicode_FindChar(e->ref, ':', 0, len, -1);
                entry = entry_of_ref(t->core, e->ref);
                path = colon >= 0 ? PyUnicode_Substring(e->ref, 0, colon) : Py_NewRef(s_empty);
                if (path == NULL)
                    return -1;
                if (e->tokens >= t->seen[entry])
                    held = e->ref;
                else
                    entry = -1;
            }
            else
                Py_INCREF(path);
            if ((id = PyUnicode_FromFormat("p%lld", ++t->made)) == NULL) {
                Py_DECREF(path);
                return -1;
            }
            item = new_item(id, e->role_name, e->role == R_SUMMARY ? s_prose : s_code, e->tokens, t->calls, path, held);
            Py_DECREF(id), Py_DECREF(path);
            if (item == NULL)
                return -1;
            if (append_item(t, item, size_of(t, e->tokens), e->role, entry, e->tokens) < 0) {
                Py_DECREF(item);
                return -1;
            }
            Py_DECREF(item);
        }
    }
    return 0;
}

/* The summarization call's prompt as the judged Request `q` says (transcript.py Transcript._requested): its bytes,
   how many leading items of the window it holds as they stand, and the bytes of the replaced items it leaves out. */
static void requested(Transcript *t, const Edit *q, long long *prompt, Py_ssize_t *shared, long long *dropped)
{
    long long generation = t->generation, total = size_of(t, q->tokens);
    Py_ssize_t i;
    if (q->ids == Py_None)
        for (i = 0; i < t->n; i++)
            t->held[i] = generation;
    for (i = 0; i < t->n; i++)
        if (t->held[i] == generation)
            total += t->size[i];
    if (q->fit)   /* the oldest items but the overhead leave it while it is larger than the window (marked -generation) */
        for (i = 0; i < t->n && total > t->max_bytes; i++)
            if (t->held[i] == generation && t->role[i] != R_OVERHEAD)
                t->held[i] = -generation, total -= t->size[i];
    *prompt = total;
    for (i = 0; i < t->n && t->held[i] == generation; i++)
        ;
    *shared = i, *dropped = 0;
    for (; i < t->n; i++)   /* what the trimming left out of the items the edits remove */
        if (t->held[i] == -generation && t->mark[i] == generation)
            *dropped += t->size[i];
}

/* The message of the judge's refusal (strategies.policy.judge_edits through `judge`), new reference. */
static PyObject *refusal(Transcript *t, PyObject *answer)
{
    PyObject *seen = PyDict_New(), *message;
    if (seen == NULL)
        return NULL;
    for (Py_ssize_t e = 0; e < t->core->nentries; e++) {
        PyObject *v;
        if (t->seen[e] < 0)
            continue;
        if ((v = PyLong_FromLongLong(t->seen[e])) == NULL || PyDict_SetItem(seen, PyList_GET_ITEM(t->core->ids, e), v) < 0) {
            Py_XDECREF(v), Py_DECREF(seen);
            return NULL;
        }
        Py_DECREF(v);
    }
    message = PyObject_CallFunctionObjArgs(t->judge, answer, t->items, seen, NULL);
    Py_DECREF(seen);
    if (message == Py_None) {
        Py_DECREF(message);
        PyErr_SetString(PyExc_RuntimeError, "transcript: the compiled judge refused edits judge_edits accepts");
        return NULL;
    }
    return message;
}

/* Call the policy with the items and the window: its answer (new reference), or NULL with *raised set to how the
   call broke the contract (NULL and nothing set: a real interrupt, passed on). */
static PyObject *call_policy(Transcript *t, long long window_bytes, long long *elapsed, PyObject **raised)
{
    PyObject *window, *view, *answer, *closed, *type = NULL, *exc = NULL, *tb = NULL;
    long long t0;
    window = PyObject_CallFunction(t->window_type, "LLLL", (long long)nearbyint((double)t->max_bytes / t->reference),
                                   tokens_of(t, window_bytes), t->calls, t->compactions);
    if (window == NULL || (view = PyObject_CallOneArg(t->view_class, t->items)) == NULL) {
        Py_XDECREF(window);
        return NULL;
    }
    t0 = now_ns();
    answer = PyObject_CallFunctionObjArgs(t->edit, view, window, NULL);
    *elapsed = now_ns() - t0;
    Py_DECREF(window);
    if (answer == NULL)   /* kept while the view is closed */
        PyErr_Fetch(&type, &exc, &tb);
    closed = PyObject_CallMethod(view, "close", NULL);
    Py_DECREF(view);
    if (closed == NULL) {
        Py_XDECREF(answer), Py_XDECREF(type), Py_XDECREF(exc), Py_XDECREF(tb);
        return NULL;
    }
    Py_DECREF(closed);
    if (answer == NULL) {   /* a policy that fails breaks the contract; a real interrupt goes on */
        PyErr_Restore(type, exc, tb);
        *raised = core_failure(t->core, NULL);
    }
    return answer;
}

static int transcript_end_turn(Model *model, Core *c, Py_ssize_t k, TurnEnd *end)
{
    Transcript *t = (Transcript *)model;
    long long turn = c->end_turns.data[k], window_bytes = t->bytes, before = t->evictable, elapsed = 0, upto;
    PyObject *answer, *problem = NULL, *raised = NULL;
    Py_ssize_t removed = PyList_GET_SIZE(c->evicted), first = t->n, count = 0;
    int compacted = 0, whole, rc = -1;
    answer = call_policy(t, window_bytes, &elapsed, &raised);
    if (answer == NULL && raised == NULL)
        return -1;
    problem = raised;
    if (answer != NULL && !(PyList_CheckExact(answer) && PyList_GET_SIZE(answer) == 0)) {
        int ok = read_edits(t, answer, &count);
        if (ok == 0) {   /* read through strategies.policy.read_edits, once, into plain values */
            Py_SETREF(answer, PyObject_CallOneArg(t->read, answer));
            if (answer == NULL)
                goto done;
            ok = read_edits(t, answer, &count);
        }
        if (ok < 0 || (ok == 1 && (ok = judge(t, count)) < 0))
            goto done;
        if (ok == 0) {
            if ((problem = refusal(t, answer)) == NULL)
                goto done;
        }
        else {
            /* An LLM writes a summary: first the summarization call, on the window before the edits or on what the
               policy's Request says. */
            const Edit *request = NULL;
            for (Py_ssize_t j = 0; j < count; j++) {
                if (t->edits[j].role == R_SUMMARY && t->edits[j].tokens > 0)
                    end->summary_calls = 1, end->summary_output_bytes += size_of(t, t->edits[j].tokens);
                if (t->edits[j].append == E_REQUEST)
                    request = &t->edits[j];
            }
            if (end->summary_calls) {
                Py_ssize_t shared = t->n;
                end->summary_prompt_bytes = window_bytes;
                if (request != NULL)
                    requested(t, request, &end->summary_prompt_bytes, &shared, &end->summary_dropped_bytes);
                if (shared == t->n)   /* it holds the window as it stands: the next call reads through it */
                    end->summary_cache_read_bytes = cache_read(&t->cache, c->end_ts.data[k], t->n, &upto, &whole)
                                                    ? t->cum[upto] : 0;
                else
                    end->summary_cache_read_bytes = cache_peek(&t->cache, c->end_ts.data[k], &upto)
                                                    ? t->cum[upto < shared ? upto : shared] : 0;
            }
            if (apply(t, count, turn, &first, &compacted) < 0)
                goto done;
        }
    }
    if (problem == NULL && t->admit_problem != NULL)
        problem = Py_NewRef(t->admit_problem);
    Py_CLEAR(t->admit_problem);
    if (problem != NULL && core_report(c, turn, problem, NULL) < 0)
        goto done;
    t->compactions += compacted;
    if (first < t->n) {   /* the prefix sums from the first place changed on */
        for (Py_ssize_t r = first; r < t->n; r++)
            t->cum[r + 1] = t->cum[r] + t->size[r];
    }
    if (first < t->n || PyList_GET_SIZE(c->evicted) > removed)
        cache_change(&t->cache, first);
    end->evictions = PyList_GET_SIZE(c->evicted) - removed;
    end->evicted_bytes = window_bytes > t->bytes ? window_bytes - t->bytes : 0;
    end->turn_bytes = before, end->occupancy_bytes = t->evictable, end->entries = t->n, end->evict_ns = elapsed;
    end->violations = problem != NULL, end->pinned_bytes = t->bytes - t->evictable;
    end->over_window = t->bytes > t->max_bytes || end->summary_prompt_bytes > t->max_bytes;
    end->cache_read_bytes = cache_read(&t->cache, c->end_ts.data[k], t->n, &upto, &whole) ? t->cum[upto] : 0;
    end->compactions = compacted, end->window_bytes = window_bytes;
    t->calls++;
    rc = 0;
done:
    Py_XDECREF(answer), Py_XDECREF(problem);
    return rc;
}

/* The ids of the items in the window at the end, in order. */
static PyObject *transcript_result(Model *model, Core *c)
{
    Transcript *t = (Transcript *)model;
    PyObject *ids = PyList_New(t->n);
    if (ids == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < t->n; k++)
        PyList_SET_ITEM(ids, k, Py_NewRef(SLOT(PyList_GET_ITEM(t->items, k), off_i_id)));
    return ids;
}

static void transcript_free(Model *model)
{
    Transcript *t = (Transcript *)model;
    free(t->size), free(t->cum), free(t->holds), free(t->tokens), free(t->role), free(t->copies), free(t->seen);
    free(t->mark), free(t->held), free(t->edits);
    Py_XDECREF(t->items), Py_XDECREF(t->index_of), Py_XDECREF(t->admit_problem);
    free(t);
}

int transcript_open(Core *c, PyObject *args, Args *held, Model **out)
{
    Transcript *t = calloc(1, sizeof(Transcript));
    Py_ssize_t nevents, k;
    if (t == NULL)
        return PyErr_NoMemory(), -1;
    t->base.holds = transcript_holds, t->base.place = transcript_place, t->base.end_turn = transcript_end_turn;
    t->base.result = transcript_result, t->base.free = transcript_free;
    *out = &t->base;
    t->core = c;
    if (item_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_transcript() was not called");
        return -1;
    }
    if (args_read(args, transcript_args, n_transcript_args, t, held) < 0)
        return -1;
    nevents = t->role_of.len;
    if (t->kind_of.len != nevents || t->adds_of.len != nevents || PyList_GET_SIZE(t->event_paths) != nevents ||
        PyTuple_GET_SIZE(t->roles) != NROLES || t->reference <= 0)
        goto bad;
    for (k = 0; k < c->nsteps; k++) {   /* every index the loop follows, checked once */
        long long event = c->event.data[k];
        if (event < 0 || event >= nevents || t->role_of.data[event] < 0 || t->role_of.data[event] >= NROLES ||
            t->kind_of.data[event] < 0 || t->kind_of.data[event] >= PyTuple_GET_SIZE(t->kinds) ||
            t->adds_of.data[event] < 0 || t->adds_of.data[event] >= NADDS)
            goto bad;
    }
    t->copies = calloc(c->nentries + 1, sizeof(long long)), t->seen = malloc((c->nentries + 1) * sizeof(long long));
    if (t->copies == NULL || t->seen == NULL || grow(t) < 0)
        return PyErr_NoMemory(), -1;
    for (k = 0; k < c->nentries; k++)
        t->seen[k] = -1;
    t->cum[0] = 0;
    cache_init(&t->cache, c->cache_ttl_ms);
    if ((t->items = PyList_New(0)) == NULL || (t->index_of = PyDict_New()) == NULL)
        return -1;
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "transcript: inconsistent event columns");
    return -1;
}

/* The offset of the object slot a member descriptor stands for into *out: 0, or -1 with TypeError. */
static int member_offset(PyObject *slots, const char *name, Py_ssize_t *out)
{
    PyObject *d = PyDict_GetItemString(slots, name);
    PyMemberDef *def;
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "item slot %s is not a member descriptor", name);
        return -1;
    }
    def = ((PyMemberDescrObject *)d)->d_member;
    if (def->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "item slot %s is not an object slot", name);
        return -1;
    }
    *out = def->offset;
    return 0;
}

/* bind_transcript(item_type, item_slots, replace_type, append_type, request_type): the TranscriptItem class whose
   slots the engine fills (its slots' member descriptors: the class's own attributes are read-only), and the
   Replace, Append and Request classes it reads. */
PyObject *transcript_bind(PyObject *const *args, Py_ssize_t nargs)
{
    PyTypeObject *items, *replaces, *appends, *requests;
    PyObject *slots;
    if (nargs != 5 || !PyType_Check(args[0]) || !PyDict_Check(args[1]) || !PyType_Check(args[2]) ||
        !PyType_Check(args[3]) || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_transcript(item_type, item_slots: dict, replace_type, append_type, request_type)");
        return NULL;
    }
    items = (PyTypeObject *)args[0], slots = args[1];
    replaces = (PyTypeObject *)args[2], appends = (PyTypeObject *)args[3], requests = (PyTypeObject *)args[4];
    if (member_offset(slots, "id", &off_i_id) < 0 || member_offset(slots, "role", &off_i_role) < 0 ||
        member_offset(slots, "kind", &off_i_kind) < 0 || member_offset(slots, "tokens", &off_i_tokens) < 0 ||
        member_offset(slots, "turn", &off_i_turn) < 0 || member_offset(slots, "path", &off_i_path) < 0 ||
        member_offset(slots, "ref", &off_i_ref) < 0 || slot_offset(replaces, "ids", &off_r_ids) < 0 ||
        slot_offset(replaces, "tokens", &off_r_tokens) < 0 || slot_offset(replaces, "role", &off_r_role) < 0 ||
        slot_offset(appends, "role", &off_a_role) < 0 || slot_offset(appends, "tokens", &off_a_tokens) < 0 ||
        slot_offset(appends, "ref", &off_a_ref) < 0 || slot_offset(requests, "ids", &off_q_ids) < 0 ||
        slot_offset(requests, "tokens", &off_q_tokens) < 0 || slot_offset(requests, "fit", &off_q_fit) < 0)
        return NULL;
    if (s_empty == NULL && ((s_empty = PyUnicode_InternFromString("")) == NULL ||
                            (s_prose = PyUnicode_InternFromString("prose")) == NULL ||
                            (s_code = PyUnicode_InternFromString("code")) == NULL))
        return NULL;
    Py_XSETREF(item_type, (PyTypeObject *)Py_NewRef(items));
    Py_XSETREF(replace_type, (PyTypeObject *)Py_NewRef(replaces));
    Py_XSETREF(append_type, (PyTypeObject *)Py_NewRef(appends));
    Py_XSETREF(request_type, (PyTypeObject *)Py_NewRef(requests));
    Py_RETURN_NONE;
}
