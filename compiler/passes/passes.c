/*
 * passes.c - the pass pipeline, on one screen.
 *
 * Each pass takes a checked graph and returns it checked: the verifier
 * (and, from `races` on, the race re-check) runs after every pass that
 * changed the graph (a pass returning PASS_SAME left it as it was), and
 * --dump-after=NAME prints the graph after the named pass ("all": after
 * each).  control_deps cannot make a race: each control_deps performs the
 * sync it replaces at its place (the same clocks), accesses nothing, and
 * its results join their operands' storage, so every access stays on the
 * storage and at the position it had; so the race walk does not run again
 * after it, and the pass makes ctrldeps_check's test of its result itself
 * (on its own tables).  A pass reports user errors through the
 * diagnostics and returns 0; the pipeline then stops.
 */
#include <string.h>

#include "passes.h"

typedef int (*PassFn)(Graph *g, const PassOptions *po, Diag *d);

static const struct {
	const char *name;
	PassFn run; /* NULL: done before the pipeline (the front end) */
	int keeps_races; /* its changes cannot make a race (see the top) */
} pipeline[] = {
	{"sema", NULL, 0},                      /* parse + semantic analysis: sema.c */
	{"functionalize", functionalize_pass, 0}, /* functionalize.c: before autograd */
	{"dead_code", dce_pass, 0},             /* dce.c: unread results' statements removed (-O2) */
	{"attention", attention_pass, 0},       /* attention.c: hand-written attention fused (-O2) */
	{"fold_ops", fold_ops_pass, 0},         /* fold_ops.c: hand-written GELU, RMS norm as ops (-O2) */
	{"pad_products", pad_products_pass, 0}, /* pad.c: misaligned products padded (-O2) */
	{"autograd", autograd_run, 0},
	{"remat", remat_pass, 0},               /* remat.c: cheap activations recomputed */
	{"grad_buckets", buckets_pass, 0},      /* bucket.c: grad_sync's all_reduces in buckets */
	{"offload", offload_pass, 0},           /* offload.c: activations to the host and back */
	{"layout", layout_pass, 0},             /* layout.c: conv chains channels last (-O2) */
	{"backward_syncs", syncs_pass, 0},      /* syncs.c: events for compiler-made nodes */
	{"join_streams", syncs_join_pass, 0},   /* syncs.c: streams joined at the ends */
	{"races", races_pass, 0},               /* races.c: re-run after each later pass */
	{"sync_dealloc", dealloc_pass, 0},      /* dealloc.c: cross-stream frees */
	{"control_deps", ctrldeps_pass, 1},     /* ctrldeps.c: no work moves across syncs */
	/* The backend's decisions, stored on the graph (g->sched, schedule.c);
	 * they change no node, so no race can come of them. */
	{"fusion", fusion_pass, 1},             /* fusion.c: pointwise groups */
	{"kernel_choice", kernel_choice_pass, 1}, /* kernels.c: library kernels, layouts */
	{"memplan", memplan_pass, 1},           /* memplan.c: the static memory plan */
};

enum { NPASSES = sizeof pipeline / sizeof *pipeline };

int
passes_known(const char *name)
{
	if (strcmp(name, "all") == 0)
		return 1;
	for (int i = 0; i < NPASSES; i++)
		if (strcmp(pipeline[i].name, name) == 0)
			return 1;
	return 0;
}

void
passes_list(FILE *f)
{
	for (int i = 0; i < NPASSES; i++)
		fprintf(f, "%s%s", i ? " " : "", pipeline[i].name);
	fputc('\n', f);
}

int
passes_dumps(const PassOptions *po, const char *pass)
{
	return po->dump_after && (strcmp(po->dump_after, "all") == 0 ||
	                          strcmp(po->dump_after, pass) == 0);
}

static void
dump(Graph *g, const PassOptions *po, const char *pass)
{
	if (!passes_dumps(po, pass))
		return;
	fprintf(stderr, "# after pass '%s'\n", pass);
	sched_print(stderr, g); /* with the backend's decisions, once made */
}

/* The race re-check after pipeline pass i, which returned r (from the
 * `races` pass on, once the graph changed; none after a pass that cannot
 * make a race).  0: a race was reported. */
static int
recheck(Graph *g, const PassOptions *po, Diag *d, int i, int r, int races_done,
        int ctrl_done)
{
	if (!races_done || r == PASS_SAME || pipeline[i].keeps_races)
		return 1;
	return races_recheck(g, po, d, pipeline[i].name, ctrl_done);
}

int
passes_run(Module *m, const PassOptions *po)
{
	for (uint32_t gi = 0; gi < m->graphs.n; gi++) {
		Graph *g = m->graphs.v[gi];
		int races_done = 0, ctrl_done = 0;
		for (int i = 0; i < NPASSES; i++) {
			int r = pipeline[i].run ? pipeline[i].run(g, po, m->diag) : 1;
			if (!r)
				return 0;
			if (r != PASS_SAME)
				verify_graph(g, pipeline[i].name);
			ctrl_done |= pipeline[i].run == ctrldeps_pass;
			if (!recheck(g, po, m->diag, i, r, races_done, ctrl_done))
				return 0;
			races_done |= pipeline[i].run == races_pass;
			dump(g, po, pipeline[i].name);
		}
	}
	return 1;
}
