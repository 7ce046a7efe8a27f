/*
 * dot.c - `--emit=dot`: the graph after all passes as a Graphviz picture.
 *
 * One box per node, filled with its stream's colour (a legend lists the
 * streams); inputs, params and consts are ellipses on default's colour.
 * Solid edges are data (labelled with the value when it is not the only
 * result), dotted grey edges are each stream's program order, dashed edges
 * are syncs: record_event to the wait_event (or sync_dealloc) that waits
 * for it, a stream's last node to a wait_stream on another stream, every
 * stream's last node to a synchronize.  Each node's label ends with its
 * `.sg` line and the kernel that computes it (codegen_kernels_of); the
 * nodes one kernel fuses are drawn inside a box labelled with it.  The
 * output is deterministic.
 *
 *     sgc model.sg --emit=dot -o model.dot && dot -Tsvg model.dot > model.svg
 */
#include <string.h>

#include "backend.h"

static const char *palette[] = {
	"#dbe9f6", "#fde0c5", "#d5f0d5", "#f5d5e6", "#e6dcf5", "#fff4b8",
	"#d0f0f0", "#f0d8c8",
};
static const char *edge_palette[] = {
	"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
	"#e377c2", "#17becf",
};
enum { NCOLOR = sizeof palette / sizeof *palette };

/* Stream s's fill colour. */
static const char *
stream_color(uint32_t s)
{
	return palette[s % NCOLOR];
}

/* A label-safe copy of s (quotes and backslashes escaped). */
static void
put_escaped(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
}

/* A node's label: results, op, sync operands, line, kernel. */
static void
put_label(FILE *f, Graph *g, const Node *n, uint32_t kernel)
{
	for (uint32_t j = 0; j < n->nres; j++) {
		fputs(j ? ", %" : "%", f);
		put_escaped(f, g->vals.v[n->res[j]].name);
	}
	if (n->nres)
		fputs(" = ", f);
	fputs(op_name(n->op), f);
	if (n->op >= OP__N || n->op == OP_SYNCHRONIZE || n->op == OP_RECORD_EVENT ||
	    n->op == OP_WAIT_EVENT || n->op == OP_WAIT_STREAM || n->op == OP_SYNC_DEALLOC ||
	    n->op == OP_CONTROL_DEPS) {
		fputc('(', f);
		int first = 1;
		for (uint32_t k = 0; k < n->nopnd; k++, first = 0) {
			const Opnd *o = &n->opnd[k];
			fputs(first ? "" : ", ", f);
			if (o->kind == OK_VAL) {
				fputc('%', f);
				put_escaped(f, g->vals.v[o->v].name);
			} else if (o->kind == OK_EVENT) {
				put_escaped(f, g->events.v[o->v].name);
			} else if (o->kind == OK_STREAM) {
				put_escaped(f, g->streams.v[o->v].name);
			}
		}
		const Attr *a = ir_attr(n, "sync");
		if (a && a->s) {
			fprintf(f, "%ssync=%s", first ? "" : ", ", a->s);
			first = 0;
		}
		const Attr *e = ir_attr(n, "event");
		if (e) {
			fprintf(f, "%sevent=", first ? "" : ", ");
			put_escaped(f, g->events.v[e->i].name);
			first = 0;
		}
		const Attr *o = ir_attr(n, "other");
		if (o) {
			fprintf(f, "%sother=", first ? "" : ", ");
			put_escaped(f, g->streams.v[o->i].name);
		}
		fputc(')', f);
	}
	fprintf(f, "\\nline %u", n->loc.line);
	if (kernel != NONE)
		fprintf(f, ", kernel %u", kernel);
	if (!(n->flags & NF_USER) || (n->flags & NF_BACKWARD))
		fputs(", compiler-made", f);
}

/* Sync ops are drawn as hexagons. */
static int
is_sync_node(const Node *n)
{
	uint32_t t;
	return n->op == OP_SYNC_DEALLOC || ir_sync_of(n, &t) >= 0;
}

/* Declarations, nodes and the return. */
static void
dot_nodes(FILE *f, Graph *g, const uint32_t *kernel)
{
	for (ValId v = 0; v < g->vals.n; v++) {
		const Value *val = &g->vals.v[v];
		if (val->kind == VK_NODE)
			continue;
		fprintf(f, "  v%u [shape=ellipse, fillcolor=\"%s\", label=\"%s %%", v,
		        stream_color(0), val->kind == VK_INPUT ? "input" : val->kind ==
		        VK_PARAM ? "param" : "const");
		put_escaped(f, val->name);
		fprintf(f, " : %s\"];\n", dtype_name((DType)val->type.dt));
	}
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		fprintf(f, "  n%u [fillcolor=\"%s\"%s, label=\"", i, stream_color(n->stream),
		        is_sync_node(n) ? ", shape=hexagon" : n->op >= OP__N
		        ? ", shape=note" : "");
		put_label(f, g, n, kernel[i]);
		fputs("\"];\n", f);
	}
	if (g->rets.n) {
		fprintf(f, "  ret [shape=ellipse, fillcolor=\"%s\", label=\"return\"];\n",
		        stream_color(0));
	}
}

/* The node (or declaration) defining v: "n3" / "v0". */
static void
put_def(FILE *f, Graph *g, ValId v)
{
	const Value *val = &g->vals.v[v];
	if (val->kind == VK_NODE)
		fprintf(f, "n%u", val->def);
	else
		fprintf(f, "v%u", v);
}

