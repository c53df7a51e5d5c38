/* l2m.engine._scan: one pass in C from JSON log lines to the referenced fields' columns.
 *
 * Input: a list of lines (bytes), the field tree (levels of keys, each key naming the output
 * slot it fills, the slot's priority and the level below it) and the number of slots.
 * Output: for each slot, the buffers of its columns (see scan()), or the row of the first line
 * this scanner is not sure of, which the caller decodes the exact, slower way.
 *
 * Why a line is only ever accepted when orjson would accept it with the same values: the
 * grammar is RFC 8259's, strictly (the only whitespace space, tab, CR and LF; no NaN, no
 * leading zeros, no trailing commas); every string is checked as strict UTF-8 (no overlong
 * forms, no surrogates, nothing past U+10FFFF) and its escapes (a \u surrogate only as a
 * pair). Everything else is "not sure" rather than an error of its own: control characters
 * in strings, numbers that could leave the double range or need more than 64 bits, a
 * referenced key written twice (escaped or not), an escaped key past MAX_ESCAPED_KEY bytes,
 * nesting past MAX_DEPTH, a line that is not an object, blank or not bytes. The caller's
 * exact path (msgspec, then orjson for the reason) decides those, so this file never has to agree with orjson's error messages.
 *
 * Floats are read by CPython's own correctly rounded, locale-independent
 * PyOS_string_to_double: the value Python's float() (and msgspec, and orjson) gives.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Kinds of value, one byte per row and slot (l2m.engine.decoding names them). */
enum { K_MISSING = 0, K_STR = 1, K_INT = 2, K_FLOAT = 3, K_TRUE = 4, K_FALSE = 5, K_OTHER = 6 };

/* Deeper lines go the exact way (msgspec's and orjson's own limits are higher). */
#define MAX_DEPTH 64
/* Digits of a number this scanner reads itself; an exponent's magnitude likewise. With at
 * most 100 digits and an exponent under 100, a number is within 1e-200 .. 1e200: never past
 * the double range, never rounded to zero. */
#define MAX_DIGITS 100
#define MAX_EXPONENT 100
/* Integers of at most 18 digits fit int64 exactly; longer ones go the exact way. */
#define MAX_INT_DIGITS 18
#define MAX_FLOAT_TEXT 64
/* Levels of at most this many keys are searched one by one, larger ones by hash. */
#define LINEAR_LEVEL 24
/* How many lines ahead the scan asks for a line's memory. */
#define PREFETCH 6
/* A key with escapes is unescaped to be looked up if it is at most this long. */
#define MAX_ESCAPED_KEY 256

typedef struct {
    const char *key;
    Py_ssize_t len;
    int slot;   /* the output slot this key fills, or -1 */
    int prio;   /* 2: a top-level (flat) key, 1: the end of a nested path */
    int child;  /* the level of this key's object value, or -1 */
} Entry;

typedef struct {
    int first, count; /* entries[first .. first + count) */
    int *table;       /* open addressing by key hash: entry indices, -1 empty */
    uint64_t mask;    /* table size - 1 (a power of two, at least twice count) */
} Level;

/* FNV-1a: the hash of a key, for its level's table. */
static inline uint64_t key_hash(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* What one line says of one slot, until the line is done. */
typedef struct {
    int kind, prio;
    const unsigned char *start, *end; /* a string's raw text, between its quotes */
    int escaped;
    int64_t ival;
    double dval;
} Value;

typedef struct {
    const unsigned char *p, *end;
    int depth;
    Entry *entries;
    Level *levels;
    char *seen; /* per entry: met in this line (a second time is a duplicate key) */
    Value *values;
    /* The entries met and the slots given a value in this line: a line's cost follows the
     * fields it has, not every field the rules read. */
    int *met, nmet, *given, ngiven;
} Scanner;

#define UNSURE (-1)

static inline void skip_ws(Scanner *s) {
    while (s->p < s->end) {
        unsigned char c = *s->p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            s->p++;
        else
            break;
    }
}

static inline int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return UNSURE;
    }
    *out = v;
    return 0;
}

/* Bytes a string's fast loop passes over: printable ASCII but the quote and the backslash. */
static unsigned char plain[256];

static void init_plain(void) {
    for (int c = 0x20; c < 0x80; c++)
        plain[c] = c != '"' && c != '\\';
}

/* A string from its opening quote: checked; start and end its raw text, escaped whether it
 * has escapes. Leaves p after the closing quote. */
