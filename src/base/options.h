/*
 * options.h: a table-driven parser for GNU-style long options.
 *
 * A program describes its options once, in a table of gl_option rows that
 * say where each value goes (an offset into the caller's struct), how to
 * read it (integer, float, string, one of a list), what range it must lie
 * in and how --help shows it.  gl_opt_parse() then walks argv:
 *
 *     --name value   and   --name=value     options that take a value
 *     --name                                flags (no value allowed)
 *
 * A mistake is reported on one line that names the option, the value and
 * what would be accepted:
 *
 *     prog: error: --hidden-size 'abc' is not an integer: give a whole number
 *     prog: error: unknown option --hiden-size: did you mean --hidden-size?
 *
 * Every mistake of one command line is reported in the same run: a
 * command line copied from another program learns at once every option
 * to change.  Unknown and refused options (rows with .refused) are found
 * first, then the values are read in order, each bad one leaving its
 * field as it was; then the caller's own checks may add theirs (see
 * gl_opt_collect_begin).  A lone error is one line; several are one line
 * each and a line with their count.  The program then stops, exit 2.
 *
 * Options are long only; there are no positional arguments, no single-dash
 * options and no abbreviations (an abbreviation that is unique today stops
 * being unique when an option is added, and scripts break).
 *
 * No MPI and no CUDA here.
 */
#ifndef GL_BASE_OPTIONS_H
#define GL_BASE_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "base/log.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GL_OPT_FLAG,    /* no value; stores 1 in an int field */
    GL_OPT_INT,     /* int field */
    GL_OPT_LONG,    /* long field */
    GL_OPT_DOUBLE,  /* double field; the value must be finite */
    GL_OPT_STR,     /* char[size] field; too long a value is an error */
    GL_OPT_DUP,     /* char * field; gl_strdup()'d, the old value freed */
    GL_OPT_CHOICE,  /* int field: index of the value in choices (or choice_values[i]) */
    GL_OPT_CALL,    /* fn() does the work; it may take further arguments */
    GL_OPT_IGNORE,  /* a value and every argument after it up to the next
                       option, read by no one (an option of another program
                       that is accepted without effect) */
} gl_opt_kind;

/* Range checks for numbers (bit flags in gl_option.check). */
enum {
    GL_OPT_POSITIVE = 1 << 0, /* value > 0 */
    GL_OPT_NONNEG   = 1 << 1, /* value >= 0 */
    GL_OPT_MIN      = 1 << 2, /* value >= min */
    GL_OPT_MAX      = 1 << 3, /* value <= max */
    GL_OPT_MAX_OPEN = 1 << 4, /* value <  max */
};

/* Where an option's value goes when it is only accepted, not stored
 * (a flag that names what the program always does). */
#define GL_OPT_NOWHERE ((size_t)-1)

struct gl_option;

/* GL_OPT_CALL handler.  value is the option's value (NULL for an option
 * without metavar); more/nmore are the arguments that follow it, which
 * the handler may consume: it returns how many it took.  target is the
 * struct given to gl_opt_parse().  A bad value is reported with
 * gl_opt_error(), which returns while the parse collects errors: the
 * handler then leaves target as it was and still returns its count. */
typedef int (*gl_opt_fn)(void *target, const struct gl_option *o,
                         const char *value, char **more, int nmore);

typedef struct gl_option {
    const char *name;      /* without the leading "--"; NULL ends a table */
    gl_opt_kind kind;
    size_t offset;         /* offsetof(target struct, field), or GL_OPT_NOWHERE */
    size_t size;           /* GL_OPT_STR: size of the char array */
    const char *metavar;   /* "N", "FILE", ...; NULL for flags */
    const char *group;     /* --help heading this option is listed under */
    const char *help;      /* one line for --help */
    unsigned check;        /* GL_OPT_POSITIVE, ... */
    double min, max;       /* bounds for GL_OPT_MIN / GL_OPT_MAX / GL_OPT_MAX_OPEN */
    const char *const *choices;   /* NULL-terminated accepted values (CHOICE, STR, DUP) */
    const int *choice_values;     /* CHOICE: value stored for choices[i] (NULL: i) */
    const char *hint;      /* appended to every error about this option */
    const char *defstr;    /* --help shows this as the default instead of the field */
    gl_opt_fn fn;          /* GL_OPT_CALL */
    const char *refused;   /* non-NULL: the option is known but refused; this
                              says why and what to use instead */
    int exits;             /* GL_OPT_CALL without metavar: 1 when fn acts at
                              once and exits (--help, --version): the parse
                              looks at nothing after it; 0 when fn only sets
                              fields (a switch such as --disable-bias-linear) */
} gl_option;

