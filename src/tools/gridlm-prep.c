/*
 * gridlm-prep: make training data.  Thin: parse the flags, call src/data.
 *
 *   gridlm-prep --input corpus.jsonl[.gz|.zst] --output-prefix PREFIX
 *               --tokenizer-type HuggingFaceTokenizer --tokenizer-model PATH
 *               [--json-keys text ...] [--append-eod] [--workers N]
 *   gridlm-prep --inspect PREFIX [--docs 0,5,9] [--tokenizer-model PATH]
 *   gridlm-prep --merge PREFIX1 PREFIX2 ... --output-prefix OUT
 *   gridlm-prep --train-tokenizer --input corpus.jsonl --vocab-size N --output tokenizer.json
 *   gridlm-prep --synthetic-corpus N_DOCS --output corpus.jsonl [--seed S]
 *
 * Flag names follow Megatron-LM's tools/preprocess_data.py; see
 * gridlm-prep(1).
 */
#include <config.h>
#include "data/prep.h"
#include "data/bpe_train.h"
#include "data/synth.h"
#include "base/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
"usage: gridlm-prep --input FILE --output-prefix PREFIX --tokenizer-model PATH [options]\n"
"       gridlm-prep --inspect PREFIX [--docs LIST] [--tokenizer-model PATH]\n"
"       gridlm-prep --merge PREFIX... --output-prefix OUT\n"
"       gridlm-prep --train-tokenizer --input FILE --vocab-size N --output tokenizer.json\n"
"       gridlm-prep --synthetic-corpus N_DOCS --output FILE [--seed S]\n"
"\n"
"Tokenize a JSONL corpus into Megatron's indexed dataset\n"
"({prefix}_{key}_document.bin/.idx), or inspect, merge, train a tokenizer,\n"
"or write the built-in synthetic corpus.\n"
"\n"
"  --input FILE            JSONL corpus, plain, .gz or .zst (- for stdin)\n"
"  --output-prefix PREFIX  output files are PREFIX_KEY_document.{bin,idx}\n"
"  --json-keys KEY...      JSON keys to tokenize, one dataset each (text)\n"
"  --tokenizer-type TYPE   HuggingFaceTokenizer (default) or GPT2BPETokenizer\n"
"  --tokenizer-model PATH  tokenizer.json, or a directory holding it\n"
"  --vocab-file, --merge-file  GPT-2's vocab.json and merges.txt\n"
"  --append-eod            end every document with the end-of-document token\n"
"  --workers N             tokenizing threads (1)\n"
"  --log-interval N        documents between progress lines (10000)\n"
"  --skip-bad-lines        report malformed JSON lines and go on (default: stop)\n"
"  --quiet                 no progress lines\n"
"  --docs LIST             --inspect: documents to print, e.g. 0,1,10-12\n"
"  --vocab-size N          --train-tokenizer: vocabulary size\n"
"  --special-tokens LIST   --train-tokenizer: comma-separated (<|endoftext|>)\n"
"  --min-frequency N       --train-tokenizer: least count of a merged pair (2)\n"
"  --output FILE           --train-tokenizer / --synthetic-corpus output\n"
"  --seed S                --synthetic-corpus seed (1234)\n"
"  --help, --version\n");
}

static long parse_long(const char *flag, const char *v, long lo)
{
    char *end;
    errno = 0;
    long x = strtol(v ? v : "", &end, 10);
    if (!v || errno || *end || end == v || x < lo)
        gl_die_code(2, "%s %s: expected a whole number >= %ld", flag, v ? v : "(missing)", lo);
    return x;
}

/* "0,3,10-12" -> list of document numbers. */
static int parse_docs(const char *s, int64_t **out)
{
    int n = 0, cap = 16;
    int64_t *v = gl_malloc((size_t)cap * sizeof *v);
    char *copy = gl_strdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *dash = strchr(tok, '-');
        long a, b;
        if (dash) {
            *dash = '\0';
            a = parse_long("--docs", tok, 0);
            b = parse_long("--docs", dash + 1, a);
        } else
            a = b = parse_long("--docs", tok, 0);
        if (b - a > 1000000)
            gl_die_code(2, "--docs %s: at most a million documents at once", s);
        for (long d = a; d <= b; d++) {
            if (n == cap)
                v = gl_realloc(v, (size_t)(cap *= 2) * sizeof *v);
            v[n++] = d;
        }
    }
    free(copy);
    *out = v;
    return n;
}

static int is_flag(const char *s) { return s[0] == '-' && s[1] == '-'; }

