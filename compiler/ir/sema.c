/*
 * sema.c - semantic analysis: from the flat AST to checked IR graphs.
 *
 * Resolves names (dims, values, streams, events), checks each statement
 * against the op table (operand kinds and counts, attributes and their
 * types, result counts), runs the op's shape rule, and enforces the
 * statement-level rules of the language: declarations before statements,
 * one definition per value, no use before definition or after `del`,
 * nothing after `return`, a scalar floating `backward` loss, an
 * `optimizer` after `backward`.
 *
 * Errors are reported and counted; analysis goes on with the next
 * statement, and values whose statement failed get type DT_ERR so that no
 * cascade of follow-on errors is reported for them.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sgc.h"

/* Attribute specs of the optimizers, in the language of ops.def. */
static const struct {
	const char *name, *spec;
} optimizers[] = {
	{"sgd", "lr:float momentum:float=0 weight_decay:float=0 fused:bool=true"},
	{"adamw", "lr:float beta1:float=0.9 beta2:float=0.999 eps:float=1e-8 "
	          "weight_decay:float=0.01 fused:bool=true"},
};

/* The positional operand of each sync op, by the attribute name that
 * control_deps(..., sync=OP, NAME=...) gives it. */
static const struct {
	int op;
	const char *operand; /* NULL: the op has no operand */
	uint8_t kind;        /* OK_EVENT or OK_STREAM */
} sync_operands[] = {
	{OP_RECORD_EVENT, "event", OK_EVENT},
	{OP_WAIT_EVENT, "event", OK_EVENT},
	{OP_WAIT_STREAM, "other", OK_STREAM},
	{OP_SYNCHRONIZE, NULL, 0},
};

enum { MAX_OPND = 256 };

typedef VEC(const AstArg *) ArgPtrVec;

struct Sema {
	Module *m;
	Diag *d;
	Graph *g;
	int nstmts;          /* statements (not declarations) seen */
	Loc first_stmt;
	int returned;
	Loc retloc;
	int has_backward, in_block;
	Loc backward_loc;
	NodeId backward;     /* an underived backward's node, or NONE */
	int has_optimizer;
	Map later;           /* value name -> index of the stmt defining it,
	                        made at the first use of an unknown name */
	int later_made;
	AstGraph *ag;
	Map deleted;         /* value -> index into del_locs */
	VEC(Loc) del_locs;
	Map bad_streams;     /* stream names already reported undeclared */
	int64_t nrandom;     /* random statements seen (each one's salt=) */
};

/* ------------------------------------------------------------------ dims */

/* The error "WHAT 'PREFIX NAME'TAIL" with a "did you mean" among the n
 * names known: the `const char *` member at offset off of each item,
 * stride bytes apart from base. */
static void
unknown_name(Sema *S, Loc loc, const char *what, const char *prefix,
             const char *name, const char *tail, const void *base, size_t n,
             size_t stride, size_t off)
{
	DiagSuggest ds;
	char buf[96];
	diag_suggest_init(&ds, name);
	for (size_t i = 0; i < n; i++)
		diag_suggest_add(&ds, *(const char *const *)((const char *)base +
		                                             i * stride + off));
	diag_error(S->d, loc, "%s '%s%s'%s%s", what, prefix, name, tail,
	           diag_suggest_text(&ds, prefix, buf, sizeof buf));
}

/* "undeclared dim 'X'", with the nearest declared dim. */
static void
undeclared_dim(Sema *S, const char *name, Loc loc)
{
	unknown_name(S, loc, "undeclared dim", "", name, "", S->m->dims.v,
	             S->m->dims.n, sizeof *S->m->dims.v, offsetof(DimDecl, name));
}

static int
lookup_dim(Sema *S, const char *name, Loc loc, int64_t *out)
{
	uint32_t *slot = map_get(&S->m->dimmap, name, strlen(name));
	if (!slot) {
		undeclared_dim(S, name, loc);
		return 0;
	}
	*out = S->m->dims.v[*slot].n;
	return 1;
}

static void
add_dim(Module *m, const char *name, int64_t n, Loc loc)
{
	DimDecl dd = {.name = name, .n = n, .loc = loc};
	map_put(&m->dimmap, name, strlen(name), m->dims.n);
	vec_push(&m->dims, dd);
}

/* Declares the file's dims, WORLD (predeclared as 1; a file may set it),
 * and applies -D overrides (which also define dims the file lacks). */
static void
declare_dims(Sema *S, AstFile *f, DimOverride *ov, int nov)
{
	Module *m = S->m;
	add_dim(m, "WORLD", 1, (Loc){0});
	for (uint32_t i = 0; i < f->dims.n; i++) {
		AstDimDecl *dd = &f->dims.v[i];
		uint32_t *slot = map_get(&m->dimmap, dd->name, strlen(dd->name));
		if (slot && strcmp(dd->name, "WORLD") != 0) {
			diag_error(S->d, dd->loc, "redefinition of dim '%s'", dd->name);
			diag_note(S->d, m->dims.v[*slot].loc, "previous definition is here");
			continue;
		}
		if (slot && m->dims.v[*slot].loc.line) {
			diag_error(S->d, dd->loc, "redefinition of dim '%s'", dd->name);
			diag_note(S->d, m->dims.v[*slot].loc, "previous definition is here");
			continue;
		}
		if (dd->n < 0) {
			diag_error(S->d, dd->loc, "dim '%s' has negative size %lld",
			           dd->name, (long long)dd->n);
			continue;
		}
		if (dd->name[0] == 'W' && strcmp(dd->name, "WORLD") == 0 && dd->n == 0) {
			diag_error(S->d, dd->loc, "WORLD must be at least 1");
			continue;
		}
		if (slot) { /* WORLD set by the file */
			m->dims.v[*slot].n = dd->n;
			m->dims.v[*slot].loc = dd->loc;
		} else {
			add_dim(m, dd->name, dd->n, dd->loc);
		}
	}
	for (int i = 0; i < nov; i++) {
		uint32_t *slot = map_get(&m->dimmap, ov[i].name, strlen(ov[i].name));
		if (slot)
			m->dims.v[*slot].n = ov[i].n;
		else
			add_dim(m, ov[i].name, ov[i].n, (Loc){0});
		ov[i].used = 1;
	}
}

