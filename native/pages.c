/*
 * Recycled pages for numpy's large arrays (a NEP 49 data-memory handler).
 *
 * Why: the analysis of a 40 M-event trace allocates and frees tens of GB of
 * column-sized temporaries.  Each comes from a fresh mmap, so the kernel faults
 * and zeroes every page again: clear_page took 29 % of the whole run.  Inside
 * a scope (pages_enter .. pages_leave) a freed large block is kept and handed
 * to the next request it fits, already faulted in.
 *
 * The peak stays the peak of what is in use: numpy's blocks, large and small,
 * are counted as they are made and freed, and the kept blocks are trimmed
 * (oldest first) so that in use + kept never passes the largest in-use total
 * seen by more than 8 MB.  A kept block is thus memory the process held a moment
 * before, and gives way as soon as anything else needs the room.  Small blocks
 * (under 32 MB, which glibc recycles in its own heap) go to numpy's own handler.
 * A 4 MB line was tried: glibc keeps the freed 4-32 MB blocks of the passes that
 * work a block at a time whatever the peak (66 MB more at 40 M events), but here
 * such blocks were cut and zeroed again: 18 K more page faults and 0.1-0.2 s more
 * system time on a 2 M-event TPU analysis.
 * On leaving the last scope the kept blocks are unmapped.
 *
 * numpy's C API is reached through its capsule at run time (no numpy headers at
 * build time); the handler struct and the API slots used are numpy's stable ABI.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pages.h"

#if !defined(_WIN32)
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* numpy's PyDataMem_Handler, version 1 (numpy/ndarraytypes.h) */
typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} DataAllocator;

typedef struct {
    char name[127];
    uint8_t version;
    DataAllocator allocator;
} DataHandler;

enum { API_SET_HANDLER = 304, API_GET_HANDLER = 305 };

#define BIG ((size_t)32 << 20)         /* below: numpy's handler (glibc recycles those itself) */
#define HEAD 64                         /* big blocks: data at base + 64 (cache-line aligned) */
#define SLOTS 64
/* what may be held past the peak in use: a kept block does not give way to the
   scalars and shapes that any step makes */
#define SLACK ((size_t)8 << 20)
#define MAGIC_SMALL ((size_t)0x534d414c4c504753ull)   /* numpy's handler made it */
#define MAGIC_PLAIN ((size_t)0x504c41494e504753ull)   /* malloc made it: the extension's */
#define MAGIC_BIG ((size_t)0x42494750414745ull)

typedef struct { char *base; size_t len; uint64_t age; } Block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Block cache[SLOTS];
static int n_cached;                    /* read without the lock by the small path */
static int scopes;
static uint64_t age;
static size_t page;
/* bytes: big blocks in arrays, big blocks kept, small blocks in arrays (atomic);
   peak_use is the largest live + small seen, and the cache is trimmed so that
   live + cached + small never passes it by more than SLACK */
static size_t live, cached, small, peak_use, peak_held;
/* what live + cached + small may reach (past SLACK): the largest use since the kept
   blocks last let go (pages_let_go), or the scope's room.  The process' other memory
   (Python objects) can grow into what the kept blocks held: letting go before such
   work keeps the blocks from sitting on top of it */
static size_t bound;
/* how far small may grow before kept blocks must give way: peak_use + SLACK - live - cached,
   set under the lock, read by the small path without it */
static size_t small_room = SIZE_MAX;
/* numpy's own handler: small blocks go to it, which keeps its cache of tiny ones */
static DataAllocator dflt = {NULL, NULL, NULL, NULL, NULL};
static uint64_t hits, misses;
/* for tests (pages_tune): a lower line for large blocks, and garbage in every block
   handed out by malloc, so that an answer read from memory nobody wrote shows */
static size_t big_line = BIG;
/* the extension's columns from this size on are mapped (grown by mremap, as before the
   pages), but kept only from big_line on like numpy's */
#define MAP_LINE ((size_t)64 << 10)
static int poison;
/* whether large blocks ask for transparent huge pages, as numpy asks for its own (see
   pages_huge: where the host takes free memory back, a fresh huge page costs more) */
static int huge = 1;

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t small_now(void) { return __atomic_load_n(&small, __ATOMIC_RELAXED); }

