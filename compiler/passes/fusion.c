/*
 * fusion.c - fusion legality for the backend (rule 6).
 *
 * Two nodes may fuse into one kernel only if they run on the same stream
 * and no sync op lies between them in program order: a fused kernel runs
 * where its last part stands, so fusing across a record_event would take
 * work out of what the event captures, and fusing across a wait (or a
 * wait_stream of another stream on this one, or a synchronize) would run
 * work before what it waits for.  Work on different streams is meant to
 * overlap and never fuses.
 *
 * A region is a maximal set of kernel nodes of one stream with no sync op
 * (record_event, wait_event, wait_stream, synchronize, control_deps,
 * sync_dealloc) between any two of them; nodes of other streams in
 * between do not split it.  Nodes that are no kernel (sync ops, del,
 * offload, the backward markers) belong to no region.
 */
#include <string.h>

#include "sgc.h"

/* A sync op: nothing fuses across it. */
static int
is_sync(const Node *n)
{
	uint32_t t;
	return n->op == OP_SYNC_DEALLOC || races_sync(n, &t) >= 0;
}

/* A node that runs work on its stream (may join a fused kernel). */
static int
is_kernel(const Node *n)
{
	return !(n->flags & NF_DEAD) && n->op < OP__N && !is_sync(n);
}

/* Region ids: a stream's run of kernels between two sync ops. */
void
fusion_analyse(const Graph *g, FusionInfo *fi)
{
	uint32_t ns = g->streams.n, epoch = 0;
	uint32_t *id = xmalloc((ns + 1) * sizeof *id);
	uint32_t *at = xmalloc((ns + 1) * sizeof *at);
	for (uint32_t s = 0; s < ns; s++)
		at[s] = NONE;
	fi->region = xmalloc((g->nodes.n + 1) * sizeof *fi->region);
	fi->nregions = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		fi->region[i] = NONE;
		if (n->flags & NF_DEAD)
			continue;
		if (is_sync(n)) {
			epoch++;
			continue;
		}
		if (!is_kernel(n))
			continue;
		if (at[n->stream] != epoch) {
			at[n->stream] = epoch;
			id[n->stream] = fi->nregions++;
		}
		fi->region[i] = id[n->stream];
	}
	free(id);
	free(at);
}

/* Frees the regions. */
void
fusion_free(FusionInfo *fi)
{
	free(fi->region);
	fi->region = NULL;
	fi->nregions = 0;
}

/* Whether a and b may fuse: same stream, kernels, no sync op between. */
int
fusion_legal(const Graph *g, NodeId a, NodeId b)
{
	if (a >= g->nodes.n || b >= g->nodes.n)
		return 0;
	if (a > b) {
		NodeId t = a;
		a = b;
		b = t;
	}
	const Node *x = &g->nodes.v[a], *y = &g->nodes.v[b];
	if (!is_kernel(x) || !is_kernel(y) || x->stream != y->stream)
		return 0;
	for (NodeId i = a + 1; i < b; i++)
		if (!(g->nodes.v[i].flags & NF_DEAD) && is_sync(&g->nodes.v[i]))
			return 0;
	return 1;
}

/* The pass checks that regions and fusion_legal agree on neighbours of a
 * stream; the backend asks fusion_analyse for the regions.  It reads the
 * graph only (PASS_SAME: the checks after it are skipped). */
int
fusion_pass(Graph *g, const PassOptions *po, Diag *d)
{
	(void)d;
	if (po->opt_level == 0)
		return PASS_SAME; /* -O0: one kernel per op */
	FusionInfo fi;
	fusion_analyse(g, &fi);
	NodeId *prev = xmalloc((g->streams.n + 1) * sizeof *prev);
	for (uint32_t s = 0; s < g->streams.n; s++)
		prev[s] = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		if (fi.region[i] == NONE)
			continue;
		uint32_t s = g->nodes.v[i].stream;
		if (prev[s] != NONE &&
		    (fi.region[prev[s]] == fi.region[i]) != fusion_legal(g, prev[s], i))
			ICE("fusion regions disagree with fusion_legal at node %u", i);
		prev[s] = i;
	}
	free(prev);
	fusion_free(&fi);
	return PASS_SAME;
}