/* ------------------------------------------------------------------ types */

/* Bytes above which a tensor is refused (2^62): sizes that overflow. */
#define MAX_BYTES ((int64_t)1 << 62)

static int
resolve_type(Sema *S, const AstType *at, Type *t)
{
	DType dt;
	memset(t, 0, sizeof *t);
	t->dt = DT_ERR;
	if (!dtype_parse(at->dtype, &dt)) {
		diag_error(S->d, at->dtloc, "unknown dtype '%s'", at->dtype);
		return 0;
	}
	if (at->ndims > SG_MAXRANK) {
		diag_error(S->d, at->dtloc, "rank %u exceeds the maximum of %d",
		           at->ndims, SG_MAXRANK);
		return 0;
	}
	int64_t bytes = dtype_size(dt);
	int ok = 1;
	t->rank = (uint8_t)at->ndims;
	for (uint32_t i = 0; i < at->ndims; i++) {
		const AstDim *ad = &at->dims[i];
		int64_t n = ad->n;
		t->sym[i] = -1;
		if (ad->name) {
			if (!lookup_dim(S, ad->name, ad->loc, &n)) {
				ok = 0;
				continue;
			}
			t->sym[i] = (int32_t)*map_get(&S->m->dimmap, ad->name,
			                              strlen(ad->name));
		}
		if (n < 0) {
			diag_error(S->d, ad->loc, "negative size %lld", (long long)n);
			ok = 0;
			continue;
		}
		t->d[i] = n;
		if (ok && n && bytes > MAX_BYTES / n) {
			diag_error(S->d, ad->loc, "tensor size overflows: more than "
			           "2^62 bytes");
			ok = 0;
		}
		if (ok)
			bytes *= n ? n : 1;
	}
	if (ok)
		t->dt = (uint8_t)dt;
	return ok;
}

/* ------------------------------------------------------------------ values */

/* The names defined by the graph's statements, to tell "used before
 * defined" from "undefined" (only an erroneous use needs them). */
static void
make_later(Sema *S)
{
	AstGraph *ag = S->ag;
	S->later_made = 1;
	for (uint32_t i = 0; i < ag->stmts.n; i++) {
		AstStmt *st = &ag->stmts.v[i];
		if (st->kind == AS_OP)
			for (uint32_t j = 0; j < st->nnames; j++)
				if (!map_get(&S->later, st->names[j], strlen(st->names[j])))
					map_put(&S->later, st->names[j], strlen(st->names[j]), i);
	}
}

/* %grad.NAME after an underived backward, NAME a param: the param's final
 * gradient, a result of the backward node until autograd makes the value
 * and puts it in this one's place (autograd.c, gradient_uses_end).
 * NONE when name is no such thing. */
static ValId
gradient_use(Sema *S, const char *name, Loc loc)
{
	Graph *g = S->g;
	if (S->backward == NONE || S->in_block || strncmp(name, "grad.", 5) != 0)
		return NONE;
	uint32_t *slot = map_get(&g->valmap, name + 5, strlen(name + 5));
	if (!slot || g->vals.v[*slot].kind != VK_PARAM)
		return NONE;
	ValId p = *slot; /* (the map may move when the value is added) */
	Node *bw = &g->nodes.v[S->backward];
	ValId v = ir_value_new(g, arena_strdup(S->m->arena, name), VK_NODE, loc);
	g->vals.v[v].type = g->vals.v[p].type;
	g->vals.v[v].def = S->backward;
	g->vals.v[v].resno = (uint16_t)bw->nres;
	ValId *res = arena_alloc(S->m->arena, (bw->nres + 1) * sizeof *res);
	if (bw->nres)
		memcpy(res, bw->res, bw->nres * sizeof *res);
	res[bw->nres++] = v;
	bw->res = res;
	return v;
}

/* Resolves a use of %name; reports undefined, used-before-definition and
 * used-after-del.  Returns NONE on error. */
static ValId
use_value(Sema *S, const char *name, Loc loc)
{
	size_t len = strlen(name);
	uint32_t *slot = map_get(&S->g->valmap, name, len);
	if (!slot) {
		ValId gv = gradient_use(S, name, loc);
		if (gv != NONE)
			return gv;
		if (!S->later_made)
			make_later(S);
		uint32_t *later = map_get(&S->later, name, len);
		if (later) {
			diag_error(S->d, loc, "'%%%s' is used before it is defined", name);
			diag_note(S->d, S->ag->stmts.v[*later].loc,
			          "'%%%s' is defined here", name);
		} else {
			unknown_name(S, loc, "use of undefined value", "%", name, "",
			             S->g->vals.v, S->g->vals.n, sizeof *S->g->vals.v,
			             offsetof(Value, name));
		}
		return NONE;
	}
	uint32_t *del = map_get(&S->deleted, name, len);
	if (del) {
		diag_error(S->d, loc, "'%%%s' is used after 'del'", name);
		diag_note(S->d, S->del_locs.v[*del], "'%%%s' is deleted here", name);
		return NONE;
	}
	return *slot;
}

static int
reserved_name(const char *name)
{
	return strncmp(name, "grad.", 5) == 0 || strncmp(name, "opt.", 4) == 0;
}

/* Defines %name; reports redefinition and reserved names. */
static ValId
define_value(Sema *S, const char *name, Loc loc, ValKind k, int compiler_ok)
{
	uint32_t *slot = map_get(&S->g->valmap, name, strlen(name));
	if (slot) {
		diag_error(S->d, loc, "redefinition of '%%%s'", name);
		diag_note(S->d, S->g->vals.v[*slot].loc, "previous definition is here");
		return NONE;
	}
	if (!compiler_ok && reserved_name(name)) {
		diag_error(S->d, loc, "value names beginning with '%.*s' are "
		           "reserved for the compiler", name[0] == 'g' ? 5 : 4, name);
		return NONE;
	}
	return ir_value_new(S->g, name, k, loc);
}

/* ------------------------------------------------------------------ attributes */

