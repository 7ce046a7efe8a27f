/*
 * passes.c - the pass pipeline, on one screen.
 *
 * Each pass takes a checked graph and returns it checked: the verifier
 * runs after every pass, and --dump-after=NAME prints the graph after the
 * named pass ("all": after each).  A pass reports user errors through the
 * diagnostics and returns 0; the pipeline then stops.
 */
#include <string.h>

#include "sgc.h"

typedef int (*PassFn)(Graph *g, const PassOptions *po, Diag *d);

static const struct {
	const char *name;
	PassFn run; /* NULL: done before the pipeline (the front end) */
} pipeline[] = {
	{"sema", NULL}, /* parse + semantic analysis: sema.c */
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
		for (int i = 0; i < NPASSES; i++) {
			if (pipeline[i].run && !pipeline[i].run(g, po, m->diag))
				return 0;
			verify_graph(g, pipeline[i].name);
			dump(g, po, pipeline[i].name);
		}
	}
	return 1;
}
