/* t/options.c: the table-driven long-option parser (src/base/options.c). */
#include <config.h>
#include "base/log.h"
#include "base/options.h"
#include "tap.h"
#include "child.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int flag, n, choice;
    long big;
    double x, frac;
    char name[8];
    char *path;
    int ncalls, nextra;
} opts;

static const char *const colours[] = {"red", "green", "blue", NULL};
static const int colour_values[] = {10, 20, 30};

/* A handler that takes every argument up to the next option. */
static int take_rest(void *target, const gl_option *o, const char *value, char **more, int nmore)
{
    opts *p = target;
    int k = 0;
    while (k < nmore && strncmp(more[k], "--", 2))
        k++;
    p->ncalls++;
    p->nextra = k;
    return k;
}

/* A handler without a value that ends the program, as --help does. */
static int stop_here(void *target, const gl_option *o, const char *value, char **more, int nmore)
{
    exit(0);
}

/* A handler without a value that only sets a field: a switch (no .exits). */
static int set_flag(void *target, const gl_option *o, const char *value, char **more, int nmore)
{
    ((opts *)target)->flag = 1;
    return 0;
}

static const gl_option table[] = {
    {.name = "flag", .kind = GL_OPT_FLAG, .offset = offsetof(opts, flag), .group = "One",
     .help = "a flag"},
    {.name = "num", .kind = GL_OPT_INT, .offset = offsetof(opts, n), .metavar = "N",
     .group = "One", .check = GL_OPT_POSITIVE, .help = "a positive int"},
    {.name = "big", .kind = GL_OPT_LONG, .offset = offsetof(opts, big), .metavar = "N",
     .group = "Two", .check = GL_OPT_NONNEG, .help = "a long", .defstr = "unbounded"},
    {.name = "x", .kind = GL_OPT_DOUBLE, .offset = offsetof(opts, x), .metavar = "X",
     .group = "One", .help = "any finite number"},
    {.name = "frac", .kind = GL_OPT_DOUBLE, .offset = offsetof(opts, frac), .metavar = "F",
     .group = "Two", .check = GL_OPT_MIN | GL_OPT_MAX_OPEN, .min = 0, .max = 1,
     .help = "in [0, 1)", .hint = "a fraction"},
    {.name = "name", .kind = GL_OPT_STR, .offset = offsetof(opts, name),
     .size = sizeof(((opts *)0)->name), .metavar = "S", .group = "Two", .help = "short text"},
    {.name = "path", .kind = GL_OPT_DUP, .offset = offsetof(opts, path), .metavar = "FILE",
     .group = "Two", .help = "a path"},
    {.name = "colour", .kind = GL_OPT_CHOICE, .offset = offsetof(opts, choice),
     .metavar = "C", .group = "One", .choices = colours, .choice_values = colour_values,
     .help = "red, green or blue"},
    {.name = "ignored", .kind = GL_OPT_FLAG, .offset = GL_OPT_NOWHERE, .group = "Two",
     .help = "accepted, no effect"},
    {.name = "rest", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .metavar = "A ...",
     .group = "Two", .fn = take_rest, .help = "takes several"},
    {.name = "hidden-size", .kind = GL_OPT_INT, .offset = offsetof(opts, n), .metavar = "N"},
    {.name = "one", .kind = GL_OPT_DOUBLE, .offset = GL_OPT_NOWHERE, .metavar = "X",
     .check = GL_OPT_MIN | GL_OPT_MAX, .min = 1, .max = 1, .hint = "only 1"},
    {.name = "skip", .kind = GL_OPT_IGNORE, .offset = GL_OPT_NOWHERE, .metavar = "X ..."},
    {.name = "old-num", .kind = GL_OPT_INT, .offset = GL_OPT_NOWHERE, .metavar = "N",
     .refused = "renamed: use --num"},
    {.name = "stop", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .fn = stop_here,
     .exits = 1},
    {.name = "switch", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .fn = set_flag},
    {.name = NULL},
};

static void defaults(opts *p)
{
    memset(p, 0, sizeof *p);
    p->n = 7;
    p->x = 0.5;
    p->choice = 20;
    strcpy(p->name, "abc");
}

/* argv from a NULL-terminated list, with a program name in front. */
static int make_argv(char **argv, const char *const *args)
{
    int n = 0;
    argv[n++] = (char *)"prog";
    while (*args)
        argv[n++] = (char *)*args++;
    argv[n] = NULL;
    return n;
}

static void parse_args(void *arg)
{
    char *argv[64];
    int argc = make_argv(argv, arg);
    opts p;
    defaults(&p);
    gl_opt_parse(table, &p, argc, argv);
}