static const char *
attr_type_words(int t)
{
	switch (t) {
	case AT_INT: return "an integer";
	case AT_FLOAT: return "a number";
	case AT_NUM: return "a number or a boolean";
	case AT_BOOL: return "true or false";
	case AT_STR: return "a string";
	case AT_INTS: return "a list of integers";
	case AT_DTYPE: return "a dtype";
	case AT_STREAM: return "a stream name";
	case AT_EVENT: return "an event name";
	default: return "an identifier";
	}
}

/* Resolves an integer-valued argument: a literal or a dim name. */
static int
arg_int(Sema *S, const AstArg *a, int64_t *out, int *bad)
{
	if (a->kind == AA_INT) {
		*out = a->i;
		return 1;
	}
	if (a->kind == AA_IDENT && map_get(&S->m->dimmap, a->s, strlen(a->s)))
		return lookup_dim(S, a->s, a->loc, out);
	if (a->kind == AA_IDENT) {
		undeclared_dim(S, a->s, a->loc);
		*bad = 1;
	}
	return 0;
}

/* "undeclared stream 'X'", with the nearest declared stream. */
static void
undeclared_stream(Sema *S, const char *name, Loc loc)
{
	unknown_name(S, loc, "undeclared stream", "", name, "", S->g->streams.v,
	             S->g->streams.n, sizeof *S->g->streams.v, offsetof(Stream, name));
}

static int
lookup_stream(Sema *S, const char *name, Loc loc, uint32_t *out)
{
	uint32_t *slot = map_get(&S->g->streammap, name, strlen(name));
	if (!slot) {
		undeclared_stream(S, name, loc);
		return 0;
	}
	*out = *slot;
	return 1;
}

static int
lookup_event(Sema *S, const char *name, Loc loc, uint32_t *out)
{
	uint32_t *slot = map_get(&S->g->eventmap, name, strlen(name));
	if (!slot) {
		unknown_name(S, loc, "undeclared event", "", name, "", S->g->events.v,
		             S->g->events.n, sizeof *S->g->events.v, offsetof(Event, name));
		return 0;
	}
	*out = *slot;
	return 1;
}

/* Converts one attribute argument to its spec's type.  what: "attribute
 * 'dim' of 'softmax'" for messages. */
static int
convert_attr(Sema *S, const AttrSpec *sp, const AstArg *a, Attr *out,
             const char *opname)
{
	int bad = 0;
	out->type = sp->type;
	out->loc = a->loc;
	out->set = 1;
	switch (sp->type) {
	case AT_INT:
		if (arg_int(S, a, &out->i, &bad))
			return 1;
		break;
	case AT_FLOAT:
		if (a->kind == AA_FLOAT) {
			out->f = a->f;
			return 1;
		}
		if (arg_int(S, a, &out->i, &bad)) {
			out->f = (double)out->i;
			return 1;
		}
		break;
	case AT_NUM:
		if (a->kind == AA_FLOAT) {
			out->f = a->f;
			out->num_kind = OK_FLOAT;
			return 1;
		}
		if (a->kind == AA_BOOL) {
			out->f = a->b;
			out->i = a->b;
			out->num_kind = OK_BOOL;
			return 1;
		}
		if (arg_int(S, a, &out->i, &bad)) {
			out->f = (double)out->i;
			out->num_kind = OK_INT;
			return 1;
		}
		break;
	case AT_BOOL:
		if (a->kind == AA_BOOL) {
			out->i = a->b;
			return 1;
		}
		break;
	case AT_STR:
		if (a->kind == AA_STRING || a->kind == AA_IDENT) {
			if (sp->choices) {
				size_t l = strlen(a->s);
				const char *c = sp->choices;
				int found = 0;
				while (*c) {
					size_t cl = strcspn(c, "|");
					if (cl == l && strncmp(c, a->s, l) == 0)
						found = 1;
					c += cl + (c[cl] == '|');
				}
				if (!found) {
					diag_error(S->d, a->loc, "attribute '%s' of '%s' must "
					           "be one of %s, not \"%s\"", sp->name, opname,
					           sp->choices, a->s);
					return 0;
				}
			}
			out->s = a->s;
			return 1;
		}
		break;
	case AT_INTS:
		if (a->kind == AA_LIST) {
			out->nints = a->nitems;
			out->ints = arena_alloc(S->m->arena, (a->nitems + 1) * sizeof(int64_t));
			for (uint32_t i = 0; i < a->nitems; i++)
				if (!arg_int(S, &a->items[i], &out->ints[i], &bad)) {
					if (!bad)
						diag_error(S->d, a->items[i].loc, "attribute '%s' of "
						           "'%s' must be a list of integers",
						           sp->name, opname);
					return 0;
				}
			return 1;
		}
		if (a->kind == AA_INT || a->kind == AA_IDENT) {
			out->ints = arena_alloc(S->m->arena, sizeof(int64_t));
			out->nints = 1;
			out->one = 1;
			if (arg_int(S, a, &out->ints[0], &bad))
				return 1;
		}
		break;
	case AT_DTYPE:
		if (a->kind == AA_IDENT) {
			DType dt;
			if (!dtype_parse(a->s, &dt)) {
				diag_error(S->d, a->loc, "unknown dtype '%s'", a->s);
				return 0;
			}
			out->i = dt;
			return 1;
		}
		break;
	case AT_STREAM:
		if (a->kind == AA_IDENT) {
			uint32_t s;
			if (!lookup_stream(S, a->s, a->loc, &s))
				return 0;
			out->i = s;
			return 1;
		}
		break;
	case AT_EVENT:
		if (a->kind == AA_IDENT) {
			uint32_t e;
			if (!lookup_event(S, a->s, a->loc, &e))
				return 0;
			out->i = e;
			return 1;
		}
		break;
	case AT_IDENT:
		if (a->kind == AA_IDENT) {
			out->s = a->s;
			return 1;
		}
		break;
	}
	if (!bad)
		diag_error(S->d, a->loc, "attribute '%s' of '%s' must be %s",
		           sp->name, opname, attr_type_words(sp->type));
	return 0;
}