/* What a row does with its option, for tables that document it:
 * GL_OPT_REFUSED (.refused set), GL_OPT_ACCEPTED (accepted and stored
 * nowhere: the program always does what it asks, or it does not apply)
 * or GL_OPT_HONOURED (everything else). */
typedef enum { GL_OPT_HONOURED, GL_OPT_ACCEPTED, GL_OPT_REFUSED } gl_opt_status;
gl_opt_status gl_opt_status_of(const gl_option *o);
/* "honoured", "accepted" or "refused". */
const char *gl_opt_status_name(gl_opt_status s);

/* Parse argv[1..argc-1] into target.  First every option name is looked
 * up, and each unknown or refused one is recorded as an error (with a
 * suggestion for a plain typo, or the refusal's reason); the scan ends at
 * a handler that exits (.exits: --help, --version), which acts before
 * anything after it.  Then the values are read in order; a bad one is
 * recorded and its field keeps its value.  Reaching --help (or the like)
 * with errors recorded reports them instead.  Unless the caller is
 * collecting already (gl_opt_collect_begin), the errors are reported at
 * the end and the program stops, exit 2. */
void gl_opt_parse(const gl_option *table, void *target, int argc, char **argv);

/* Collecting the usage errors of one command line, for a caller with
 * checks of its own to run after gl_opt_parse():
 *
 *     gl_opt_collect_begin();
 *     gl_opt_parse(table, &cfg, argc, argv);
 *     if (cfg.a % cfg.b && !gl_opt_had_error("b")) gl_opt_record(NULL, "...");
 *     gl_opt_collect_end();
 *
 * While collecting, gl_opt_error() and gl_opt_record() keep the error and
 * return; gl_opt_collect_end() then prints every line (on stderr, as
 * "PROG: error: LINE"), one more with their count if there are several,
 * and stops the program, exit 2; it returns only when there were none.
 * Outside a collection, gl_opt_error() and gl_opt_record() stop the
 * program at once with their line. */
void gl_opt_collect_begin(void);
void gl_opt_collect_end(void);
int gl_opt_collecting(void);

/* Record a usage error: line is the message without the "PROG: error: "
 * prefix; name is the option it is about (without "--"), or NULL for a
 * check across options. */
void gl_opt_record(const char *name, const char *line);

/* 1 when an error about option name (its name or its value) has been
 * recorded: a check that uses the option's value can skip, rather than
 * judge the default that stood in for the refused value. */
int gl_opt_had_error(const char *name);

/* The value of the last --name / --name=value in argv, or NULL.  Used to
 * look at one option (a preset) before parsing the rest. */
const char *gl_opt_find(int argc, char **argv, const char *name);

/* The row named name, or NULL. */
const gl_option *gl_opt_lookup(const gl_option *table, const char *name);

/* The known option that name is a plain typo of, or NULL: the closest
 * name within a few edits (underscores count as dashes), or the one
 * name that starts with it.  A name that differs by more, such as one
 * with a word more or less, is another option, not a typo. */
const char *gl_opt_suggest(const gl_option *table, const char *name);

/* Print the options grouped by their group, in the order the groups first
 * appear in the table, each with its default read from defaults (a struct
 * of the target type filled with the defaults), or its defstr. */
void gl_opt_help(FILE *f, const gl_option *table, const void *defaults);

/* Record a usage error about option o: "--NAME VALUE MESSAGE[ (HINT)]"
 * (value may be NULL).  For GL_OPT_CALL handlers and for checks made
 * after parsing.  Returns -1 while collecting; the caller goes on without
 * the bad value (a handler leaves its field as it was).  Outside a
 * collection it does not return: the program stops, exit 2. */
int gl_opt_error(const gl_option *o, const char *value, const char *fmt, ...) GL_PRINTF(3, 4);

/* Conversions used by the parser, for handlers: 0 on success, -1 when s
 * is not a whole number / finite number (trailing junk included). */
int gl_opt_to_long(const char *s, long *out);
int gl_opt_to_double(const char *s, double *out);

#ifdef __cplusplus
}
#endif
#endif
