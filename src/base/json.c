/* json.c: typed reads of a JSON object's members (json.h). */
#include <config.h>
#include "base/json.h"
#include "base/file.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gl_json_reader_init(gl_json_reader *r, json_t *obj)
{
    r->obj = obj;
    r->err[0] = '\0';
}

/* What a JSON value is, for a message: "a string", "an array", ... */
static const char *kind(const json_t *x)
{
    switch (json_typeof(x)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Member key, or NULL when absent or null. */
static json_t *member(gl_json_reader *r, const char *key)
{
    json_t *x = json_is_object(r->obj) ? json_object_get(r->obj, key) : NULL;
    return json_is_null(x) ? NULL : x;
}

/* Record the first problem; the read then gives dflt. */
static void wrong(gl_json_reader *r, const char *key, const json_t *x, const char *want)
{
    if (!r->err[0])
        snprintf(r->err, sizeof r->err, "\"%s\" is %s, not %s", key, kind(x), want);
}

long gl_json_long(gl_json_reader *r, const char *key, long dflt)
{
    json_t *x = member(r, key);
    if (!x)
        return dflt;
    if (!json_is_integer(x)) {
        wrong(r, key, x, "an integer");
        return dflt;
    }
    /* json_int_t is long long: as wide as long on LP64 Linux. */
    _Static_assert(sizeof(long) == sizeof(json_int_t), "long holds a JSON integer");
    return (long)json_integer_value(x);
}

int gl_json_int(gl_json_reader *r, const char *key, int dflt)
{
    json_t *x = member(r, key);
    if (!x)
        return dflt;
    if (json_is_integer(x) &&
        (json_integer_value(x) < INT_MIN || json_integer_value(x) > INT_MAX)) {
        if (!r->err[0])
            snprintf(r->err, sizeof r->err, "\"%s\" is %lld, beyond the range of an int",
                     key, (long long)json_integer_value(x));
        return dflt;
    }
    return (int)gl_json_long(r, key, dflt);
}

double gl_json_num(gl_json_reader *r, const char *key, double dflt)
{
    json_t *x = member(r, key);
    if (!x)
        return dflt;
    if (!json_is_number(x)) {
        wrong(r, key, x, "a number");
        return dflt;
    }
    return json_number_value(x);
}

int gl_json_bool(gl_json_reader *r, const char *key, int dflt)
{
    json_t *x = member(r, key);
    if (!x)
        return dflt;
    if (json_is_boolean(x))
        return json_is_true(x);
    if (json_is_integer(x))
        return json_integer_value(x) != 0;
    wrong(r, key, x, "true or false");
    return dflt;
}

json_t *gl_json_load(const char *path, size_t flags, gl_error *err)
{
    char *text;
    size_t len;
    if (gl_file_read_all(path, &text, &len, err) < 0)
        return NULL;
    json_error_t je;
    json_t *j = json_loadb(text, len, flags, &je);
    free(text);
    if (!j)
        gl_errprintf(err, "%s is not valid JSON (%s at line %d, column %d)", path, je.text,
                     je.line, je.column);
    return j;
}