/* Checks keyword arguments against a spec; fills out[nspec].  Arguments
 * whose name is not in the spec go to extra (when extra is non-NULL) or are
 * errors. */
static int
check_attrs(Sema *S, const AttrSpec *spec, uint32_t nspec, AstArg *args,
            uint32_t nargs, Attr *out, const char *opname, Loc oploc,
            ArgPtrVec *extra)
{
	int ok = 1;
	const AstArg *given[32] = {0};
	for (uint32_t i = 0; i < nargs; i++) {
		const AstArg *a = &args[i];
		if (!a->key)
			continue;
		uint32_t k;
		for (k = 0; k < nspec; k++)
			if (strcmp(spec[k].name, a->key) == 0)
				break;
		if (k == nspec) {
			if (extra) {
				vec_push(extra, a);
				continue;
			}
			if (nspec == 0)
				diag_error(S->d, a->keyloc, "'%s' takes no attributes", opname);
			else {
				char tail[96];
				snprintf(tail, sizeof tail, " for '%s'", opname);
				unknown_name(S, a->keyloc, "unknown attribute", "", a->key, tail,
				             spec, nspec, sizeof *spec, offsetof(AttrSpec, name));
			}
			ok = 0;
			continue;
		}
		if (given[k]) {
			diag_error(S->d, a->keyloc, "attribute '%s' given twice", a->key);
			diag_note(S->d, given[k]->keyloc, "first given here");
			ok = 0;
			continue;
		}
		given[k] = a;
		if (!convert_attr(S, &spec[k], a, &out[k], opname))
			ok = 0;
	}
	for (uint32_t k = 0; k < nspec; k++) {
		if (given[k])
			continue;
		if (spec[k].required) {
			diag_error(S->d, oploc, "'%s' requires attribute '%s'", opname,
			           spec[k].name);
			ok = 0;
		}
		attr_default(S->m->arena, &spec[k], &out[k]);
	}
	return ok;
}

/* ------------------------------------------------------------------ operands */

static int
is_literal(const AstArg *a)
{
	return a->kind == AA_INT || a->kind == AA_FLOAT || a->kind == AA_BOOL;
}

static const char *
arg_words(const AstArg *a)
{
	switch (a->kind) {
	case AA_VALUE: return "a value";
	case AA_INT: case AA_FLOAT: case AA_BOOL: return "a scalar literal";
	case AA_STRING: return "a string";
	case AA_IDENT: return "a name";
	default: return "a list";
	}
}

/* Converts one positional argument against one signature character. */
static int
convert_operand(Sema *S, char sig, const AstArg *a, Opnd *o, const OpInfo *oi,
                int *err_operand)
{
	const char *opname = oi->name;
	o->loc = a->loc;
	switch (sig) {
	case 'p':
		if (is_literal(a)) {
			o->kind = a->kind == AA_INT ? OK_INT : a->kind == AA_FLOAT
			          ? OK_FLOAT : OK_BOOL;
			o->i = a->kind == AA_BOOL ? a->b : a->i;
			o->f = a->kind == AA_FLOAT ? a->f : (double)o->i;
			return 1;
		}
		/* A dim name stands wherever an integer may (the spec's
		 * "Arguments"): an integer literal of its value. */
		if (a->kind == AA_IDENT && map_get(&S->m->dimmap, a->s, strlen(a->s))) {
			o->kind = OK_INT;
			if (!lookup_dim(S, a->s, a->loc, &o->i))
				return 0;
			o->f = (double)o->i;
			return 1;
		}
		/* fall through */
	case 't': case '?': case '+': case '*':
		if (a->kind == AA_VALUE) {
			o->kind = OK_VAL;
			o->v = use_value(S, a->s, a->loc);
			if (o->v == NONE) {
				*err_operand = 1;
				return 0;
			}
			return 1;
		}
		diag_error(S->d, a->loc, "'%s' expects a value here, not %s%s", opname,
		           arg_words(a), !is_literal(a) || sig == 'p' ? ""
		           : (oi->flags & OPF_POINTWISE)
		           ? " (a scalar stands for an operand of a pointwise op beside a "
		             "tensor operand)"
		           : " (scalar literals stand only for operands of pointwise ops)");
		return 0;
	case 'e':
		if (a->kind == AA_IDENT) {
			o->kind = OK_EVENT;
			return lookup_event(S, a->s, a->loc, &o->v);
		}
		diag_error(S->d, a->loc, "'%s' expects an event name, not %s", opname,
		           arg_words(a));
		return 0;
	case 's':
		if (a->kind == AA_IDENT) {
			o->kind = OK_STREAM;
			return lookup_stream(S, a->s, a->loc, &o->v);
		}
		diag_error(S->d, a->loc, "'%s' expects a stream name, not %s", opname,
		           arg_words(a));
		return 0;
	}
	ICE("bad operand signature '%c'", sig);
}

/* Counts what the signature accepts: [min, max] positional operands. */
static void
sig_range(const char *sig, uint32_t *min, uint32_t *max)
{
	*min = *max = 0;
	for (const char *c = sig; *c; c++) {
		if (*c == '+') {
			*min += 1;
			*max = MAX_OPND;
			return;
		}
		if (*c == '*') {
			*max = MAX_OPND;
			return;
		}
		if (*c != '?')
			(*min)++;
		(*max)++;
	}
}

