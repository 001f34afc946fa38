/* data-index-build: a helper of t/data-megatron.t.  Builds the sample
 * indices of one split into a cache directory:
 *   data-index-build PREFIX CACHE SPLIT train|valid|test SEQ_LENGTH NUM_SAMPLES SEED
 */
#include <config.h>
#include "data/samples.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    gl_log_set_program(argv[0]);
    if (argc != 8) {
        fprintf(stderr, "usage: data-index-build PREFIX CACHE SPLIT NAME SEQ NUM SEED\n");
        return 2;
    }
    gl_idx *x = gl_idx_open_or_die(argv[1]);
    double w[3];
    gl_error err;
    if (gl_parse_split(argv[3], w, &err) != 0)
        gl_die("%s", err.text);
    int which = strcmp(argv[4], "train") == 0 ? 0 : strcmp(argv[4], "valid") == 0 ? 1 : 2;
    int64_t b[4];
    gl_split_bounds(w, gl_idx_num_sequences(x), b);
    gl_gpt_index g = { .ds = x, .split_name = argv[4], .begin = b[which], .end = b[which + 1],
                       .seq_length = atoi(argv[5]), .num_samples = atol(argv[6]),
                       .seed = (uint32_t)strtoul(argv[7], NULL, 10) };
    gl_gpt_index_cached(&g, argv[2], 1);
    printf("%ld %ld %d %ld %ld\n", (long)b[which], (long)b[which + 1], g.num_epochs,
           (long)g.n_samples, (long)g.n_doc_index);
    gl_gpt_index_free(&g);
    gl_idx_close(x);
    return 0;
}