/* the header's two words sit just before the data, for either kind */
static void put_head(char *data, size_t magic, size_t len) {
    ((size_t *)data)[-2] = magic;
    ((size_t *)data)[-1] = len;
}

static void cache_drop(int i, Block *out) {
    *out = cache[i];
    cache[i] = cache[n_cached - 1];
    __atomic_store_n(&n_cached, n_cached - 1, __ATOMIC_RELAXED);
    cached -= out->len;
}

static void cache_push(Block b) {
    cache[n_cached] = b;
    __atomic_store_n(&n_cached, n_cached + 1, __ATOMIC_RELAXED);
    cached += b.len;
}

static int cache_drop_oldest(Block *gone) {
    int oldest = 0;
    for (int i = 1; i < n_cached; i++)
        if (cache[i].age < cache[oldest].age) oldest = i;
    cache_drop(oldest, gone);
    return 1;
}

/* under the lock: how far small blocks may grow before kept blocks must give way */
static void small_room_set(void) {
    size_t held = live + cached;
    __atomic_store_n(&small_room, bound + SLACK > held ? bound + SLACK - held : 0,
                     __ATOMIC_RELAXED);
}

/* under the lock, after live or small changed: the peaks moved on, and cached
   blocks (oldest first) collected in `gone` (to unmap after unlocking) until what
   is held fits under the largest use; returns how many */
static int cache_fit(Block *gone) {
    int n = 0;
    size_t s = small_now();
    if (live + s > peak_use) peak_use = live + s;
    if (live + s > bound) bound = live + s;
    while (n_cached && live + cached + s > bound + SLACK) n += cache_drop_oldest(&gone[n]);
    if (live + cached + s > peak_held) peak_held = live + cached + s;
    small_room_set();
    return n;
}

/* under the lock: the smallest cached block of at least `len` bytes (page-rounded),
   cut to `len`: a rest that a large request could use stays cached, a smaller one
   is put in *tail to unmap after unlocking; returns its data or NULL */
static char *cache_take(size_t len, Block *tail) {
    int best = -1;
    for (int i = 0; i < n_cached; i++)
        if (cache[i].len >= len && (best < 0 || cache[i].len < cache[best].len)) best = i;
    if (best < 0) return NULL;
    Block b;
    cache_drop(best, &b);
    if (b.len > len) {
        Block rest = {b.base + len, b.len - len, b.age};
        if (rest.len >= big_line + HEAD) cache_push(rest);
        else *tail = rest;
        b.len = len;
    }
    live += b.len;
    put_head(b.base + HEAD, MAGIC_BIG, b.len);
    return b.base + HEAD;
}

static void unmap_all(Block *gone, int n) {
    for (int i = 0; i < n; i++) munmap(gone[i].base, gone[i].len);
}

static void *big_alloc(size_t n, int zero) {
    if (n > SIZE_MAX - HEAD - page) return NULL;
    size_t len = round_up(n + HEAD, page);
    Block gone[SLOTS + 1];
    gone[SLOTS].base = NULL;            /* the cut-off tail of a cached block */
    pthread_mutex_lock(&lock);
    char *data = scopes && n >= big_line ? cache_take(len, &gone[SLOTS]) : NULL;
    if (data) hits++;
    else {
        misses++;
        live += len;                    /* counted before mapping: a racing request sees it */
    }
    int n_gone = cache_fit(gone);
    pthread_mutex_unlock(&lock);
    unmap_all(gone, n_gone);
    if (gone[SLOTS].base) munmap(gone[SLOTS].base, gone[SLOTS].len);
    if (data) {
        if (poison && !zero) memset(data, 0xa5, n);
        if (zero) {
            /* as from a fresh mapping: pages nobody writes stay unbacked (a sparse
               np.zeros would otherwise be touched whole) */
            memset(data, 0, page - HEAD);
            madvise(data - HEAD + page, len - page, MADV_DONTNEED);
        }
        return data;
    }
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        pthread_mutex_lock(&lock);
        live -= len;
        pthread_mutex_unlock(&lock);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (huge) madvise(base, len, MADV_HUGEPAGE);
#endif
    put_head(base + HEAD, MAGIC_BIG, len);
    if (poison && !zero) memset(base + HEAD, 0xa5, n);
    return base + HEAD;
}