static int
check_operands(Sema *S, int op, AstStmt *st, Node *n, int *err_operand)
{
	const OpInfo *oi = &op_table[op];
	uint32_t npos = 0, min, max;
	int ok = 1;
	for (uint32_t i = 0; i < st->nargs; i++) {
		if (st->args[i].key)
			continue;
		if (i > npos) { /* positional after a keyword */
			diag_error(S->d, st->args[i].loc, "positional operand after "
			           "attributes");
			return 0;
		}
		npos++;
	}
	sig_range(oi->opnds, &min, &max);
	if (npos < min || npos > max) {
		if (min == max)
			diag_error(S->d, st->oploc, "'%s' takes %u operand%s, %u given%s",
			           oi->name, min, min == 1 ? "" : "s", npos,
			           npos > max && oi->nattr ? " (attributes are written "
			           "name=value)" : "");
		else if (max == MAX_OPND && npos > max)
			diag_error(S->d, st->oploc, "'%s' takes at most %u operands, %u "
			           "given", oi->name, max, npos);
		else if (max == MAX_OPND)
			diag_error(S->d, st->oploc, "'%s' takes at least %u operand%s, "
			           "%u given", oi->name, min, min == 1 ? "" : "s", npos);
		else
			diag_error(S->d, st->oploc, "'%s' takes %u to %u operands, %u "
			           "given", oi->name, min, max, npos);
		return 0;
	}
	n->nopnd = (uint16_t)npos;
	n->opnd = arena_alloc(S->m->arena, (npos + 1) * sizeof *n->opnd);
	size_t siglen = strlen(oi->opnds);
	for (uint32_t i = 0; i < npos; i++) {
		char sig = i < siglen ? oi->opnds[i] : oi->opnds[siglen - 1];
		if (!convert_operand(S, sig, &st->args[i], &n->opnd[i], oi, err_operand))
			ok = 0;
	}
	/* A pointwise op needs at least one tensor operand. */
	if (ok && (oi->flags & OPF_POINTWISE) && strchr(oi->opnds, 'p')) {
		int tensors = 0;
		for (uint32_t i = 0; i < npos; i++)
			tensors += n->opnd[i].kind == OK_VAL;
		if (!tensors) {
			diag_error(S->d, st->oploc, "'%s' needs at least one tensor "
			           "operand", oi->name);
			ok = 0;
		}
	}
	return ok;
}

/* ------------------------------------------------------------------ statements */

static uint32_t
stmt_stream(Sema *S, AstStmt *st)
{
	uint32_t s = 0;
	if (!st->stream)
		return 0;
	uint32_t *slot = map_get(&S->g->streammap, st->stream, strlen(st->stream));
	if (slot)
		return *slot;
	/* Report an undeclared stream once per `with` block. */
	char key[32];
	snprintf(key, sizeof key, "%u:%u", st->streamloc.line, st->streamloc.col);
	if (!map_get(&S->bad_streams, key, strlen(key))) {
		char *k = arena_strdup(S->m->arena, key);
		map_put(&S->bad_streams, k, strlen(k), 1);
		undeclared_stream(S, st->stream, st->streamloc);
	}
	return s;
}

/* Marks the results of a failed statement so later uses stay quiet. */
static void
define_failed(Sema *S, AstStmt *st)
{
	for (uint32_t i = 0; i < st->nnames; i++)
		if (!map_get(&S->g->valmap, st->names[i], strlen(st->names[i])))
			ir_value_new(S->g, st->names[i], VK_NODE, st->namelocs[i]);
}

static int
operands_poisoned(Graph *g, Node *n)
{
	for (uint32_t i = 0; i < n->nopnd; i++)
		if (n->opnd[i].kind == OK_VAL && g->vals.v[n->opnd[i].v].type.dt == DT_ERR)
			return 1;
	return 0;
}

static int
check_host_operands(Sema *S, int op, Node *n)
{
	if (op == OP_TO_DEVICE || op == OP_TO_HOST || op == OP_CONTROL_DEPS ||
	    op == OP_SYNC_DEALLOC)
		return 1;
	for (uint32_t i = 0; i < n->nopnd; i++) {
		if (n->opnd[i].kind != OK_VAL)
			continue;
		Value *v = &S->g->vals.v[n->opnd[i].v];
		if (v->type.host) {
			diag_error(S->d, n->opnd[i].loc, "'%%%s' is in host memory; "
			           "'%s' needs it on the device (use to_device first)",
			           v->name, op_name(op));
			return 0;
		}
	}
	return 1;
}

/* control_deps(%a, ..., sync=OP, <OP's operand and attributes>). */
static int
check_control_deps(Sema *S, Node *n, ArgPtrVec *extra_args)
{
	const Attr *sync = &n->attr[0];
	int sop = sync->set ? op_lookup(sync->s, strlen(sync->s)) : -1;
	uint32_t k;
	for (k = 0; k < sizeof sync_operands / sizeof *sync_operands; k++)
		if (sync_operands[k].op == sop)
			break;
	if (k == sizeof sync_operands / sizeof *sync_operands) {
		diag_error(S->d, sync->loc, "control_deps: sync= must name a sync op "
		           "(record_event, wait_event, wait_stream, synchronize)");
		return 0;
	}
	const char *operand = sync_operands[k].operand;
	int ok = 1, have_operand = 0;
	n->extra = arena_alloc(S->m->arena, (extra_args->n + 1) * sizeof *n->extra);
	for (uint32_t i = 0; i < extra_args->n; i++) {
		const AstArg *a = extra_args->v[i];
		ExtraAttr *x = &n->extra[n->nextra];
		AttrSpec sp = {.name = a->key};
		if (operand && strcmp(a->key, operand) == 0) {
			sp.type = sync_operands[k].kind == OK_EVENT ? AT_EVENT : AT_STREAM;
			have_operand = 1;
		} else if (strcmp(a->key, "stream") == 0) {
			sp.type = AT_STREAM;
		} else {
			diag_error(S->d, a->keyloc, "control_deps: '%s' takes no "
			           "attribute '%s'", sync->s, a->key);
			ok = 0;
			continue;
		}
		x->key = a->key;
		if (!convert_attr(S, &sp, a, &x->a, "control_deps")) {
			ok = 0;
			continue;
		}
		if (strcmp(a->key, "stream") == 0)
			n->stream = (uint32_t)x->a.i;
		n->nextra++;
	}
	if (ok && operand && !have_operand) {
		diag_error(S->d, n->loc, "control_deps with sync=%s requires "
		           "attribute '%s'", sync->s, operand);
		ok = 0;
	}
	return ok;
}