/* A caller that collects: the parse, then a check of its own. */
static void collect_and_check(void *arg)
{
    char *argv[64], line[256];
    int argc = make_argv(argv, arg);
    opts p;
    defaults(&p);
    gl_opt_collect_begin();
    gl_opt_parse(table, &p, argc, argv);
    if (!gl_opt_had_error("num") || gl_opt_had_error("colour") || gl_opt_had_error("x"))
        gl_opt_record(NULL, "gl_opt_had_error is wrong");
    if (p.x > 1) {
        snprintf(line, sizeof line, "--x %g is more than 1 (--num is still %d)", p.x, p.n);
        gl_opt_record("x", line);
    }
    gl_opt_collect_end();
    exit(0);
}

/* Parse args in a child; return its exit status and its stderr in err. */
static int parse_in_child(const char *const *args, char *err, size_t errlen)
{
    return run_in_child(parse_args, (void *)args, err, errlen);
}

/* The child exits 2 and its one line of stderr contains every needle. */
static void fails(const char *const *args, const char *what, const char *n1, const char *n2)
{
    char err[2048];
    int code = parse_in_child(args, err, sizeof err);
    int lines = 0;
    for (char *p = err; *p; p++)
        lines += *p == '\n';
    ok(code == 2 && lines == 1 && strstr(err, n1) && (!n2 || strstr(err, n2)),
       "%s: exit 2 with one line naming '%s'%s%s", what, n1, n2 ? " and " : "", n2 ? n2 : "");
    if (code != 2 || !strstr(err, n1) || (n2 && !strstr(err, n2)))
        diag("exit %d, stderr: %s", code, err);
}

static void test_values(void)
{
    opts p;
    char *argv[64];
    const char *const args[] = {"--flag", "--num", "12", "--big=-0", "--x=-2.5e-3", "--frac",
                                "0.25", "--name", "xyz", "--path", "a/b", "--path=c/d",
                                "--colour", "blue", "--ignored", NULL};
    defaults(&p);
    gl_opt_parse(table, &p, make_argv(argv, args), argv);
    is_int(p.flag, 1, "flag set");
    is_int(p.n, 12, "--num 12");
    is_int(p.big, 0, "--big=-0");
    is_double(p.x, -2.5e-3, 0, "--x=-2.5e-3 (negative values are values, not options)");
    is_double(p.frac, 0.25, 0, "--frac 0.25");
    is_string(p.name, "xyz", "--name xyz");
    is_string(p.path, "c/d", "the last --path wins (the first is freed)");
    is_int(p.choice, 30, "--colour blue stores its value 30");
    free(p.path);

    const char *const rest[] = {"--rest", "a", "b", "c", "--num", "3", "--rest", "z", NULL};
    defaults(&p);
    gl_opt_parse(table, &p, make_argv(argv, rest), argv);
    ok(p.ncalls == 2 && p.nextra == 0 && p.n == 3,
       "a handler consumes the arguments it takes, parsing resumes after them");

    const char *const skip[] = {"--skip", "a", "b", "--num", "4", "--skip=c", "--skip", "-1",
                                NULL};
    defaults(&p);
    gl_opt_parse(table, &p, make_argv(argv, skip), argv);
    ok(p.n == 4, "an ignored option takes its values up to the next option, unread");

    const char *const none[] = {NULL};
    defaults(&p);
    gl_opt_parse(table, &p, make_argv(argv, none), argv);
    ok(p.n == 7 && p.choice == 20 && !strcmp(p.name, "abc"), "no arguments: defaults kept");
}