static void big_free(char *data) {
    char *base = data - HEAD;
    size_t len = ((size_t *)data)[-1];
    Block gone[SLOTS + 1];
    pthread_mutex_lock(&lock);
    int n_gone = cache_fit(gone);       /* the peak with this block still in use */
    live -= len;
    if (scopes && len >= big_line + HEAD) {
        if (n_cached == SLOTS) n_gone += cache_drop_oldest(&gone[n_gone]);
        cache_push((Block){base, len, ++age});
    } else {
        gone[n_gone++] = (Block){base, len, 0};
    }
    small_room_set();
    pthread_mutex_unlock(&lock);
    unmap_all(gone, n_gone);
}

/* small blocks are counted so that kept big blocks give way when they grow */
static void small_grew(size_t n) {
    size_t s = __atomic_add_fetch(&small, n, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&n_cached, __ATOMIC_RELAXED) ||
        s <= __atomic_load_n(&small_room, __ATOMIC_RELAXED))
        return;
    Block gone[SLOTS];
    pthread_mutex_lock(&lock);
    int n_gone = cache_fit(gone);
    pthread_mutex_unlock(&lock);
    unmap_all(gone, n_gone);
}

/* Small blocks of numpy's arrays go to numpy's own handler (its cache of tiny blocks
   wants the GIL, which numpy holds when it asks); the extension's own small blocks,
   made and grown by scanners that let the GIL go, to plain malloc. */
static void *small_alloc(size_t n, int zero, int plain) {
    char *p = plain || !dflt.malloc ? (zero ? calloc(1, n + 16) : malloc(n + 16))
              : zero ? dflt.calloc(dflt.ctx, 1, n + 16) : dflt.malloc(dflt.ctx, n + 16);
    if (!p) return NULL;
    put_head(p + 16, plain || !dflt.malloc ? MAGIC_PLAIN : MAGIC_SMALL, n);
    small_grew(n);
    if (poison && !zero) memset(p + 16, 0xa5, n);
    return p + 16;
}

static void small_free(char *data) {
    size_t n = ((size_t *)data)[-1];
    __atomic_sub_fetch(&small, n, __ATOMIC_RELAXED);
    if (((size_t *)data)[-2] == MAGIC_SMALL) dflt.free(dflt.ctx, data - 16, n + 16);
    else free(data - 16);
}

/* the allocator's ctx: NULL when numpy asks, &extension_ctx when the extension does */
static int extension_ctx;

/* from this size a block is a big one: numpy's from big_line, the extension's (ctx
   set) from MAP_LINE */
static size_t line_of(void *ctx) { return ctx ? MAP_LINE : big_line; }

static void *h_malloc(void *ctx, size_t n) {
    return n >= line_of(ctx) ? big_alloc(n, 0) : small_alloc(n, 0, ctx != NULL);
}

static void *h_calloc(void *ctx, size_t nelem, size_t elsize) {
    size_t n;
    if (__builtin_mul_overflow(nelem, elsize, &n)) return NULL;
    return n >= line_of(ctx) ? big_alloc(n, 1) : small_alloc(n, 1, ctx != NULL);
}

static void h_free(void *ctx, void *ptr, size_t size) {
    (void)ctx, (void)size;
    if (!ptr) return;
    char *data = ptr;
    if (((size_t *)data)[-2] == MAGIC_BIG) big_free(data);
    else small_free(data);
}

/* a big block cut to what n bytes need: the pages past them are unmapped */
static void big_shrink(char *data, size_t n) {
    char *base = data - HEAD;
    size_t len = ((size_t *)data)[-1], keep = round_up(n + HEAD, page);
    if (keep >= len) return;
    munmap(base + keep, len - keep);
    ((size_t *)data)[-1] = keep;
    pthread_mutex_lock(&lock);
    live -= len - keep;
    pthread_mutex_unlock(&lock);
}

/* a big block grown to n bytes where it lies or moved by mremap (no copy); NULL
   when the kernel cannot */