static void
stmt_op(Sema *S, AstStmt *st)
{
	Graph *g = S->g;
	int op = op_lookup(st->op, strlen(st->op));
	if (op < 0) {
		unknown_name(S, st->oploc, "unknown op", "", st->op, "", op_table, OP__N,
		             sizeof *op_table, offsetof(OpInfo, name));
		define_failed(S, st);
		return;
	}
	const OpInfo *oi = &op_table[op];
	Node n = {.op = (uint16_t)op, .loc = st->loc, .flags = NF_USER};
	n.stream = stmt_stream(S, st);
	if (st->in_backward)
		n.flags |= NF_BACKWARD;
	int ok = 1, err_operand = 0;

	/* Result count. */
	uint32_t want = (uint32_t)oi->nres;
	if (oi->flags & OPF_VARRES) {
		if (st->nnames == 0) {
			diag_error(S->d, st->oploc, "'%s' produces results; name them "
			           "('%%a, %%b = %s(...)')", oi->name, oi->name);
			ok = 0;
		}
	} else if (oi->flags & OPF_OPTRES) {
		if (st->nnames > want) {
			diag_error(S->d, st->namelocs[want], "'%s' has %u result%s, %u "
			           "named", oi->name, want, want == 1 ? "" : "s", st->nnames);
			ok = 0;
		}
	} else if (st->nnames != want) {
		if (want == 0)
			diag_error(S->d, st->namelocs[0], "'%s' has no result; write it "
			           "as a statement on its own", oi->name);
		else if (st->nnames == 0)
			diag_error(S->d, st->oploc, "the result of '%s' is not named "
			           "(write '%%r = %s(...)')", oi->name, oi->name);
		else
			diag_error(S->d, st->namelocs[0], "'%s' has %u result%s, %u "
			           "named", oi->name, want, want == 1 ? "" : "s", st->nnames);
		ok = 0;
	}

	ok = check_operands(S, op, st, &n, &err_operand) && ok;

	/* Attributes. */
	ArgPtrVec extra_args = {0};
	n.nattr = (uint16_t)oi->nattr;
	n.attr = arena_alloc(S->m->arena, (oi->nattr + 1) * sizeof *n.attr);
	ok = check_attrs(S, oi->attr, oi->nattr, st->args, st->nargs, n.attr, oi->name,
	                 st->oploc, op == OP_CONTROL_DEPS ? &extra_args : NULL) && ok;
	if (ok && op == OP_CONTROL_DEPS)
		ok = check_control_deps(S, &n, &extra_args);
	vec_free(&extra_args);

	/* Each random op (and attention with dropout_p) draws its own numbers:
	 * one without salt= gets the count of random statements before it
	 * (shown by --dump-after, so that the printed program draws the same). */
	if (ok && ir_draws(&n)) {
		Attr *salt = &n.attr[op_attr_index(op, "salt")];
		if (!salt->set) {
			salt->set = 1;
			salt->type = AT_INT;
			salt->i = S->nrandom;
		}
		S->nrandom++;
	}

	/* A `stream=` attribute puts the node on that stream. */
	int sa = op_attr_index(op, "stream");
	if (ok && sa >= 0 && n.attr[sa].set) {
		n.stream = (uint32_t)n.attr[sa].i;
		if (!op_table[op].attr[sa].required)
			n.attr[sa].set = 0; /* printed through the stream block */
	}

	if (ok)
		ok = check_host_operands(S, op, &n);

	/* Results. */
	if (!ok) {
		define_failed(S, st);
		return;
	}
	n.nres = (uint16_t)st->nnames;
	n.res = arena_alloc(S->m->arena, (st->nnames + 1) * sizeof *n.res);
	for (uint32_t i = 0; i < st->nnames; i++) {
		n.res[i] = define_value(S, st->names[i], st->namelocs[i], VK_NODE,
		                        st->in_backward);
		if (n.res[i] == NONE) {
			define_failed(S, st);
			return;
		}
	}
	if (operands_poisoned(g, &n))
		return; /* results stay DT_ERR, silently */
	if (!oi->shape(g, &n, S->d)) {
		for (uint32_t i = 0; i < n.nres; i++)
			g->vals.v[n.res[i]].type.dt = DT_ERR;
		return;
	}
	for (uint32_t i = 0; i < n.nres; i++)
		if (g->vals.v[n.res[i]].type.dt == DT_ERR)
			ICE("shape rule of '%s' left result %u without a type", oi->name, i);
	ir_node_add(g, &n);
}

static void
stmt_decl(Sema *S, AstStmt *st)
{
	Graph *g = S->g;
	if (S->nstmts) {
		diag_error(S->d, st->loc, "declarations must come before the first "
		           "statement of the graph");
		diag_note(S->d, S->first_stmt, "first statement is here");
		return;
	}
	switch (st->kind) {
	case AS_INPUT:
	case AS_PARAM:
	case AS_CONST: {
		ValKind k = st->kind == AS_INPUT ? VK_INPUT : st->kind == AS_PARAM
		            ? VK_PARAM : VK_CONST;
		ValId v = define_value(S, st->name, st->nameloc, k, 0);
		if (v == NONE)
			return;
		Type t;
		if (resolve_type(S, &st->type, &t)) {
			if (k == VK_PARAM && !dtype_is_float(t.dt)) {
				diag_error(S->d, st->type.dtloc, "param '%%%s' must have a "
				           "floating-point dtype, not %s (only floating "
				           "tensors have gradients; use const)", st->name,
				           dtype_name(t.dt));
				t.dt = DT_ERR;
			}
		}
		g->vals.v[v].type = t;
		if (k == VK_INPUT)
			vec_push(&g->inputs, v);
		else if (k == VK_PARAM)
			vec_push(&g->params, v);
		else
			vec_push(&g->consts, v);
		return;
	}
	case AS_STREAM: {
		uint32_t *slot = map_get(&g->streammap, st->name, strlen(st->name));
		if (slot) {
			if (*slot == 0)
				diag_error(S->d, st->nameloc, "stream 'default' always "
				           "exists and cannot be declared");
			else {
				diag_error(S->d, st->nameloc, "redefinition of stream '%s'",
				           st->name);
				diag_note(S->d, g->streams.v[*slot].loc,
				          "previous definition is here");
			}
			return;
		}
		Stream s = {.name = st->name, .loc = st->nameloc};
		AttrSpec sp = {.name = "priority", .type = AT_INT};
		Attr a = {0};
		if (!check_attrs(S, &sp, 1, st->args, st->nargs, &a, "stream",
		                 st->nameloc, NULL))
			return;
		for (uint32_t i = 0; i < st->nargs; i++)
			if (!st->args[i].key) {
				diag_error(S->d, st->args[i].loc, "expected 'priority=INT'");
				return;
			}
		if (a.set) {
			if (a.i < -1000 || a.i > 1000) {
				diag_error(S->d, a.loc, "stream priority %lld out of range",
				           (long long)a.i);
				return;
			}
			s.priority = (int)a.i;
			s.has_priority = 1;
		}
		map_put(&g->streammap, st->name, strlen(st->name), g->streams.n);
		vec_push(&g->streams, s);
		return;
	}
	case AS_EVENT:
	case AS_EXTERN_EVENT:
		for (uint32_t i = 0; i < st->nnames; i++) {
			const char *name = st->names[i];
			uint32_t *slot = map_get(&g->eventmap, name, strlen(name));
			if (slot) {
				diag_error(S->d, st->namelocs[i], "redefinition of event '%s'",
				           name);
				diag_note(S->d, g->events.v[*slot].loc,
				          "previous definition is here");
				continue;
			}
			Event e = {.name = name, .loc = st->namelocs[i],
			           .is_extern = st->kind == AS_EXTERN_EVENT};
			map_put(&g->eventmap, name, strlen(name), g->events.n);
			vec_push(&g->events, e);
		}
		return;
	default:
		ICE("not a declaration");
	}
}

