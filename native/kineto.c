/*
 * native/kineto.c — scan_kineto and the Kineto stream: Chrome trace JSON into flat
 * columns, mirroring tb_perfdiag.trace.kineto.scan_python.  The tokenizer first, then
 * one event, the run over traceEvents, the result; then the stream fed chunk by chunk
 * and the stretches of traceEvents scanned ahead on their own threads and absorbed.
 * Validation is at least as strict as orjson's; nesting is walked iteratively.
 */
#include "common.h"
#include "methods.h"
#include "strings.h"


#define J_MAX_DEPTH 1000 /* orjson refuses more than 1024 levels */

enum { T_MISSING = 0, T_STR, T_NUM, T_TRUE, T_FALSE, T_NULL, T_OBJ, T_ARR };

typedef struct {
    const unsigned char *s, *e; /* the literal text */
    const unsigned char *int_s, *int_e, *frac_s, *frac_e;
    int neg, has_frac, has_exp;
    int is_float; /* Python type after orjson: float (else int) */
    int fits_i64; /* an int in int64 range (value in i) */
    int64_t i;
    uint64_t u; /* magnitude of an int outside int64 but inside uint64 */
    int64_t exp;
} Num;

typedef struct {
    int t;
    int esc;   /* T_STR: has escapes */
    int empty; /* T_OBJ/T_ARR: no members */
    const unsigned char *s, *e; /* T_STR: content between the quotes; T_OBJ/T_ARR: the text */
    Num num;
} Tok;

/* event keys */
enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_NKEYS, K_ARGS = K_NKEYS, K_OTHER };
/* args keys, in STAT_ARGS order (external_id has two spellings), then those of
   STRING_STAT_ARGS */
enum { A_CORR, A_EXT1, A_EXT2, A_DEVICE, A_STREAM, A_BYTES, A_FLOPS, A_GID, A_GNODE, A_DIMS,
       A_TYPES, A_CONC, A_KERNEL, A_GNAME, A_NKEYS, A_OTHER = A_NKEYS };
#define N_STATS 8
static const char *const STAT_NAMES[N_STATS] = {"correlation", "external_id", "device", "stream",
                                                "bytes", "flops", "graph_id", "graph_node_id"};
/* string stats (kineto.STRING_STAT_ARGS): an array value's JSON text, less its blanks
   outside strings, interned in a table of their own; the ops of one shape share it */
#define N_SSTATS 5
static const char *const SSTAT_NAMES[N_SSTATS] = {"input_dims", "input_type", "concrete_inputs",
                                                  "launch_kernel", "graph_annotation"};
static const int SSTAT_KEY[N_SSTATS] = {A_DIMS, A_TYPES, A_CONC, A_KERNEL, A_GNAME};
/* metadata keys copied from the document (chrome_meta.METADATA_KEYS, in its order): INFO
   and WARNING are the profiler's own log lines, where it says what it lost */
#define N_META 7
static const char *const META_KEYS[N_META] = {"deviceProperties", "distributedInfo",
                                              "baseTimeNanoseconds", "schemaVersion",
                                              "displayTimeUnit", "INFO", "WARNING"};

enum { V_NONE, V_TRUE, V_FALSE, V_INT, V_FLOAT, V_STR };

typedef struct {
    uint8_t type[2];
    int64_t i[2];
    double d[2];
    size_t soff[2], slen[2]; /* V_STR: payload inside the interned key */
} TrackDesc;

typedef struct {
    Vec idx, val, isf; /* event index, 8-byte value (int64 or double), is-float flag */
    int any_float;
} StatCol;

typedef struct {
    Fail f;
    const unsigned char *buf, *end;
    Table names, cats, tracks;
    Table stexts;  /* the string stats' texts */
    Arena arena;
    Vec name_ids, cat_ids, track_ids, dur_ps;
    Vec ts_exact;  /* i128 ps (text truncated to 6 decimals) */
    Vec ts_isexp;  /* uint8 */
    Vec tdesc;     /* TrackDesc per track */
    Vec ts_out;    /* int64 ps after base_us */
    Vec sane;      /* uint8 per event: its time can be placed */
    Vec pick;      /* double: scratch for the median */
    Vec scratch, keybuf;
    StatCol stats[N_STATS];
    StatCol sstats[N_SSTATS]; /* idx, val: the text's id in stexts (int64); isf unused */
    Vec ts_approx; /* double: ts as float64 (the reference's view) */
    Vec dur_d;     /* double: dur as float64 */
    int64_t n_kept, n_raw, bad;
    int64_t *done;     /* NULL, or where the bytes scanned so far are published */
    PyObject *mevents; /* list of the text (bytes) of each "M" event */
    PyObject *meta[N_META]; /* text (bytes) of each metadata value, or NULL */
    /* Streaming: the text comes in chunks.  The walk commits after each unit (the
     * document's opening, one top-level member, one traceEvents element, one
     * separator); a unit that runs past the end of the buffer is not committed and is
     * walked again, whole, once the next chunk is in. */
    int final;       /* the buffer ends the document */
    int committing;  /* a complete unit is being recorded: failures are real */
    int need_more;   /* the walk stopped at the buffer's end */
    int state;       /* JS_*: where the next unit starts */
    int seen_events;
    int dead;        /* a real failure happened: no more feeding */
    Py_ssize_t pos;  /* offset of the next unit in buf */
    Vec inbuf;       /* the uncommitted tail, then the chunk after it */
    size_t retry_at; /* after running dry: walk again once inbuf holds this much */
} JCtx;

#define JPOS(c, p) ((Py_ssize_t)((p) - (c)->buf))

/* the farthest any token looks ahead of the byte it fails at (a \\uXXXX\\uXXXX pair) */
#define J_LOOKAHEAD 16

static NORETURN void j_dry(JCtx *c) {
    c->need_more = 1;
    longjmp(c->f.jb, 1);
}

/* A failure this close to the end of a chunk that is not the last may be a token cut by
 * the chunk's end: the unit is walked again with more text. */
static NORETURN void jfail(JCtx *c, const unsigned char *p, const char *msg) {
    if (!c->final && !c->committing && p >= c->buf && p <= c->end && c->end - p <= J_LOOKAHEAD)
        j_dry(c);
    fail_at(&c->f, JPOS(c, p), msg);
}

static inline int j_blank(unsigned ch) {
    return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t';
}

#define BYTES8(b) (0x0101010101010101ULL * (uint64_t)(b))

/* high bit of each byte of x that is not zero, exactly (no carry between bytes) */
static inline uint64_t nonzero8(uint64_t x) {
    const uint64_t low7 = BYTES8(0x7f);
    return (((x & low7) + low7) | x) & BYTES8(0x80);
}

/* A run of blanks longer than JSON's usual indentation, eight bytes at a time: a
 * stream of nothing but blanks (a 6 GB bomb of spaces inside traceEvents) is walked
 * at memory speed, not a byte and four compares at a time. */
static const unsigned char *jws_run(const unsigned char *p, const unsigned char *end) {
    while (end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        if (x != BYTES8(' ') && (nonzero8(x ^ BYTES8(' ')) & nonzero8(x ^ BYTES8('\n')) &
                                 nonzero8(x ^ BYTES8('\r')) & nonzero8(x ^ BYTES8('\t'))))
            break; /* a byte of these eight is not blank */
        p += 8;
    }
    while (p < end && j_blank(*p)) p++;
    return p;
}

static inline const unsigned char *jws(const unsigned char *p, const unsigned char *end) {
    for (int i = 0; i < 16; i++, p++) /* most runs: a newline and some indentation */
        if (p >= end || !j_blank(*p)) return p;
    return jws_run(p, end);
}

/* next non-whitespace byte, which must exist */
static inline const unsigned char *jnext(JCtx *c, const unsigned char *p) {
    p = jws(p, c->end);
    if (UNLIKELY(p >= c->end)) jfail(c, p, "unexpected end of data");
    return p;
}

static inline int hexval(unsigned ch) {
    if (ch >= '0' && ch <= '9') return (int)(ch - '0');
    ch |= 0x20;
    if (ch >= 'a' && ch <= 'f') return (int)(ch - 'a' + 10);
    return -1;
}

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return 0;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 1;
}

/* p at a backslash: validated escape; returns the pointer after it and the code point */
static const unsigned char *j_escape(JCtx *c, const unsigned char *p, unsigned *cp) {
    const unsigned char *end = c->end;
    if (end - p < 2) jfail(c, p, "unterminated escape");
    switch (p[1]) {
    case '"': *cp = '"'; return p + 2;
    case '\\': *cp = '\\'; return p + 2;
    case '/': *cp = '/'; return p + 2;
    case 'b': *cp = '\b'; return p + 2;
    case 'f': *cp = '\f'; return p + 2;
    case 'n': *cp = '\n'; return p + 2;
    case 'r': *cp = '\r'; return p + 2;
    case 't': *cp = '\t'; return p + 2;
    case 'u': {
        unsigned u, lo;
        if (end - p < 6 || !hex4(p + 2, &u)) jfail(c, p, "invalid \\u escape");
        if (u >= 0xDC00 && u <= 0xDFFF) jfail(c, p, "lone low surrogate");
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (end - p < 12 || p[6] != '\\' || p[7] != 'u' || !hex4(p + 8, &lo) || lo < 0xDC00 ||
                lo > 0xDFFF)
                jfail(c, p, "lone high surrogate");
            *cp = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            return p + 12;
        }
        *cp = u;
        return p + 6;
    }
    default:
        jfail(c, p, "invalid escape");
    }
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* p just after the opening quote: pointer after the closing quote */
static const unsigned char *j_string_long(JCtx *c, const unsigned char *p, int *esc) {
    const unsigned char *end = c->end;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time: a quote, a backslash, or (signed) below 0x20, which takes
         * control characters and every non-ASCII byte */
        {
            const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'),
                          space = _mm_set1_epi8(0x20);
            while (end - p >= 16) {
                __m128i v = _mm_loadu_si128((const __m128i *)p);
                __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)),
                                           _mm_cmplt_epi8(v, space));
                int m = _mm_movemask_epi8(hit);
                if (m) {
                    p += __builtin_ctz((unsigned)m);
                    goto found;
                }
                p += 16;
            }
        }
