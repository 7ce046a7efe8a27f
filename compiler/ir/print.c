/*
 * print.c - the IR as a .sg program (--emit=ir, --dump-after).
 *
 * The text is canonical: printing, parsing and printing again gives the
 * same bytes.  Choices that make it so:
 *   - attributes are printed only when they differ from the op's default;
 *     dim names in attributes are printed as their values;
 *   - declared tensor types keep their dim names;
 *   - each run of consecutive statements on one stream is one
 *     `with stream(NAME) { }` block; statements on the region's own stream
 *     (default at graph level, the backward statement's stream inside a
 *     derived block) are printed bare;
 *   - the optimizer statement is printed right after `backward`.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sgc.h"

typedef struct {
	FILE *f;
	Graph *g;
	uint32_t base;   /* the region's own stream */
	uint32_t block;  /* stream of the open `with` block; base when none */
	int indent;      /* of the region */
	PrintNote note;  /* a trailing comment per statement, or NULL */
	void *ctx;
} Printer;

/* The end of node i's line: its note, the newline. */
const char *
print_layout_note(FILE *f, const Graph *g, NodeId i, const char *sep)
{
	const Node *n = &g->nodes.v[i];
	for (uint32_t j = 0; j < n->nres; j++)
		if (g->vals.v[n->res[j]].layout == LAYOUT_CL) {
			fprintf(f, "%s%%%s: channels last", sep, g->vals.v[n->res[j]].name);
			sep = ", ";
		}
	return sep;
}

static void
end_line(Printer *P, NodeId i)
{
	if (P->note)
		P->note(P->f, P->ctx, i);
	fputc('\n', P->f);
}

static void
put_indent(Printer *P, int extra)
{
	for (int i = 0; i < P->indent + extra; i++)
		fputs("  ", P->f);
}

static void
print_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static void
print_type(FILE *f, Module *m, const Type *t)
{
	fprintf(f, "%s[", dtype_name(t->dt));
	for (int i = 0; i < t->rank; i++) {
		if (i)
			fputs(", ", f);
		if (t->sym[i] >= 0 && (uint32_t)t->sym[i] < m->dims.n &&
		    m->dims.v[t->sym[i]].n == t->d[i])
			fputs(m->dims.v[t->sym[i]].name, f);
		else
			fprintf(f, "%" PRId64, t->d[i]);
	}
	fputc(']', f);
}

static void
print_num(FILE *f, uint8_t kind, int64_t i, double d)
{
	char buf[32];
	if (kind == OK_INT)
		fprintf(f, "%" PRId64, i);
	else if (kind == OK_BOOL)
		fputs(i ? "true" : "false", f);
	else
		fputs(fmt_double(buf, d), f);
}

static void
print_attr_value(Printer *P, const Attr *a)
{
	FILE *f = P->f;
	switch (a->type) {
	case AT_INT: fprintf(f, "%" PRId64, a->i); break;
	case AT_FLOAT: print_num(f, OK_FLOAT, 0, a->f); break;
	case AT_NUM: print_num(f, a->num_kind, a->i, a->f); break;
	case AT_BOOL: fputs(a->i ? "true" : "false", f); break;
	case AT_STR: print_string(f, a->s); break;
	case AT_INTS:
		fputc('[', f);
		for (uint32_t i = 0; i < a->nints; i++)
			fprintf(f, i ? ", %" PRId64 : "%" PRId64, a->ints[i]);
		fputc(']', f);
		break;
	case AT_DTYPE: fputs(dtype_name((DType)a->i), f); break;
	case AT_STREAM: fputs(P->g->streams.v[a->i].name, f); break;
	case AT_EVENT: fputs(P->g->events.v[a->i].name, f); break;
	case AT_IDENT: fputs(a->s, f); break;
	}
}

/* Whether a (set) attribute equals its spec's default, and so is left out. */
static int
is_default(const AttrSpec *sp, const Attr *a)
{
	if (!sp->deflt)
		return 0;
	switch (sp->type) {
	case AT_INT: case AT_BOOL: case AT_DTYPE: {
		Attr d = {0};
		if (sp->type == AT_DTYPE) {
			DType dt;
			dtype_parse(sp->deflt, &dt);
			return a->i == (int64_t)dt;
		}
		d.i = strcmp(sp->deflt, "true") == 0 ? 1
		      : strcmp(sp->deflt, "false") == 0 ? 0 : strtoll(sp->deflt, NULL, 10);
		return a->i == d.i;
	}
	case AT_FLOAT:
		return a->f == strtod(sp->deflt, NULL);
	case AT_NUM:
		return a->num_kind == OK_FLOAT && a->f == strtod(sp->deflt, NULL);
	case AT_STR:
		return strlen(a->s) + 2 == strlen(sp->deflt) &&
		       strncmp(a->s, sp->deflt + 1, strlen(a->s)) == 0;
	default:
		return 0;
	}
}