static int scan_string(Scanner *s, const unsigned char **start, const unsigned char **end,
                       int *escaped) {
    const unsigned char *p = s->p + 1, *e = s->end;
    int esc = 0;
    *start = p;
    for (;;) {
        /* The common case: a run of plain ASCII. */
        while (p + 4 <= e && plain[p[0]] && plain[p[1]] && plain[p[2]] && plain[p[3]])
            p += 4;
        while (p < e && plain[*p])
            p++;
        if (p >= e)
            return UNSURE;
        unsigned char c = *p;
        if (c == '"')
            break;
        if (c == '\\') {
            esc = 1;
            if (p + 1 >= e)
                return UNSURE;
            unsigned char n = p[1];
            if (n == '"' || n == '\\' || n == '/' || n == 'b' || n == 'f' || n == 'n' ||
                n == 'r' || n == 't') {
                p += 2;
                continue;
            }
            if (n != 'u' || p + 6 > e)
                return UNSURE;
            unsigned cp;
            if (hex4(p + 2, &cp))
                return UNSURE;
            p += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return UNSURE; /* a lone low surrogate */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p + 6 > e || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return UNSURE; /* a high surrogate without its pair */
                p += 6;
            }
            continue;
        }
        if (c < 0x20)
            return UNSURE; /* a raw control character: not JSON */
        /* Strict UTF-8 (RFC 3629). */
        if (c >= 0xC2 && c <= 0xDF) {
            if (p + 2 > e || (p[1] & 0xC0) != 0x80) return UNSURE;
            p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (p + 3 > e || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return UNSURE;
            if (c == 0xE0 && p[1] < 0xA0) return UNSURE; /* overlong */
            if (c == 0xED && p[1] > 0x9F) return UNSURE; /* a surrogate */
            p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (p + 4 > e || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
                (p[3] & 0xC0) != 0x80)
                return UNSURE;
            if (c == 0xF0 && p[1] < 0x90) return UNSURE; /* overlong */
            if (c == 0xF4 && p[1] > 0x8F) return UNSURE; /* past U+10FFFF */
            p += 4;
        } else {
            return UNSURE;
        }
    }
    *end = p;
    *escaped = esc;
    s->p = p + 1;
    return 0;
}