static char *big_grow(char *data, size_t n) {
    char *base = data - HEAD;
    size_t len = ((size_t *)data)[-1], to = round_up(n + HEAD, page);
    Block gone[SLOTS];
    pthread_mutex_lock(&lock);
    live += to - len;
    int n_gone = cache_fit(gone);
    pthread_mutex_unlock(&lock);
    unmap_all(gone, n_gone);
    char *q = mremap(base, len, to, MREMAP_MAYMOVE);
    if (q == MAP_FAILED) {
        pthread_mutex_lock(&lock);
        live -= to - len;
        pthread_mutex_unlock(&lock);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (huge) madvise(q, to, MADV_HUGEPAGE);
#endif
    put_head(q + HEAD, MAGIC_BIG, to);
    return q + HEAD;
}

static void *h_realloc(void *ctx, void *ptr, size_t n) {
    if (!ptr) return h_malloc(ctx, n);
    char *data = ptr;
    size_t magic = ((size_t *)data)[-2], had = ((size_t *)data)[-1];
    if (magic != MAGIC_BIG && n < line_of(ctx)) {
        char *p = magic == MAGIC_SMALL ? dflt.realloc(dflt.ctx, data - 16, n + 16)
                                       : realloc(data - 16, n + 16);
        if (!p) return NULL;
        put_head(p + 16, magic, n);
        if (n > had) small_grew(n - had);
        else __atomic_sub_fetch(&small, had - n, __ATOMIC_RELAXED);
        return p + 16;
    }
    size_t room = magic == MAGIC_BIG ? had - HEAD : had;
    if (magic == MAGIC_BIG && n >= line_of(ctx)) {
        if (n <= room) {
            big_shrink(data, n);
            return data;
        }
        char *q = big_grow(data, n);
        if (q) return q;
    }
    char *to = h_malloc(ctx, n);
    if (!to) return NULL;
    memcpy(to, data, n < room ? n : room);
    h_free(ctx, data, 0);
    return to;
}

/* a column made at its final size: from malloc's heap below the big line, like numpy's
   arrays (a fresh mapping per column faulted and zeroed its pages again each time: half
   the system time of a TPU trace's analysis); only columns that grow (pages_resize)
   are mapped from MAP_LINE on, to move by mremap */
void *pages_take(size_t n) {
    if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
    if (n >= big_line) return big_alloc(n, 0);
    return small_alloc(n ? n : 1, 0, 1);
}

void *pages_take_zeroed(size_t n) {
    if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
    if (n >= big_line) return big_alloc(n, 1);
    return small_alloc(n ? n : 1, 1, 1);
}

void *pages_resize(void *p, size_t n) {
    if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
    return h_realloc(&extension_ctx, p, n ? n : 1);
}

void pages_give(void *p) { h_free(NULL, p, 0); }

void pages_cut(void *p, size_t n) {
    char *data = p;
    if (((size_t *)data)[-2] == MAGIC_BIG) big_shrink(data, n);
}

static DataHandler handler = {
    "tb_perfdiag_recycled_pages", 1,
    {NULL, h_malloc, h_calloc, h_realloc, h_free},
};

/* a child forked while another thread held the lock would wait for it forever */
static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_parent(void) { pthread_mutex_unlock(&lock); }
static void fork_child(void) { pthread_mutex_unlock(&lock); }

static PyObject *capsule;        /* our handler, as numpy wants it */
static void **numpy_api;

/* pages_install(array_api_capsule) -> bool: take numpy's API table; False when the
   current handler is not numpy's default (someone else's: leave it alone) */
PyObject *pages_install(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *api_capsule;
    if (!PyArg_ParseTuple(args, "O", &api_capsule)) return NULL;
    void **api = PyCapsule_GetPointer(api_capsule, NULL);
    if (!api) return NULL;
    PyObject *(*get)(void) = (PyObject *(*)(void))api[API_GET_HANDLER];
    PyObject *current = get();
    if (!current) return NULL;
    DataHandler *h = PyCapsule_IsValid(current, "mem_handler")
        ? PyCapsule_GetPointer(current, "mem_handler") : NULL;
    int is_default = h && h->version >= 1 && strcmp(h->name, "default_allocator") == 0;
    if (is_default && !dflt.malloc) {
        Py_INCREF(current);             /* its functions are used for good */
        dflt = h->allocator;
    }
    Py_DECREF(current);
    if (!is_default) Py_RETURN_FALSE;
    if (!capsule) {
        capsule = PyCapsule_New(&handler, "mem_handler", NULL);
        if (!capsule) return NULL;
    }
    page = (size_t)sysconf(_SC_PAGESIZE);
    if (!numpy_api) pthread_atfork(fork_prepare, fork_parent, fork_child);
    numpy_api = api;
    Py_RETURN_TRUE;
}

/* pages_enter(room=0) -> the handler it replaced (for pages_leave).  `room`: bytes
   the process already had in use for this work (the read of the trace an analysis
   reads): kept blocks may fill up to it from the start, as that raises no high-water
   mark, where the peak of the scope alone would let few be kept early on */
PyObject *pages_enter(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t room = 0;
    if (!PyArg_ParseTuple(args, "|n", &room)) return NULL;
    if (!numpy_api) {
        PyErr_SetString(PyExc_RuntimeError, "pages_install first");
        return NULL;
    }
    PyObject *(*set)(PyObject *) = (PyObject *(*)(PyObject *))numpy_api[API_SET_HANDLER];
    PyObject *old = set(capsule);
    if (!old) return NULL;
    pthread_mutex_lock(&lock);
    scopes++;
    if (room > 0 && (size_t)room > peak_use) peak_use = (size_t)room;
    if (room > 0 && (size_t)room > bound) bound = (size_t)room;
    small_room_set();
    pthread_mutex_unlock(&lock);
    return old;
}

/* pages_leave(old) -> None: put `old` back; the last scope out unmaps the cache
   and restarts the peaks */
PyObject *pages_leave(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *old;
    if (!PyArg_ParseTuple(args, "O", &old)) return NULL;
    PyObject *(*set)(PyObject *) = (PyObject *(*)(PyObject *))numpy_api[API_SET_HANDLER];
    PyObject *ours = set(old);
    Py_XDECREF(ours);
    Block gone[SLOTS];
    int n_gone = 0, last = 0;
    pthread_mutex_lock(&lock);
    if (--scopes == 0) {
        last = 1;
        while (n_cached) n_gone += cache_drop_oldest(&gone[n_gone]);
        /* the next scopes keep blocks under their own peak, not this one's */
        peak_use = peak_held = bound = live + small_now();
        small_room_set();                   /* nothing is kept now */
    }
    pthread_mutex_unlock(&lock);
    unmap_all(gone, n_gone);
#ifdef __GLIBC__
    /* blocks under 32 MB went to malloc's heap (glibc raises its mmap threshold as such
       blocks are freed): what a read or an analysis freed there goes back to the
       system, not held by the server beside the traces it keeps (40 M XSpace: 180 MB) */
    if (last) malloc_trim(0);
#endif
    if (!ours) return NULL;
    Py_RETURN_NONE;
}

/* pages_heap_pad(n) -> the pad it replaced: malloc keeps n bytes free at the top of each
   heap (M_TOP_PAD) instead of giving them back, and its mmap line stays at the 32 MB its
   own dynamic line ends at.  Why: a streamed read makes and drops blocks under 32 MB by
   the thousand (the gunzip's 4 MB chunks, the walked stretches); cut from the heap's top
   as they were freed, each was faulted in and zeroed again when made anew.  The 20 M-
   event Kineto trace's read took 280 K page faults (3.6 s of system time, mostly
   clear_page) where a 64 MB pad leaves 120 K (2 s).  What the pad held goes back at the
   last scope's end (malloc_trim(0) in pages_leave) */
PyObject *pages_heap_pad(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n)) return NULL;
    if (n < 0 || n > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "pages_heap_pad: 0 <= n <= INT_MAX");
        return NULL;
    }
    static Py_ssize_t pad;
    Py_ssize_t old = pad;