static void
print_opnd(Printer *P, const Opnd *o)
{
	switch (o->kind) {
	case OK_VAL: fprintf(P->f, "%%%s", P->g->vals.v[o->v].name); break;
	case OK_STREAM: fputs(P->g->streams.v[o->v].name, P->f); break;
	case OK_EVENT: fputs(P->g->events.v[o->v].name, P->f); break;
	default: print_num(P->f, o->kind, o->i, o->f); break;
	}
}

static void
print_op(Printer *P, const Node *n)
{
	FILE *f = P->f;
	const OpInfo *oi = &op_table[n->op];
	for (uint32_t i = 0; i < n->nres; i++)
		fprintf(f, i ? ", %%%s" : "%%%s", P->g->vals.v[n->res[i]].name);
	if (n->nres)
		fputs(" = ", f);
	fprintf(f, "%s(", oi->name);
	int first = 1;
	for (uint32_t i = 0; i < n->nopnd; i++, first = 0) {
		if (!first)
			fputs(", ", f);
		print_opnd(P, &n->opnd[i]);
	}
	for (uint32_t i = 0; i < n->nattr && i < oi->nattr; i++) {
		const Attr *a = &n->attr[i];
		if (!a->set || is_default(&oi->attr[i], a))
			continue;
		fprintf(f, first ? "%s=" : ", %s=", oi->attr[i].name);
		print_attr_value(P, a);
		first = 0;
	}
	for (uint32_t i = 0; i < n->nextra; i++) {
		fprintf(f, first ? "%s=" : ", %s=", n->extra[i].key);
		print_attr_value(P, &n->extra[i].a);
		first = 0;
	}
	fputc(')', f);
	end_line(P, (NodeId)(n - P->g->nodes.v));
}

static void
print_optimizer(Printer *P)
{
	const Optimizer *o = &P->g->opt;
	char b[32];
	FILE *f = P->f;
	if (!o->name)
		return;
	put_indent(P, P->block != P->base);
	fprintf(f, "optimizer %s(lr=%s", o->name, fmt_double(b, o->lr));
	if (strcmp(o->name, "sgd") == 0) {
		if (o->momentum != 0)
			fprintf(f, ", momentum=%s", fmt_double(b, o->momentum));
		if (o->weight_decay != 0)
			fprintf(f, ", weight_decay=%s", fmt_double(b, o->weight_decay));
	} else {
		if (o->beta1 != 0.9)
			fprintf(f, ", beta1=%s", fmt_double(b, o->beta1));
		if (o->beta2 != 0.999)
			fprintf(f, ", beta2=%s", fmt_double(b, o->beta2));
		if (o->eps != 1e-8)
			fprintf(f, ", eps=%s", fmt_double(b, o->eps));
		if (o->weight_decay != 0.01)
			fprintf(f, ", weight_decay=%s", fmt_double(b, o->weight_decay));
	}
	if (!o->fused)
		fputs(", fused=false", f);
	fputs(")\n", f);
}

/* Opens or closes `with` blocks so that the next statement is on s. */
static void
switch_stream(Printer *P, uint32_t s)
{
	if (P->block == s)
		return;
	if (P->block != P->base) {
		put_indent(P, 0);
		fputs("}\n", P->f);
	}
	if (s != P->base) {
		put_indent(P, 0);
		fprintf(P->f, "with stream(%s) {\n", P->g->streams.v[s].name);
	}
	P->block = s;
}

static void
print_decls(Printer *P)
{
	Graph *g = P->g;
	FILE *f = P->f;
	int any = 0;
	for (uint32_t i = 0; i < g->vals.n; i++) {
		Value *v = &g->vals.v[i];
		if (v->kind == VK_NODE)
			continue;
		fprintf(f, "  %s %%%s : ", v->kind == VK_INPUT ? "input" : v->kind ==
		        VK_PARAM ? "param" : "const", v->name);
		print_type(f, g->mod, &v->type);
		fputc('\n', f);
		any = 1;
	}
	for (uint32_t i = 1; i < g->streams.n; i++) {
		Stream *s = &g->streams.v[i];
		fprintf(f, "  stream %s", s->name);
		if (s->has_priority)
			fprintf(f, " (priority=%d)", s->priority);
		fputc('\n', f);
		any = 1;
	}
	for (uint32_t i = 0; i < g->events.n; i++) {
		fprintf(f, "  %sevent %s\n", g->events.v[i].is_extern ? "extern " : "",
		        g->events.v[i].name);
		any = 1;
	}
	/* the blank line before the statements: only when one is printed (a
	 * graph whose statements are all dead prints as one that has none) */
	int stmts = 0;
	for (uint32_t i = 0; i < g->nodes.n && !stmts; i++)
		stmts = !(g->nodes.v[i].flags & NF_DEAD);
	if (any && stmts)
		fputc('\n', f);
}

