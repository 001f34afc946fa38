/* synth.c: the deterministic synthetic corpus (see synth.h). */
#include <config.h>
#include "data/synth.h"
#include "base/rng.h"
#include "base/file.h"
#include "base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N(a) (sizeof(a) / sizeof *(a))

static const char *const NAMES[] = {
    "Alice", "Bob", "Carol", "David", "Emma", "Felix", "Grace", "Hugo", "Iris", "Jack", "Kara",
    "Liam", "Mona", "Nina", "Oscar", "Paula", "Quentin", "Rosa", "Sam", "Tara", "Umar", "Vera",
    "Walter", "Xena", "Yusuf", "Zoe", "Arjun", "Bea", "Chen", "Dara", "Elif", "Farid", "Gita",
    "Hana", "Ivan", "Jun", "Kofi", "Lena", "Mateo", "Noor",
};
static const char *const PLACES[] = {
    "the forest", "the village", "the market", "the river", "the castle", "the harbor",
    "the library", "the garden", "the mountain", "the school", "the bakery", "the station",
    "the old bridge", "the island", "the farm", "the museum",
};
static const char *const COLORS[] = {
    "red", "blue", "green", "yellow", "black", "white", "purple", "orange", "brown", "grey",
};
static const char *const THINGS[] = {
    "hat", "book", "lamp", "kite", "box", "cup", "ball", "coat", "bag", "key", "boat", "map",
    "drum", "bell", "rope", "clock",
};
static const char *const VERBS_PAST[] = {
    "found", "lost", "painted", "carried", "hid", "fixed", "sold", "bought", "washed", "opened",
};
static const char *const FEELINGS[] = { "happy", "sad", "tired", "curious", "brave", "hungry", "calm" };
/* Facts shared by every document. */
static const char *const COUNTRIES[][2] = {
    { "France", "Paris" }, { "Japan", "Tokyo" }, { "Kenya", "Nairobi" }, { "Peru", "Lima" },
    { "Norway", "Oslo" }, { "Egypt", "Cairo" }, { "Canada", "Ottawa" }, { "India", "New Delhi" },
    { "Spain", "Madrid" }, { "Chile", "Santiago" }, { "Ghana", "Accra" }, { "Italy", "Rome" },
    { "Vietnam", "Hanoi" }, { "Poland", "Warsaw" }, { "Brazil", "Brasilia" }, { "Greece", "Athens" },
};
static const char *const ANIMALS[][2] = {
    { "dog", "barks" }, { "cat", "meows" }, { "cow", "moos" }, { "duck", "quacks" },
    { "sheep", "bleats" }, { "lion", "roars" }, { "owl", "hoots" }, { "horse", "neighs" },
    { "frog", "croaks" }, { "bee", "buzzes" }, { "snake", "hisses" }, { "wolf", "howls" },
};
static const char *const NUMBER_WORDS[] = {
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
};
static const char *const DAYS[] = {
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
};

typedef struct {
    uint64_t seed, doc, ctr;
    char *s; size_t n, cap;
} gen;

/* A uniform draw in [0, k): base/rng.h's counter-based generator keyed
 * by (seed, document); the counter counts the draws of the document. */
static uint64_t draw(gen *g, uint64_t k)
{
    return gl_rng_u64(g->seed, gl_rng_key("synthetic-corpus") ^ g->doc, g->ctr++) % k;
}

#define PICK(g, a) ((a)[draw(g, N(a))])

static void put(gen *g, const char *fmt, ...) GL_PRINTF(2, 3);
static void put(gen *g, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(g->s + g->n, g->cap - g->n, fmt, ap);
        va_end(ap);
        if ((size_t)k < g->cap - g->n) {
            g->n += (size_t)k;
            return;
        }
        g->cap = 2 * g->cap + (size_t)k + 64;
        g->s = gl_realloc(g->s, g->cap);
    }
}

/* A story: characters with things of a colour, places, and questions
 * about them at the end (the answers are earlier in the text). */
static void story(gen *g)
{
    const char *a = PICK(g, NAMES), *b = PICK(g, NAMES);
    while (b == a)
        b = PICK(g, NAMES);
    const char *color = PICK(g, COLORS), *thing = PICK(g, THINGS), *place = PICK(g, PLACES);
    const char *place2 = PICK(g, PLACES), *feel = PICK(g, FEELINGS);
    put(g, "Once upon a time, %s lived near %s. %s had %s %s %s. ", a, place, a,
        strchr("aeiou", color[0]) ? "an" : "a", color, thing);
    int events = 2 + (int)draw(g, 4);
    for (int i = 0; i < events; i++) {
        switch (draw(g, 5)) {
        case 0: put(g, "One day, %s went to %s and met %s. ", a, place2, b); break;
        case 1: put(g, "%s %s the %s %s. ", b, PICK(g, VERBS_PAST), color, thing); break;
        case 2: put(g, "%s felt %s, so %s sat by %s. ", a, feel, a, place2); break;
        case 3: put(g, "\"Where is my %s?\" asked %s. \"It is at %s,\" said %s. ", thing, a, place2, b); break;
        case 4: put(g, "On %s, %s and %s walked to %s together. ", PICK(g, DAYS), a, b, place); break;
        }
    }
    put(g, "The end.\n");
    put(g, "Q: What color was the %s of %s? A: %s.\n", thing, a, color);
    put(g, "Q: Where did %s live? A: near %s.\n", a, place);
}

