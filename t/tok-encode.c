/* tok-encode: a helper for t/tok-hf.t.  Encodes length-prefixed records
 * ("LEN\n" then LEN bytes, repeated) from FILE with a tokenizer and
 * prints one line of space-separated ids per record.
 *   tok-encode TOKENIZER FILE [--special] [--decode]
 * TOKENIZER is a tokenizer.json, or VOCAB.json:MERGES.txt (GPT-2's files).
 * With --decode it prints the decoded bytes of each encoding, hex. */
#include <config.h>
#include "data/tokenizer.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    gl_log_set_program(argv[0]);
    if (argc < 3) {
        fprintf(stderr, "usage: tok-encode TOKENIZER FILE [--special] [--decode]\n");
        return 2;
    }
    int special = 0, decode = 0;
    for (int i = 3; i < argc; i++) {
        special |= strcmp(argv[i], "--special") == 0;
        decode |= strcmp(argv[i], "--decode") == 0;
    }
    /* VOCAB.json:MERGES.txt selects GPT2BPETokenizer */
    gl_tokenizer *t = gl_tokenizer_open(strchr(argv[1], ':') ? "GPT2BPETokenizer"
                                                             : "HuggingFaceTokenizer", argv[1]);
    gl_tok_encoder *e = gl_tok_encoder_new(t);
    FILE *f = fopen(argv[2], "rb");
    if (!f)
        gl_die("cannot open %s", argv[2]);
    size_t len;
    char *buf = NULL;
    while (fscanf(f, "%zu", &len) == 1) {
        if (fgetc(f) != '\n')
            gl_die("%s: bad record header", argv[2]);
        buf = realloc(buf, len + 1);
        if (len && fread(buf, 1, len, f) != len)
            gl_die("%s: short record", argv[2]);
        const int32_t *ids;
        size_t n = gl_tok_encode(e, buf, len, special, &ids);
        if (decode) {
            size_t dl;
            char *d = gl_tok_decode(t, ids, n, &dl);
            for (size_t i = 0; i < dl; i++)
                printf("%02x", (unsigned char)d[i]);
            free(d);
        } else
            for (size_t i = 0; i < n; i++)
                printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    free(buf);
    fclose(f);
    gl_tok_encoder_free(e);
    gl_tokenizer_free(t);
    return 0;
}
