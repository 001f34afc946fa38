/*
 * ckpt-hf-check.c: what gridlm-ckpt import-hf wrote, checked against the
 * Hugging Face tensors t/ckpt-hf.py made, through a name table written
 * out here on its own (not src/ckpt/hf.c's), so a swapped pair in that
 * table fails.
 *
 *   ckpt-hf-check FILE tied|untied
 *
 * The model is the one t/ckpt-hf.py makes: h 8, f 12, 2 layers, 2 query
 * heads, 1 kv head, head_dim 4, vocabulary 10 (padded to 128); every
 * value is (crc32(HF name) + 7 i) % 255 - 127, over 8.
 */
#include <config.h>
#include "ckpt/ckpt.h"
#include "base/log.h"
#include "tap.h"

#include <jansson.h>
#include <mpi.h>
#include <zlib.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 8, F = 12, L = 2, HQ = 2, HKV = 1, D = 4, V = 10, VPAD = 128 };

static const struct { const char *hf, *gl; long rows, cols; } table[] = {
    { "model.embed_tokens.weight", "model/embedding.weight", V, H },
    { "model.layers.%d.input_layernorm.weight", "model/layers.%d.attention_norm.weight", H, 0 },
    { "model.layers.%d.self_attn.q_proj.weight", "model/layers.%d.attention.wq.weight", HQ * D, H },
    { "model.layers.%d.self_attn.k_proj.weight", "model/layers.%d.attention.wk.weight", HKV * D, H },
    { "model.layers.%d.self_attn.v_proj.weight", "model/layers.%d.attention.wv.weight", HKV * D, H },
    { "model.layers.%d.self_attn.o_proj.weight", "model/layers.%d.attention.wo.weight", H, HQ * D },
    { "model.layers.%d.post_attention_layernorm.weight", "model/layers.%d.mlp_norm.weight", H, 0 },
    { "model.layers.%d.mlp.gate_proj.weight", "model/layers.%d.mlp.w_gate.weight", F, H },
    { "model.layers.%d.mlp.up_proj.weight", "model/layers.%d.mlp.w_up.weight", F, H },
    { "model.layers.%d.mlp.down_proj.weight", "model/layers.%d.mlp.w_down.weight", H, F },
    { "model.norm.weight", "model/final_norm.weight", H, 0 },
    { "lm_head.weight", "model/lm_head.weight", V, H },
};

static float value(const char *hf, long i)
{
    uint64_t crc = crc32(0L, (const Bytef *)hf, (uInt)strlen(hf));
    return (float)((long)((crc + 7 * (uint64_t)i) % 255) - 127) / 8.0f;
}

static int check(gl_ckpt *ck, const char *hf, const char *gl, long rows, long cols)
{
    int i = gl_ckpt_find(ck, gl);
    if (i < 0) {
        diag("no %s", gl);
        return 0;
    }
    const gl_ckpt_info *in = gl_ckpt_tensor_info(ck, i);
    long prow = rows == V ? VPAD : rows;
    if (in->ndim != (cols ? 2 : 1) || in->shape[0] != prow || (cols && in->shape[1] != cols)) {
        diag("%s: shape [%ld, %ld]", gl, in->shape[0], in->shape[1]);
        return 0;
    }
    long c = cols ? cols : 1;
    float *buf = gl_malloc((size_t)(prow * c) * sizeof *buf);
    gl_ckpt_tensor t = { .name = gl, .ndim = in->ndim, .shape = { in->shape[0], in->shape[1] },
                         .count = { in->shape[0], in->shape[1] }, .data = buf };
    int good = gl_ckpt_read(ck, &t, NULL) == GL_CKPT_OK;
    for (long k = 0; good && k < prow * c; k++) {
        float want = k < rows * c ? value(hf, k) : 0.0f;   /* padding rows are zero */
        if (buf[k] != want) {
            diag("%s element %ld: %g, want %g (from %s)", gl, k, buf[k], want, hf);
            good = 0;
        }
    }
    free(buf);
    return good;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc != 3)
        bail_out("usage: ckpt-hf-check FILE tied|untied");
    int tied = !strcmp(argv[2], "tied");
    plan(NO_PLAN);
    gl_ckpt *ck;
    gl_error err;
    if (gl_ckpt_open(MPI_COMM_SELF, argv[1], GL_CKPT_VERIFY, &ck, &err) != GL_CKPT_OK)
        bail_out("%s", err.text);
    int n = 0;
    for (size_t r = 0; r < sizeof table / sizeof table[0]; r++) {
        int per_layer = strstr(table[r].hf, "%d") != NULL;
        for (int l = 0; l < (per_layer ? L : 1); l++) {
            char hf[128], gl[128];
            snprintf(hf, sizeof hf, table[r].hf, l);
            snprintf(gl, sizeof gl, table[r].gl, l);
            if (tied && !strcmp(hf, "lm_head.weight")) {
                ok(gl_ckpt_find(ck, gl) < 0, "tied: no %s", gl);
                continue;
            }
            ok(check(ck, hf, gl, table[r].rows, table[r].cols), "%s -> %s", hf, gl);
            n++;
        }
    }
    is_int(gl_ckpt_ntensors(ck), n, "no other tensors");
    long long vs = 0;
    ok(gl_ckpt_get_i64(ck, "vocab_size", &vs, NULL) == 0 && vs == V, "vocab_size attribute");
    char *cfg = gl_ckpt_get_str(ck, "config");
    json_t *j = cfg ? json_loads(cfg, 0, NULL) : NULL;
    ok(j && json_integer_value(json_object_get(j, "num_layers")) == L &&
       json_integer_value(json_object_get(j, "hidden_size")) == H &&
       json_integer_value(json_object_get(j, "ffn_hidden_size")) == F &&
       json_integer_value(json_object_get(j, "num_attention_heads")) == HQ &&
       json_integer_value(json_object_get(j, "num_query_groups")) == HKV &&
       json_integer_value(json_object_get(j, "kv_channels")) == D &&
       json_integer_value(json_object_get(j, "padded_vocab_size")) == VPAD &&
       json_real_value(json_object_get(j, "rotary_base")) == 500000.0 &&
       json_is_true(json_object_get(j, "use_rope_scaling")) &&
       json_is_true(json_object_get(j, "untie_embeddings_and_output_weights")) == !tied,
       "config attribute in Megatron's names: %s", cfg ? "present" : "missing");
    json_decref(j);
    free(cfg);
    char *hfc = gl_ckpt_get_str(ck, "hf_config");
    ok(hfc && strstr(hfc, "\"eos_token_id\""), "the original config.json is kept");
    free(hfc);
    gl_ckpt_close(ck);
    int rc = done_testing();
    MPI_Finalize();
    return rc;
}