#endif
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
            uint64_t m = (((q - ONES) & ~q) | ((b - ONES) & ~b) | ((w - ONES * 0x20) & ~w) | w) & HIGHS;
            if (m) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__)
                p += __builtin_ctzll(m) >> 3;
#endif
                break;
            }
            p += 8;
        }
#ifdef __SSE2__
    found:
#endif
        if (UNLIKELY(p >= end)) jfail(c, p, "unterminated string");
        unsigned ch = *p;
        if (ch == '"') return p + 1;
        if (ch == '\\') {
            unsigned cp;
            *esc = 1;
            p = j_escape(c, p, &cp);
        } else if (ch < 0x20) {
            jfail(c, p, "control character in string");
        } else if (ch < 0x80) {
            p++;
        } else {
            const unsigned char *q = utf8_seq(p, end);
            if (!q) jfail(c, p, "invalid UTF-8");
            p = q;
        }
    }
}

/* p just after an opening quote: the byte after the closing one.  Most strings in a
 * trace are short keys and values: the first 16 bytes are looked at here, inline; a
 * string with more, or with an escape or a byte to check, goes to j_string_long. */
static inline const unsigned char *j_string(JCtx *c, const unsigned char *p, int *esc) {
#ifdef __SSE2__
    if (c->end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        int q = _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')));
        int other = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\\')),
                                                   _mm_cmplt_epi8(v, _mm_set1_epi8(0x20))));
        /* a quote before any other byte to stop at */
        if (q && (other == 0 || (q & -q) < (other & -other)))
            return p + __builtin_ctz((unsigned)q) + 1;
        if (!q && !other) p += 16;      /* plain bytes: not looked at again */
    }
#endif
    return j_string_long(c, p, esc);
}

/* decode validated string content s..e (escapes) into out (capacity >= e - s) */
static size_t j_decode(JCtx *c, const unsigned char *s, const unsigned char *e, unsigned char *out) {
    unsigned char *o = out;
    while (s < e) {
        if (*s != '\\') {
            *o++ = *s++;
            continue;
        }
        unsigned cp;
        s = j_escape(c, s, &cp);
        if (cp < 0x80) {
            *o++ = (unsigned char)cp;
        } else if (cp < 0x800) {
            *o++ = (unsigned char)(0xC0 | (cp >> 6));
            *o++ = (unsigned char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            *o++ = (unsigned char)(0xE0 | (cp >> 12));
            *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (unsigned char)(0x80 | (cp & 0x3F));
        } else {
            *o++ = (unsigned char)(0xF0 | (cp >> 18));
            *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
            *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            *o++ = (unsigned char)(0x80 | (cp & 0x3F));
        }
    }
    return (size_t)(o - out);
}

/* the bytes of a string token (decoded into c->scratch when it has escapes) */
static const unsigned char *tok_bytes(JCtx *c, const Tok *t, size_t *n) {
    if (!t->esc) {
        *n = (size_t)(t->e - t->s);
        return t->s;
    }
    size_t raw = (size_t)(t->e - t->s);
    c->scratch.len = 0;
    if (raw > c->scratch.cap) vec_grow(&c->f, &c->scratch, raw);
    *n = j_decode(c, t->s, t->e, (unsigned char *)c->scratch.data);
    return (const unsigned char *)c->scratch.data;
}

static double parse_double_text(JCtx *c, const unsigned char *s, const unsigned char *e) {
    char local[64];
    size_t n = (size_t)(e - s);
    char *b = local;
    if (n >= sizeof(local)) {
        b = (char *)malloc(n + 1);
        if (!b) fail_oom(&c->f);
    }
    memcpy(b, s, n);
    b[n] = 0;
    char *endp = NULL;
    PyThreadState *held = gil_hold(&c->f);
    double d = PyOS_string_to_double(b, &endp, NULL);
    int ok = !(d == -1.0 && PyErr_Occurred()) && endp == b + n;
    if (!ok) PyErr_Clear();
    gil_restore(&c->f, held);
    if (b != local) free(b);
    if (!ok) jfail(c, s, "unparsable number");
    return d;
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* the float64 value of a number, correctly rounded (as orjson and Python) */
static double num_double(JCtx *c, const Num *n) {
    if (!n->is_float) return n->fits_i64 ? (double)n->i : (double)n->u;
    /* exact fast path (Clinger): a significand of at most 2**53 and a power of ten of at
     * most 1e22 are both exact doubles, so one multiplication or division rounds
     * correctly.  Counting up to 19 digits cannot overflow uint64; microsecond epoch
     * timestamps with nanosecond decimals (16 digits) stay on this path. */
    uint64_t m = 0;
    int digits = 0;
    const unsigned char *q;
    for (q = n->int_s; q < n->int_e; q++) {
        if (m == 0 && *q == '0') continue;
        m = m * 10 + (uint64_t)(*q - '0');
        if (++digits > 19) goto slow;
    }
    int64_t e10 = n->exp;
    if (n->has_frac) {
        for (q = n->frac_s; q < n->frac_e; q++) {
            if (m == 0 && *q == '0') { e10--; continue; }
            m = m * 10 + (uint64_t)(*q - '0');
            e10--;
            if (++digits > 19) goto slow;
        }
    }
    if (m == 0) return n->neg ? -0.0 : 0.0;
    if (m > (1ULL << 53) || e10 < -22 || e10 > 22) goto slow;
    {
        double d = (double)m;
        d = e10 >= 0 ? d * POW10[e10] : d / POW10[-e10];
        return n->neg ? -d : d;
    }
slow:
    return parse_double_text(c, n->s, n->e);
}

/* p at '-' or a digit: the text of a JSON number checked and its parts marked in n (no
 * value yet).  Field by field: a memset of n (rep stos) was about 7 % of the scan. */
static inline const unsigned char *j_number_lex(JCtx *c, const unsigned char *p, Num *n) {
    const unsigned char *end = c->end;
    n->neg = n->has_frac = n->has_exp = n->is_float = n->fits_i64 = 0;
    n->i = 0;
    n->u = 0;
    n->exp = 0;
    n->frac_s = n->frac_e = NULL;
    n->s = p;
    if (*p == '-') {
        n->neg = 1;
        p++;
    }
    n->int_s = p;
    if (p < end && *p == '0') {
        p++;
    } else if (p < end && *p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        jfail(c, p, "invalid number");
    }
    n->int_e = p;
    if (p < end && *p == '.') {
        p++;
        n->frac_s = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == n->frac_s) jfail(c, p, "no digit after decimal point");
        n->frac_e = p;
        n->has_frac = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            eneg = *p == '-';
            p++;
        }
        const unsigned char *es = p;
        int64_t ev = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (ev < 100000000) ev = ev * 10 + (*p - '0');
            p++;
        }
        if (p == es) jfail(c, p, "no digit in exponent");
        n->exp = eneg ? -ev : ev;
        n->has_exp = 1;
    }
    n->e = p;
    n->is_float = n->has_frac || n->has_exp;
    return p;
}

/* orjson refuses numbers that overflow to infinity (n a float to it) */
static inline void j_refuse_infinity(JCtx *c, const Num *n) {
    if (n->is_float && (int64_t)(n->int_e - n->int_s) + n->exp > 300) {
        double d = parse_double_text(c, n->s, n->e);
        if (isinf(d)) jfail(c, n->s, "number is infinity when parsed as double");
    }
}

/* p at '-' or a digit: validated JSON number */
static const unsigned char *j_number(JCtx *c, const unsigned char *p, Num *n) {
    p = j_number_lex(c, p, n);
    size_t nd = (size_t)(n->int_e - n->int_s);
    if (!n->is_float) {
        uint64_t u = 0;
        int over = nd > 20;
        if (nd <= 19) {
            /* 19 digits always fit: no overflow test (a division) per digit */
            for (const unsigned char *q = n->int_s; q < n->int_e; q++)
                u = u * 10 + (uint64_t)(*q - '0');
        } else {
            for (const unsigned char *q = n->int_s; !over && q < n->int_e; q++) {
                uint64_t d = (uint64_t)(*q - '0');
                if (u > (UINT64_MAX - d) / 10) over = 1;
                else u = u * 10 + d;
            }
        }
        if (over) {
            n->is_float = 1; /* orjson: integers past 64 bits become floats */
        } else if (n->neg) {
            if (u <= (uint64_t)INT64_MAX) {
                n->fits_i64 = 1;
                n->i = -(int64_t)u;
            } else if (u == (uint64_t)INT64_MAX + 1) {
                n->fits_i64 = 1;
                n->i = INT64_MIN;
            } else {
                n->is_float = 1;
            }
        } else if (u <= (uint64_t)INT64_MAX) {
            n->fits_i64 = 1;
            n->i = (int64_t)u;
        } else {
            n->u = u;
        }
    }
    j_refuse_infinity(c, n);
    return p;
}