/* A statement naming one value: del, offload. */
static void
stmt_value(Sema *S, AstStmt *st, int op)
{
	ValId v = use_value(S, st->name, st->nameloc);
	if (v == NONE)
		return;
	Node n = {.op = (uint16_t)op, .loc = st->loc, .flags = NF_USER,
	          .stream = stmt_stream(S, st), .nopnd = 1};
	if (st->in_backward)
		n.flags |= NF_BACKWARD;
	Opnd o = {.kind = OK_VAL, .v = v, .loc = st->nameloc};
	n.opnd = &o;
	Value *val = &S->g->vals.v[v];
	if (op == OP_DEL) {
		if (val->kind != VK_NODE) {
			diag_error(S->d, st->nameloc, "'del' of '%%%s', which the %s "
			           "owns", val->name, val->kind == VK_INPUT ? "caller"
			           : "model");
			return;
		}
		map_put(&S->deleted, val->name, strlen(val->name), S->del_locs.n);
		vec_push(&S->del_locs, st->loc);
	} else {
		if (val->kind != VK_NODE) {
			diag_error(S->d, st->nameloc, "'offload' applies to activations; "
			           "'%%%s' is a %s", val->name, val->kind == VK_INPUT
			           ? "graph input" : val->kind == VK_PARAM ? "param"
			           : "const");
			return;
		}
		val->offload = 1;
	}
	ir_node_add(S->g, &n);
}

static void
stmt_backward(Sema *S, AstStmt *st)
{
	Graph *g = S->g;
	if (S->has_backward) {
		diag_error(S->d, st->loc, "a graph has at most one 'backward'");
		diag_note(S->d, S->backward_loc, "previous 'backward' is here");
		return;
	}
	uint32_t npos = 0;
	const AstArg *loss = NULL;
	for (uint32_t i = 0; i < st->nargs; i++)
		if (!st->args[i].key) {
			npos++;
			loss = &st->args[i];
		}
	if (npos != 1 || loss->kind != AA_VALUE) {
		diag_error(S->d, npos == 1 ? loss->loc : st->loc, "'backward' takes "
		           "one value, the loss");
		return;
	}
	AttrSpec sp = {.name = "grad_sync", .type = AT_STR,
	               .choices = "all_reduce", .optional = 1};
	Attr a = {0};
	if (!check_attrs(S, &sp, 1, st->args, st->nargs, &a, "backward", st->loc,
	                 NULL))
		return;
	ValId v = use_value(S, loss->s, loss->loc);
	if (v == NONE)
		return;
	S->has_backward = 1;
	S->backward_loc = st->loc;
	const Type *t = &g->vals.v[v].type;
	if (t->dt != DT_ERR && (!dtype_is_float(t->dt) || type_numel(t) != 1)) {
		diag_error(S->d, loss->loc, "'backward' needs a scalar floating-point "
		           "loss; '%%%s' is %s with %lld elements", loss->s,
		           dtype_name(t->dt), (long long)type_numel(t));
		return;
	}
	Node n = {.op = OP_BACKWARD, .loc = st->loc, .flags = NF_USER,
	          .stream = stmt_stream(S, st), .nopnd = 1, .nattr = 1};
	Opnd o = {.kind = OK_VAL, .v = v, .loc = loss->loc};
	n.opnd = &o;
	n.attr = &a;
	if (st->has_block) {
		S->in_block = 1;
		n.nextra = 0;
		n.flags |= NF_BACKWARD; /* a derived block follows */
	}
	ir_node_add(g, &n);
	if (!st->has_block)
		S->backward = g->nodes.n - 1;
}