static void test_errors(void)
{
    fails((const char *const[]){"--num", "abc", NULL}, "not a number", "--num abc",
          "is not an integer");
    fails((const char *const[]){"--num", "1.5", NULL}, "fraction for an int", "--num 1.5",
          "not a whole number");
    fails((const char *const[]){"--num", "0", NULL}, "zero", "--num 0", "positive");
    fails((const char *const[]){"--num=99999999999", NULL}, "int overflow",
          "--num 99999999999", "at most 2147483647");
    fails((const char *const[]){"--num", "1e3", NULL}, "exponent for an int", "--num 1e3",
          "plain digits: 1000");
    fails((const char *const[]){"--big", "-1", NULL}, "negative", "--big -1",
          "zero or a positive");
    fails((const char *const[]){"--x", "nan", NULL}, "NaN", "--x nan", "finite");
    fails((const char *const[]){"--x", "1e999", NULL}, "overflowing double", "--x 1e999",
          "finite");
    fails((const char *const[]){"--frac", "1", NULL}, "open upper bound", "--frac 1",
          "[0, 1) (a fraction)");
    fails((const char *const[]){"--name", "too-long-a-name", NULL}, "string too long",
          "--name too-long-a-name", "at most 7");
    fails((const char *const[]){"--one", "0.5", NULL}, "a range of one value", "--one 0.5",
          "is not supported: use 1 (only 1)");
    fails((const char *const[]){"--colour", "mauve", NULL}, "bad choice", "--colour mauve",
          "use one of red, green or blue");
    fails((const char *const[]){"--num", NULL}, "missing value", "--num needs a value",
          "--num N");
    fails((const char *const[]){"--num", "--flag", NULL}, "option where a value should be",
          "--num needs a value", NULL);
    fails((const char *const[]){"--flag=1", NULL}, "value for a flag", "--flag takes no value",
          NULL);
    fails((const char *const[]){"--colur", "red", NULL}, "typo", "unknown option --colur",
          "did you mean --colour?");
    fails((const char *const[]){"--hidden_size", "4", NULL}, "underscores",
          "unknown option --hidden_size", "did you mean --hidden-size?");
    fails((const char *const[]){"--frobnicate", NULL}, "nothing close",
          "unknown option --frobnicate: see --help", NULL);
    fails((const char *const[]){"file.txt", NULL}, "positional", "unexpected argument 'file.txt'",
          NULL);
    fails((const char *const[]){"-n", "3", NULL}, "single dash", "unexpected argument '-n'", NULL);
    fails((const char *const[]){"--num", "", NULL}, "empty value quoted",
          "--num '' is not an integer", NULL);
}

/* The child exits 2; its stderr has `lines` lines and every needle. */
static void fails_lines(const char *const *args, const char *what, int lines,
                        const char *const *needles)
{
    char err[4096];
    int code = parse_in_child(args, err, sizeof err);
    int n = 0, good = code == 2;
    for (char *p = err; *p; p++)
        n += *p == '\n';
    for (int i = 0; needles[i]; i++)
        if (!strstr(err, needles[i]))
            good = 0;
    ok(good && n == lines, "%s: exit 2 with %d lines", what, lines);
    if (!good || n != lines)
        diag("exit %d, stderr: %s", code, err);
}

static void test_names_first(void)
{
    fails((const char *const[]){"--old-num", "3", NULL}, "a refused option",
          "--old-num is not supported: renamed: use --num", NULL);
    fails((const char *const[]){"--old_num", "3", NULL}, "a typo of a refused option",
          "did you mean --old-num? (which is not supported: renamed: use --num)", NULL);
    fails_lines((const char *const[]){"--num", "abc", "--old-num", "3", "--colur", "red",
                                      "--frobnicate", "x", "y", NULL},
                "every unknown and refused name first, then the values", 5,
                (const char *const[]){"prog: error: --old-num is not supported: renamed: "
                                      "use --num\n"
                                      "prog: error: unknown option --colur: did you mean "
                                      "--colour?\n"
                                      "prog: error: unknown option --frobnicate: see --help "
                                      "for the options\n"
                                      "prog: error: --num abc is not an integer",
                                      "prog: error: 4 usage errors above", NULL});
    fails((const char *const[]){"--rest", "a", "--old-num", NULL}, "a refused name after a "
          "handler's arguments", "--old-num is not supported", NULL);
    /* a switch handler (no .exits) is no --help: the scan and the values go on */
    fails_lines((const char *const[]){"--switch", "--old-num", "3", "--num", "abc", NULL},
                "a switch handler does not end the name scan", 3,
                (const char *const[]){"prog: error: --old-num is not supported: renamed: "
                                      "use --num\n"
                                      "prog: error: --num abc is not an integer",
                                      "prog: error: 2 usage errors above", NULL});
}

/* Bad values do not stop the parse: every one is reported, with the
 * unknown names, and the fields they were for keep their values. */
static void test_collected(void)
{
    fails_lines((const char *const[]){"--num", "0", "--colour", "mauve", "--x", "1", "--bogus",
                                      "--frac", "2", NULL},
                "two bad values and an unknown name reported together", 5,
                (const char *const[]){"prog: error: unknown option --bogus: see --help for the "
                                      "options\n"
                                      "prog: error: --num 0 must be a positive integer\n"
                                      "prog: error: --colour mauve is not supported: use one "
                                      "of red, green or blue\n"
                                      "prog: error: --frac 2 is out of range",
                                      "prog: error: 4 usage errors above: change each as its "
                                      "line says, then run again\n", NULL});
    fails_lines((const char *const[]){"--num", "--flag=2", "--colour", "pink", "stray", "words",
                                      NULL},
                "a missing value, a value for a flag, a bad choice and stray words", 5,
                (const char *const[]){"--num needs a value", "--flag takes no value",
                                      "--colour pink", "unexpected argument 'stray'",
                                      "4 usage errors above", NULL});
    fails((const char *const[]){"--num", "abc", "--stop", "--bogus", NULL},
          "an error before a handler that takes no value is reported instead of running it",
          "--num abc is not an integer", NULL);
    char err0[256];
    ok(parse_in_child((const char *const[]){"--num", "3", "--stop", "--bogus", NULL}, err0,
                      sizeof err0) == 0,
       "without one, the handler acts, before what follows it is looked at");

    /* A caller's own checks add to the parser's errors; a refused
     * value leaves the field at its default. */
    const char *const args[] = {"--num", "-3", "--x", "2", "--colour", "blue", NULL};
    char err[2048];
    int code = run_in_child(collect_and_check, (void *)args, err, sizeof err);
    ok(code == 2 && strstr(err, "prog: error: --num -3 must be a positive integer\n"
                                "prog: error: --x 2 is more than 1 (--num is still 7)\n"
                                "prog: error: 2 usage errors above"),
       "gl_opt_collect_begin: the caller's checks add their lines before the count");
    if (code != 2 || !strstr(err, "still 7"))
        diag("exit %d, stderr: %s", code, err);
}