/* p at '-' or a digit: a number checked as j_number checks it, without its value: most
 * numbers in a trace are args nobody reads.  An integer of 20 digits or fewer that is a
 * float to orjson (past 64 bits) cannot reach infinity, so its digits are not added up. */
static const unsigned char *j_number_skip(JCtx *c, const unsigned char *p) {
    Num n;
    p = j_number_lex(c, p, &n);
    n.is_float |= n.int_e - n.int_s > 20;
    j_refuse_infinity(c, &n);
    return p;
}

static const unsigned char *j_literal(JCtx *c, const unsigned char *p, int *t) {
    size_t left = (size_t)(c->end - p);
    if (left >= 4 && memcmp(p, "true", 4) == 0) { *t = T_TRUE; return p + 4; }
    if (left >= 5 && memcmp(p, "false", 5) == 0) { *t = T_FALSE; return p + 5; }
    if (left >= 4 && memcmp(p, "null", 4) == 0) { *t = T_NULL; return p + 4; }
    jfail(c, p, "unexpected character, expected a JSON value");
}

/* a member's key and its colon, skipped: the value's first byte after */
static inline const unsigned char *j_skip_key(JCtx *c, const unsigned char *p) {
    int esc = 0;
    if (*p != '"') jfail(c, p, "expected a key");
    p = j_string(c, p + 1, &esc);
    p = jnext(c, p);
    if (*p != ':') jfail(c, p, "expected ':'");
    return jnext(c, p + 1);
}

/* p at the first byte of a value (non-whitespace); depth = nesting level a container
 * here would have.  Validates and skips it without recursion. */
static const unsigned char *j_skip(JCtx *c, const unsigned char *p, int depth) {
    unsigned char stack[J_MAX_DEPTH + 1];
    int sp = 0;
    const unsigned char *end = c->end;
    for (;;) {
        /* a value at p */
        unsigned ch = *p;
        if (ch == '"') {
            int esc = 0;
            p = j_string(c, p + 1, &esc);
        } else if (ch == '{' || ch == '[') {
            if (depth + sp > J_MAX_DEPTH) jfail(c, p, "nesting too deep");
            stack[sp++] = (unsigned char)ch;
            p = jnext(c, p + 1);
            if (ch == '{') {
                if (*p == '}') {
                    p++;
                    sp--;
                } else {
                    p = j_skip_key(c, p);
                    continue;
                }
            } else {
                if (*p == ']') {
                    p++;
                    sp--;
                } else {
                    continue;
                }
            }
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            p = j_number_skip(c, p);
        } else {
            int t;
            p = j_literal(c, p, &t);
        }
        /* after a complete value */
        for (;;) {
            if (sp == 0) return p;
            p = jws(p, end);
            if (p >= end) jfail(c, p, "unexpected end of data");
            unsigned top = stack[sp - 1];
            if (*p == ',') {
                p = jnext(c, p + 1);
                if (top == '{') p = j_skip_key(c, p);
                break;
            }
            if (*p == (top == '{' ? '}' : ']')) {
                p++;
                sp--;
                continue;
            }
            jfail(c, p, "expected ',' or a closing bracket");
        }
    }
}

/* a value at p recorded as a token (containers are skipped) */
static const unsigned char *j_tok(JCtx *c, const unsigned char *p, int depth, Tok *t) {
    unsigned ch = *p;
    t->esc = 0;
    t->empty = 0;
    if (ch == '"') {
        t->t = T_STR;
        t->s = p + 1;
        p = j_string(c, p + 1, &t->esc);
        t->e = p - 1;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        t->t = T_NUM;
        p = j_number(c, p, &t->num);
    } else if (ch == '{' || ch == '[') {
        t->t = ch == '{' ? T_OBJ : T_ARR;
        const unsigned char *q = jws(p + 1, c->end);
        t->empty = q < c->end && *q == (ch == '{' ? '}' : ']');
        t->s = p;
        p = j_skip(c, p, depth);
        t->e = p;
    } else {
        p = j_literal(c, p, &t->t);
    }
    return p;
}

/* identify a key among names[0:n] (decoding escapes when present) */
static int key_id(JCtx *c, const unsigned char *s, const unsigned char *e, int esc,
                  const char *const *names, int n) {
    unsigned char buf[128];
    size_t len = (size_t)(e - s);
    if (esc) {
        if (len > sizeof(buf)) return n; /* decodes to more than 16 bytes: no match */
        len = j_decode(c, s, e, buf);
        s = buf;
    }
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) return i;
    return n;
}

static const char *const EVENT_KEYS[K_NKEYS + 1] = {"ph", "cat", "name", "pid", "tid",
                                                    "ts", "dur", "args"};
static const char *const ARG_KEYS[A_NKEYS] = {"correlation", "External id", "external id",
                                              "device",      "stream",      "bytes",
                                              "flops",       "graph id",    "graph node id",
                                              "Input Dims",  "Input type",  "Concrete Inputs",
                                              "kernel",      "name"};

static inline int event_key(JCtx *c, const unsigned char *s, const unsigned char *e, int esc) {
    size_t n = (size_t)(e - s);
    if (!esc) { /* fast path for the common spellings */
        switch (n) {
        case 2:
            if (s[0] == 'p' && s[1] == 'h') return K_PH;
            if (s[0] == 't' && s[1] == 's') return K_TS;
            return K_OTHER;
        case 3:
            if (memcmp(s, "cat", 3) == 0) return K_CAT;
            if (memcmp(s, "pid", 3) == 0) return K_PID;
            if (memcmp(s, "tid", 3) == 0) return K_TID;
            if (memcmp(s, "dur", 3) == 0) return K_DUR;
            return K_OTHER;
        case 4:
            if (memcmp(s, "name", 4) == 0) return K_NAME;
            if (memcmp(s, "args", 4) == 0) return K_ARGS;
            return K_OTHER;
        default:
            return K_OTHER;
        }
    }
    return key_id(c, s, e, esc, EVENT_KEYS, K_NKEYS + 1);
}

/* p at the opening quote of a key: one of the usual event keys, read by comparing the
 * eight bytes after the quote with its text and closing quote (where it returns the key
 * and the byte after that quote), else -1: no string scan for the keys every event
 * has (3 % of the scan). */
static inline int event_key_quick(const unsigned char *p, const unsigned char *end,
                                  const unsigned char **after) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define KEYW(a, b, c, d, e) \
    ((uint64_t)(a) | (uint64_t)(b) << 8 | (uint64_t)(c) << 16 | (uint64_t)(d) << 24 | (uint64_t)(e) << 32)
    if (end - p < 9) return -1;
    uint64_t w;
    memcpy(&w, p + 1, 8);
    uint64_t w3 = w & 0xFFFFFFULL, w4 = w & 0xFFFFFFFFULL, w5 = w & 0xFFFFFFFFFFULL;
    int k = -1, n = 0;
    if (w3 == KEYW('p', 'h', '"', 0, 0)) k = K_PH, n = 3;
    else if (w3 == KEYW('t', 's', '"', 0, 0)) k = K_TS, n = 3;
    else if (w4 == KEYW('p', 'i', 'd', '"', 0)) k = K_PID, n = 4;
    else if (w4 == KEYW('t', 'i', 'd', '"', 0)) k = K_TID, n = 4;
    else if (w4 == KEYW('d', 'u', 'r', '"', 0)) k = K_DUR, n = 4;
    else if (w4 == KEYW('c', 'a', 't', '"', 0)) k = K_CAT, n = 4;
    else if (w5 == KEYW('n', 'a', 'm', 'e', '"')) k = K_NAME, n = 5;
    else if (w5 == KEYW('a', 'r', 'g', 's', '"')) k = K_ARGS, n = 5;
#undef KEYW
    *after = p + 1 + n;
    return k;
#else
    (void)p, (void)end, (void)after;
    return -1;
#endif
}

/* most args keys are none of ours: told apart by their length first */
static inline int args_key(JCtx *c, const unsigned char *s, const unsigned char *e, int esc) {
    size_t n = (size_t)(e - s);
    if (!esc) {
        switch (n) {
        case 4:
            return memcmp(s, "name", 4) == 0 ? A_GNAME : A_OTHER;
        case 8:
            return memcmp(s, "graph id", 8) == 0 ? A_GID : A_OTHER;
        case 13:
            return memcmp(s, "graph node id", 13) == 0 ? A_GNODE : A_OTHER;
        case 5:
            if (memcmp(s, "bytes", 5) == 0) return A_BYTES;
            if (memcmp(s, "flops", 5) == 0) return A_FLOPS;
            return A_OTHER;
        case 6:
            if (memcmp(s, "device", 6) == 0) return A_DEVICE;
            if (memcmp(s, "stream", 6) == 0) return A_STREAM;
            if (memcmp(s, "kernel", 6) == 0) return A_KERNEL;
            return A_OTHER;
        case 11:
            if (memcmp(s, "correlation", 11) == 0) return A_CORR;
            if (memcmp(s, "External id", 11) == 0) return A_EXT1;
            if (memcmp(s, "external id", 11) == 0) return A_EXT2;
            return A_OTHER;
        case 10:
            if (memcmp(s, "Input Dims", 10) == 0) return A_DIMS;
            if (memcmp(s, "Input type", 10) == 0) return A_TYPES;
            return A_OTHER;
        case 15:
            return memcmp(s, "Concrete Inputs", 15) == 0 ? A_CONC : A_OTHER;
        default:
            return A_OTHER;
        }
    }
    return key_id(c, s, e, esc, ARG_KEYS, A_NKEYS);
}