#ifdef __GLIBC__
    static int line_set;
    if (!line_set) {
        /* set once, as glibc's own dynamic lines end (which any mallopt turns off): the
           mmap line at 32 MB, the trim line at twice it.  Left at its 128 KB default the
           trim line cut every freed block off the heap's top: an analysis after a read
           had 140 K page faults where it had 50 K */
        mallopt(M_MMAP_THRESHOLD, (int)BIG);
        mallopt(M_TRIM_THRESHOLD, (int)(2 * BIG));
        line_set = 1;
    }
    mallopt(M_TOP_PAD, (int)n);
#endif
    pad = n;
    return PyLong_FromSsize_t(old);
}

/* pages_let_go() -> bytes unmapped: the kept blocks go now, and from now on are kept
   only up to the use from here (not the earlier peak) */
PyObject *pages_let_go(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    Block gone[SLOTS];
    int n_gone = 0;
    size_t freed = 0;
    pthread_mutex_lock(&lock);
    while (n_cached) n_gone += cache_drop_oldest(&gone[n_gone]);
    bound = live + small_now();
    small_room_set();
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n_gone; i++) freed += gone[i].len;
    unmap_all(gone, n_gone);
    return PyLong_FromSize_t(freed);
}

/* pages_lower(n) -> bytes unmapped: what live + cached + small may reach (past SLACK)
   is at most n from now (the arrays' own use still raises it): kept blocks beyond it
   go.  For memory the process grew outside the arrays since the scope's room was set
   (malloc's heap, Python objects), which the room did not leave space for */