/* Powers of ten a double holds exactly. */
static const double exact_tens[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                    1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                    1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A checked number token read without strtod when that is exact (Clinger's fast path): at
 * most 15 significant digits make an integer m < 2^53, exact as a double, and for |e| <= 22
 * 10^|e| is exact too, so m * 10^e or m / 10^-e is one correctly rounded operation: the
 * double nearest the decimal, which is what strtod gives. 0 when not so (strtod decides). */
static int fast_float(const unsigned char *p, const unsigned char *end, double *out) {
    int negative = *p == '-', digits = 0, e = 0;
    uint64_t m = 0;
    if (negative)
        p++;
    while (p < end && *p >= '0' && *p <= '9') {
        m = m * 10 + (uint64_t)(*p++ - '0');
        if (m) digits++;
        if (digits > 15) return 0;
    }
    if (p < end && *p == '.') {
        p++;
        while (p < end && *p >= '0' && *p <= '9') {
            m = m * 10 + (uint64_t)(*p++ - '0');
            if (m) digits++;
            if (digits > 15) return 0;
            e--;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int sign = 1, x = 0;
        if (*p == '+' || *p == '-')
            sign = *p++ == '-' ? -1 : 1;
        while (p < end && *p >= '0' && *p <= '9') {
            x = x * 10 + (*p++ - '0');
            if (x > 1000) return 0;
        }
        e += sign * x;
    }
    if (e < -22 || e > 22)
        return 0;
    double d = (double)m;
    d = e < 0 ? d / exact_tens[-e] : d * exact_tens[e];
    *out = negative ? -d : d;
    return 1;
}

/* A number: checked against the grammar and the bounds above; when ``v`` is given, read. */
static int scan_number(Scanner *s, Value *v) {
    const unsigned char *p = s->p, *e = s->end, *start = p;
    int negative = 0, digits = 0, integral = 1;
    uint64_t mag = 0;
    if (*p == '-') {
        negative = 1;
        p++;
    }
    if (p >= e)
        return UNSURE;
    if (*p == '0') {
        p++;
        digits = 1;
    } else if (*p >= '1' && *p <= '9') {
        while (p < e && *p >= '0' && *p <= '9') {
            if (digits < MAX_INT_DIGITS)
                mag = mag * 10 + (uint64_t)(*p - '0');
            if (++digits > MAX_DIGITS)
                return UNSURE; /* also keeps the count far from overflowing */
            p++;
        }
    } else {
        return UNSURE;
    }
    if (p < e && *p == '.') {
        integral = 0;
        p++;
        const unsigned char *f = p;
        while (p < e && *p >= '0' && *p <= '9')
            p++;
        if (p == f || p - f > MAX_DIGITS)
            return UNSURE;
        digits += (int)(p - f);
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        integral = 0;
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        const unsigned char *x = p;
        int exponent = 0;
        while (p < e && *p >= '0' && *p <= '9') {
            if (exponent < 10 * MAX_EXPONENT)
                exponent = exponent * 10 + (*p - '0');
            p++;
        }
        if (p == x || exponent >= MAX_EXPONENT)
            return UNSURE;
    }
    if (digits > MAX_DIGITS)
        return UNSURE;
    s->p = p;
    if (v == NULL)
        return 0;
    if (integral) {
        if (digits > MAX_INT_DIGITS)
            return UNSURE; /* orjson's big-integer rules: the exact path */
        v->kind = K_INT;
        v->ival = negative ? -(int64_t)mag : (int64_t)mag;
        v->dval = (double)v->ival;
        return 0;
    }
    if (fast_float(start, p, &v->dval)) {
        v->kind = K_FLOAT;
        return 0;
    }
    Py_ssize_t n = p - start;
    if (n >= MAX_FLOAT_TEXT)
        return UNSURE;
    char text[MAX_FLOAT_TEXT];
    memcpy(text, start, (size_t)n);
    text[n] = '\0';
    char *stop = NULL;
    double d = PyOS_string_to_double(text, &stop, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return UNSURE;
    }
    if (stop != text + n)
        return UNSURE;
    v->kind = K_FLOAT;
    v->dval = d;
    return 0;
}

static int scan_value(Scanner *s, int entry);

static inline int literal(Scanner *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return UNSURE;
    s->p += n;
    return 0;
}

/* Writes a checked string's text (start .. end, between its quotes), escapes resolved, as
 * UTF-8 to ``out``; returns the bytes written. An escape's UTF-8 is never longer than its
 * text (\uXXXX: 6 bytes for at most 3, a pair's 12 for 4): end - start bytes are enough. */
static Py_ssize_t unescape(const unsigned char *p, const unsigned char *end, unsigned char *out) {
    unsigned char *o = out;
    while (p < end) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        unsigned char c = p[1];
        p += 2;
        switch (c) {
        case 'b': *o++ = '\b'; continue;
        case 'f': *o++ = '\f'; continue;
        case 'n': *o++ = '\n'; continue;
        case 'r': *o++ = '\r'; continue;
        case 't': *o++ = '\t'; continue;
        case 'u': break;
        default: *o++ = c; continue; /* " \ / */
        }
        unsigned cp, lo;
        hex4(p, &cp);
        p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            hex4(p + 2, &lo);
            p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
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
    return o - out;
}

/* Sets a slot's value unless a higher-priority key (the flat one) gave it already. */
static inline void put(Scanner *s, int entry, Value *v) {
    Entry *en = &s->entries[entry];
    Value *slot = &s->values[en->slot];
    if (slot->kind != K_MISSING && slot->prio > en->prio)
        return;
    if (slot->kind == K_MISSING)
        s->given[s->ngiven++] = en->slot;
    *slot = *v;
    slot->prio = en->prio;
}

/* A level's entry for a key, or -1: compared one by one (a small level), or through the
 * level's hash table. */
static inline int find_linear(Scanner *s, Level *lv, const unsigned char *k, Py_ssize_t n) {
    for (int i = lv->first; i < lv->first + lv->count; i++) {
        Entry *en = &s->entries[i];
        if (en->len == n && (n == 0 || (en->key[0] == (char)k[0] &&
                                        memcmp(en->key, k, (size_t)n) == 0)))
            return i;
    }
    return -1;
}

static inline int find_hashed(Scanner *s, Level *lv, const unsigned char *k, Py_ssize_t n) {
    for (uint64_t h = key_hash(k, n) & lv->mask;; h = (h + 1) & lv->mask) {
        int i = lv->table[h];
        if (i < 0)
            return -1;
        Entry *en = &s->entries[i];
        if (en->len == n && memcmp(en->key, k, (size_t)n) == 0)
            return i;
    }
}

/* After a container's opening bracket: 1 when it closes at once (empty), 0 when a member
 * follows. */
static inline int open_container(Scanner *s, unsigned char close) {
    if (++s->depth > MAX_DEPTH)
        return UNSURE;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 1;
    }
    return 0;
}

/* After a member: 0 when another follows (past its comma), 1 when the container closes. */
static inline int next_member(Scanner *s, unsigned char close) {
    skip_ws(s);
    if (s->p >= s->end)
        return UNSURE;
    if (*s->p == ',') {
        s->p++;
        skip_ws(s);
        return 0;
    }
    if (*s->p == close) {
        s->p++;
        s->depth--;
        return 1;
    }
    return UNSURE;
}

/* An object from its opening brace; ``level`` is the tree level its keys are looked up in,
 * or -1 when no referenced field is below it. */
static int scan_object(Scanner *s, int level) {
    int state = open_container(s, '}');
    if (state)
        return state == 1 ? 0 : UNSURE;
    for (;;) {
        if (s->p >= s->end || *s->p != '"')
            return UNSURE;
        const unsigned char *ks, *ke;
        int escaped, entry = -1;
        if (scan_string(s, &ks, &ke, &escaped))
            return UNSURE;
        if (level >= 0) {
            unsigned char key[MAX_ESCAPED_KEY];
            if (escaped) { /* matched as the exact decoders match it: unescaped */
                if (ke - ks > MAX_ESCAPED_KEY)
                    return UNSURE;
                Py_ssize_t n = unescape(ks, ke, key);
                ks = key;
                ke = key + n;
            }
            Level *lv = &s->levels[level];
            Py_ssize_t klen = ke - ks;
            entry = lv->count <= LINEAR_LEVEL ? find_linear(s, lv, ks, klen)
                                              : find_hashed(s, lv, ks, klen);
            if (entry >= 0) {
                if (s->seen[entry])
                    return UNSURE; /* a duplicate key: orjson keeps the last */
                s->seen[entry] = 1;
                s->met[s->nmet++] = entry;
            }
        }
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':')
            return UNSURE;
        s->p++;
        skip_ws(s);
        if (scan_value(s, entry))
            return UNSURE;
        state = next_member(s, '}');
        if (state)
            return state == 1 ? 0 : UNSURE;
    }
}

static int scan_array(Scanner *s) {
    int state = open_container(s, ']');
    if (state)
        return state == 1 ? 0 : UNSURE;
    for (;;) {
        if (scan_value(s, -1))
            return UNSURE;
        state = next_member(s, ']');
        if (state)
            return state == 1 ? 0 : UNSURE;
    }
}

/* One value; ``entry`` is the tree entry whose key it belongs to, or -1. */
static int scan_value(Scanner *s, int entry) {
    if (s->p >= s->end)
        return UNSURE;
    Entry *en = entry >= 0 ? &s->entries[entry] : NULL;
    int wanted = en != NULL && en->slot >= 0;
    Value v = {0};
    switch (*s->p) {
    case '{':
        if (scan_object(s, en != NULL ? en->child : -1))
            return UNSURE;
        v.kind = K_OTHER;
        break;
    case '[':
        if (scan_array(s))
            return UNSURE;
        v.kind = K_OTHER;
        break;
    case '"':
        if (scan_string(s, &v.start, &v.end, &v.escaped))
            return UNSURE;
        v.kind = K_STR;
        break;
    case 't':
        if (literal(s, "true", 4))
            return UNSURE;
        v.kind = K_TRUE;
        break;
    case 'f':
        if (literal(s, "false", 5))
            return UNSURE;
        v.kind = K_FALSE;
        break;
    case 'n':
        return literal(s, "null", 4); /* null is missing: the slot keeps what it has */
    default:
        if (scan_number(s, wanted ? &v : NULL))
            return UNSURE;
        break;
    }
    if (wanted)
        put(s, entry, &v);
    return 0;
}

/* Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static inline int digits(const unsigned char *p, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 0;
}

/* Epoch milliseconds of the usual ISO time, YYYY-MM-DDTHH:MM:SS, then .fff or .ffffff or
 * nothing, then Z or +HH:MM or -HH:MM, exactly as datetime.fromisoformat and
 * l2m.semantics.values.parse_timestamp read it (an aware time, floored to the millisecond, years
 * 0001-9999 in UTC). 0 when read; -1 for anything else, which Python then parses (a
 * valid time in another shape, or nothing). */
static int iso_time(const unsigned char *p, Py_ssize_t n, int64_t *out) {
    int year, month, day, hour, minute, second, micros = 0, offset = 0;
    if (n < 20 || p[4] != '-' || p[7] != '-' || p[10] != 'T' || p[13] != ':' || p[16] != ':')
        return -1;
    if (digits(p, 4, &year) || digits(p + 5, 2, &month) || digits(p + 8, 2, &day) ||
        digits(p + 11, 2, &hour) || digits(p + 14, 2, &minute) || digits(p + 17, 2, &second))
        return -1;
    Py_ssize_t i = 19;
    if (p[i] == '.') {
        int frac;
        if (n >= i + 4 && digits(p + i + 1, 3, &frac) == 0 &&
            (i + 4 == n || p[i + 4] < '0' || p[i + 4] > '9')) {
            micros = frac * 1000;
            i += 4;
        } else if (n >= i + 7 && digits(p + i + 1, 6, &frac) == 0 &&
                   (i + 7 == n || p[i + 7] < '0' || p[i + 7] > '9')) {
            micros = frac;
            i += 7;
        } else {
            return -1;
        }
    }
    if (i + 1 == n && p[i] == 'Z') {
        offset = 0;
    } else if (i + 6 == n && (p[i] == '+' || p[i] == '-') && p[i + 3] == ':') {
        int oh, om;
        if (digits(p + i + 1, 2, &oh) || digits(p + i + 4, 2, &om) || oh > 23 || om > 59)
            return -1;
        offset = (oh * 60 + om) * (p[i] == '-' ? -1 : 1);
    } else {
        return -1;
    }
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (year < 1 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 ||
        second > 59)
        return -1;
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (day > month_days[month - 1] + (month == 2 && leap))
        return -1;
    int64_t seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 +
                      second - (int64_t)offset * 60;
    int64_t ms = seconds * 1000 + micros / 1000;
    int64_t lowest = days_from_civil(1, 1, 1) * 86400000;
    int64_t highest = days_from_civil(9999, 12, 31) * 86400000 + 86399999;
    if (ms < lowest || ms > highest)
        return -1;
    *out = ms;
    return 0;
}

/* A growing byte buffer. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buffer;

static int reserve(Buffer *b, Py_ssize_t more) {
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* Appends a checked string's text, escapes resolved, as UTF-8. */
static int append_text(Buffer *b, const Value *v) {
    Py_ssize_t n = v->end - v->start;
    if (reserve(b, n))
        return -1;
    if (!v->escaped) {
        memcpy(b->data + b->len, v->start, (size_t)n);
        b->len += n;
    } else {
        b->len += unescape(v->start, v->end, (unsigned char *)b->data + b->len);
    }
    return 0;
}

/* The columns of one slot, written row by row. */
typedef struct {
    /* bytes, preallocated; valid, int_valid and num_valid are Arrow validity bitmaps of the
     * rows holding a string, an integer, a number */
    PyObject *kinds, *offsets, *valid, *ints, *doubles, *int_valid, *num_valid;
    Buffer text;
    unsigned present; /* bit k: some row of kind k */
} Out;

static void out_free(Out *o) {
    Py_XDECREF(o->kinds);
    Py_XDECREF(o->offsets);
    Py_XDECREF(o->valid);
    Py_XDECREF(o->ints);
    Py_XDECREF(o->doubles);
    Py_XDECREF(o->int_valid);
    Py_XDECREF(o->num_valid);
    PyMem_Free(o->text.data);
}

/* The tree from Python: a list of levels, each a list of (key: bytes, slot, prio, child). */
static int read_tree(PyObject *levels_obj, int nslots, Level **levels, Entry **entries,
                     int *nentries) {
    if (!PyList_Check(levels_obj)) {
        PyErr_SetString(PyExc_TypeError, "levels must be a list");
        return -1;
    }
    Py_ssize_t nlevels = PyList_GET_SIZE(levels_obj), total = 0;
    for (Py_ssize_t i = 0; i < nlevels; i++) {
        PyObject *lv = PyList_GET_ITEM(levels_obj, i);
        if (!PyList_Check(lv)) {
            PyErr_SetString(PyExc_TypeError, "a level must be a list");
            return -1;
        }
        total += PyList_GET_SIZE(lv);
    }
    *levels = PyMem_Calloc((size_t)(nlevels ? nlevels : 1), sizeof(Level));
    *entries = PyMem_Calloc((size_t)(total ? total : 1), sizeof(Entry));
    if (*levels == NULL || *entries == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int k = 0;
    for (Py_ssize_t i = 0; i < nlevels; i++) {
        PyObject *lv = PyList_GET_ITEM(levels_obj, i);
        (*levels)[i].first = k;
        (*levels)[i].count = (int)PyList_GET_SIZE(lv);
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(lv); j++, k++) {
            Entry *en = &(*entries)[k];
            char *key;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(lv, j), "y#iii", &key, &en->len, &en->slot,
                                  &en->prio, &en->child))
                return -1;
            en->key = key; /* owned by the tuple, alive for the call */
            if (en->child < -1 || en->child >= nlevels || en->slot < -1 || en->slot >= nslots) {
                PyErr_SetString(PyExc_ValueError, "a slot or child level out of range");
                return -1;
            }
        }
    }
    *nentries = k;
    for (Py_ssize_t i = 0; i < nlevels; i++) {
        Level *lv = &(*levels)[i];
        uint64_t size = 8;
        while (size < 2 * (uint64_t)lv->count)
            size *= 2;
        lv->table = PyMem_Malloc(size * sizeof(int));
        if (lv->table == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        lv->mask = size - 1;
        for (uint64_t j = 0; j < size; j++)
            lv->table[j] = -1;
        for (int e = lv->first; e < lv->first + lv->count; e++) {
            Entry *en = &(*entries)[e];
            uint64_t h = key_hash((const unsigned char *)en->key, en->len) & lv->mask;
            while (lv->table[h] >= 0)
                h = (h + 1) & lv->mask;
            lv->table[h] = e;
        }
    }
    return 0;
}

