/*
 * native/strings.h — what both scanners read strings with: an arena for copied bytes,
 * a table that interns byte strings in first-seen order, and strict UTF-8 validation.
 * Static here (not in common.c): interning runs once per event, and each scanner's
 * compiler keeps it inlined where it was in one file.
 */
#ifndef TB_PERFDIAG_STRINGS_H
#define TB_PERFDIAG_STRINGS_H

#include "common.h"

/* ---------------- arena: stable storage for copied strings ---------------- */

typedef struct Chunk {
    struct Chunk *next;
    size_t used, cap;
    unsigned char data[];
} Chunk;

typedef struct {
    Chunk *head;
} Arena;

static unsigned char *arena_alloc(Fail *f, Arena *a, size_t n) {
    Chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = (Chunk *)malloc(sizeof(Chunk) + cap);
        if (!c) fail_oom(f);
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    unsigned char *r = c->data + c->used;
    c->used += n;
    return r;
}

static void arena_free(Arena *a) {
    Chunk *c = a->head;
    while (c) {
        Chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
}

/* ---------------- string interning (first-seen order) ---------------- */

typedef struct {
    const unsigned char *p;
    size_t n;
    uint64_t h;
} Ent;

typedef struct {
    Ent *ents;
    size_t nents, cap;
    int32_t *slots;    /* -1 = empty */
    size_t mask;
} Table;

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Two lanes of 8 bytes, each one multiply and a rotation per word (the rotation brings
 * the product's mixed high bits down), folded by mix64: kernel names run to hundreds of
 * bytes and are hashed once per event. */
static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t a = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)n * 0x87c37b91114253d5ULL);
    uint64_t b = 0xC2B2AE3D27D4EB4FULL;
    size_t left = n;
    while (left >= 16) {
        uint64_t w0, w1;
        memcpy(&w0, p, 8);
        memcpy(&w1, p + 8, 8);
        a = (a ^ w0) * 0xff51afd7ed558ccdULL;
        b = (b ^ w1) * 0xc4ceb9fe1a85ec53ULL;
        a = (a << 31) | (a >> 33);
        b = (b << 27) | (b >> 37);
        p += 16;
        left -= 16;
    }
    if (left >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        a = (a ^ w) * 0xff51afd7ed558ccdULL;
        a = (a << 31) | (a >> 33);
        p += 8;
        left -= 8;
    }
    /* the last bytes by overlapping loads, not a byte loop */
    uint64_t w = 0;
    if (left && n >= 8) {
        memcpy(&w, p + left - 8, 8);
    } else if (left >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + left - 4, 4);
        w = lo | (uint64_t)hi << 32;
    } else if (left) {
        w = p[0] | (uint64_t)p[left / 2] << 8 | (uint64_t)p[left - 1] << 16;
    }
    b = (b ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return mix64(a ^ ((b << 32) | (b >> 32)) ^ ((uint64_t)left << 59));
}

static void table_rehash(Fail *f, Table *t) {
    size_t ns = t->mask ? (t->mask + 1) * 2 : 64;
    int32_t *slots = (int32_t *)malloc(ns * sizeof(int32_t));
    if (!slots) fail_oom(f);
    memset(slots, 0xff, ns * sizeof(int32_t));
    for (size_t i = 0; i < t->nents; i++) {
        size_t s = (size_t)t->ents[i].h & (ns - 1);
        while (slots[s] >= 0) s = (s + 1) & (ns - 1);
        slots[s] = (int32_t)i;
    }
    free(t->slots);
    t->slots = slots;
    t->mask = ns - 1;
}

/* Id of the byte string p[0:n]; a new entry keeps the pointer (copy==0: p must
 * outlive the table) or a copy made in the arena. */
static int32_t intern(Fail *f, Table *t, Arena *a, const unsigned char *p, size_t n, int copy) {
    if (UNLIKELY(t->mask == 0 || (t->nents + 1) * 2 > t->mask + 1)) table_rehash(f, t);
    uint64_t h = hash_bytes(p, n);
    size_t s = (size_t)h & t->mask;
    for (;;) {
        int32_t i = t->slots[s];
        if (i < 0) break;
        const Ent *e = &t->ents[i];
        if (e->h == h && e->n == n && memcmp(e->p, p, n) == 0) return i;
        s = (s + 1) & t->mask;
    }
    if (t->nents >= 0x7fffffff) fail_at(f, 0, "too many distinct strings");
    if (t->nents == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        Ent *ne = (Ent *)realloc(t->ents, nc * sizeof(Ent));
        if (!ne) fail_oom(f);
        t->ents = ne;
        t->cap = nc;
    }
    if (copy) {
        unsigned char *q = arena_alloc(f, a, n ? n : 1);
        if (n) memcpy(q, p, n);
        p = q;
    }
    int32_t id = (int32_t)t->nents++;
    t->ents[id].p = p;
    t->ents[id].n = n;
    t->ents[id].h = h;
    t->slots[s] = id;
    return id;
}

static void table_free(Table *t) {
    free(t->ents);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

/* ---------------- UTF-8 validation (strict, as upb and orjson) ---------------- */

/* p[0] >= 0x80: pointer after a valid multi-byte sequence, or NULL */
static inline const unsigned char *utf8_seq(const unsigned char *p, const unsigned char *end) {
    unsigned b0 = p[0];
    if (b0 < 0xC2) return NULL;
    if (b0 < 0xE0) {
        if (end - p < 2 || (p[1] & 0xC0) != 0x80) return NULL;
        return p + 2;
    }
    if (b0 < 0xF0) {
        if (end - p < 3) return NULL;
        unsigned b1 = p[1];
        if (b0 == 0xE0) {
            if (b1 < 0xA0 || b1 > 0xBF) return NULL;
        } else if (b0 == 0xED) {
            if (b1 < 0x80 || b1 > 0x9F) return NULL;
        } else if ((b1 & 0xC0) != 0x80) {
            return NULL;
        }
        if ((p[2] & 0xC0) != 0x80) return NULL;
        return p + 3;
    }
    if (b0 > 0xF4 || end - p < 4) return NULL;
    unsigned b1 = p[1];
    if (b0 == 0xF0) {
        if (b1 < 0x90 || b1 > 0xBF) return NULL;
    } else if (b0 == 0xF4) {
        if (b1 < 0x80 || b1 > 0x8F) return NULL;
    } else if ((b1 & 0xC0) != 0x80) {
        return NULL;
    }
    if ((p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return NULL;
    return p + 4;
}

static inline int utf8_valid(const unsigned char *p, size_t n) {
    const unsigned char *end = p + n;
    while (p < end) {
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (w & 0x8080808080808080ULL) break;
            p += 8;
        }
        if (p >= end) break;
        if (*p < 0x80) {
            p++;
            continue;
        }
        p = utf8_seq(p, end);
        if (!p) return 0;
    }
    return 1;
}

#endif