/* "args" object at p (its '{'): records the stat keys (last occurrence wins) */
static const unsigned char *j_args(JCtx *c, const unsigned char *p, Tok *slots) {
    p = jnext(c, p + 1);
    if (*p == '}') return p + 1;
    for (;;) {
        if (*p != '"') jfail(c, p, "expected a key");
        const unsigned char *ks = p + 1;
        int esc = 0;
        p = j_string(c, ks, &esc);
        int k = args_key(c, ks, p - 1, esc);
        p = jnext(c, p);
        if (*p != ':') jfail(c, p, "expected ':'");
        p = jnext(c, p + 1);
        if (k < A_NKEYS) p = j_tok(c, p, 5, &slots[k]);
        else p = j_skip(c, p, 5);
        p = jnext(c, p);
        if (*p == ',') {
            p = jnext(c, p + 1);
            continue;
        }
        if (*p == '}') return p + 1;
        jfail(c, p, "expected ',' or '}'");
    }
}

/* does a string token equal the ASCII text lit? */
static int tok_is(JCtx *c, const Tok *t, const char *lit) {
    if (t->t != T_STR) return 0;
    size_t n, ln = strlen(lit);
    if (!t->esc && (size_t)(t->e - t->s) != ln) return 0;
    const unsigned char *b = tok_bytes(c, t, &n);
    return n == ln && memcmp(b, lit, n) == 0;
}

/* str(value) of a name or (truthy) category value, as the bytes to intern */
static const unsigned char *tok_text(JCtx *c, const Tok *t, size_t *n, const unsigned char *at) {
    switch (t->t) {
    case T_MISSING:
    case T_NULL:
        *n = 4;
        return (const unsigned char *)"None";
    case T_TRUE:
        *n = 4;
        return (const unsigned char *)"True";
    case T_FALSE:
        *n = 5;
        return (const unsigned char *)"False";
    case T_STR:
        return tok_bytes(c, t, n);
    case T_NUM:
        if (!t->num.is_float) {
            if (t->num.fits_i64 && t->num.i == 0) {
                *n = 1;
                return (const unsigned char *)"0"; /* "-0" */
            }
            *n = (size_t)(t->num.e - t->num.s); /* JSON integers are canonical */
            return t->num.s;
        }
        jfail(c, at, "float name or category (falls back to the reference scanner)");
    default:
        jfail(c, at, "object or array as name or category (falls back to the reference scanner)");
    }
}

/* canonical key bytes of a pid/tid value (Python equality: 1 == 1.0 == True) */
static void track_part(JCtx *c, const Tok *t, TrackDesc *d, int w, const unsigned char *at) {
    Vec *k = &c->keybuf;
    unsigned char cls;
    int64_t iv = 0;
    double dv = 0;
    switch (t->t) {
    case T_MISSING:
    case T_NULL:
        d->type[w] = V_NONE;
        cls = 'N';
        vec_put(&c->f, k, &cls, 1);
        return;
    case T_TRUE:
    case T_FALSE:
        d->type[w] = t->t == T_TRUE ? V_TRUE : V_FALSE;
        iv = t->t == T_TRUE;
        cls = 'I';
        break;
    case T_NUM:
        if (!t->num.is_float) {
            if (!t->num.fits_i64) jfail(c, at, "pid/tid past int64");
            d->type[w] = V_INT;
            d->i[w] = iv = t->num.i;
            cls = 'I';
        } else {
            dv = num_double(c, &t->num);
            d->type[w] = V_FLOAT;
            d->d[w] = dv;
            if (dv == floor(dv) && dv >= -9223372036854775808.0 && dv < 9223372036854775808.0) {
                iv = (int64_t)dv;
                cls = 'I';
            } else {
                cls = 'F';
            }
        }
        break;
    case T_STR: {
        size_t n;
        const unsigned char *b = tok_bytes(c, t, &n);
        uint64_t ln = n;
        d->type[w] = V_STR;
        cls = 'S';
        vec_put(&c->f, k, &cls, 1);
        vec_put(&c->f, k, &ln, 8);
        d->soff[w] = k->len;
        d->slen[w] = n;
        vec_put(&c->f, k, b, n);
        return;
    }
    default:
        jfail(c, at, "pid/tid container");
    }
    vec_put(&c->f, k, &cls, 1);
    if (cls == 'I') vec_put(&c->f, k, &iv, 8);
    else vec_put(&c->f, k, &dv, 8);
}

static void stat_value(JCtx *c, int s, int64_t k, const Tok *t, const unsigned char *at) {
    StatCol *col = &c->stats[s];
    uint8_t isf;
    if (t->num.is_float) {
        double d = num_double(c, &t->num);
        vec_put(&c->f, &col->val, &d, 8);
        isf = 1;
        col->any_float = 1;
    } else {
        if (!t->num.fits_i64) jfail(c, at, "stat value past int64");
        vec_put(&c->f, &col->val, &t->num.i, 8);
        isf = 0;
    }
    VEC_PUSH(&c->f, &col->idx, int64_t, k);
    vec_put(&c->f, &col->isf, &isf, 1);
}

/* A string stat of event k: the array's text (validated by the walk) less the blanks
 * outside its strings, as orjson writes a list of ints and plain strings, interned */
static void sstat_value(JCtx *c, int s, int64_t k, const Tok *t) {
    size_t raw = (size_t)(t->e - t->s);
    c->scratch.len = 0;
    if (raw > c->scratch.cap) vec_grow(&c->f, &c->scratch, raw);
    unsigned char *o = (unsigned char *)c->scratch.data;
    size_t n = 0;
    int in_str = 0;
    for (const unsigned char *q = t->s; q < t->e; q++) {
        unsigned ch = *q;
        if (in_str) {
            o[n++] = (unsigned char)ch;
            if (ch == '\\') o[n++] = *++q; /* the escaped byte: never a closing quote */
            else if (ch == '"') in_str = 0;
        } else if (!j_blank(ch)) {
            o[n++] = (unsigned char)ch;
            in_str = ch == '"';
        }
    }
    int32_t id = intern(&c->f, &c->stexts, &c->arena, o, n, 1);
    StatCol *col = &c->sstats[s];
    VEC_PUSH(&c->f, &col->idx, int64_t, k);
    VEC_PUSH(&c->f, &col->val, int64_t, (int64_t)id);
}

/* A time's exact ps from the text (fractional digits past 6 truncated, as the
 * reference) and its float64 value; written with an exponent (or absurdly long), the
 * float64 value stands for both.  A time of at most 19 digits, 6 of them decimals, no
 * exponent (every profiler's microseconds with up to picosecond decimals) is its
 * significand m times a power of ten, both exactly: with m <= 2**53 the double is
 * m / 10**decimals, correctly rounded as in num_double, and the digits are read once
 * for both (the general path reads them again for each). */
static void ts_record(JCtx *c, const Num *n) {
    size_t ni = (size_t)(n->int_e - n->int_s);
    size_t nf = n->has_frac ? (size_t)(n->frac_e - n->frac_s) : 0;
    uint8_t isexp = (uint8_t)(n->has_exp || ni > 30);
    i128 v = 0;
    double d;
    uint64_t m = 0;
    int once = !n->has_exp && nf <= 6 && ni + nf <= 19; /* 19 digits cannot overflow m */
    if (once) {
        for (const unsigned char *q = n->int_s; q < n->int_e; q++) m = m * 10 + (uint64_t)(*q - '0');
        if (nf)
            for (const unsigned char *q = n->frac_s; q < n->frac_e; q++)
                m = m * 10 + (uint64_t)(*q - '0');
        once = m <= (1ULL << 53);
    }
    if (once) {
        static const int64_t SCALE[7] = {1000000, 100000, 10000, 1000, 100, 10, 1};
        v = (i128)m * SCALE[nf];
        if (!n->is_float) d = (double)(n->neg ? -(int64_t)m : (int64_t)m); /* "-0": 0.0 */
        else if (m == 0) d = n->neg ? -0.0 : 0.0;
        else d = (n->neg ? -1.0 : 1.0) * ((double)m / POW10[nf]);
    } else {
        d = num_double(c, n);
        if (!isexp) {
            for (const unsigned char *q = n->int_s; q < n->int_e; q++) v = v * 10 + (*q - '0');
            int64_t frac = 0;
            int fd = 0;
            if (n->has_frac)
                for (const unsigned char *q = n->frac_s; q < n->frac_e && fd < 6; q++, fd++)
                    frac = frac * 10 + (*q - '0');
            for (; fd < 6; fd++) frac *= 10;
            v = v * 1000000 + frac;
        }
    }
    if (n->neg) v = -v;
    vec_put(&c->f, &c->ts_exact, &v, sizeof(v));
    vec_put(&c->f, &c->ts_isexp, &isexp, 1);
    vec_put(&c->f, &c->ts_approx, &d, 8);
}

/* events further than this from the median time are unplaceable (kineto._MAX_SPAN_US) */
#define MAX_SPAN_US 1e12

/* np.median of a[0:n] (n > 0, no NaN); reorders a.  Quickselect with pseudo-random
 * pivots and a three-way partition (runs of equal values stay linear). */
