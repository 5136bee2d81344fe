/* The recall index's hot loop in C: gather the postings of many messages.
 *
 * `gather(texts, term_bytes)` does what `eva.core.recall_index` does in
 * Python (`gather_python`), with the same result, at a fraction of the cost.
 * Pure: no IO, no state kept between calls. ASCII texts are split into terms
 * here (maximal runs of ASCII letters and digits, folded to lower case, a
 * run over MAX_TERM_CHARS dropped: exactly what `term_bytes` does to them);
 * any other text is handed to `term_bytes`. The terms are then gathered with
 * the interpreter lock released, so other threads run meanwhile.
 *
 * Result, one tuple per bucket, in bucket order:
 *   (bucket number, {term: records}, indexed messages, summed length)
 * where records are one 5-byte record per message holding the term, in index
 * order: offset in the bucket (u16 LE), terms in the message (u16 LE,
 * capped), times the term occurs in it (u8, capped). Terms appear in the
 * dict in the order they first occur in the bucket. A message with no terms
 * is left out.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BUCKET_BITS 12
#define MAX_TERM_CHARS 40
#define MAX_LENGTH 0xFFFF
#define MAX_TF 0xFF
#define RECORD_SIZE 5

typedef struct {
    const char *data; /* an ASCII text, or NULL when `words` holds its terms */
    Py_ssize_t size;
    PyObject *words; /* a list of bytes from term_bytes (a new reference), or NULL */
    int64_t index;
} Message;

typedef struct {
    uint64_t hash;
    size_t key;       /* offset of the term in the key arena */
    uint32_t key_len;
    uint32_t count;   /* the term's records */
    uint32_t last;    /* its latest record */
    int64_t last_index; /* the message of that record */
    size_t out;       /* where its records go in the output, once laid out */
} Entry;

typedef struct {
    uint32_t entry; /* the term it is a record of */
    uint16_t offset;
    uint16_t length;
    uint32_t tf;
} Record;

typedef struct {
    int64_t number;
    size_t first_entry; /* the bucket's entries are first_entry .. end_entry - 1 */
    size_t end_entry;
    int64_t docs;
    int64_t length;
} Bucket;

/* Growable arrays; every `grow_*` returns 0 when memory runs out. */
typedef struct {
    void *items;
    size_t used;
    size_t capacity;
} Array;

static int
reserve(Array *array, size_t more, size_t item_size)
{
    if (array->used + more <= array->capacity) {
        return 1;
    }
    size_t capacity = array->capacity ? array->capacity : 64;
    while (capacity < array->used + more) {
        if (capacity > SIZE_MAX / 2 / item_size) {
            return 0;
        }
        capacity *= 2;
    }
    void *items = realloc(array->items, capacity * item_size);
    if (items == NULL) {
        return 0;
    }
    array->items = items;
    array->capacity = capacity;
    return 1;
}

typedef struct {
    Array entries; /* Entry */
    Array records; /* Record */
    Array keys;    /* char: every term's bytes, one after the other */
    Array buckets; /* Bucket */
    Array spans;   /* Span: the terms of the message being gathered */
    Array folded;  /* char: the folded ASCII terms of that message */
    Array out;     /* char: every bucket's records, term after term */
    uint32_t *slots; /* open addressing over the current bucket: entry + 1, or 0 */
    size_t slot_mask;
    size_t slots_used;
} Gathering;

typedef struct {
    const char *data;
    uint32_t size;
} Span;

static uint64_t
term_hash(const char *data, uint32_t size)
{
    uint64_t hash = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (uint32_t i = 0; i < size; i++) {
        hash ^= (unsigned char)data[i];
        hash *= 0x100000001b3ULL;
    }
    return hash ^ (hash >> 29);
}

static int
clear_slots(Gathering *g, size_t wanted)
{
    size_t size = 1024;
    while (size < wanted * 2) {
        size *= 2;
    }
    if (g->slots == NULL || g->slot_mask + 1 < size) {
        free(g->slots);
        g->slots = calloc(size, sizeof(uint32_t));
        if (g->slots == NULL) {
            return 0;
        }
        g->slot_mask = size - 1;
    }
    else {
        memset(g->slots, 0, (g->slot_mask + 1) * sizeof(uint32_t));
    }
    g->slots_used = 0;
    return 1;
}

