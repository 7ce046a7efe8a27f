/*
 * dce.c - pass `dead_code` (-O2): statements whose results nothing reads
 * are removed, when removing them changes nothing else.
 *
 * Exported programs carry such statements: torch.export's
 * `num_batches_tracked.add_(1)` of every BatchNorm arrives as
 *
 *     %add_ = add(%bn1.num_batches_tracked, 1)
 *
 * whose write-back fx2sg leaves out (the counter is read only with
 * momentum=None), and ResNet-18's 20 of them were 20 kernels a step.
 *
 * A node goes when none of its results is read (by a live node or a
 * return), its op has no effect but its results (not in place, not a sync
 * or a collective, not compiler-made, not batch_norm, which updates its
 * running statistics in training, not a copy to or from the host) and it
 * is on `default`: work the program put on a side stream is its schedule,
 * kept as written (and joined at the end, rule 0).  `offload` and `del`
 * statements do not count as reads: one naming a value removed goes too,
 * so that printing the result and compiling it again removes nothing
 * more.  The walk runs
 * backwards, so a chain that only fed a removed node goes with it; each
 * node's operands are counted down once: linear in the graph.
 */
#include <stdlib.h>

#include "passes.h"

/* 1 when a node of op k can go once its results are unread. */
static int
pure(uint32_t k)
{
	if (k >= OP__N || k == OP_BATCH_NORM || k == OP_TO_HOST || k == OP_TO_DEVICE)
		return 0;
	return !(op_table[k].flags & (OPF_INPLACE | OPF_SYNC | OPF_COLLECTIVE | OPF_COMPILER));
}

/* An `offload` or `del` statement: it names its value, reading nothing. */
static int
names_only(const Node *n)
{
	return !(n->flags & NF_DEAD) && (n->op == OP_OFFLOAD || n->op == OP_DEL) &&
	       n->nopnd == 1 && n->opnd[0].kind == OK_VAL;
}

int
dce_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)d;
	if (po->opt_level < 2)
		return PASS_SAME;
	uint32_t *uses = ir_use_counts(g);
	int changed = 0;
	/* `offload` and `del` name a value without reading it: one only they
	 * name is unread, and they go with it (below). */
	for (NodeId i = 0; i < g->nodes.n; i++)
		if (names_only(&g->nodes.v[i]))
			uses[g->nodes.v[i].opnd[0].v]--;
	for (uint32_t i = g->nodes.n; i-- > 0;) {
		Node *n = &g->nodes.v[i];
		if ((n->flags & NF_DEAD) || n->nres == 0 || n->stream != 0 || !pure(n->op))
			continue;
		uint32_t read = 0;
		for (uint32_t r = 0; r < n->nres; r++)
			read += uses[n->res[r]];
		if (read)
			continue;
		n->flags |= NF_DEAD;
		changed = 1;
		for (uint32_t j = 0; j < n->nopnd; j++)
			if (n->opnd[j].kind == OK_VAL)
				uses[n->opnd[j].v]--;
	}
	for (NodeId i = 0; changed && i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		const Value *v = names_only(n) ? &g->vals.v[n->opnd[0].v] : NULL;
		if (v && v->kind == VK_NODE && v->def != NONE &&
		    (g->nodes.v[v->def].flags & NF_DEAD))
			n->flags |= NF_DEAD;
	}
	free(uses);
	return changed ? 1 : PASS_SAME;
}