static double median_inplace(double *a, size_t n) {
    uint64_t rng = 0x9E3779B97F4A7C15ULL ^ n;
    size_t k = n / 2;
    int64_t lo = 0, hi = (int64_t)n - 1;
    while (lo < hi) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        double pivot = a[lo + (int64_t)(rng % (uint64_t)(hi - lo + 1))];
        int64_t lt = lo, i = lo, gt = hi;
        while (i <= gt) {
            double x = a[i];
            if (x < pivot) {
                a[i++] = a[lt];
                a[lt++] = x;
            } else if (x > pivot) {
                a[i] = a[gt];
                a[gt--] = x;
            } else {
                i++;
            }
        }
        if ((int64_t)k < lt) hi = lt - 1;
        else if ((int64_t)k > gt) lo = gt + 1;
        else break;
    }
    /* a[0:k] <= a[k] <= a[k+1:] now */
    double upper = a[k];
    if (n % 2) return upper;
    double lower = a[0];
    for (size_t j = 1; j < k; j++)
        if (a[j] > lower) lower = a[j];
    return (lower + upper) / 2.0; /* np.mean of the two middle values */
}

static inline int64_t to_i64_checked(JCtx *c, double x, const unsigned char *at) {
    if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) jfail(c, at, "value past int64");
    return (int64_t)x;
}

/* p at '{' of an event, index i in traceEvents */
static const unsigned char *j_event(JCtx *c, const unsigned char *p, int64_t i) {
    const unsigned char *ev_start = p;
    /* only the kind is cleared: every reader looks at it first (a memset of both
     * arrays was about 7 % of the scan) */
    Tok tk[K_NKEYS];
    Tok slots[A_NKEYS];
    for (int j = 0; j < K_NKEYS; j++) tk[j].t = T_MISSING;
    for (int j = 0; j < A_NKEYS; j++) slots[j].t = T_MISSING;
    int args_obj = 0;
    p = jnext(c, p + 1);
    if (*p == '}') {
        p++;
    } else {
        for (;;) {
            if (*p != '"') jfail(c, p, "expected a key");
            const unsigned char *after;
            int k = event_key_quick(p, c->end, &after);
            if (k >= 0) {
                p = after;
            } else {
                const unsigned char *ks = p + 1;
                int esc = 0;
                p = j_string(c, ks, &esc);
                k = event_key(c, ks, p - 1, esc);
            }
            p = jnext(c, p);
            if (*p != ':') jfail(c, p, "expected ':'");
            p = jnext(c, p + 1);
            if (k < K_NKEYS) {
                p = j_tok(c, p, 4, &tk[k]);
            } else if (k == K_ARGS) {
                for (int j = 0; j < A_NKEYS; j++) slots[j].t = T_MISSING;
                if (*p == '{') {
                    args_obj = 1;
                    p = j_args(c, p, slots);
                } else {
                    args_obj = 0;
                    p = j_skip(c, p, 4);
                }
            } else {
                p = j_skip(c, p, 4);
            }
            p = jnext(c, p);
            if (*p == ',') {
                p = jnext(c, p + 1);
                continue;
            }
            if (*p == '}') {
                p++;
                break;
            }
            jfail(c, p, "expected ',' or '}'");
        }
    }

    /* ---- the reference's per-event logic ---- */
    c->committing = 1; /* the event is whole: from here on, failures are real */
    if (!tok_is(c, &tk[K_PH], "X")) {
        if (tok_is(c, &tk[K_PH], "M")) {
            PyThreadState *held = gil_hold(&c->f);
            PyObject *t = PyBytes_FromStringAndSize((const char *)ev_start, p - ev_start);
            if (!t) fail_py(&c->f);
            int r = PyList_Append(c->mevents, t);
            Py_DECREF(t);
            if (r < 0) fail_py(&c->f);
            gil_restore(&c->f, held);
        }
        return p;
    }
    const Tok *ts = &tk[K_TS], *dur = &tk[K_DUR], *pid = &tk[K_PID], *tid = &tk[K_TID];
    if (ts->t != T_NUM || (dur->t != T_NUM && dur->t != T_MISSING) || pid->t == T_OBJ ||
        pid->t == T_ARR || tid->t == T_OBJ || tid->t == T_ARR) {
        c->bad++;
        return p;
    }
    /* cat = e.get("cat") or "" */
    const Tok *cat = &tk[K_CAT];
    const unsigned char *cb;
    size_t cn;
    int falsy;
    switch (cat->t) {
    case T_MISSING:
    case T_NULL:
    case T_FALSE:
        falsy = 1;
        break;
    case T_STR:
        falsy = cat->e == cat->s;
        break;
    case T_NUM:
        falsy = cat->num.is_float ? num_double(c, &cat->num) == 0.0
                                  : (cat->num.fits_i64 && cat->num.i == 0);
        break;
    case T_OBJ:
    case T_ARR:
        falsy = cat->empty;
        break;
    default:
        falsy = 0;
    }
    if (tok_is(c, cat, "Trace") || tok_is(c, pid, "Spans") || tok_is(c, pid, "Traces")) return p;

    int64_t k = c->n_kept++;
    if (k >= 0x7fffffff) jfail(c, ev_start, "too many events");
    /* name */
    size_t nn;
    const unsigned char *nb = tok_text(c, &tk[K_NAME], &nn, ev_start);
    /* copied: the text is a chunk that will be gone */
    int32_t nid = intern(&c->f, &c->names, &c->arena, nb, nn, 1);
    VEC_PUSH(&c->f, &c->name_ids, int32_t, nid);
    /* category */
    if (falsy) {
        cb = (const unsigned char *)"";
        cn = 0;
    } else {
        cb = tok_text(c, cat, &cn, ev_start);
    }
    int32_t cid = intern(&c->f, &c->cats, &c->arena, cb, cn, 1);
    VEC_PUSH(&c->f, &c->cat_ids, int32_t, cid);
    /* track */
    TrackDesc d;
    memset(&d, 0, sizeof(d));
    c->keybuf.len = 0;
    track_part(c, pid, &d, 0, ev_start);
    track_part(c, tid, &d, 1, ev_start);
    int32_t tid_ = intern(&c->f, &c->tracks, &c->arena, (const unsigned char *)c->keybuf.data,
                          c->keybuf.len, 1);
    if ((size_t)tid_ * sizeof(TrackDesc) == c->tdesc.len) vec_put(&c->f, &c->tdesc, &d, sizeof(d));
    VEC_PUSH(&c->f, &c->track_ids, int32_t, tid_);
    /* ts, dur */
    ts_record(c, &ts->num);
    VEC_PUSH(&c->f, &c->dur_d, double, dur->t == T_NUM ? num_double(c, &dur->num) : 0.0);
    /* stats from args: per stat the first spelling whose value is not null */
    if (args_obj) {
        static const int first_key[N_STATS] = {A_CORR, A_EXT1, A_DEVICE, A_STREAM, A_BYTES,
                                               A_FLOPS, A_GID, A_GNODE};
        for (int s = 0; s < N_STATS; s++) {
            int nkeys = s == 1 ? 2 : 1;
            for (int j = 0; j < nkeys; j++) {
                const Tok *v = &slots[first_key[s] + j];
                if (v->t == T_MISSING || v->t == T_NULL) continue;
                if (v->t == T_NUM) stat_value(c, s, k, v, ev_start);
                break;
            }
        }
        /* "name" in a device event's args is the annotation torch's graph annotations
           (torch.cuda._annotate_cuda_graph_trace) put on a kernel replayed from a graph,
           one with a nonzero "graph node id" (Kineto's CuptiActivity.cpp); elsewhere the
           key means other things and is left alone */
        const Tok *gn = &slots[A_GNODE];
        int graphed = gn->t == T_NUM && num_double(c, &gn->num) != 0.0;
        for (int s = 0; s < N_SSTATS; s++) {
            const Tok *v = &slots[SSTAT_KEY[s]];
            if (v->t == T_ARR && SSTAT_KEY[s] != A_GNAME) sstat_value(c, s, k, v);
            else if (v->t == T_STR && (SSTAT_KEY[s] == A_KERNEL ||
                                       (SSTAT_KEY[s] == A_GNAME && graphed))) {
                /* a launch's kernel name (graph captures), a graph kernel's annotation:
                   its JSON text, quotes included */
                Tok q = *v;
                q.s -= 1;
                q.e += 1;
                sstat_value(c, s, k, &q);
            }
        }
    }
    return p;
}

/* where the next unit starts */
enum { JS_BEGIN, JS_FIRST, JS_MEMBER, JS_AFTER, JS_EVFIRST, JS_EVENT, JS_EVSEP, JS_TAIL };

/* a value that ends the buffer (a number) may go on in the next chunk */
static inline void j_settled(JCtx *c, const unsigned char *p) {
    if (p >= c->end && !c->final) j_dry(c);
}

static inline void j_commit(JCtx *c, const unsigned char *p, int state) {
    c->pos = JPOS(c, p);
    c->state = state;
    c->committing = 0;
}

/* After a member of the document or an element of traceEvents: a comma goes on to
 * `more`, the closing bracket to `closed`. */
static inline const unsigned char *j_separator(JCtx *c, const unsigned char *p,
                                               unsigned char close, int more, int closed,
                                               const char *expected) {
    p = jnext(c, p);
    if (*p == ',') j_commit(c, ++p, more);
    else if (*p == close) j_commit(c, ++p, closed);
    else jfail(c, p, expected);
    return p;
}

/* Walks buf[pos:end] unit by unit from c->state; returns at the end of the text, or
 * longjmps: a failure, or (not final) a unit cut by the end of the buffer. */