static int
grow_slots(Gathering *g, size_t first_entry)
{
    size_t size = (g->slot_mask + 1) * 2;
    uint32_t *slots = calloc(size, sizeof(uint32_t));
    if (slots == NULL) {
        return 0;
    }
    Entry *entries = (Entry *)g->entries.items;
    for (size_t e = first_entry; e < g->entries.used; e++) {
        size_t slot = entries[e].hash & (size - 1);
        while (slots[slot]) {
            slot = (slot + 1) & (size - 1);
        }
        slots[slot] = (uint32_t)(e + 1);
    }
    free(g->slots);
    g->slots = slots;
    g->slot_mask = size - 1;
    return 1;
}

/* The term's entry in the current bucket, made if new; NULL when memory runs out. */
static Entry *
entry_of(Gathering *g, Bucket *bucket, const char *data, uint32_t size)
{
    uint64_t hash = term_hash(data, size);
    size_t slot = hash & g->slot_mask;
    const char *keys = (const char *)g->keys.items;
    while (g->slots[slot]) {
        Entry *entry = (Entry *)g->entries.items + (g->slots[slot] - 1);
        if (entry->hash == hash && entry->key_len == size
            && memcmp(keys + entry->key, data, size) == 0) {
            return entry;
        }
        slot = (slot + 1) & g->slot_mask;
    }
    if (g->entries.used >= UINT32_MAX - 1 || !reserve(&g->entries, 1, sizeof(Entry))
        || !reserve(&g->keys, size, 1)) {
        return NULL;
    }
    memcpy((char *)g->keys.items + g->keys.used, data, size);
    Entry *entry = (Entry *)g->entries.items + g->entries.used;
    entry->hash = hash;
    entry->key = g->keys.used;
    entry->key_len = size;
    entry->count = 0;
    entry->last = UINT32_MAX;
    entry->last_index = -1;
    g->keys.used += size;
    g->slots[slot] = (uint32_t)(++g->entries.used);
    bucket->end_entry = g->entries.used;
    if (++g->slots_used * 2 > g->slot_mask + 1) {
        if (!grow_slots(g, bucket->first_entry)) {
            return NULL;
        }
    }
    return (Entry *)g->entries.items + (g->entries.used - 1);
}

/* Each byte folded if it belongs in a term (an ASCII letter or digit), else 0. */
static unsigned char fold[256];

static void
make_fold(void)
{
    for (int c = '0'; c <= '9'; c++) {
        fold[c] = (unsigned char)c;
    }
    for (int c = 'a'; c <= 'z'; c++) {
        fold[c] = (unsigned char)c;
        fold[c - 32] = (unsigned char)c;
    }
}

/* Split an ASCII text into its folded terms, in g->spans. */
static int
split_ascii(Gathering *g, const char *text, Py_ssize_t size)
{
    g->spans.used = 0;
    g->folded.used = 0;
    if (!reserve(&g->folded, (size_t)size, 1)) {
        return 0;
    }
    char *folded = (char *)g->folded.items;
    Py_ssize_t at = 0;
    while (at < size) {
        while (at < size && !fold[(unsigned char)text[at]]) {
            at++;
        }
        /* Fold as it goes; a term over the limit is given back. */
        char *term = folded + g->folded.used;
        Py_ssize_t length = 0;
        unsigned char c;
        while (at < size && (c = fold[(unsigned char)text[at]]) != 0) {
            term[length++] = (char)c;
            at++;
        }
        if (length == 0 || length > MAX_TERM_CHARS) {
            continue;
        }
        g->folded.used += (size_t)length;
        if (!reserve(&g->spans, 1, sizeof(Span))) {
            return 0;
        }
        ((Span *)g->spans.items)[g->spans.used++] = (Span){term, (uint32_t)length};
    }
    return 1;
}

/* The terms term_bytes gave, in g->spans (the list is kept alive by the caller). */
static int
spans_of_words(Gathering *g, PyObject *words)
{
    Py_ssize_t count = PyList_GET_SIZE(words);
    g->spans.used = 0;
    if (!reserve(&g->spans, (size_t)count, sizeof(Span))) {
        return 0;
    }
    Span *spans = (Span *)g->spans.items;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        spans[i] = (Span){PyBytes_AS_STRING(word), (uint32_t)PyBytes_GET_SIZE(word)};
    }
    g->spans.used = (size_t)count;
    return 1;
}

/* Write every record into g->out, each term's records together and in index order:
   one pass over the records as they were made, with no chain to follow. */
