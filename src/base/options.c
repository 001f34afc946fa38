/* options.c: the table-driven long-option parser (see options.h). */
#include <config.h>
#include "base/options.h"
#include "base/log.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A value is shown bare unless it would be hard to read that way. */
static const char *shown(const char *value, char *buf, size_t n)
{
    if (*value && !strpbrk(value, " \t\n"))
        return value;
    snprintf(buf, n, "'%s'", value);
    return buf;
}

/* ------------------------------------------------------------------ */
/* Usage errors, collected.                                            */

/* While a command line is read, each usage error is kept here, with the
 * option it is about, instead of stopping the program: one run then
 * reports them all.  One command line is read at a time, before any
 * thread starts, so the list is a plain static. */
typedef struct {
    char *line;
    char name[128];  /* the option, without "--"; "" for none */
} usage_error;

static struct {
    int on;               /* between gl_opt_collect_begin() and _end() */
    int n;
    usage_error *list;
} errors;

void gl_opt_collect_begin(void)
{
    errors.on = 1;
}

int gl_opt_collecting(void)
{
    return errors.on;
}

void gl_opt_record(const char *name, const char *line)
{
    if (!errors.on)
        gl_die_code(2, "%s", line);
    errors.list = gl_realloc(errors.list, (size_t)(errors.n + 1) * sizeof *errors.list);
    usage_error *e = &errors.list[errors.n++];
    e->line = gl_strdup(line);
    snprintf(e->name, sizeof e->name, "%s", name ? name : "");
}

int gl_opt_had_error(const char *name)
{
    for (int i = 0; i < errors.n; i++)
        if (!strcmp(errors.list[i].name, name))
            return 1;
    return 0;
}

void gl_opt_collect_end(void)
{
    errors.on = 0;
    if (errors.n == 1)
        gl_die_code(2, "%s", errors.list[0].line);
    if (errors.n > 1) {
        /* One line each, and the count last: the lines are the message. */
        for (int i = 0; i < errors.n; i++)
            fprintf(stderr, "%s: error: %s\n", gl_log_program(), errors.list[i].line);
        gl_die_code(2, "%d usage errors above: change each as its line says, then run again",
                    errors.n);
    }
}

int gl_opt_error(const gl_option *o, const char *value, const char *fmt, ...)
{
    char msg[1024], vbuf[512], line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *hint = o->hint;
    if (value)
        snprintf(line, sizeof line, "--%s %s %s%s%s%s", o->name,
                 shown(value, vbuf, sizeof vbuf), msg, hint ? " (" : "", hint ? hint : "",
                 hint ? ")" : "");
    else
        snprintf(line, sizeof line, "--%s %s%s%s%s", o->name, msg, hint ? " (" : "",
                 hint ? hint : "", hint ? ")" : "");
    gl_opt_record(o->name, line);
    return -1;
}

int gl_opt_to_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno)
        return -1;
    *out = v;
    return 0;
}

int gl_opt_to_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

const gl_option *gl_opt_lookup(const gl_option *table, const char *name)
{
    for (const gl_option *o = table; o->name; o++)
        if (!strcmp(o->name, name))
            return o;
    return NULL;
}

/* Levenshtein distance between a and b, one row of the table at a time. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    size_t *row = gl_malloc((nb + 1) * sizeof *row);
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t sub = diag + (a[i - 1] != b[j - 1]);
            size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    size_t d = row[nb];
    free(row);
    return d;
}

/* A plain typo is a few edits away: two, and one more for every 16
 * characters of the name (so a long name may have a word misspelt, but
 * not a word more or less: --virtual-pipeline-model-parallel-size is
 * no typo of --pipeline-model-parallel-size).  Underscores count as
 * dashes, since --hidden_size is the commonest slip from Python
 * configs. */
const char *gl_opt_suggest(const gl_option *table, const char *name)
{
    char *dashed = gl_strdup(name);
    for (char *p = dashed; *p; p++)
        if (*p == '_')
            *p = '-';
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (const gl_option *o = table; o->name; o++) {
        size_t d = edit_distance(dashed, o->name);
        if (d < best_d) {
            best_d = d;
            best = o->name;
        }
    }
    size_t n = strlen(dashed);
    size_t limit = 2 + n / 16;
    /* The one known name that starts with what was typed is a likely
     * abbreviation (which is not accepted, but worth pointing at); when
     * several do, the abbreviation names none of them. */
    if (best_d > limit && n >= 4) {
        const char *only = NULL;
        int count = 0;
        for (const gl_option *o = table; o->name; o++)
            if (!strncmp(o->name, dashed, n)) {
                only = o->name;
                count++;
            }
        if (count == 1) {
            best = only;
            best_d = 0;
        }
    }
    free(dashed);
    return best_d <= limit ? best : NULL;
}