/* A line the scanner is not sure of, with ``skip``: its row stays missing in every slot,
 * without an event time, and is listed in ``refused`` for the exact decoder. Returns -1
 * when there is no list (no ``skip``: the scan stops there) or it cannot grow. */
static int refuse(PyObject *refused, Py_ssize_t row, PyObject *times, PyObject *timed) {
    if (refused == NULL)
        return -1;
    PyObject *r = PyLong_FromSsize_t(row);
    if (r == NULL || PyList_Append(refused, r)) {
        Py_XDECREF(r);
        return -1;
    }
    Py_DECREF(r);
    if (times != NULL) {
        ((int64_t *)PyBytes_AS_STRING(times))[row] = 0;
        ((uint8_t *)PyBytes_AS_STRING(timed))[row] = 0;
    }
    return 0;
}

/* scan(lines, levels, slots, time_slot, skip=False) -> int | (columns, times, timed[, refused])
 *
 * columns: per slot, n rows: kinds (uint8, K_*), offsets (int32, n + 1) and text (UTF-8) of
 * the string values, valid (a bitmap, LSB first: the rows holding a string), ints (int64: the
 * K_INT values) and doubles (float64: the K_INT and K_FLOAT values as doubles), int_valid
 * and num_valid (bitmaps of the K_INT rows, of the K_INT and K_FLOAT rows), and present
 * (an int: bit k set when some row is of kind k). times (int64)
 * and timed (uint8, 1 where read): the event time of time_slot's value where iso_time reads
 * it or it is an integer of years 0001-9999 (epoch milliseconds); both None when time_slot is
 * -1. An int instead when a line is one to decode the exact way: the first such row (the
 * lines before it can be scanned alone). With skip, such a line is left missing instead and
 * its row listed in refused (the fourth item), and the scan goes on; an int then only when
 * the list cannot grow or a slot's text passes 2 GiB. */