static int
lay_out(Gathering *g)
{
    Entry *entries = (Entry *)g->entries.items;
    size_t total = 0;
    for (size_t e = 0; e < g->entries.used; e++) {
        entries[e].out = total;
        total += (size_t)entries[e].count * RECORD_SIZE;
    }
    if (!reserve(&g->out, total ? total : 1, 1)) {
        return 0;
    }
    unsigned char *out = (unsigned char *)g->out.items;
    const Record *records = (const Record *)g->records.items;
    for (size_t r = 0; r < g->records.used; r++) {
        const Record *record = &records[r];
        uint32_t tf = record->tf < MAX_TF ? record->tf : MAX_TF;
        unsigned char *at = out + entries[record->entry].out;
        at[0] = (unsigned char)(record->offset & 0xFF);
        at[1] = (unsigned char)(record->offset >> 8);
        at[2] = (unsigned char)(record->length & 0xFF);
        at[3] = (unsigned char)(record->length >> 8);
        at[4] = (unsigned char)tf;
        entries[record->entry].out += RECORD_SIZE;
    }
    g->out.used = total;
    return 1;
}

/* Gather every message; runs without the interpreter lock. 0: out of memory. */
static int
gather_all(Gathering *g, const Message *messages, Py_ssize_t count)
{
    Bucket *bucket = NULL;
    for (Py_ssize_t m = 0; m < count; m++) {
        const Message *message = &messages[m];
        int ok = message->words == NULL ? split_ascii(g, message->data, message->size)
                                        : spans_of_words(g, message->words);
        if (!ok) {
            return 0;
        }
        size_t terms = g->spans.used;
        if (terms == 0) {
            continue;
        }
        int64_t number = message->index >> BUCKET_BITS;
        if (bucket == NULL || bucket->number != number) {
            if (!reserve(&g->buckets, 1, sizeof(Bucket)) || !clear_slots(g, 0)) {
                return 0;
            }
            bucket = (Bucket *)g->buckets.items + g->buckets.used++;
            *bucket = (Bucket){number, g->entries.used, g->entries.used, 0, 0};
        }
        uint16_t length = (uint16_t)(terms < MAX_LENGTH ? terms : MAX_LENGTH);
        uint16_t offset = (uint16_t)(message->index & ((1 << BUCKET_BITS) - 1));
        bucket->docs += 1;
        bucket->length += length;
        if (g->records.used + terms >= UINT32_MAX
            || !reserve(&g->records, terms, sizeof(Record))) {
            return 0;
        }
        const Span *spans = (const Span *)g->spans.items;
        for (size_t t = 0; t < terms; t++) {
            Entry *entry = entry_of(g, bucket, spans[t].data, spans[t].size);
            if (entry == NULL) {
                return 0;
            }
            Record *records = (Record *)g->records.items;
            if (entry->last_index == message->index) {
                records[entry->last].tf += 1;
                continue;
            }
            uint32_t at = (uint32_t)g->records.used++;
            uint32_t number_of_entry = (uint32_t)(entry - (Entry *)g->entries.items);
            records[at] = (Record){number_of_entry, offset, length, 1};
            entry->last = at;
            entry->last_index = message->index;
            entry->count += 1;
        }
    }
    return lay_out(g);
}

static PyObject *
bucket_result(const Gathering *g, const Bucket *bucket)
{
    PyObject *postings = PyDict_New();
    if (postings == NULL) {
        return NULL;
    }
    const Entry *entries = (const Entry *)g->entries.items;
    const char *keys = (const char *)g->keys.items;
    const char *out = (const char *)g->out.items;
    for (size_t e = bucket->first_entry; e < bucket->end_entry; e++) {
        const Entry *entry = &entries[e];
        size_t size = (size_t)entry->count * RECORD_SIZE;
        /* lay_out left `out` at the end of the term's records */
        PyObject *key = PyBytes_FromStringAndSize(keys + entry->key, entry->key_len);
        PyObject *value = PyBytes_FromStringAndSize(out + entry->out - size, (Py_ssize_t)size);
        if (key == NULL || value == NULL) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_DECREF(postings);
            return NULL;
        }
        int failed = PyDict_SetItem(postings, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (failed) {
            Py_DECREF(postings);
            return NULL;
        }
    }
    return Py_BuildValue("(LNLL)", (long long)bucket->number, postings,
                         (long long)bucket->docs, (long long)bucket->length);
}

/* Check one (index, text) pair and note where its terms are to come from. */
static int
take_message(PyObject *pair, PyObject *term_bytes, int64_t previous, Message *message)
{
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "gather: each text is an (index, text) pair");
        return 0;
    }
    PyObject *index = PyTuple_GET_ITEM(pair, 0);
    PyObject *text = PyTuple_GET_ITEM(pair, 1);
    if (!PyLong_Check(index) || !PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "gather: each text is an (int, str) pair");
        return 0;
    }
    long long value = PyLong_AsLongLong(index);
    if (value == -1 && PyErr_Occurred()) {
        return 0;
    }
    if (value < 0 || value <= previous) {
        PyErr_SetString(PyExc_ValueError,
                        "gather: indexes must be non-negative and increasing");
        return 0;
    }
    message->index = value;
    message->words = NULL;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) {
        return 0;
    }
