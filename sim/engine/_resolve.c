/* Resolution of one arm's events (sim/engine/rules.py `Resolver`, the specification): which revision each event
 * needs, how a miss of it is classed, which entry it leaves resident. */
#include "_engine.h"

#include <stdlib.h>
#include <string.h>


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
   `paths` is a list of str, one per event, or interned: (codes, names), an int64 column of indices
   into the list of str `names` (each name's slot is then found once, not per event).
   `out` is 9 writable int64 columns (slot, need, need_bytes, miss, place, place_bytes, ts, count,
   event) at least as long as the events; `out_entry_slot` twice as long; `entries` maps each id
   to its entry. */
PyObject *engine_resolve(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Column ops = {0}, sizes = {0}, costs = {0}, ts = {0}, out[9], entry_slot = {0}, codes = {0};
    PyObject *paths = NULL, *names = NULL, *ids = NULL, *slot_paths = NULL, *slots = NULL, *entries = NULL, *result = NULL;
    long long *current = NULL, *known = NULL, *known_cost = NULL, *revisions = NULL, *placed = NULL, *count = NULL;
    long long *name_slot = NULL;   /* interned paths: each name's slot, -1 until it has one */
    char *invalid = NULL;
    Py_ssize_t n, nslots = 0, cap = 0, steps = 0, i, k;
    memset(out, 0, sizeof out);
    int interned = nargs == 7 && PyTuple_Check(args[1]) && PyTuple_GET_SIZE(args[1]) == 2 &&
                   PyList_Check(PyTuple_GET_ITEM(args[1], 1));
    if (nargs != 7 || !(PyList_Check(args[1]) || interned) || !PyTuple_Check(args[5]) || PyTuple_GET_SIZE(args[5]) != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "resolve(ops, paths: list or (codes, names), sizes, costs, ts, out: 9 columns, out_entry_slot)");
        return NULL;
    }
    if (interned) {
        Py_ssize_t j, nnames;
        names = PyTuple_GET_ITEM(args[1], 1);
        nnames = PyList_GET_SIZE(names);
        if (column_get(PyTuple_GET_ITEM(args[1], 0), &codes, 0, "path codes") < 0)
            goto done;
        n = codes.len;
        if ((name_slot = malloc((nnames ? nnames : 1) * sizeof(long long))) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (j = 0; j < nnames; j++)
            name_slot[j] = -1;
    } else {
        paths = args[1];
        n = PyList_GET_SIZE(paths);
    }
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
        PyObject *path, *found;
        long long code = -1;
        long long op = ops.data[i], size = sizes.data[i], cost = costs.data[i], slot, need = -1, need_bytes = 0;
        long long miss = NO_NEED, place, known_size;
        if (op == MESSAGE || op == CALL || op == OVERHEAD) {   /* pinned: no slot, no need */
            out[0].data[steps] = -1, out[1].data[steps] = -1, out[2].data[steps] = 0, out[3].data[steps] = NO_NEED;
            out[4].data[steps] = -1, out[5].data[steps] = cost, out[6].data[steps] = ts.data[i], out[7].data[steps] = 0;
            out[8].data[steps] = i;
            steps++;
            continue;
        }
        if (names != NULL) {
            code = codes.data[i];
            if (code < 0 || code >= PyList_GET_SIZE(names)) {
                PyErr_Format(PyExc_ValueError, "path code %lld of event %zd is not an index of the names", code, i);
                goto done;
            }
            path = PyList_GET_ITEM(names, code);
        } else
            path = PyList_GET_ITEM(paths, i);
        if (code >= 0 && name_slot[code] >= 0)
            slot = name_slot[code];
        else if ((found = PyDict_GetItemWithError(slots, path)) != NULL)
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
        if (code >= 0)
            name_slot[code] = slot;
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
    column_release(&entry_slot), column_release(&codes);
    for (k = 0; k < 9; k++)
        column_release(&out[k]);
    free(current), free(known), free(known_cost), free(revisions), free(placed), free(count), free(invalid), free(name_slot);
    Py_XDECREF(ids), Py_XDECREF(slot_paths), Py_XDECREF(slots), Py_XDECREF(entries);
    return result;
}