static void j_run(JCtx *c) {
    const unsigned char *p = c->buf + c->pos;
    static const char *const TE[1] = {"traceEvents"};
    for (;;) {
        if (c->state != JS_BEGIN && c->state != JS_TAIL) {
            /* whitespace is committed as it comes (a stream of it costs nothing) */
            p = jws(p, c->end);
            if (p >= c->end && !c->final) {
                j_commit(c, p, c->state);
                return;
            }
        }
        switch (c->state) {
        case JS_BEGIN:
            p = jws(p, c->end);
            if (p >= c->end && !c->final) {
                j_commit(c, p, JS_BEGIN);
                return;
            }
            if (p >= c->end || *p != '{') jfail(c, p, "document is not a JSON object");
            j_commit(c, ++p, JS_FIRST);
            break;
        case JS_FIRST:
            p = jnext(c, p);
            if (*p == '}') j_commit(c, ++p, JS_TAIL);
            else c->state = JS_MEMBER;
            break;
        case JS_MEMBER: {
            p = jnext(c, p);
            if (*p != '"') jfail(c, p, "expected a key");
            const unsigned char *ks = p + 1;
            int esc = 0;
            p = j_string(c, ks, &esc);
            const unsigned char *ke = p - 1;
            p = jnext(c, p);
            if (*p != ':') jfail(c, p, "expected ':'");
            p = jnext(c, p + 1);
            if (key_id(c, ks, ke, esc, TE, 1) == 0) {
                if (c->seen_events) jfail(c, ks, "duplicate traceEvents");
                if (*p != '[') jfail(c, p, "traceEvents is not a list");
                c->seen_events = 1;
                j_commit(c, ++p, JS_EVFIRST);
            } else {
                int m = key_id(c, ks, ke, esc, META_KEYS, N_META);
                const unsigned char *vs = p;
                p = j_skip(c, p, 2);
                j_settled(c, p);
                c->committing = 1;
                if (m < N_META) {
                    PyThreadState *held = gil_hold(&c->f);
                    PyObject *v = PyBytes_FromStringAndSize((const char *)vs, p - vs);
                    if (!v) fail_py(&c->f);
                    Py_XSETREF(c->meta[m], v);
                    gil_restore(&c->f, held);
                }
                j_commit(c, p, JS_AFTER);
            }
            break;
        }
        case JS_AFTER:
            p = j_separator(c, p, '}', JS_MEMBER, JS_TAIL, "expected ',' or '}'");
            break;
        case JS_EVFIRST:
            p = jnext(c, p);
            if (*p == ']') j_commit(c, ++p, JS_AFTER);
            else c->state = JS_EVENT;
            break;
        case JS_EVENT:
            p = jnext(c, p);
            if (*p == '{') {
                p = j_event(c, p, c->n_raw);
            } else {
                p = j_skip(c, p, 3);
                j_settled(c, p);
                c->bad++;
            }
            c->n_raw++;
            j_commit(c, p, JS_EVSEP);
            publish(c->done, JPOS(c, p));
            break;
        case JS_EVSEP:
            p = j_separator(c, p, ']', JS_EVENT, JS_AFTER, "expected ',' or ']'");
            break;
        default: /* JS_TAIL */
            p = jws(p, c->end);
            if (p != c->end) jfail(c, p, "unexpected content after document");
            j_commit(c, p, JS_TAIL);
            if (c->final && !c->seen_events) jfail(c, p, "no traceEvents list");
            return;
        }
    }
}

#define JCTX_VECS (15 + 3 * N_STATS + 3 * N_SSTATS)

/* every growable vector of a context, for freeing it or emptying it for reuse */
static void jctx_vecs(JCtx *c, Vec **vs) {
    Vec *own[] = {&c->name_ids, &c->cat_ids, &c->track_ids, &c->dur_ps, &c->ts_exact,
                  &c->ts_approx, &c->dur_d, &c->ts_isexp, &c->tdesc, &c->scratch, &c->keybuf,
                  &c->ts_out, &c->sane, &c->pick, &c->inbuf};
    size_t n = sizeof(own) / sizeof(own[0]);
    memcpy(vs, own, sizeof(own));
    for (int s = 0; s < N_STATS; s++) {
        vs[n++] = &c->stats[s].idx;
        vs[n++] = &c->stats[s].val;
        vs[n++] = &c->stats[s].isf;
    }
    for (int s = 0; s < N_SSTATS; s++) {
        vs[n++] = &c->sstats[s].idx;
        vs[n++] = &c->sstats[s].val;
        vs[n++] = &c->sstats[s].isf;
    }
}

static void jctx_free(JCtx *c) {
    table_free(&c->names);
    table_free(&c->cats);
    table_free(&c->tracks);
    table_free(&c->stexts);
    arena_free(&c->arena);
    Vec *vs[JCTX_VECS];
    jctx_vecs(c, vs);
    for (size_t i = 0; i < JCTX_VECS; i++) vec_free(vs[i]);
    Py_XDECREF(c->mevents);
    for (int m = 0; m < N_META; m++) Py_XDECREF(c->meta[m]);
    free(c);
}

static PyObject *str_list(const Table *t) {
    PyObject *l = PyList_New((Py_ssize_t)t->nents);
    if (!l) return NULL;
    for (size_t i = 0; i < t->nents; i++) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)t->ents[i].p, (Py_ssize_t)t->ents[i].n,
                                           "strict");
        if (!s) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, s);
    }
    return l;
}

static PyObject *track_value(const TrackDesc *d, int w, const unsigned char *key) {
    switch (d->type[w]) {
    case V_NONE: Py_RETURN_NONE;
    case V_TRUE: Py_RETURN_TRUE;
    case V_FALSE: Py_RETURN_FALSE;
    case V_INT: return PyLong_FromLongLong(d->i[w]);
    case V_FLOAT: return PyFloat_FromDouble(d->d[w]);
    default:
        return PyUnicode_DecodeUTF8((const char *)key + d->soff[w], (Py_ssize_t)d->slen[w], "strict");
    }
}