static void test_status(void)
{
    ok(gl_opt_status_of(gl_opt_lookup(table, "num")) == GL_OPT_HONOURED &&
       gl_opt_status_of(gl_opt_lookup(table, "rest")) == GL_OPT_HONOURED,
       "status: a stored option and a handler are honoured");
    ok(gl_opt_status_of(gl_opt_lookup(table, "ignored")) == GL_OPT_ACCEPTED &&
       gl_opt_status_of(gl_opt_lookup(table, "skip")) == GL_OPT_ACCEPTED,
       "status: an option stored nowhere is accepted");
    ok(gl_opt_status_of(gl_opt_lookup(table, "old-num")) == GL_OPT_REFUSED,
       "status: a row with a refusal is refused");
    is_string(gl_opt_status_name(GL_OPT_REFUSED), "refused", "status names");
}

static void test_find_and_suggest(void)
{
    char *argv[64];
    const char *const args[] = {"--num", "1", "--name=a", "--name", "b", "--names", "c", NULL};
    int argc = make_argv(argv, args);
    is_string(gl_opt_find(argc, argv, "name"), "b", "gl_opt_find: the last occurrence");
    ok(gl_opt_find(argc, argv, "flag") == NULL, "gl_opt_find: absent");
    is_string(gl_opt_suggest(table, "colr"), "colour", "suggest: one deletion");
    is_string(gl_opt_suggest(table, "hidden"), "hidden-size", "suggest: a prefix");
    ok(gl_opt_suggest(table, "zzzzzzzzzz") == NULL, "suggest: nothing plausible");
    ok(gl_opt_suggest(table, "extra-hidden-size") == NULL,
       "suggest: a name with a word more is another option, not a typo");
    ok(gl_opt_suggest(table, "hidden-sizes-per-layer") == NULL,
       "suggest: nor one that a known name is the start of");
    ok(gl_opt_lookup(table, "frac") == &table[4], "lookup by name");
}

static void test_help(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    opts d;
    defaults(&d);
    gl_opt_help(f, table, &d);
    fclose(f);
    const char *one = strstr(buf, "\nOne:\n"), *two = strstr(buf, "\nTwo:\n");
    ok(one && two && one < two, "groups in order of first appearance");
    ok(strstr(buf, "--num N") && strstr(buf, "a positive int [default: 7]"),
       "int shown with its default");
    ok(strstr(buf, "[default: green]") != NULL, "choice default shown by name");
    ok(strstr(buf, "[default: unbounded]") != NULL, "defstr replaces the field's value");
    ok(strstr(buf, "[default: abc]") != NULL, "string default");
    ok(strstr(buf, "--hidden-size") == NULL, "options without help are not listed");
    /* every option of group One comes before the Two heading */
    const char *colour = strstr(buf, "--colour");
    ok(colour && colour < two, "an option is listed under its own group");
    free(buf);
}

static void test_conversions(void)
{
    long l;
    double d;
    ok(gl_opt_to_long("42", &l) == 0 && l == 42, "to_long 42");
    ok(gl_opt_to_long("42x", &l) == -1, "to_long rejects trailing junk");
    ok(gl_opt_to_long("", &l) == -1, "to_long rejects empty");
    ok(gl_opt_to_double("1e-3", &d) == 0 && d == 1e-3, "to_double 1e-3");
    ok(gl_opt_to_double("inf", &d) == -1, "to_double rejects inf");
}

int main(void)
{
    gl_log_set_program("prog");
    plan(NO_PLAN);
    test_values();
    test_errors();
    test_names_first();
    test_collected();
    test_status();
    test_find_and_suggest();
    test_help();
    test_conversions();
    return done_testing();
}