#endif
    if (PyUnicode_IS_ASCII(text)) {
        message->data = (const char *)PyUnicode_DATA(text);
        message->size = PyUnicode_GET_LENGTH(text);
        return 1;
    }
    PyObject *words = PyObject_CallOneArg(term_bytes, text);
    if (words == NULL) {
        return 0;
    }
    if (!PyList_CheckExact(words)) {
        Py_DECREF(words);
        PyErr_SetString(PyExc_TypeError, "gather: term_bytes must return a list of bytes");
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(words); i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        if (!PyBytes_CheckExact(word) || PyBytes_GET_SIZE(word) > UINT32_MAX) {
            Py_DECREF(words);
            PyErr_SetString(PyExc_TypeError, "gather: term_bytes must return a list of bytes");
            return 0;
        }
    }
    message->words = words;
    message->data = NULL;
    message->size = 0;
    return 1;
}

static void
release(Gathering *g, Message *messages, Py_ssize_t taken)
{
    for (Py_ssize_t m = 0; m < taken; m++) {
        Py_XDECREF(messages[m].words);
    }
    PyMem_Free(messages);
    free(g->entries.items);
    free(g->records.items);
    free(g->keys.items);
    free(g->buckets.items);
    free(g->spans.items);
    free(g->folded.items);
    free(g->out.items);
    free(g->slots);
}

static PyObject *
gather(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "gather(texts, term_bytes) takes two arguments");
        return NULL;
    }
    /* A tuple of its own: no other thread can drop a text while the lock is released. */
    PyObject *texts = PySequence_Tuple(args[0]);
    if (texts == NULL) {
        return NULL;
    }
    PyObject *term_bytes = args[1];
    Py_ssize_t count = PyTuple_GET_SIZE(texts);
    Message *messages = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Message));
    Gathering g;
    memset(&g, 0, sizeof(g));
    PyObject *result = NULL;
    Py_ssize_t taken = 0;
    if (messages == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t previous = -1;
    for (; taken < count; taken++) {
        if (!take_message(PyTuple_GET_ITEM(texts, taken), term_bytes, previous,
                          &messages[taken])) {
            goto done;
        }
        previous = messages[taken].index;
    }
    /* The texts and word lists stay referenced by `texts` and `messages` while the
       lock is released, and neither strings nor bytes ever change. */
    int gathered;
    Py_BEGIN_ALLOW_THREADS
    gathered = gather_all(&g, messages, count);
    Py_END_ALLOW_THREADS
    if (!gathered) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyList_New((Py_ssize_t)g.buckets.used);
    if (result == NULL) {
        goto done;
    }
    for (size_t b = 0; b < g.buckets.used; b++) {
        PyObject *item = bucket_result(&g, (const Bucket *)g.buckets.items + b);
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)b, item);
    }
done:
    release(&g, messages, taken);
    Py_DECREF(texts);
    return result;
}

static PyMethodDef methods[] = {
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL,
     "gather(texts, term_bytes) -> [(bucket, {term: records}, docs, length), ...]\n\n"
     "The postings of (index, text) pairs given in increasing index order."},
    {NULL, NULL, 0, NULL},
};

static int
add_constants(PyObject *made)
{
    /* Python checks these against its own, so the two layouts cannot drift apart. */
    if (PyModule_AddIntConstant(made, "BUCKET_BITS", BUCKET_BITS) < 0
        || PyModule_AddIntConstant(made, "MAX_TERM_CHARS", MAX_TERM_CHARS) < 0
        || PyModule_AddIntConstant(made, "MAX_LENGTH", MAX_LENGTH) < 0
        || PyModule_AddIntConstant(made, "MAX_TF", MAX_TF) < 0
        || PyModule_AddIntConstant(made, "RECORD_SIZE", RECORD_SIZE) < 0) {
        return -1;
    }
    return 0;
}

static struct PyModuleDef_Slot slots[] = {
    {Py_mod_exec, add_constants},
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "eva.core._postings",
    .m_doc = "The recall index's gathering of postings, in C.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__postings(void)
{
    make_fold();
    return PyModuleDef_Init(&module);
}