/* everything after the walk; Python objects only */
static PyObject *j_result(JCtx *c) {
    int64_t n = c->n_kept;
    const double *approx = (const double *)c->ts_approx.data;
    const double *dur = (const double *)c->dur_d.data;
    const uint8_t *ie = (const uint8_t *)c->ts_isexp.data;
    /* "sane" events, as the reference: a finite duration under MAX_SPAN, and a time
     * within MAX_SPAN of the median time of the events with such a duration.  Where all
     * those times lie within MAX_SPAN of each other, each is within it of their median
     * too: the median (a copy of every time, and a quickselect over it, on the scan's
     * one thread at its end) is needed only where they do not. */
    if (n > 0) vec_grow(&c->f, &c->sane, (size_t)n);
    uint8_t *sane = (uint8_t *)c->sane.data;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t k = 0; k < n; k++) {
        uint8_t ok = isfinite(approx[k]) && isfinite(dur[k]) && fabs(dur[k]) < MAX_SPAN_US;
        sane[k] = ok;
        if (ok) {
            lo = approx[k] < lo ? approx[k] : lo;
            hi = approx[k] > hi ? approx[k] : hi;
        }
    }
    c->sane.len = (size_t)n;
    if (lo <= hi && !(hi - lo < MAX_SPAN_US)) {
        for (int64_t k = 0; k < n; k++)
            if (sane[k]) VEC_PUSH(&c->f, &c->pick, double, approx[k]);
        double med = median_inplace((double *)c->pick.data, c->pick.len / 8);
        for (int64_t k = 0; k < n; k++)
            if (sane[k] && !(fabs(approx[k] - med) < MAX_SPAN_US)) sane[k] = 0;
    }
    vec_free(&c->pick);
    const uint8_t *ok = (const uint8_t *)c->sane.data;
    /* base_us = floor(min ts) over the sane events, as float64 like the reference */
    int64_t base_us = 0;
    double tmin = 0.0;
    int seen = 0;
    for (int64_t k = 0; k < n; k++)
        if (ok[k] && (!seen || approx[k] < tmin)) {
            tmin = approx[k];
            seen = 1;
        }
    if (seen) base_us = to_i64_checked(c, floor(tmin), c->buf);
    i128 base_ps = (i128)base_us * 1000000;
    /* the int64 columns overwrite the float64 ones they come from, element by element
     * (each read before it is written): 16 bytes an event less at the scan's peak */
    int64_t *ts_out = (int64_t *)c->ts_approx.data, *dur_out = (int64_t *)c->dur_d.data;
    for (int64_t k = 0; k < n; k++) {
        int64_t v = INT64_MIN, d = 0; /* OUT_OF_RANGE, as the reference */
        if (ok[k]) {
            if (ie[k]) {
                v = to_i64_checked(c, nearbyint((approx[k] - (double)base_us) * 1e6), c->buf);
            } else {
                i128 r;
                memcpy(&r, c->ts_exact.data + (size_t)k * sizeof(i128), sizeof(r));
                r -= base_ps;
                if (r < (i128)INT64_MIN || r > (i128)INT64_MAX) jfail(c, c->buf, "timestamp past int64");
                v = (int64_t)r;
            }
            d = to_i64_checked(c, nearbyint(dur[k] * 1e6), c->buf);
        }
        ts_out[k] = v;
        dur_out[k] = d;
    }
    c->ts_out = c->ts_approx;
    c->dur_ps = c->dur_d;
    memset(&c->ts_approx, 0, sizeof(Vec));
    memset(&c->dur_d, 0, sizeof(Vec));
    /* stats: a column with any float goes through float64 and rint, like np.asarray */
    for (int s = 0; s < N_STATS; s++) {
        StatCol *col = &c->stats[s];
        if (!col->any_float) continue;
        size_t m = col->isf.len;
        for (size_t j = 0; j < m; j++) {
            double x;
            int64_t iv;
            memcpy(&iv, col->val.data + j * 8, 8);
            if (col->isf.data[j]) memcpy(&x, &iv, 8);
            else x = (double)iv;
            iv = to_i64_checked(c, nearbyint(x), c->buf);
            memcpy(col->val.data + j * 8, &iv, 8);
        }
    }

    /* the per-event scratch is done with: freed before the columns are handed over */
    Vec *done_with[] = {&c->ts_exact, &c->ts_approx, &c->dur_d, &c->ts_isexp, &c->sane, &c->pick,
                        &c->inbuf};
    for (size_t j = 0; j < sizeof(done_with) / sizeof(done_with[0]); j++) vec_free(done_with[j]);

    /* no longjmp past this point: Python errors unwind through `error` */
    PyObject *out = PyDict_New(), *stats = PyDict_New(), *meta = PyDict_New();
    PyObject *sstats = PyDict_New();
    PyObject *tk = PyList_New((Py_ssize_t)c->tracks.nents);
    PyObject *names = NULL, *cats = NULL, *stexts = NULL;
    if (!out || !stats || !meta || !sstats || !tk) goto error;
    for (int s = 0; s < N_STATS; s++) {
        StatCol *col = &c->stats[s];
        if (!col->isf.len) continue;
        PyObject *pair = Py_BuildValue("(NN)", vec_to_column(&col->idx), vec_to_column(&col->val));
        if (!pair) goto error;
        int r = PyDict_SetItemString(stats, STAT_NAMES[s], pair);
        Py_DECREF(pair);
        if (r < 0) goto error;
    }
    for (int s = 0; s < N_SSTATS; s++) {
        StatCol *col = &c->sstats[s];
        if (!col->idx.len) continue;
        PyObject *pair = Py_BuildValue("(NN)", vec_to_column(&col->idx), vec_to_column(&col->val));
        if (!pair) goto error;
        int r = PyDict_SetItemString(sstats, SSTAT_NAMES[s], pair);
        Py_DECREF(pair);
        if (r < 0) goto error;
    }
    const TrackDesc *ds = (const TrackDesc *)c->tdesc.data;
    for (size_t j = 0; j < c->tracks.nents; j++) {
        const unsigned char *key = c->tracks.ents[j].p;
        PyObject *a = track_value(&ds[j], 0, key);
        PyObject *b = a ? track_value(&ds[j], 1, key) : NULL;
        PyObject *t = (a && b) ? PyTuple_Pack(2, a, b) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (!t) goto error;
        PyList_SET_ITEM(tk, (Py_ssize_t)j, t);
    }
    for (int m = 0; m < N_META; m++) {
        if (c->meta[m] && PyDict_SetItemString(meta, META_KEYS[m], c->meta[m]) < 0) goto error;
    }
    names = str_list(&c->names);
    cats = str_list(&c->cats);
    stexts = str_list(&c->stexts);
    if (!names || !cats || !stexts) goto error;
    if (dict_put(out, "n_raw", PyLong_FromLongLong(c->n_raw)) < 0 ||
        PyDict_SetItemString(out, "names", names) < 0 ||
        dict_put(out, "name_ids", vec_to_column(&c->name_ids)) < 0 ||
        PyDict_SetItemString(out, "cats", cats) < 0 ||
        dict_put(out, "cat_ids", vec_to_column(&c->cat_ids)) < 0 ||
        PyDict_SetItemString(out, "track_keys", tk) < 0 ||
        dict_put(out, "track_ids", vec_to_column(&c->track_ids)) < 0 ||
        dict_put(out, "base_us", PyLong_FromLongLong(base_us)) < 0 ||
        dict_put(out, "ts_ps", vec_to_column(&c->ts_out)) < 0 ||
        dict_put(out, "dur_ps", vec_to_column(&c->dur_ps)) < 0 ||
        PyDict_SetItemString(out, "stats", stats) < 0 ||
        PyDict_SetItemString(out, "string_stats", sstats) < 0 ||
        PyDict_SetItemString(out, "stat_strings", stexts) < 0 ||
        PyDict_SetItemString(out, "meta", meta) < 0 ||
        PyDict_SetItemString(out, "m_events", c->mevents) < 0 ||
        dict_put(out, "bad", PyLong_FromLongLong(c->bad)) < 0)
        goto error;
    Py_DECREF(names);
    Py_DECREF(cats);
    Py_DECREF(stexts);
    Py_DECREF(tk);
    Py_DECREF(stats);
    Py_DECREF(sstats);
    Py_DECREF(meta);
    return out;
error:
    Py_XDECREF(names);
    Py_XDECREF(cats);
    Py_XDECREF(stexts);
    Py_XDECREF(tk);
    Py_XDECREF(stats);
    Py_XDECREF(sstats);
    Py_XDECREF(meta);
    Py_XDECREF(out);
    return NULL;
}

static JCtx *jctx_new(void) {
    JCtx *c = (JCtx *)calloc(1, sizeof(JCtx));
    if (!c) {
        PyErr_NoMemory();
        return NULL;
    }
    c->mevents = PyList_New(0);
    if (!c->mevents) {
        free(c);
        return NULL;
    }
    return c;
}

PyObject *scan_kineto(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view, done;
    int64_t *done_at;
    if (scan_args(args, "scan_kineto", &view, &done, &done_at) < 0) return NULL;
    JCtx *c = jctx_new();
    if (!c) {
        scan_args_release(&view, &done);
        return NULL;
    }
    c->buf = (const unsigned char *)view.buf;
    c->end = c->buf + view.len;
    c->done = done_at;
    c->final = 1;
    if (setjmp(c->f.jb)) {
        gil_hold(&c->f);
        raise_fail(&c->f, "native Kineto scan");
        jctx_free(c);
        scan_args_release(&view, &done);
        return NULL;
    }
    gil_release(&c->f);
    j_run(c);
    gil_hold(&c->f);
    publish(c->done, (int64_t)view.len);
    PyObject *out = j_result(c); /* NULL with a Python error set */
    jctx_free(c);
    scan_args_release(&view, &done);
    return out;
}

/* ---- the same scan fed chunk by chunk: the text never exists whole ---- */

#define KSTREAM "tb_perfdiag._native.kineto_stream"

static void kstream_free(PyObject *cap) {
    JCtx *c = (JCtx *)PyCapsule_GetPointer(cap, KSTREAM);
    if (c) jctx_free(c);
}

PyObject *kineto_stream(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    JCtx *c = jctx_new();
    if (!c) return NULL;
    PyObject *cap = PyCapsule_New(c, KSTREAM, kstream_free);
    if (!cap) jctx_free(c);
    return cap;
}

/* appends a chunk and walks what is whole; final: the chunk ends the document, and
 * the columns are returned (else None) */
PyObject *kineto_feed(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap;
    Py_buffer view;
    int final;
    if (!PyArg_ParseTuple(args, "Oy*p", &cap, &view, &final)) return NULL;
    JCtx *c = (JCtx *)PyCapsule_GetPointer(cap, KSTREAM);
    if (!c) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (c->dead) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "native Kineto scan: fed after a failure");
        return NULL;
    }
    c->final = final;
    c->committing = 0;
    c->need_more = 0;
    volatile int holding = 1; /* the view (j_result may fail after it is released) */
    if (setjmp(c->f.jb)) {
        gil_hold(&c->f);
        if (!c->need_more) {
            c->dead = 1;
            raise_fail(&c->f, "native Kineto scan");
            if (holding) PyBuffer_Release(&view);
            return NULL;
        }
    } else {
        vec_put(&c->f, &c->inbuf, view.buf, (size_t)view.len);
        if (!final && c->inbuf.len < c->retry_at) {
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
        c->buf = (const unsigned char *)c->inbuf.data;
        c->end = c->buf + c->inbuf.len;
        gil_release(&c->f);
        j_run(c);
        gil_hold(&c->f);
    }
    PyBuffer_Release(&view);
    holding = 0;
    /* keep the uncommitted tail; a unit longer than a chunk waits for twice its text
     * before it is walked again (no quadratic re-walks) */
    size_t left = c->inbuf.len - (size_t)c->pos;
    if (left && c->pos) memmove(c->inbuf.data, c->inbuf.data + c->pos, left);
    c->inbuf.len = left;
    c->pos = 0;
    c->retry_at = c->need_more ? 2 * left : 0;
    c->buf = c->end = NULL;
    if (!final) Py_RETURN_NONE;
    c->dead = 1; /* the columns are handed over once */
    return j_result(c);
}

/* ---- a stretch of traceEvents scanned on its own thread, then absorbed ----
 * The text between two event starts (a '{' after a newline) is walked by a context of
 * its own that starts where an event is expected; the stream takes it as if it had
 * walked the text itself when, at that point, it expects an event with nothing
 * pending (kineto_absorb).  Else the caller feeds the text as usual, so a guess that
 * was wrong (a pretty-printed args object, the list's end) costs only the time. */

#define KPART "tb_perfdiag._native.kineto_part"

static void kpart_free(PyObject *cap) {
    JCtx *c = (JCtx *)PyCapsule_GetPointer(cap, KPART);
    if (c) jctx_free(c);
}

/* a context as new, keeping what it has allocated: a part absorbed is walked again
 * over the next stretch without faulting its columns' pages in anew (a fresh context a
 * stretch was 340 K more page faults on the 20 M-event trace) */
