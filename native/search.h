/*
 * native/search.h — the answer of np.searchsorted for one key, galloping on from the
 * last key's answer: what search.c's searches and passes.c's step lookups share.
 */
#ifndef TB_PERFDIAG_SEARCH_H
#define TB_PERFDIAG_SEARCH_H

/* The answer for key x: how many of the sorted a[0..n) are below it (SS_BELOW), left in
 * prev.  Where `on` (x is not below the last key, whose answer prev holds) it gallops on
 * from there: keys mostly in order take one or two steps; else the whole column.  Then
 * it halves by conditional moves. */
#define SS_FIND(T, a, n, x, on, prev)                                                   \
    do {                                                                                \
        Py_ssize_t lo_ = 0, len_ = (n);                                                 \
        if (on) {                                                                       \
            Py_ssize_t step_ = 1;                                                       \
            lo_ = (prev);                                                               \
            while (lo_ + step_ <= (n) && SS_BELOW((a)[lo_ + step_ - 1], (x))) {         \
                lo_ += step_;                                                           \
                step_ <<= 1;                                                            \
            }                                                                           \
            len_ = step_ < (n) - lo_ ? step_ : (n) - lo_;                               \
        }                                                                               \
        /* the answer is in [lo_, lo_ + len_] */                                        \
        const T *base_ = (a) + lo_;                                                     \
        if (len_ == 0) {                                                                \
            (prev) = lo_;                                                               \
        } else {                                                                        \
            while (len_ > 1) {                                                          \
                Py_ssize_t half_ = len_ >> 1;                                           \
                base_ = SS_BELOW(base_[half_], (x)) ? base_ + half_ : base_;            \
                len_ -= half_;                                                          \
            }                                                                           \
            (prev) = (base_ - (a)) + SS_BELOW(*base_, (x));                             \
        }                                                                               \
    } while (0)

#define SS_BELOW(y, x) (right ? (y) <= (x) : (y) < (x))
#endif
