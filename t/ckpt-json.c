/*
 * ckpt-json.c: the typed JSON member reads (src/base/json.h) that read a
 * checkpoint's "config" attribute for gridlm-train --load, gridlm-eval
 * and gridlm-ckpt export-hf: defaults for absent and null members,
 * values of the right type, and the first wrongly typed or out-of-range
 * member named in err while the read gives the default.
 */
#include <config.h>
#include "base/json.h"
#include "tap.h"

#include <string.h>

static const char *text =
    "{\"n\": 7, \"big\": 4294967301, \"neg\": -3, \"x\": 0.25, \"whole\": 2,"
    " \"t\": true, \"f\": false, \"one\": 1, \"zero\": 0, \"nul\": null,"
    " \"s\": \"4\", \"r\": 4.0, \"a\": [1], \"o\": {}}";

int main(void)
{
    plan(24);
    json_t *j = json_loads(text, 0, NULL);
    if (!j)
        bail_out("the test's JSON does not parse");
    gl_json_reader r;
    gl_json_reader_init(&r, j);

    is_int(gl_json_long(&r, "n", -1), 7, "an integer");
    is_int(gl_json_long(&r, "big", -1), 4294967301LL, "a long beyond an int");
    is_int(gl_json_int(&r, "neg", 0), -3, "a negative int");
    is_int(gl_json_long(&r, "absent", 42), 42, "absent: the default");
    is_int(gl_json_long(&r, "nul", 42), 42, "null: the default");
    is_double(gl_json_num(&r, "x", 0), 0.25, 0, "a real number");
    is_double(gl_json_num(&r, "whole", 0), 2.0, 0, "an integer read as a number");
    is_double(gl_json_num(&r, "nul", 1.5), 1.5, 0, "a null number: the default");
    ok(gl_json_bool(&r, "t", 0) == 1 && gl_json_bool(&r, "f", 1) == 0, "true and false");
    ok(gl_json_bool(&r, "one", 0) == 1 && gl_json_bool(&r, "zero", 1) == 0,
       "an integer flag: nonzero is true");
    ok(gl_json_bool(&r, "absent", 1) == 1, "an absent flag: the default");
    is_string(r.err, "", "no problem recorded for well-typed members");

    is_int(gl_json_int(&r, "big", 9), 9, "an int out of range gives the default");
    is_string(r.err, "\"big\" is 4294967301, beyond the range of an int",
              "and is named with its value");
    is_int(gl_json_long(&r, "s", 5), 5, "a string for an integer gives the default");
    is_string(r.err, "\"big\" is 4294967301, beyond the range of an int",
              "the first problem stays");

    gl_json_reader_init(&r, j);
    is_int(gl_json_long(&r, "s", 5), 5, "a string integer: the default");
    is_string(r.err, "\"s\" is a string, not an integer", "named with its type");
    gl_json_reader_init(&r, j);
    gl_json_long(&r, "r", 0);
    is_string(r.err, "\"r\" is a real number, not an integer", "a real is no integer");
    gl_json_reader_init(&r, j);
    is_double(gl_json_num(&r, "a", 3), 3, 0, "an array number: the default");
    is_string(r.err, "\"a\" is an array, not a number", "named with its type");
    gl_json_reader_init(&r, j);
    ok(gl_json_bool(&r, "o", 0) == 0 && !strcmp(r.err, "\"o\" is an object, not true or false"),
       "an object flag: the default, named");

    json_t *arr = json_array();
    gl_json_reader_init(&r, arr);
    is_int(gl_json_long(&r, "n", 11), 11, "a non-object has no members");
    gl_json_reader_init(&r, NULL);
    ok(gl_json_int(&r, "n", 12) == 12 && r.err[0] == '\0', "nor has NULL");
    json_decref(arr);
    json_decref(j);
    return done_testing();
}