static void jctx_reset(JCtx *c) {
    Table *ts[] = {&c->names, &c->cats, &c->tracks, &c->stexts};
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        ts[i]->nents = 0;
        if (ts[i]->slots) memset(ts[i]->slots, 0xff, (ts[i]->mask + 1) * sizeof(int32_t));
    }
    arena_free(&c->arena);
    Vec *vs[JCTX_VECS];
    jctx_vecs(c, vs);
    for (size_t i = 0; i < JCTX_VECS; i++) {
        if (vs[i]->col) vec_free(vs[i]); /* handed over: not ours to write again */
        vs[i]->len = 0;
    }
    for (int s = 0; s < N_STATS; s++) c->stats[s].any_float = 0;
    PyList_SetSlice(c->mevents, 0, PyList_GET_SIZE(c->mevents), NULL);
    for (int m = 0; m < N_META; m++) Py_CLEAR(c->meta[m]);
    c->n_kept = c->n_raw = c->bad = 0;
    c->done = NULL;
    c->final = c->committing = c->need_more = c->dead = 0;
    c->pos = 0;
    c->retry_at = 0;
    c->buf = c->end = NULL;
    c->f.err = NULL;
    c->f.err_pos = 0;
}

/* kineto_part(buf, lo, hi[, spare]) -> the walk of buf[lo:hi], read in place, as whole
 * events each followed by its separator, or None when the text is not that.  spare: a
 * part already absorbed, whose context (and capsule) the walk reuses. */
PyObject *kineto_part(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b;
    Py_ssize_t lo, hi;
    PyObject *spare = Py_None;
    if (!PyArg_ParseTuple(args, "y*nn|O", &b, &lo, &hi, &spare)) return NULL;
    if (lo < 0 || hi < lo || hi > b.len) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "kineto_part: lo:hi outside the buffer");
        return NULL;
    }
    JCtx *reused = NULL;
    if (spare != Py_None) {
        reused = (JCtx *)PyCapsule_GetPointer(spare, KPART);
        if (!reused || !reused->dead) {
            PyBuffer_Release(&b);
            if (reused) PyErr_SetString(PyExc_ValueError, "kineto_part: spare not absorbed");
            return NULL;
        }
        jctx_reset(reused);
    }
    JCtx *volatile c = reused ? reused : jctx_new();
    if (!c) {
        PyBuffer_Release(&b);
        return NULL;
    }
    c->state = JS_EVENT;
    c->seen_events = 1;
    c->buf = (const unsigned char *)b.buf + lo;
    c->end = (const unsigned char *)b.buf + hi;
    if (setjmp(c->f.jb)) {
        /* cut short, or not events: the stream walks this text itself (and names any
         * problem).  A reused context stays its capsule's, marked spent. */
        gil_hold(&c->f);
        PyErr_Clear();
        c->buf = c->end = NULL;
        if (reused) c->dead = 1;
        else jctx_free(c);
        PyBuffer_Release(&b);
        Py_RETURN_NONE;
    }
    gil_release(&c->f);
    j_run(c);
    gil_hold(&c->f);
    int whole = c->state == JS_EVENT && c->pos == hi - lo;
    c->buf = c->end = NULL;
    PyBuffer_Release(&b);
    if (!whole) {
        if (reused) c->dead = 1;
        else jctx_free(c);
        Py_RETURN_NONE;
    }
    if (reused) {
        Py_INCREF(spare);
        return spare;
    }
    PyObject *cap = PyCapsule_New(c, KPART, kpart_free);
    if (!cap) jctx_free(c);
    return cap;
}

/* the part's ids of table t in ours, new strings added in the part's first-seen order
 * (the order a walk of its text would add them in) */
static int32_t *absorb_table(JCtx *c, Table *ours, const Table *t) {
    int32_t *lut = (int32_t *)malloc((t->nents ? t->nents : 1) * sizeof(int32_t));
    if (!lut) fail_oom(&c->f);
    for (size_t i = 0; i < t->nents; i++)
        lut[i] = intern(&c->f, ours, &c->arena, t->ents[i].p, t->ents[i].n, 1);
    return lut;
}

static void absorb_ids(JCtx *c, Vec *ours, const Vec *part, const int32_t *lut) {
    size_t m = part->len / sizeof(int32_t);
    if (ours->len + part->len > ours->cap) vec_grow(&c->f, ours, part->len);
    const int32_t *from = (const int32_t *)part->data;
    int32_t *to = (int32_t *)(ours->data + ours->len);
    for (size_t k = 0; k < m; k++) to[k] = lut[from[k]];
    ours->len += part->len;
}

/* kineto_absorb(stream, part) -> True when the stream took the part's events as if it
 * had walked their text; False (nothing changed) when it is not expecting an event
 * with nothing pending */
PyObject *kineto_absorb(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *scap, *pcap;
    if (!PyArg_ParseTuple(args, "OO", &scap, &pcap)) return NULL;
    JCtx *c = (JCtx *)PyCapsule_GetPointer(scap, KSTREAM);
    JCtx *p = c ? (JCtx *)PyCapsule_GetPointer(pcap, KPART) : NULL;
    if (!p) return NULL;
    /* an event expected next (the list's first element, or one after a comma) */
    if (c->dead || p->dead || (c->state != JS_EVENT && c->state != JS_EVFIRST) ||
        c->inbuf.len != 0 || c->n_kept + p->n_kept >= 0x7fffffff)
        Py_RETURN_FALSE;
    p->dead = 1; /* absorbed once */
    c->state = JS_EVENT; /* where the part's text ends */
    volatile int32_t *lut_n = NULL, *lut_c = NULL, *lut_t = NULL, *lut_s = NULL;
    if (setjmp(c->f.jb)) {
        gil_hold(&c->f);
        free((void *)lut_n);
        free((void *)lut_c);
        free((void *)lut_t);
        free((void *)lut_s);
        c->dead = 1;
        raise_fail(&c->f, "native Kineto scan");
        return NULL;
    }
    Py_ssize_t nm = PyList_GET_SIZE(p->mevents);
    for (Py_ssize_t j = 0; j < nm; j++)
        if (PyList_Append(c->mevents, PyList_GET_ITEM(p->mevents, j)) < 0) fail_py(&c->f);
    gil_release(&c->f);
    lut_n = absorb_table(c, &c->names, &p->names);
    lut_c = absorb_table(c, &c->cats, &p->cats);
    lut_t = absorb_table(c, &c->tracks, &p->tracks);
    lut_s = absorb_table(c, &c->stexts, &p->stexts);
    const TrackDesc *pd = (const TrackDesc *)p->tdesc.data;
    for (size_t i = 0; i < p->tracks.nents; i++)
        if ((size_t)lut_t[i] * sizeof(TrackDesc) == c->tdesc.len)
            vec_put(&c->f, &c->tdesc, &pd[i], sizeof(TrackDesc));
    absorb_ids(c, &c->name_ids, &p->name_ids, (const int32_t *)lut_n);
    absorb_ids(c, &c->cat_ids, &p->cat_ids, (const int32_t *)lut_c);
    absorb_ids(c, &c->track_ids, &p->track_ids, (const int32_t *)lut_t);
    vec_put(&c->f, &c->ts_exact, p->ts_exact.data, p->ts_exact.len);
    vec_put(&c->f, &c->ts_isexp, p->ts_isexp.data, p->ts_isexp.len);
    vec_put(&c->f, &c->ts_approx, p->ts_approx.data, p->ts_approx.len);
    vec_put(&c->f, &c->dur_d, p->dur_d.data, p->dur_d.len);
    for (int s = 0; s < N_STATS; s++) {
        StatCol *o = &c->stats[s], *q = &p->stats[s];
        size_t m = q->idx.len / sizeof(int64_t);
        if (o->idx.len + q->idx.len > o->idx.cap) vec_grow(&c->f, &o->idx, q->idx.len);
        const int64_t *from = (const int64_t *)q->idx.data;
        int64_t *to = (int64_t *)(o->idx.data + o->idx.len);
        for (size_t k = 0; k < m; k++) to[k] = from[k] + c->n_kept;
        o->idx.len += q->idx.len;
        vec_put(&c->f, &o->val, q->val.data, q->val.len);
        vec_put(&c->f, &o->isf, q->isf.data, q->isf.len);
        o->any_float |= q->any_float;
    }
    for (int s = 0; s < N_SSTATS; s++) {
        StatCol *o = &c->sstats[s], *q = &p->sstats[s];
        size_t m = q->idx.len / sizeof(int64_t);
        if (o->idx.len + q->idx.len > o->idx.cap) vec_grow(&c->f, &o->idx, q->idx.len);
        if (o->val.len + q->val.len > o->val.cap) vec_grow(&c->f, &o->val, q->val.len);
        const int64_t *from = (const int64_t *)q->idx.data, *ids = (const int64_t *)q->val.data;
        int64_t *to = (int64_t *)(o->idx.data + o->idx.len), *tv = (int64_t *)(o->val.data + o->val.len);
        for (size_t k = 0; k < m; k++) {
            to[k] = from[k] + c->n_kept;
            tv[k] = lut_s[ids[k]];
        }
        o->idx.len += q->idx.len;
        o->val.len += q->val.len;
    }
    c->n_kept += p->n_kept;
    c->n_raw += p->n_raw;
    c->bad += p->bad;
    gil_hold(&c->f);
    free((void *)lut_n);
    free((void *)lut_c);
    free((void *)lut_t);
    free((void *)lut_s);
    Py_RETURN_TRUE;
}