gl_opt_status gl_opt_status_of(const gl_option *o)
{
    if (o->refused)
        return GL_OPT_REFUSED;
    if (o->offset == GL_OPT_NOWHERE && o->kind != GL_OPT_CALL)
        return GL_OPT_ACCEPTED;
    return GL_OPT_HONOURED;
}

const char *gl_opt_status_name(gl_opt_status s)
{
    static const char *const names[] = {"honoured", "accepted", "refused"};
    return names[s];
}

static void *field(void *target, const gl_option *o)
{
    return o->offset == GL_OPT_NOWHERE ? NULL : (char *)target + o->offset;
}

/* "a, b or c" */
static void list_choices(const char *const *choices, char *buf, size_t n)
{
    size_t len = 0, count = 0;
    buf[0] = '\0';
    while (choices[count])
        count++;
    for (size_t i = 0; i < count && len < n; i++)
        len += snprintf(buf + len, n - len, "%s%s", i == 0 ? "" : i + 1 == count ? " or " : ", ",
                        choices[i]);
}

/* How many of the nmore arguments at more come before the next option:
 * the values of an option that takes a list, or that is not read. */
static int values_after(char **more, int nmore)
{
    int n = 0;
    while (n < nmore && strncmp(more[n], "--", 2))
        n++;
    return n;
}

/* The index of value in o->choices, or -1 after recording the error. */
static int find_choice(const gl_option *o, const char *value)
{
    for (int i = 0; o->choices[i]; i++)
        if (!strcmp(o->choices[i], value))
            return i;
    char list[512];
    list_choices(o->choices, list, sizeof list);
    return gl_opt_error(o, value, "is not supported: use %s%s", o->choices[1] ? "one of " : "",
                        list);
}

/* The range checks of o->check, on a value already read: 0, or -1
 * after recording the error. */
static int check_range(const gl_option *o, const char *value, double v, int integral)
{
    const char *what = integral ? "integer" : "number";
    if ((o->check & GL_OPT_POSITIVE) && !(v > 0))
        return gl_opt_error(o, value, "must be a positive %s", what);
    if ((o->check & GL_OPT_NONNEG) && !(v >= 0))
        return gl_opt_error(o, value, "must be zero or a positive %s", what);
    int lo = (o->check & GL_OPT_MIN) != 0;
    int hi = (o->check & (GL_OPT_MAX | GL_OPT_MAX_OPEN)) != 0;
    int open = (o->check & GL_OPT_MAX_OPEN) != 0;
    if ((lo && v < o->min) || (hi && (open ? v >= o->max : v > o->max))) {
        if (lo && hi && !open && o->min == o->max)   /* one value only */
            return gl_opt_error(o, value, "is not supported: use %g", o->min);
        if (lo && hi)
            return gl_opt_error(o, value, "is out of range: give a %s in [%g, %g%s", what,
                                o->min, o->max, open ? ")" : "]");
        if (lo)
            return gl_opt_error(o, value, "is too small: give a %s >= %g", what, o->min);
        return gl_opt_error(o, value, "is too large: give a %s %s %g", what, open ? "<" : "<=",
                            o->max);
    }
    return 0;
}

/* value as o's integer (GL_OPT_INT or GL_OPT_LONG), range checked, in
 * *out: 0, or -1 after recording the error. */
static int read_integer(const gl_option *o, const char *value, long *out)
{
    long l;
    double d;
    if (gl_opt_to_long(value, &l)) {
        if (gl_opt_to_double(value, &d))
            return gl_opt_error(o, value, "is not an integer: give a whole number");
        if (d != floor(d))
            return gl_opt_error(o, value, "is not a whole number: give an integer");
        if (fabs(d) < 1e15)
            return gl_opt_error(o, value, "must be written in plain digits: %.0f", d);
        return gl_opt_error(o, value, "is too large: give an integer of at most %ld", LONG_MAX);
    }
    if (o->kind == GL_OPT_INT && (l < INT_MIN || l > INT_MAX))
        return gl_opt_error(o, value, "is too large: give an integer of at most %d", INT_MAX);
    if (check_range(o, value, (double)l, 1))
        return -1;
    *out = l;
    return 0;
}

/* Store value (non-NULL for every kind but FLAG and a metavar-less CALL)
 * into o's field.  A bad value is recorded (gl_opt_error) and the field
 * keeps what it held.  Returns how many of the following arguments a
 * CALL handler consumed. */