PyObject *pages_lower(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n", &n)) return NULL;
    Block gone[SLOTS];
    int n_gone = 0;
    size_t freed = 0;
    pthread_mutex_lock(&lock);
    if (n >= 0 && (size_t)n < bound) {
        bound = (size_t)n;
        n_gone = cache_fit(gone);
    }
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n_gone; i++) freed += gone[i].len;
    unmap_all(gone, n_gone);
    return PyLong_FromSize_t(freed);
}

/* pages_tune(big_line, poison) -> (the old pair): for tests only */
PyObject *pages_tune(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t line;
    int p;
    if (!PyArg_ParseTuple(args, "np", &line, &p)) return NULL;
    if (line < 4096) {
        PyErr_SetString(PyExc_ValueError, "big_line: at least 4 KB");
        return NULL;
    }
    pthread_mutex_lock(&lock);
    PyObject *old = Py_BuildValue("(nO)", (Py_ssize_t)big_line, poison ? Py_True : Py_False);
    big_line = (size_t)line;
    poison = p;
    pthread_mutex_unlock(&lock);
    return old;
}

/* pages_huge([flag]) -> the old flag: whether the large blocks mapped from now on ask
   for transparent huge pages (without flag: only asked) */
PyObject *pages_huge(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *flag = NULL;
    if (!PyArg_ParseTuple(args, "|O", &flag)) return NULL;
    int h = flag ? PyObject_IsTrue(flag) : -1;
    if (flag && h < 0) return NULL;
    pthread_mutex_lock(&lock);
    int old = huge;
    if (h >= 0) huge = h;
    pthread_mutex_unlock(&lock);
    return PyBool_FromLong(old);
}

/* pages_stats() -> dict of the byte counts and peaks */
PyObject *pages_stats(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    pthread_mutex_lock(&lock);
    size_t s = small_now();
    if (live + s > peak_use) peak_use = live + s;   /* the small path leaves it lazy */
    if (live + s > bound) bound = live + s;
    PyObject *d = Py_BuildValue(
        "{s:n,s:n,s:n,s:n,s:n,s:n,s:K,s:K,s:i}", "live", (Py_ssize_t)live,
        "cached", (Py_ssize_t)cached, "small", (Py_ssize_t)s,
        "peak_use", (Py_ssize_t)peak_use, "peak_held", (Py_ssize_t)peak_held,
        "slack", (Py_ssize_t)SLACK, "hits", (unsigned long long)hits,
        "misses", (unsigned long long)misses, "scopes", scopes);
    pthread_mutex_unlock(&lock);
    return d;
}

#else /* no mmap: the handler is not offered */

void *pages_take(size_t n) { return malloc(n ? n : 1); }
void *pages_take_zeroed(size_t n) { return calloc(1, n ? n : 1); }
void *pages_resize(void *p, size_t n) { return realloc(p, n ? n : 1); }
void pages_give(void *p) { free(p); }
void pages_cut(void *p, size_t n) { (void)p, (void)n; }

PyObject *pages_install(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    Py_RETURN_FALSE;
}
PyObject *pages_enter(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    PyErr_SetString(PyExc_RuntimeError, "not offered here");
    return NULL;
}
PyObject *pages_leave(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    Py_RETURN_NONE;
}
PyObject *pages_stats(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyDict_New();
}
PyObject *pages_let_go(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return PyLong_FromLong(0);
}
PyObject *pages_tune(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    Py_RETURN_NONE;
}
PyObject *pages_lower(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyLong_FromLong(0);
}
PyObject *pages_heap_pad(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyLong_FromLong(0);
}
PyObject *pages_huge(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    Py_RETURN_FALSE;
}
#endif
