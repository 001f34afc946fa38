/*
 * train-sched: the pipeline schedules, run on paper for every stage at
 * once.
 *
 * Each message carries a label (direction, model chunk it is for,
 * micro-batch), computed from the sender's counters exactly as the
 * pipeline runner does.  The test checks that
 *   - each chunk runs M forwards and M backwards, a forward only after its
 *     input arrived and a backward only after its forward and its output
 *     gradient;
 *   - between every ordered pair of ranks the k-th message sent is the
 *     k-th one the receiver expects (same label), even on a ring of two;
 *   - the rounds, each completing only when all its messages are matched
 *     (rendezvous, the strictest case), never deadlock;
 *   - the activation slots each chunk reserves are enough and not more
 *     than Megatron's bound: min(PP - stage, M) for 1F1B.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/sched.h"
#include "tap.h"

typedef struct {
    int dir;            /* 0 forward activation, 1 backward gradient */
    int mc, mb;         /* for model chunk mc, micro-batch mb */
    int peer;           /* the other rank */
    int round;          /* round index on its own rank */
    int send;
} op;

typedef struct {
    op *ops;
    int n, cap;
} oplist;

static void add(oplist *l, op o)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->ops = realloc(l->ops, (size_t)l->cap * sizeof *l->ops);
    }
    l->ops[l->n++] = o;
}