static int apply(const gl_option *o, void *target, const char *value, char **more, int nmore)
{
    void *f = field(target, o);
    long l = 0;
    double d;
    int i;
    switch (o->kind) {
    case GL_OPT_FLAG:
        if (f)
            *(int *)f = 1;
        return 0;
    case GL_OPT_INT:
    case GL_OPT_LONG:
        if (read_integer(o, value, &l) == 0 && f) {
            if (o->kind == GL_OPT_INT)
                *(int *)f = (int)l;
            else
                *(long *)f = l;
        }
        return 0;
    case GL_OPT_DOUBLE:
        if (gl_opt_to_double(value, &d))
            gl_opt_error(o, value, "is not a finite number: give a value such as 0.5 or 1e-4");
        else if (check_range(o, value, d, 0) == 0 && f)
            *(double *)f = d;
        return 0;
    case GL_OPT_STR:
        if (o->choices && find_choice(o, value) < 0)
            return 0;
        if (f && strlen(value) >= o->size)
            gl_opt_error(o, value, "is too long: at most %zu characters", o->size - 1);
        else if (f)
            memcpy(f, value, strlen(value) + 1);
        return 0;
    case GL_OPT_DUP:
        if (o->choices && find_choice(o, value) < 0)
            return 0;
        if (f) {
            free(*(char **)f);
            *(char **)f = gl_strdup(value);
        }
        return 0;
    case GL_OPT_CHOICE:
        i = find_choice(o, value);
        if (i >= 0 && f)
            *(int *)f = o->choice_values ? o->choice_values[i] : i;
        return 0;
    case GL_OPT_CALL:
        return o->fn(target, o, value, more, nmore);
    case GL_OPT_IGNORE:
        return values_after(more, nmore);
    }
    return 0;
}

static int takes_value(const gl_option *o)
{
    return o->kind != GL_OPT_FLAG && !(o->kind == GL_OPT_CALL && !o->metavar);
}

/* The option name of arg ("--name" or "--name=value") in buf. */
static void option_name(const char *arg, char *buf, size_t size)
{
    const char *eq = strchr(arg + 2, '=');
    size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (n >= size)
        n = size - 1;
    memcpy(buf, arg + 2, n);
    buf[n] = '\0';
}

/* What is wrong with the option called name, as one line in buf, or
 * 0 when it is known and accepted. */
static int name_problem(const gl_option *table, const char *name, char *buf, size_t size)
{
    const gl_option *o = gl_opt_lookup(table, name);
    if (o && o->refused) {
        snprintf(buf, size, "--%s is not supported: %s", name, o->refused);
        return 1;
    }
    if (o)
        return 0;
    const char *s = gl_opt_suggest(table, name);
    const gl_option *so = s ? gl_opt_lookup(table, s) : NULL;
    if (so && so->refused)
        snprintf(buf, size, "unknown option --%s: did you mean --%s? (which is not supported: "
                 "%s)", name, s, so->refused);
    else if (s)
        snprintf(buf, size, "unknown option --%s: did you mean --%s?", name, s);
    else
        snprintf(buf, size, "unknown option --%s: see --help for the options", name);
    return 1;
}

/* The first pass: every unknown or refused option of argv, recorded one
 * line each.  Values are skipped, not read: an option's value and
 * whatever follows it up to the next --option are the second pass's to
 * judge.  --help and --version (handlers that exit: .exits) act at
 * once, so the scan stops there. */
static void check_names(const gl_option *table, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) || !arg[2])
            continue;
        char name[128], line[1024];
        option_name(arg, name, sizeof name);
        const gl_option *o = gl_opt_lookup(table, name);
        if (o && o->exits && !o->refused)
            break;
        if (name_problem(table, name, line, sizeof line))
            gl_opt_record(name, line);
    }
}

/* The second pass: each value read into target, in order; a bad one is
 * recorded and the option's field keeps its value. */
static void read_values(const gl_option *table, void *target, int argc, char **argv)
{
    char line[1024];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) || !arg[2]) {
            snprintf(line, sizeof line, "unexpected argument '%s': %s takes only --name value "
                     "options (see --help)", arg, gl_log_program());
            gl_opt_record(NULL, line);
            i += values_after(argv + i + 1, argc - i - 1);   /* one line for a run of them */
            continue;
        }

        char name[128];
        const char *eq = strchr(arg + 2, '=');
        option_name(arg, name, sizeof name);

        /* Unknown and refused names were recorded by the first pass;
         * their values, if any, are not read. */
        const gl_option *o = gl_opt_lookup(table, name);
        if (!o || o->refused) {
            i += values_after(argv + i + 1, argc - i - 1);
            continue;
        }

        const char *value = NULL;
        if (takes_value(o)) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
                value = argv[++i];
            if (!value) {
                snprintf(line, sizeof line, "--%s needs a value: --%s %s", o->name, o->name,
                         o->metavar ? o->metavar : "VALUE");
                gl_opt_record(o->name, line);
                continue;
            }
        } else if (eq) {
            snprintf(line, sizeof line, "--%s takes no value (given '%s'): write just --%s",
                     o->name, eq + 1, o->name);
            gl_opt_record(o->name, line);
            continue;
        } else if (o->exits && errors.n) {
            /* --help and the like act at once and exit 0: the errors
             * before them are reported instead (and what follows them
             * was not looked at, as for a successful --help). */
            gl_opt_collect_end();
        }
        i += apply(o, target, value, argv + i + 1, argc - i - 1);
    }
}