/* The `# saved: %a, %b` line opening the derived block of backward node
 * bw: the forward results its statements read (the activations kept for
 * backward; autograd.c), in the order they are defined.  None: no line. */
static void
print_saved(Printer *P, uint32_t bw)
{
	Graph *g = P->g;
	uint8_t *mark = calloc((size_t)g->vals.n + 1, 1);
	int any = 0;
	if (!mark)
		out_of_memory(0);
	for (uint32_t i = bw + 1; i < g->nodes.n && g->nodes.v[i].op != OP_BACKWARD_END; i++) {
		const Node *n = &g->nodes.v[i];
		for (uint32_t k = 0; k < n->nopnd && !(n->flags & NF_DEAD); k++) {
			const Value *v = &g->vals.v[n->opnd[k].v];
			if (n->opnd[k].kind == OK_VAL && v->kind == VK_NODE && v->def < bw)
				mark[n->opnd[k].v] = 1;
		}
	}
	for (uint32_t i = 0; i < bw; i++) {
		const Node *n = &g->nodes.v[i];
		for (uint32_t j = 0; j < n->nres && !(n->flags & NF_DEAD); j++) {
			if (!mark[n->res[j]])
				continue;
			if (!any++)
				put_indent(P, 0);
			fprintf(P->f, any > 1 ? ", %%%s" : "# saved: %%%s", g->vals.v[n->res[j]].name);
		}
	}
	if (any)
		fputc('\n', P->f);
	free(mark);
}

void
print_graph(FILE *f, Graph *g)
{
	print_graph_notes(f, g, NULL, NULL);
}

void
print_graph_notes(FILE *f, Graph *g, PrintNote note, void *ctx)
{
	Printer P = {.f = f, .g = g, .indent = 1, .note = note, .ctx = ctx};
	Printer outer = P;
	fprintf(f, "graph %s {\n", g->name);
	print_decls(&P);
	for (uint32_t i = 0; i < g->nodes.n; i++) {
		const Node *n = &g->nodes.v[i];
		if (n->flags & NF_DEAD)
			continue;
		if (n->op == OP_BACKWARD_END) {
			switch_stream(&P, P.base);
			P = outer;
			put_indent(&P, P.block != P.base);
			fputs("}\n", f);
			print_optimizer(&P);
			continue;
		}
		switch_stream(&P, n->stream);
		put_indent(&P, P.block != P.base);
		switch (n->op) {
		case OP_DEL:
		case OP_OFFLOAD:
			fprintf(f, "%s %%%s", op_name(n->op), g->vals.v[n->opnd[0].v].name);
			end_line(&P, i);
			break;
		case OP_BACKWARD:
			fprintf(f, "backward(%%%s", g->vals.v[n->opnd[0].v].name);
			if (n->nattr && n->attr[0].set)
				fprintf(f, ", grad_sync=%s", n->attr[0].s);
			if (n->flags & NF_BACKWARD) {
				fputs(") {\n", f);
				outer = P;
				P.indent = P.indent + 1 + (P.block != P.base);
				P.base = P.block = n->stream;
				print_saved(&P, i);
			} else {
				fputs(")\n", f);
				print_optimizer(&P);
			}
			break;
		default:
			print_op(&P, n);
		}
	}
	switch_stream(&P, P.base);
	if (g->rets.n || g->retloc.line) {
		fputs("  return", f);
		for (uint32_t i = 0; i < g->rets.n; i++)
			fprintf(f, i ? ", %%%s" : " %%%s", g->vals.v[g->rets.v[i]].name);
		fputc('\n', f);
	}
	fputs("}\n", f);
}

void
print_module(FILE *f, Module *m, const char *only_graph)
{
	int any = 0;
	for (uint32_t i = 0; i < m->dims.n; i++) {
		DimDecl *d = &m->dims.v[i];
		if (strcmp(d->name, "WORLD") == 0 && d->n == 1)
			continue;
		fprintf(f, "dim %s = %" PRId64 "\n", d->name, d->n);
		any = 1;
	}
	for (uint32_t i = 0; i < m->graphs.n; i++) {
		Graph *g = m->graphs.v[i];
		if (only_graph && strcmp(only_graph, g->name) != 0)
			continue;
		if (any)
			fputc('\n', f);
		print_graph(f, g);
		any = 1;
	}
}