/* Solid edges from each definition to its uses. */
static void
dot_data_edges(FILE *f, Graph *g)
{
	for (NodeId i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		for (uint32_t k = 0; k < n->nopnd; k++) {
			if (n->opnd[k].kind != OK_VAL)
				continue;
			ValId v = n->opnd[k].v;
			fputs("  ", f);
			put_def(f, g, v);
			fprintf(f, " -> n%u", i);
			const Value *val = &g->vals.v[v];
			if (val->kind == VK_NODE && g->nodes.v[val->def].nres > 1) {
				fputs(" [label=\"%", f);
				put_escaped(f, val->name);
				fputs("\"]", f);
			}
			fputs(";\n", f);
		}
	}
	for (uint32_t j = 0; j < g->rets.n; j++) {
		fputs("  ", f);
		put_def(f, g, g->rets.v[j]);
		fputs(" -> ret;\n", f);
	}
}

/* What dot_order_edge writes to. */
typedef struct {
	FILE *f;
	const Graph *g;
} DotOut;

/* A dashed edge coloured by the event or stream it stands for. */
static void
sync_edge(FILE *f, NodeId from, NodeId to, uint32_t color, const char *label)
{
	fprintf(f, "  n%u -> n%u [style=dashed, penwidth=1.5, color=\"%s\", "
	        "fontcolor=\"%s\", label=\"", from, to, edge_palette[color % NCOLOR],
	        edge_palette[color % NCOLOR]);
	put_escaped(f, label);
	fputs("\"];\n", f);
}

/* One ordering edge (ir_order_edges): a stream's program order dotted,
 * a sync's edge from another stream dashed in the event's or stream's
 * colour; a synchronize's barrier on the nodes after it is left out. */
static void
dot_order_edge(void *ctx, NodeId from, NodeId to, IrAfter kind, uint32_t via)
{
	const Graph *g = ((const DotOut *)ctx)->g;
	FILE *f = ((const DotOut *)ctx)->f;
	int other = via != g->nodes.v[to].stream; /* wait_stream, synchronize: via is a stream */
	switch (kind) {
	case IR_AFTER_STREAM:
		fprintf(f, "  n%u -> n%u [style=dotted, color=\"#999999\", "
		        "arrowhead=none];\n", from, to);
		break;
	case IR_AFTER_EVENT:
		sync_edge(f, from, to, via, g->events.v[via].name);
		break;
	case IR_AFTER_WAIT_STREAM:
		if (other)
			sync_edge(f, from, to, via, g->streams.v[via].name);
		break;
	case IR_AFTER_SYNCHRONIZE:
		if (other)
			sync_edge(f, from, to, via, "synchronize");
		break;
	case IR_AFTER_BARRIER:
		break;
	}
}

/* One filled box per stream, in its colour. */
static void
dot_legend(FILE *f, Graph *g)
{
	fputs("  subgraph cluster_streams {\n    label=\"streams\";\n"
	      "    style=rounded;\n", f);
	for (uint32_t s = 0; s < g->streams.n; s++) {
		fprintf(f, "    s%u [fillcolor=\"%s\", label=\"", s, stream_color(s));
		put_escaped(f, g->streams.v[s].name);
		fputs("\"];\n", f);
	}
	for (uint32_t s = 1; s < g->streams.n; s++)
		fprintf(f, "    s%u -> s%u [style=invis];\n", s - 1, s);
	fputs("  }\n", f);
}

/* A labelled box around the nodes of each kernel that fuses several. */
static void
dot_kernels(FILE *f, Graph *g, const uint32_t *kernel, uint32_t nk)
{
	uint32_t *count = xmalloc((nk + 1) * sizeof *count);
	memset(count, 0, (nk + 1) * sizeof *count);
	for (NodeId i = 0; i < g->nodes.n; i++)
		if (kernel[i] != NONE)
			count[kernel[i]]++;
	for (uint32_t k = 0; k < nk; k++) {
		if (count[k] < 2)
			continue;
		fprintf(f, "  subgraph cluster_kernel%u {\n    label=\"kernel %u: %u ops "
		        "fused\";\n    style=dashed;\n    color=\"#555555\";\n   ", k, k,
		        count[k]);
		for (NodeId i = 0; i < g->nodes.n; i++)
			if (kernel[i] == k)
				fprintf(f, " n%u;", i);
		fputs("\n  }\n", f);
	}
	free(count);
}

/* One digraph. */
static void
dot_graph(FILE *f, Module *m, Graph *g, int opt_level)
{
	uint32_t *kernel = xmalloc((g->nodes.n + 1) * sizeof *kernel);
	uint32_t nk = codegen_kernels_of(m, g, opt_level, kernel);
	fputs("digraph \"", f);
	put_escaped(f, g->name);
	fputs("\" {\n  graph [fontname=\"Helvetica\", labelloc=t, label=\"graph ", f);
	put_escaped(f, g->name);
	fputs("\"];\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", "
	      "fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n", f);
	dot_legend(f, g);
	dot_nodes(f, g, kernel);
	dot_kernels(f, g, kernel, nk);
	dot_data_edges(f, g);
	ir_order_edges(g, dot_order_edge, &(DotOut){f, g});
	fputs("}\n", f);
	free(kernel);
}

/* Every graph of the module (or only_graph). */
void
dot_module(FILE *f, Module *m, const char *only_graph, int opt_level)
{
	for (uint32_t i = 0; i < m->graphs.n; i++) {
		Graph *g = m->graphs.v[i];
		if (only_graph && strcmp(only_graph, g->name) != 0)
			continue;
		dot_graph(f, m, g, opt_level);
	}
}
