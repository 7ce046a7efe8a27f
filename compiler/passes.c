/*
 * passes.c - the pass pipeline, on one screen.
 *
 * Each pass takes a checked graph and returns it checked: the verifier
 * (and, from `races` on, the race re-check) runs after every pass that
 * changed the graph (a pass returning PASS_SAME left it as it was), and
 * --dump-after=NAME prints the graph after the named pass ("all": after
 * each).  A pass reports user errors through the diagnostics and returns
 * 0; the pipeline then stops.
 */
#include <string.h>

#include "sgc.h"

typedef int (*PassFn)(Graph *g, const PassOptions *po, Diag *d);

static const struct {
	const char *name;
	PassFn run; /* NULL: done before the pipeline (the front end) */
} pipeline[] = {
	{"sema", NULL}, /* parse + semantic analysis: sema.c */
	{"functionalize", functionalize_pass}, /* functionalize.c: before autograd */
	{"autograd", autograd_run},
	{"grad_buckets", buckets_pass},      /* bucket.c: grad_sync's all_reduces in buckets */
	{"offload", offload_pass},           /* offload.c: activations to the host and back */
	{"backward_syncs", syncs_pass},      /* syncs.c: events for compiler-made nodes */
	{"join_streams", syncs_join_pass},   /* syncs.c: streams joined at the ends */
	{"races", races_pass},               /* races.c: re-run after each later pass */
	{"sync_dealloc", dealloc_pass},      /* dealloc.c: cross-stream frees */
	{"control_deps", ctrldeps_pass},     /* ctrldeps.c: no work moves across syncs */
	{"fusion", fusion_pass},             /* fusion.c: legality for the backend */
	{"memplan", memplan_pass},           /* memplan.c: the static memory plan */
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

static void
dump(Graph *g, const PassOptions *po, const char *pass)
{
	if (!po->dump_after || (strcmp(po->dump_after, "all") != 0 &&
	                        strcmp(po->dump_after, pass) != 0))
		return;
	fprintf(stderr, "# after pass '%s'\n", pass);
	print_graph(stderr, g);
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
			if (races_done && r != PASS_SAME &&
			    !races_recheck(g, po, m->diag, pipeline[i].name, ctrl_done))
				return 0;
			races_done |= pipeline[i].run == races_pass;
			dump(g, po, pipeline[i].name);
		}
	}
	return 1;
}