static void arithmetic(gen *g)
{
    int lines = 3 + (int)draw(g, 6);
    for (int i = 0; i < lines; i++) {
        int x = (int)draw(g, 20), y = (int)draw(g, 20);
        switch (draw(g, 4)) {
        case 0: put(g, "%d + %d = %d\n", x, y, x + y); break;
        case 1: put(g, "%d - %d = %d\n", x + y, y, x); break;
        case 2: put(g, "%d * %d = %d\n", x % 10, y % 10, (x % 10) * (y % 10)); break;
        case 3:
            if (x + y <= 20)
                put(g, "%s plus %s is %s.\n", NUMBER_WORDS[x], NUMBER_WORDS[y], NUMBER_WORDS[x + y]);
            else
                put(g, "%d plus %d is %d.\n", x, y, x + y);
            break;
        }
    }
}

static void facts(gen *g)
{
    int lines = 2 + (int)draw(g, 5);
    for (int i = 0; i < lines; i++) {
        if (draw(g, 2)) {
            size_t k = draw(g, N(COUNTRIES));
            put(g, draw(g, 2) ? "The capital of %s is %s.\n" : "%s has its capital in %s.\n",
                COUNTRIES[k][0], COUNTRIES[k][1]);
        } else {
            size_t k = draw(g, N(ANIMALS));
            put(g, "The %s %s.\n", ANIMALS[k][0], ANIMALS[k][1]);
        }
    }
}

static void counting(gen *g)
{
    switch (draw(g, 4)) {
    case 0: {
        int a = (int)draw(g, 10), len = 4 + (int)draw(g, 8);
        for (int i = 0; i < len && a + i <= 20; i++)
            put(g, "%s%s", i ? ", " : "", NUMBER_WORDS[a + i]);
        put(g, ".\n");
        break;
    }
    case 1: {
        int a = (int)draw(g, 50), step = 1 + (int)draw(g, 5), len = 5 + (int)draw(g, 8);
        for (int i = 0; i < len; i++)
            put(g, "%s%d", i ? " " : "", a + i * step);
        put(g, "\n");
        break;
    }
    case 2: {
        int a = (int)draw(g, 7);
        put(g, "The days are ");
        for (int i = 0; i < 7; i++)
            put(g, "%s%s", i ? ", " : "", DAYS[(a + i) % 7]);
        put(g, ".\n");
        break;
    }
    case 3: {
        int a = (int)draw(g, 20);
        for (int i = 0; i < 6 + (int)draw(g, 10); i++)
            put(g, "%c", 'a' + (a + i) % 26);
        put(g, "\n");
        break;
    }
    }
}

static void program(gen *g)
{
    int k = 1 + (int)draw(g, 9);
    const char *op = draw(g, 2) ? "+" : "*";
    const char *word = *op == '+' ? "add" : "mul";
    int x = (int)draw(g, 10);
    put(g, "def %s_%d(x):\n    return x %s %d\n\nprint(%s_%d(%d))  # %d\n", word, k, op, k, word, k,
        x, *op == '+' ? x + k : x * k);
}

char *gl_synth_document(uint64_t seed, uint64_t d, size_t *len)
{
    gen g = { .seed = seed, .doc = d, .cap = 1024 };
    g.s = gl_malloc(g.cap);
    g.s[0] = '\0';
    int parts = 2 + (int)draw(&g, 5);
    for (int i = 0; i < parts; i++) {
        if (i)
            put(&g, "\n");
        switch (draw(&g, 8)) {
        case 0: case 1: case 2: story(&g); break;
        case 3: arithmetic(&g); break;
        case 4: case 5: facts(&g); break;
        case 6: counting(&g); break;
        case 7: program(&g); break;
        }
    }
    *len = g.n;
    return g.s;
}

static void put_json_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void gl_synth_write(const char *path, long n, uint64_t seed)
{
    gl_error e;
    gl_file_tmp *t = gl_file_tmp_create(path, 0, &e);
    if (!t)
        gl_die("--output: %s", e.text);
    FILE *f = gl_file_tmp_stream(t);
    for (long d = 0; d < n; d++) {
        size_t len;
        char *s = gl_synth_document(seed, (uint64_t)d, &len);
        fputs("{\"text\": ", f);
        put_json_string(f, s, len);
        fputs("}\n", f);
        free(s);
    }
    if (ferror(f)) {
        gl_file_tmp_discard(t);
        gl_die("--output %s: write error", path);
    }
    if (gl_file_tmp_publish(t, 0, &e) < 0)
        gl_die("--output: %s", e.text);
}