static int check(int pp, int V, int M)
{
    char what[64];
    snprintf(what, sizeof what, "PP %d V %d M %d", pp, V, M);
    gl_sched **s = calloc((size_t)pp, sizeof *s);
    oplist *all = calloc((size_t)pp, sizeof *all);     /* per rank, in post order */
    int *nrounds = calloc((size_t)pp, sizeof(int));
    int bad = 0, nmc = pp * V;

    for (int p = 0; p < pp; p++) {
        s[p] = gl_sched_build(pp, p, V, M);
        int fw[16] = {0}, bw[16] = {0}, rf[16] = {0}, rb[16] = {0};
        int held_max[16] = {0};
        int next = (p + 1) % pp, prev = (p + pp - 1) % pp;
        for (int i = 0; i < s[p]->nsteps && !bad; i++) {
            const gl_step *st = &s[p]->step[i];
            int c = st->chunk;
            if (st->kind == GL_STEP_FWD) {
                int mc = c * pp + p;
                if (mc != 0 && rf[c] <= fw[c]) {
                    diag("%s: stage %d forward of chunk %d mb %d before its input",
                         what, p, c, fw[c]);
                    bad = 1;
                }
                fw[c]++;
            } else if (st->kind == GL_STEP_BWD) {
                int mc = c * pp + p;
                if (fw[c] <= bw[c] || (mc != nmc - 1 && rb[c] <= bw[c])) {
                    diag("%s: stage %d backward of chunk %d mb %d too early", what, p, c, bw[c]);
                    bad = 1;
                }
                bw[c]++;
            } else {
                int r = nrounds[p]++;
                if (st->send_fwd >= 0) {
                    int cc = st->send_fwd;
                    add(&all[p], (op){ 0, cc * pp + p + 1, fw[cc] - 1, next, r, 1 });
                }
                if (st->send_bwd >= 0) {
                    int cc = st->send_bwd;
                    add(&all[p], (op){ 1, cc * pp + p - 1, bw[cc] - 1, prev, r, 1 });
                }
                if (st->recv_fwd >= 0) {
                    int cc = st->recv_fwd;
                    add(&all[p], (op){ 0, cc * pp + p, rf[cc]++, prev, r, 0 });
                }
                if (st->recv_bwd >= 0) {
                    int cc = st->recv_bwd;
                    add(&all[p], (op){ 1, cc * pp + p, rb[cc]++, next, r, 0 });
                }
            }
            for (int cc = 0; cc < V; cc++) {
                int h = (rf[cc] > fw[cc] ? rf[cc] : fw[cc]) - bw[cc];
                if (h > held_max[cc])
                    held_max[cc] = h;
            }
        }
        for (int cc = 0; cc < V && !bad; cc++) {
            int mc = cc * pp + p;
            if (fw[cc] != M || bw[cc] != M || (mc != 0 && rf[cc] != M) ||
                (mc != nmc - 1 && rb[cc] != M)) {
                diag("%s: stage %d chunk %d: %d fwd %d bwd %d recv %d grads", what, p, cc,
                     fw[cc], bw[cc], rf[cc], rb[cc]);
                bad = 1;
            }
            if (held_max[cc] != s[p]->slots[cc]) {
                diag("%s: stage %d chunk %d holds %d, reserves %d", what, p, cc,
                     held_max[cc], s[p]->slots[cc]);
                bad = 1;
            }
            int bound = pp - p < M ? pp - p : M;
            if (V == 1 && s[p]->slots[cc] > bound) {
                diag("%s: stage %d holds %d micro-batches, 1F1B needs %d", what, p,
                     s[p]->slots[cc], bound);
                bad = 1;
            }
        }
    }

    /* Match the k-th send a->b with the k-th receive of b from a. */
    int *partner_round = NULL;
    int total_ops = 0;
    for (int p = 0; p < pp; p++)
        total_ops += all[p].n;
    partner_round = calloc((size_t)total_ops + 1, sizeof(int));
    int base[64] = {0};
    for (int p = 1; p < pp; p++)
        base[p] = base[p - 1] + all[p - 1].n;
    for (int a = 0; a < pp && !bad; a++)
        for (int b = 0; b < pp && !bad; b++) {
            int ia = 0, ib = 0;
            for (;;) {
                while (ia < all[a].n && !(all[a].ops[ia].send && all[a].ops[ia].peer == b))
                    ia++;
                while (ib < all[b].n && !(!all[b].ops[ib].send && all[b].ops[ib].peer == a))
                    ib++;
                if (ia == all[a].n || ib == all[b].n) {
                    if (ia != all[a].n || ib != all[b].n) {
                        diag("%s: %d -> %d: unmatched message", what, a, b);
                        bad = 1;
                    }
                    break;
                }
                const op *x = &all[a].ops[ia], *y = &all[b].ops[ib];
                if (x->dir != y->dir || x->mc != y->mc || x->mb != y->mb) {
                    diag("%s: %d -> %d sends (%s chunk %d mb %d), receiver expects "
                         "(%s chunk %d mb %d)", what, a, b, x->dir ? "bwd" : "fwd", x->mc,
                         x->mb, y->dir ? "bwd" : "fwd", y->mc, y->mb);
                    bad = 1;
                }
                partner_round[base[a] + ia] = y->round;
                partner_round[base[b] + ib] = x->round;
                ia++;
                ib++;
            }
        }

    /* Rendezvous rounds: a round completes once every partner has posted
     * (reached) the round holding the matching operation. */
    if (!bad) {
        int *cur = calloc((size_t)pp, sizeof(int)), progress = 1;
        while (progress) {
            progress = 0;
            for (int p = 0; p < pp; p++) {
                if (cur[p] == nrounds[p])
                    continue;
                int ready = 1;
                for (int i = 0; i < all[p].n; i++)
                    if (all[p].ops[i].round == cur[p] &&
                        cur[all[p].ops[i].peer] < partner_round[base[p] + i])
                        ready = 0;
                if (ready) {
                    cur[p]++;
                    progress = 1;
                }
            }
        }
        for (int p = 0; p < pp; p++)
            if (cur[p] != nrounds[p]) {
                diag("%s: deadlock: stage %d stuck in round %d of %d", what, p, cur[p],
                     nrounds[p]);
                bad = 1;
            }
        free(cur);
    }
    ok(!bad, "%s: every message matched in order, no deadlock, slots %d..", what,
       s[0]->slots[0]);
    for (int p = 0; p < pp; p++) {
        gl_sched_free(s[p]);
        free(all[p].ops);
    }
    free(partner_round);
    free(s);
    free(all);
    free(nrounds);
    return !bad;
}

int main(void)
{
    static const int cases[][3] = {
        {1, 1, 1}, {1, 1, 8},
        {2, 1, 1}, {2, 1, 2}, {2, 1, 8},
        {3, 1, 2}, {4, 1, 3}, {4, 1, 4}, {4, 1, 16},
        {2, 2, 2}, {2, 2, 4}, {2, 2, 8},
        {4, 2, 4}, {4, 2, 8}, {4, 2, 16},
        {3, 2, 6}, {4, 3, 12}, {2, 4, 6}, {8, 2, 16},
    };
    plan(NO_PLAN);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check(cases[i][0], cases[i][1], cases[i][2]);
    /* Megatron's interleaved warm-up on the first stage: 2 (PP-1) + (V-1) PP. */
    gl_sched *s = gl_sched_build(4, 0, 2, 8);
    int warm = 0;
    for (int i = 0; i < s->nsteps && s->step[i].kind != GL_STEP_BWD; i++)
        warm += s->step[i].kind == GL_STEP_FWD;
    is_int(warm, 2 * 3 + 1 * 4 + 1, "interleaved PP 4 V 2: 10 warm-up forwards, then the "
           "first steady forward");
    gl_sched_free(s);
    return done_testing();
}