static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *lines, *levels_obj;
    int nslots, time_slot, skip = 0;
    if (!PyArg_ParseTuple(args, "O!O!ii|p", &PyList_Type, &lines, &PyList_Type, &levels_obj,
                          &nslots, &time_slot, &skip))
        return NULL;
    if (nslots < 0 || time_slot < -1 || time_slot >= nslots) {
        PyErr_SetString(PyExc_ValueError, "slots must be >= 0, time_slot one of them or -1");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(lines);
    Level *levels = NULL;
    Py_ssize_t nlevels = PyList_GET_SIZE(levels_obj);
    Entry *entries = NULL;
    int nentries = 0;
    char *seen = NULL;
    Value *values = NULL;
    Out *outs = NULL;
    int *met = NULL, *given = NULL;
    PyObject *result = NULL, *columns = NULL, *times = NULL, *timed = NULL, *refused = NULL;
    int sure = 1;
    int64_t lowest = days_from_civil(1, 1, 1) * 86400000;
    int64_t highest = days_from_civil(9999, 12, 31) * 86400000 + 86399999;

    if (read_tree(levels_obj, nslots, &levels, &entries, &nentries))
        goto done;
    seen = PyMem_Calloc((size_t)(nentries ? nentries : 1), 1);
    values = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(Value));
    outs = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(Out));
    met = PyMem_Calloc((size_t)(nentries ? nentries : 1), sizeof(int));
    given = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(int));
    if (seen == NULL || values == NULL || outs == NULL || met == NULL || given == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int k = 0; k < nslots; k++) {
        Out *o = &outs[k];
        o->kinds = PyBytes_FromStringAndSize(NULL, n);
        o->offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
        o->valid = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        o->ints = PyBytes_FromStringAndSize(NULL, n * 8);
        o->doubles = PyBytes_FromStringAndSize(NULL, n * 8);
        o->int_valid = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        o->num_valid = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        if (!o->kinds || !o->offsets || !o->valid || !o->ints || !o->doubles ||
            !o->int_valid || !o->num_valid)
            goto done;
        memset(PyBytes_AS_STRING(o->kinds), K_MISSING, (size_t)n);
        memset(PyBytes_AS_STRING(o->valid), 0, (size_t)((n + 7) / 8));
        memset(PyBytes_AS_STRING(o->int_valid), 0, (size_t)((n + 7) / 8));
        memset(PyBytes_AS_STRING(o->num_valid), 0, (size_t)((n + 7) / 8));
        memset(PyBytes_AS_STRING(o->ints), 0, (size_t)(n * 8));
        memset(PyBytes_AS_STRING(o->doubles), 0, (size_t)(n * 8));
        ((int32_t *)PyBytes_AS_STRING(o->offsets))[0] = 0;
    }

    if (skip && (refused = PyList_New(0)) == NULL)
        goto done;
    if (time_slot >= 0) {
        times = PyBytes_FromStringAndSize(NULL, n * 8);
        timed = PyBytes_FromStringAndSize(NULL, n);
        if (times == NULL || timed == NULL)
            goto done;
    }

    Scanner s = {.entries = entries, .levels = levels, .seen = seen, .values = values,
                 .met = met, .given = given};
    int root = PyList_GET_SIZE(levels_obj) > 0 ? 0 : -1;
    Py_ssize_t *filled = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(Py_ssize_t));
    Py_ssize_t *count = PyMem_Calloc((size_t)(nslots ? nslots : 1), sizeof(Py_ssize_t));
    if (filled == NULL || count == NULL) {
        PyMem_Free(filled);
        PyMem_Free(count);
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t bad = -1; /* the first line the scanner is not sure of */
    for (Py_ssize_t row = 0; row < n && sure; row++) {
        PyObject *line = PyList_GET_ITEM(lines, row);
        /* Lines are objects all over the heap: ask for a later one's first bytes (and its
         * header, in the same cache line) while this one is scanned. */
        if (row + PREFETCH < n) {
            const char *ahead = (const char *)PyList_GET_ITEM(lines, row + PREFETCH);
            __builtin_prefetch(ahead);
            __builtin_prefetch(ahead + 64);
            __builtin_prefetch(ahead + 128);
        }
        if (!PyBytes_CheckExact(line)) { /* a str or a tombstone: the exact path */
            if (refuse(refused, row, times, timed)) {
                sure = 0, bad = row;
                break;
            }
            continue;
        }
        s.p = (const unsigned char *)PyBytes_AS_STRING(line);
        s.end = s.p + PyBytes_GET_SIZE(line);
        s.depth = 0;
        for (int i = 0; i < s.nmet; i++)
            seen[met[i]] = 0;
        for (int i = 0; i < s.ngiven; i++)
            values[given[i]].kind = K_MISSING;
        s.nmet = s.ngiven = 0;
        skip_ws(&s);
        int accepted = s.p < s.end && *s.p == '{' && !scan_object(&s, root);
        if (accepted) {
            skip_ws(&s);
            accepted = s.p == s.end;
        }
        if (!accepted) {
            if (refuse(refused, row, times, timed)) {
                sure = 0, bad = row;
                break;
            }
            continue;
        }
        for (int i = 0; i < s.ngiven; i++) {
            int k = given[i];
            Out *o = &outs[k];
            Value *v = &values[k];
            count[k]++;
            ((uint8_t *)PyBytes_AS_STRING(o->kinds))[row] = (uint8_t)v->kind;
            o->present |= 1u << v->kind;
            char bit = (char)(1 << (row & 7));
            if (v->kind == K_INT) {
                ((int64_t *)PyBytes_AS_STRING(o->ints))[row] = v->ival;
                PyBytes_AS_STRING(o->int_valid)[row >> 3] |= bit;
            }
            if (v->kind == K_INT || v->kind == K_FLOAT) {
                ((double *)PyBytes_AS_STRING(o->doubles))[row] = v->dval;
                PyBytes_AS_STRING(o->num_valid)[row >> 3] |= bit;
            }
            if (v->kind == K_STR) {
                /* The rows since this slot's last string end where its text ends now. */
                int32_t *offsets = (int32_t *)PyBytes_AS_STRING(o->offsets);
                for (Py_ssize_t r = filled[k]; r < row; r++)
                    offsets[r + 1] = (int32_t)o->text.len;
                if (append_text(&o->text, v)) {
                    PyMem_Free(filled);
                    PyMem_Free(count);
                    goto done;
                }
                if (o->text.len > INT32_MAX) {
                    sure = 0, bad = row;
                    break;
                }
                offsets[row + 1] = (int32_t)o->text.len;
                filled[k] = row + 1;
                PyBytes_AS_STRING(o->valid)[row >> 3] |= bit;
            }
        }
        if (time_slot >= 0 && sure) {
            Value *v = &values[time_slot];
            int64_t ms = 0;
            int ok = 0;
            if (v->kind == K_STR && !v->escaped)
                ok = iso_time(v->start, v->end - v->start, &ms) == 0;
            else if (v->kind == K_INT && v->ival >= lowest && v->ival <= highest)
                ms = v->ival, ok = 1;
            ((int64_t *)PyBytes_AS_STRING(times))[row] = ok ? ms : 0;
            ((uint8_t *)PyBytes_AS_STRING(timed))[row] = (uint8_t)ok;
        }
    }
    for (int k = 0; k < nslots && sure; k++) {
        int32_t *offsets = (int32_t *)PyBytes_AS_STRING(outs[k].offsets);
        for (Py_ssize_t r = filled[k]; r < n; r++)
            offsets[r + 1] = (int32_t)outs[k].text.len;
        if (count[k] < n)
            outs[k].present |= 1u << K_MISSING;
    }
    PyMem_Free(filled);
    PyMem_Free(count);
    if (!sure) {
        if (!PyErr_Occurred()) /* else the refused list could not grow */
            result = PyLong_FromSsize_t(bad);
        goto done;
    }
    columns = PyList_New(nslots);
    if (columns == NULL)
        goto done;
    for (int k = 0; k < nslots; k++) {
        Out *o = &outs[k];
        PyObject *text = PyBytes_FromStringAndSize(o->text.data ? o->text.data : "",
                                                   o->text.len);
        if (text == NULL)
            goto done;
        PyObject *item = Py_BuildValue("(OOONOOOOI)", o->kinds, o->offsets, o->valid, text,
                                       o->ints, o->doubles, o->int_valid, o->num_valid,
                                       o->present);
        if (item == NULL)
            goto done;
        PyList_SET_ITEM(columns, k, item);
    }
    if (refused != NULL)
        result = Py_BuildValue("(OOOO)", columns, times ? times : Py_None,
                               timed ? timed : Py_None, refused);
    else
        result = Py_BuildValue("(OOO)", columns, times ? times : Py_None,
                               timed ? timed : Py_None);

done:
    Py_XDECREF(refused);
    Py_XDECREF(columns);
    Py_XDECREF(times);
    Py_XDECREF(timed);
    if (outs != NULL)
        for (int k = 0; k < nslots; k++)
            out_free(&outs[k]);
    PyMem_Free(outs);
    PyMem_Free(met);
    PyMem_Free(given);
    PyMem_Free(values);
    PyMem_Free(seen);
    PyMem_Free(entries);
    if (levels != NULL)
        for (Py_ssize_t i = 0; i < nlevels; i++)
            PyMem_Free(levels[i].table);
    PyMem_Free(levels);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(lines, levels, slots, time_slot, skip=False) -> (columns, times, timed) or int: "
     "the referenced fields of JSON log lines and the event times, or the first row that "
     "needs the exact decoder; with skip, such rows are left missing and listed as a fourth "
     "item."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "l2m.engine._scan",
    "The referenced fields of JSON log lines, scanned in C (l2m.engine.decoding).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    init_plain();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) ||
        PyModule_AddIntConstant(m, "MISSING", K_MISSING) ||
        PyModule_AddIntConstant(m, "STR", K_STR) || PyModule_AddIntConstant(m, "INT", K_INT) ||
        PyModule_AddIntConstant(m, "FLOAT", K_FLOAT) ||
        PyModule_AddIntConstant(m, "TRUE", K_TRUE) ||
        PyModule_AddIntConstant(m, "FALSE", K_FALSE) ||
        PyModule_AddIntConstant(m, "OTHER", K_OTHER)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