static void
stmt_optimizer(Sema *S, AstStmt *st)
{
	Graph *g = S->g;
	uint32_t k;
	for (k = 0; k < sizeof optimizers / sizeof *optimizers; k++)
		if (strcmp(optimizers[k].name, st->op) == 0)
			break;
	if (k == sizeof optimizers / sizeof *optimizers) {
		diag_error(S->d, st->oploc, "unknown optimizer '%s' (sgd and adamw "
		           "are known)", st->op);
		return;
	}
	if (S->has_optimizer) {
		diag_error(S->d, st->loc, "a graph has at most one 'optimizer'");
		diag_note(S->d, g->opt.loc, "previous 'optimizer' is here");
		return;
	}
	if (!S->has_backward) {
		diag_error(S->d, st->loc, "'optimizer' needs a 'backward' before it");
		return;
	}
	for (uint32_t i = 0; i < st->nargs; i++)
		if (!st->args[i].key) {
			diag_error(S->d, st->args[i].loc, "'optimizer %s' takes only "
			           "attributes (name=value)", st->op);
			return;
		}
	AttrSpec *spec;
	uint32_t nspec = attrspec_parse(optimizers[k].spec, &spec, optimizers[k].name);
	Attr a[8] = {0};
	int ok = check_attrs(S, spec, nspec, st->args, st->nargs, a, st->op,
	                     st->oploc, NULL);
	Optimizer *o = &g->opt;
	if (ok) {
		S->has_optimizer = 1;
		o->name = optimizers[k].name;
		o->loc = st->loc;
		o->lr = a[0].f;
		if (k == 0) {
			o->momentum = a[1].f;
			o->weight_decay = a[2].f;
			o->fused = (int)a[3].i;
		} else {
			o->beta1 = a[1].f;
			o->beta2 = a[2].f;
			o->eps = a[3].f;
			o->weight_decay = a[4].f;
			o->fused = (int)a[5].i;
		}
		/* The checks torch.optim.SGD and AdamW make, with their words. */
		if (o->lr < 0 || isnan(o->lr))
			diag_error(S->d, a[0].loc, "invalid learning rate: %g", o->lr);
		if (k == 0 && !(o->momentum >= 0))
			diag_error(S->d, a[1].loc, "invalid momentum value: %g (at least 0)",
			           o->momentum);
		if (k != 0 && !(o->beta1 >= 0 && o->beta1 < 1))
			diag_error(S->d, a[1].loc, "invalid beta1: %g (from 0 up to, not "
			           "including, 1)", o->beta1);
		if (k != 0 && !(o->beta2 >= 0 && o->beta2 < 1))
			diag_error(S->d, a[2].loc, "invalid beta2: %g (from 0 up to, not "
			           "including, 1)", o->beta2);
		if (k != 0 && !(o->eps >= 0))
			diag_error(S->d, a[3].loc, "invalid epsilon value: %g (at least 0)",
			           o->eps);
		if (!(o->weight_decay >= 0))
			diag_error(S->d, a[k == 0 ? 2 : 4].loc, "invalid weight_decay value: "
			           "%g (at least 0)", o->weight_decay);
	}
	for (uint32_t i = 0; i < nspec; i++) { /* attrspec_parse's strings */
		free((char *)spec[i].name);
		free((char *)spec[i].deflt);
		free((char *)spec[i].choices);
	}
	free(spec);
}

static void
stmt_return(Sema *S, AstStmt *st)
{
	Graph *g = S->g;
	g->retloc = st->loc;
	for (uint32_t i = 0; i < st->nnames; i++) {
		ValId v = use_value(S, st->names[i], st->namelocs[i]);
		if (v == NONE)
			continue;
		for (uint32_t j = 0; j < g->rets.n; j++)
			if (g->rets.v[j] == v) {
				diag_error(S->d, st->namelocs[i], "'%%%s' is returned twice",
				           st->names[i]);
				v = NONE;
				break;
			}
		if (v != NONE)
			vec_push(&g->rets, v);
	}
}

static void
sema_stmt(Sema *S, AstStmt *st)
{
	switch (st->kind) {
	case AS_INPUT: case AS_PARAM: case AS_CONST: case AS_STREAM:
	case AS_EVENT: case AS_EXTERN_EVENT:
		stmt_decl(S, st);
		return;
	default:
		break;
	}
	if (S->returned) {
		diag_error(S->d, st->loc, "statement after 'return'");
		diag_note(S->d, S->retloc, "'return' must be the last statement");
		S->returned = 2; /* report once */
		return;
	}
	if (!S->nstmts++)
		S->first_stmt = st->loc;
	switch (st->kind) {
	case AS_OP: stmt_op(S, st); break;
	case AS_DEL: stmt_value(S, st, OP_DEL); break;
	case AS_OFFLOAD: stmt_value(S, st, OP_OFFLOAD); break;
	case AS_BACKWARD: stmt_backward(S, st); break;
	case AS_BACKWARD_END: {
		Node n = {.op = OP_BACKWARD_END, .loc = st->loc, .flags = NF_BACKWARD,
		          .stream = stmt_stream(S, st)};
		S->in_block = 0;
		ir_node_add(S->g, &n);
		break;
	}
	case AS_OPTIMIZER: stmt_optimizer(S, st); break;
	case AS_RETURN:
		S->returned = 1;
		S->retloc = st->loc;
		stmt_return(S, st);
		break;
	default:
		ICE("unknown statement kind %d", st->kind);
	}
}

static void
sema_graph(Sema *S, AstGraph *ag)
{
	Graph *g = ir_graph_new(S->m, ag->name, ag->loc);
	S->g = g;
	S->ag = ag;
	S->nstmts = 0;
	S->returned = 0;
	S->has_backward = S->has_optimizer = S->in_block = 0;
	S->backward = NONE;
	map_init(&S->later);
	S->later_made = 0;
	map_init(&S->deleted);
	map_init(&S->bad_streams);
	S->del_locs.n = 0;
	for (uint32_t i = 0; i < ag->stmts.n && !diag_full(S->d); i++)
		sema_stmt(S, &ag->stmts.v[i]);
	map_free(&S->later);
	map_free(&S->deleted);
	map_free(&S->bad_streams);
}

int
sema_module(Module *m, AstFile *f, DimOverride *ov, int nov)
{
	Sema S = {.m = m, .d = m->diag};
	int before = m->diag->nerrors;
	map_init(&m->dimmap);
	declare_dims(&S, f, ov, nov);
	Map names;
	map_init(&names);
	for (uint32_t i = 0; i < f->graphs.n && !diag_full(S.d); i++) {
		AstGraph *ag = &f->graphs.v[i];
		uint32_t *slot = map_get(&names, ag->name, strlen(ag->name));
		if (slot) {
			diag_error(S.d, ag->loc, "redefinition of graph '%s'", ag->name);
			diag_note(S.d, f->graphs.v[*slot].loc, "previous definition is here");
			continue;
		}
		map_put(&names, ag->name, strlen(ag->name), i);
		if (!m->only_graph || strcmp(m->only_graph, ag->name) == 0)
			sema_graph(&S, ag);
	}
	map_free(&names);
	vec_free(&S.del_locs);
	return m->diag->nerrors == before;
}
