/* The compiled replay engine: what its parts share (sim/engine/_engine.c, _resolve.c, _managed.c,
 * _transcript.c).
 *
 * The readable specification is Python (sim/engine/core.py, rules.py, transcript.py); this code must give
 * exactly its results, which the tests check on random and generated sessions. Its shape is the
 * specification's: one core loop (`core_run`) with one tally and one row builder, and two models that plug
 * into it through `Model` (what a need finds, what a placement does, what a turn end removes). Arguments
 * cross from Python as one object whose fields each part reads by the names of a declared table (`ArgSpec`),
 * which the Python side checks at import against its dataclasses (sim/engine/compiled.py).
 */
#ifndef CTXBENCH_ENGINE_H
#define CTXBENCH_ENGINE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* ----- the event vocabulary (traces/vocabulary.py; checked at import) ------------------------------------ */
enum { READ, EDIT, WRITE, OUTPUT, MESSAGE, CALL, OVERHEAD, INVALIDATE, NOPS };
enum { ADDS_NOTHING, ADDS_CONTENT, ADDS_CONFIRMATION, NADDS };
/* Miss classes (sim/engine/core.py MISSES). */
enum { NO_NEED, COMPULSORY, INVALIDATION, CAPACITY, NMISSES };
/* Roles of a transcript's items (strategies/policy.py ROLES). */
enum { R_OVERHEAD, R_USER, R_ASSISTANT, R_THINKING, R_CALL, R_RESULT, R_SUMMARY, R_PLACEHOLDER, R_ATTACHED, NROLES };

/* ----- int64 columns ------------------------------------------------------------------------------------- */
typedef struct {
    Py_buffer view;
    long long *data;
    Py_ssize_t len;
} Column;

int column_get(PyObject *obj, Column *c, int writable, const char *what);
void column_release(Column *c);
long long now_ns(void);

/* ----- arguments: one object, its fields read by name from a declared table ------------------------------ */
typedef enum {
    ARG_COLUMN,       /* an int64 array */
    ARG_OUT,          /* a writable int64 array */
    ARG_OPT_COLUMN,   /* an int64 array, or None (data NULL) */
    ARG_INT,          /* an int within int64 */
    ARG_OPT_INT,      /* an int, or None (the spec's `none`) */
    ARG_FLOAT,
    ARG_OBJECT,       /* any object (borrowed from the argument object, which the call holds) */
    ARG_OPT_OBJECT,   /* any object, or None (NULL) */
    ARG_LIST,         /* a list */
    ARG_DICT,         /* a dict */
    ARG_TUPLE,        /* a tuple */
} ArgType;

typedef struct {
    const char *name;
    ArgType type;
    size_t offset;        /* into the struct the table fills */
    long long none;       /* ARG_OPT_INT: the value of None */
} ArgSpec;

#define ARGS_HELD 96
typedef struct {
    PyObject *objects[ARGS_HELD];
    int nobjects;
    Column *columns[ARGS_HELD];
    int ncolumns;
} Args;

int args_read(PyObject *from, const ArgSpec *specs, Py_ssize_t n, void *base, Args *held);
void args_release(Args *held);
PyObject *args_names(const ArgSpec *specs, Py_ssize_t n);

/* ----- the row's groups (sim/engine/measures.py KEY_FIELDS, TALLY_FIELDS, END_FIELDS; checked at import) - */
typedef struct {
    long long accesses, hits, compulsory, capacity, invalidation, accessed_bytes, miss_bytes, capacity_bytes,
        invalidation_bytes;
} Tally;
typedef struct {
    long long evictions, evicted_bytes, turn_bytes, occupancy_bytes, entries, evict_ns, violations, pinned_bytes,
        over_window, cache_read_bytes, compactions, window_bytes, summary_calls, summary_prompt_bytes,
        summary_cache_read_bytes, summary_output_bytes, summary_dropped_bytes;
} TurnEnd;
#define NKEY 2
#define NTALLY ((Py_ssize_t)(sizeof(Tally) / sizeof(long long)))
#define NEND ((Py_ssize_t)(sizeof(TurnEnd) / sizeof(long long)))
#define NFIELDS (NKEY + NTALLY + NEND)

/* ----- the core ------------------------------------------------------------------------------------------ */
typedef struct Core {
    /* read from the arguments (`core_args`) */
    Column slot, need, need_bytes, miss, place, place_bytes, ts_ms, count, event, entry_slot;
    Column ends, end_turns, end_ts, rows;
    PyObject *ids, *paths, *entries;   /* entry ids, slot paths, id -> entry */
    PyObject *violations;              /* sim.engine.core.Violations: report(turn, what, answer) */
    PyObject *failed;                  /* sim.engine.core.failed_call(exc[, name]) */
    long long cache_ttl_ms;
    PyObject *model_name;
    /* the replay */
    Py_ssize_t nsteps, nends, nentries, nslots;
    Py_ssize_t steps_done;             /* steps applied so far */
    Tally tally;                       /* the open turn's */
    PyObject *evicted;                 /* every id removed at a turn end, in order */
    long long *evicted_turn;           /* and the turn it left at */
    Py_ssize_t evicted_cap;
} Core;

typedef struct Model Model;
struct Model {
    /* whether `entry` is in the window now */
    int (*holds)(Model *m, long long entry);
    /* apply step `i`'s placement (its need is tallied): 0, or -1 with an exception */
    int (*place)(Model *m, Core *c, Py_ssize_t i);
    /* close turn end `k`: fill `end`, record removed ids with `core_removed`: 0, or -1 */
    int (*end_turn)(Model *m, Core *c, Py_ssize_t k, TurnEnd *end);
    /* what the model adds to the replay's result (new reference), or NULL */
    PyObject *(*result)(Model *m, Core *c);
    void (*free)(Model *m);
};

int core_removed(Core *c, PyObject *id, long long turn);
int core_report(Core *c, long long turn, PyObject *what, PyObject *answer);
PyObject *core_failure(Core *c, const char *name);

/* The prompt cache across calls (sim/engine/core.py PromptCache): a model numbers the places of its prompt. */
typedef struct {
    long long ttl_ms, last_places, last_ts, changed_from;
    int have_last;
} PromptCache;

void cache_init(PromptCache *p, long long ttl_ms);
void cache_change(PromptCache *p, long long place);
/* This call (at `ts`, its prompt `places` long): 0 when it reads nothing from the cache, else 1 with the
   place up to which the previous prompt is read in *upto (and *whole: whether that is all of it). */
int cache_read(PromptCache *p, long long ts, long long places, long long *upto, int *whole);
/* What a call made aside at `ts` may read (sim/engine/core.py PromptCache.read_aside): 0 when nothing, else 1 with
   the place up to which the previous prompt is unchanged in *upto; the cache is left as it was. */
int cache_peek(PromptCache *p, long long ts, long long *upto);

/* ----- the models ---------------------------------------------------------------------------------------- */
extern const ArgSpec managed_args[];
extern const Py_ssize_t n_managed_args;
int managed_open(Core *c, PyObject *args, Args *held, Model **out);
int managed_ready(void);
PyObject *managed_bind(PyObject *const *args, Py_ssize_t nargs);
int managed_types_ready(PyObject *module);

extern const ArgSpec transcript_args[];
extern const Py_ssize_t n_transcript_args;
int transcript_open(Core *c, PyObject *args, Args *held, Model **out);
PyObject *transcript_bind(PyObject *const *args, Py_ssize_t nargs);

PyObject *engine_resolve(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