void gl_opt_parse(const gl_option *table, void *target, int argc, char **argv)
{
    int own = !gl_opt_collecting();   /* else the caller reports, after its own checks */
    if (own)
        gl_opt_collect_begin();
    check_names(table, argc, argv);
    read_values(table, target, argc, argv);
    if (own)
        gl_opt_collect_end();
}

const char *gl_opt_find(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);
    const char *found = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) || strncmp(a + 2, name, n))
            continue;
        if (a[2 + n] == '=')
            found = a + 3 + n;
        else if (!a[2 + n] && i + 1 < argc && strncmp(argv[i + 1], "--", 2))
            found = argv[++i];
    }
    return found;
}

/* The default of o as --help shows it, or "" for none worth showing. */
static void default_text(const gl_option *o, const void *defaults, char *buf, size_t n)
{
    buf[0] = '\0';
    if (o->defstr) {
        snprintf(buf, n, "%s", o->defstr);
        return;
    }
    if (o->offset == GL_OPT_NOWHERE || !defaults)
        return;
    const char *f = (const char *)defaults + o->offset;
    switch (o->kind) {
    case GL_OPT_INT:
        snprintf(buf, n, "%d", *(const int *)f);
        break;
    case GL_OPT_LONG:
        snprintf(buf, n, "%ld", *(const long *)f);
        break;
    case GL_OPT_DOUBLE:
        snprintf(buf, n, "%g", *(const double *)f);
        break;
    case GL_OPT_STR:
        snprintf(buf, n, "%s", f);
        break;
    case GL_OPT_DUP:
        snprintf(buf, n, "%s", *(char *const *)f ? *(char *const *)f : "");
        break;
    case GL_OPT_CHOICE: {
        int v = *(const int *)f;
        for (int i = 0; o->choices[i]; i++)
            if ((o->choice_values ? o->choice_values[i] : i) == v)
                snprintf(buf, n, "%s", o->choices[i]);
        break;
    }
    case GL_OPT_FLAG:
    case GL_OPT_CALL:
    case GL_OPT_IGNORE:
        break;
    }
}

/* One option: "  --name METAVAR   help [default: X]", the text wrapped
 * at word boundaries to fit 79 columns, and starting on a line of its
 * own when the name is too long for the left column. */
static void help_line(FILE *f, const gl_option *o, const void *defaults)
{
    enum { COL = 36, WIDTH = 79 };
    char left[160], def[256], text[1024];
    snprintf(left, sizeof left, "  --%s%s%s", o->name, o->metavar ? " " : "",
             o->metavar ? o->metavar : "");
    default_text(o, defaults, def, sizeof def);
    snprintf(text, sizeof text, "%s%s%s%s", o->help ? o->help : "", def[0] ? " [default: " : "",
             def, def[0] ? "]" : "");
    if (strlen(left) < COL - 1)
        fprintf(f, "%-*s", COL, left);
    else
        fprintf(f, "%s\n%-*s", left, COL, "");

    int col = COL;
    for (const char *p = text; *p;) {
        size_t word = strcspn(p, " ");
        if (col > COL && col + 1 + (int)word > WIDTH) {
            fprintf(f, "\n%-*s", COL, "");
            col = COL;
        } else if (col > COL) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, word, f);
        col += (int)word;
        p += word;
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

void gl_opt_help(FILE *f, const gl_option *table, const void *defaults)
{
    for (const gl_option *g = table; g->name; g++) {
        /* Each group is printed once, where it first appears. */
        int seen = 0;
        for (const gl_option *p = table; p < g; p++)
            if (p->group && g->group && !strcmp(p->group, g->group))
                seen = 1;
        if (seen || !g->group)
            continue;
        fprintf(f, "\n%s:\n", g->group);
        for (const gl_option *o = g; o->name; o++)
            if (o->group && !strcmp(o->group, g->group) && o->help)
                help_line(f, o, defaults);
    }
}