int main(int argc, char **argv)
{
    gl_log_set_program("gridlm-prep");
    gl_prep_opts o = { .workers = 1, .log_interval = 10000 };
    const char *inspect = NULL, *docs = NULL, *output = NULL, *specials = "<|endoftext|>";
    const char *vocab_file = NULL, *merge_file = NULL;
    const char *merge[256];
    int n_merge = 0, train = 0, merge_mode = 0;
    long vocab_size = 0, synth = -1, seed = 1234, min_freq = 2;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE() do { if (!v) gl_die_code(2, "%s needs a value (see --help)", a); i++; } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            printf("gridlm-prep (%s) %s\n", PACKAGE_NAME, PACKAGE_VERSION);
            return 0;
        } else if (!strcmp(a, "--input")) {
            VALUE();
            o.input = v;
        } else if (!strcmp(a, "--output-prefix")) {
            VALUE();
            o.output_prefix = v;
        } else if (!strcmp(a, "--json-keys")) {
            o.n_keys = 0;
            while (i + 1 < argc && !is_flag(argv[i + 1])) {
                if (o.n_keys == GL_PREP_MAX_KEYS)
                    gl_die_code(2, "--json-keys: at most %d keys", GL_PREP_MAX_KEYS);
                o.json_keys[o.n_keys++] = argv[++i];
            }
            if (!o.n_keys)
                gl_die_code(2, "--json-keys needs at least one key");
        } else if (!strcmp(a, "--tokenizer-type")) {
            VALUE();
            o.tokenizer_type = v;
        } else if (!strcmp(a, "--tokenizer-model")) {
            VALUE();
            o.tokenizer_model = v;
        } else if (!strcmp(a, "--vocab-file")) {
            VALUE();
            vocab_file = v;
        } else if (!strcmp(a, "--merge-file")) {
            VALUE();
            merge_file = v;
        } else if (!strcmp(a, "--append-eod")) {
            o.append_eod = 1;
        } else if (!strcmp(a, "--workers")) {
            VALUE();
            o.workers = (int)parse_long(a, v, 1);
            if (o.workers > 1024)
                gl_die_code(2, "--workers %s: at most 1024", v);
        } else if (!strcmp(a, "--log-interval")) {
            VALUE();
            o.log_interval = parse_long(a, v, 1);
        } else if (!strcmp(a, "--skip-bad-lines")) {
            o.skip_bad_lines = 1;
        } else if (!strcmp(a, "--quiet")) {
            o.quiet = 1;
        } else if (!strcmp(a, "--inspect")) {
            VALUE();
            inspect = v;
        } else if (!strcmp(a, "--docs")) {
            VALUE();
            docs = v;
        } else if (!strcmp(a, "--merge")) {
            merge_mode = 1;
            while (i + 1 < argc && !is_flag(argv[i + 1])) {
                if (n_merge == 256)
                    gl_die_code(2, "--merge: at most 256 datasets at once");
                merge[n_merge++] = argv[++i];
            }
        } else if (!strcmp(a, "--train-tokenizer")) {
            train = 1;
        } else if (!strcmp(a, "--vocab-size")) {
            VALUE();
            vocab_size = parse_long(a, v, 1);
        } else if (!strcmp(a, "--special-tokens")) {
            VALUE();
            specials = v;
        } else if (!strcmp(a, "--min-frequency")) {
            VALUE();
            min_freq = parse_long(a, v, 1);
        } else if (!strcmp(a, "--output")) {
            VALUE();
            output = v;
        } else if (!strcmp(a, "--synthetic-corpus")) {
            VALUE();
            synth = parse_long(a, v, 1);
        } else if (!strcmp(a, "--seed")) {
            VALUE();
            seed = parse_long(a, v, 0);
        } else if (!strcmp(a, "--dataset-impl")) {
            VALUE();
            if (strcmp(v, "mmap") != 0)
                gl_die_code(2, "--dataset-impl %s: gridlm writes Megatron's mmap format only", v);
        } else if (!strcmp(a, "--split-sentences")) {
            gl_die_code(2, "--split-sentences is not supported: gridlm writes one sequence per"
                        " document (Megatron's default)");
        } else if (!strcmp(a, "--keep-newlines")) {
            /* only meaningful with --split-sentences; newlines are always kept */
        } else
            gl_die_code(2, "unknown option %s (see --help)", a);
#undef VALUE
    }
    if (vocab_file || merge_file) {
        if (!vocab_file || !merge_file)
            gl_die_code(2, "--vocab-file and --merge-file go together (GPT2BPETokenizer)");
        static char model[8192];
        snprintf(model, sizeof model, "%s:%s", vocab_file, merge_file);
        o.tokenizer_model = model;
        if (!o.tokenizer_type)
            o.tokenizer_type = "GPT2BPETokenizer";
    }

    if (synth >= 0) {
        if (!output)
            gl_die_code(2, "--synthetic-corpus needs --output FILE");
        gl_synth_write(output, synth, (uint64_t)seed);
        return 0;
    }
    if (train) {
        if (!o.input || !output || !vocab_size)
            gl_die_code(2, "--train-tokenizer needs --input FILE, --vocab-size N and --output FILE");
        gl_bpe_train_opts t = { .input = o.input, .output = output, .vocab_size = vocab_size,
                                .special_tokens = specials, .min_frequency = min_freq,
                                .json_key = o.n_keys ? o.json_keys[0] : "text",
                                .quiet = o.quiet };
        gl_bpe_train(&t);
        return 0;
    }
    if (inspect) {
        int64_t *list = NULL;
        int n = docs ? parse_docs(docs, &list) : 0;
        gl_prep_inspect(inspect, list, n, o.tokenizer_type, o.tokenizer_model);
        free(list);
        return 0;
    }
    if (merge_mode) {
        if (!o.output_prefix)
            gl_die_code(2, "--merge needs --output-prefix OUT");
        gl_prep_merge(merge, n_merge, o.output_prefix);
        return 0;
    }
    if (!o.input || !o.output_prefix)
        gl_die_code(2, "give --input FILE and --output-prefix PREFIX (or --inspect, --merge,"
                    " --train-tokenizer, --synthetic-corpus; see --help)");
    if (!o.tokenizer_model)
        gl_die_code(2, "--tokenizer-model PATH is needed to tokenize (a tokenizer.json, or a"
                    " directory holding one)");
    if (!o.n_keys) {
        o.json_keys[0] = "text";
        o.n_keys = 1;
    }
    gl_prep_run(&o);
    return 0;
}
