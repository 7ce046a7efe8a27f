/*
 * ops.c - the op table, built from ops.def, and its attribute specs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sgc.h"
#include "interp.h"
#include "passes.h"
#include "sgk/sgk_pointwise.h"

/* Every shape rule and interpreter kernel named in ops.def. */
#define X(e, name, opnds, nres, attrs, shape, interp, flags, grad, emit, kernel) \
	int shape(Graph *g, Node *n, Diag *d);                                \
	int interp(struct Interp *I, Node *n, struct Tensor **in,             \
	           struct Tensor **out);
#include "ops.def"
#undef X

/* ops.def's kernel column: the formulas of runtime/sgk/sgk_pointwise.h. */
#define PW1(f) .pw = {.name = #f, .d1 = sgk_##f##_d}
#define PW1I(f) .pw = {.name = #f, .d1 = sgk_##f##_d, .i1 = sgk_##f##_i}
#define PW2(f) .pw = {.name = #f, .d2 = sgk_##f##_d}
#define PW2I(f) .pw = {.name = #f, .d2 = sgk_##f##_d, .i2 = sgk_##f##_i}
#define PW1A(f, g) PW1(f), .pw_tanh = {.name = #g, .d1 = sgk_##g##_d}
#define PW2A(f, g) PW2(f), .pw_tanh = {.name = #g, .d2 = sgk_##g##_d}
#define RED(c, id, fin)                                                      \
	.combine = {.name = #c, .d2 = sgk_##c##_d, .i2 = sgk_##c##_i},      \
	.ident = RED_##id, .finish = FIN_##fin
#define BASE(b) .has_base = 1, .base = OP_##b
#define NK .pw = {.name = NULL}

OpInfo op_table[OP__N] = {
#define X(e, nm, opnds_, nres_, attrs_, shape_, interp_, flags_, grad_, emit_, kernel_) \
	[OP_##e] = {.name = nm, .opnds = opnds_, .nres = nres_,                \
	            .attrs = attrs_, .shape = shape_, .interp = interp_,       \
	            .flags = flags_, .grad = grad_, .emit = EM_##emit_,        \
	            kernel_},
#include "ops.def"
#undef X
};

static Map op_names; /* name -> OpKind, built by ops_init */

static const struct {
	const char *word;
	AttrType t;
} attr_types[] = {
	{"int", AT_INT},     {"float", AT_FLOAT},   {"num", AT_NUM},
	{"bool", AT_BOOL},   {"str", AT_STR},       {"ints", AT_INTS},
	{"dtype", AT_DTYPE}, {"stream", AT_STREAM}, {"event", AT_EVENT},
	{"ident", AT_IDENT},
};

/* Parses one spec text ("dims:ints? keepdim:bool=false") into specs.  The
 * text is part of the program, so a malformed one is an internal fault. */
uint32_t
attrspec_parse(const char *text, AttrSpec **out, const char *what)
{
	const char *p = text;
	uint32_t n = 0;
	AttrSpec tmp[16];
	while (*p) {
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		if (n == 16)
			ICE("too many attributes for %s", what);
		AttrSpec *s = &tmp[n++];
		memset(s, 0, sizeof *s);
		const char *colon = strchr(p, ':');
		if (!colon)
			ICE("bad attribute spec for %s", what);
		s->name = strndup(p, (size_t)(colon - p));
		p = colon + 1;
		size_t tl = strcspn(p, "(=? ");
		int found = 0;
		for (size_t i = 0; i < sizeof attr_types / sizeof *attr_types; i++)
			if (strlen(attr_types[i].word) == tl &&
			    strncmp(attr_types[i].word, p, tl) == 0) {
				s->type = (uint8_t)attr_types[i].t;
				found = 1;
			}
		if (!found)
			ICE("bad attribute type in spec of %s", what);
		p += tl;
		if (*p == '(') {
			const char *close = strchr(p, ')');
			if (!close)
				ICE("bad choices in spec of %s", what);
			s->choices = strndup(p + 1, (size_t)(close - p - 1));
			p = close + 1;
		}
		if (*p == '?') {
			s->optional = 1;
			p++;
		} else if (*p == '=') {
			p++;
			size_t dl;
			if (*p == '"') {
				const char *q = strchr(p + 1, '"');
				if (!q)
					ICE("bad default in spec of %s", what);
				dl = (size_t)(q - p + 1);
			} else {
				dl = strcspn(p, " ");
			}
			s->deflt = strndup(p, dl);
			p += dl;
		} else {
			s->required = 1;
		}
	}
	*out = NULL;
	if (n) {
		*out = malloc(n * sizeof **out);
		if (!*out)
			out_of_memory(0);
		memcpy(*out, tmp, n * sizeof **out);
	}
	return n;
}

/* The table is process-wide data, built once; parse_spec's strings live
 * until exit. */
void
ops_init(void)
{
	static int done;
	if (done)
		return;
	done = 1;
	map_init(&op_names);
	for (int i = 0; i < OP__N; i++) {
		OpInfo *op = &op_table[i];
		op->nattr = attrspec_parse(op->attrs, &op->attr, op->name);
		map_put(&op_names, op->name, strlen(op->name), (uint32_t)i);
	}
}

int
op_lookup(const char *name, size_t len)
{
	uint32_t *slot = map_get(&op_names, name, len);
	return slot ? (int)*slot : -1;
}

int
op_attr_index(int op, const char *name)
{
	if (op < 0 || op >= OP__N)
		return -1;
	for (uint32_t i = 0; i < op_table[op].nattr; i++)
		if (strcmp(op_table[op].attr[i].name, name) == 0)
			return (int)i;
	return -1;
}

const char *
op_name(int op)
{
	switch (op) {
	case OP_DEL: return "del";
	case OP_OFFLOAD: return "offload";
	case OP_BACKWARD: return "backward";
	case OP_BACKWARD_END: return "backward_end";
	default:
		return op >= 0 && op < OP__N ? op_table[op].name : "<bad op>";
	}
}

/* Fills an attribute from its spec's default (unset when it has none):
 * what sema does for an attribute left out, and autograd for the nodes it
 * makes. */
void
attr_default(Arena *a, const AttrSpec *sp, Attr *out)
{
	memset(out, 0, sizeof *out);
	out->type = sp->type;
	if (!sp->deflt)
		return;
	const char *t = sp->deflt;
	out->set = 1;
	switch (sp->type) {
	case AT_INT:
	case AT_BOOL:
		out->i = strcmp(t, "true") == 0 ? 1 : strcmp(t, "false") == 0 ? 0
		         : strtoll(t, NULL, 10);
		break;
	case AT_FLOAT:
	case AT_NUM:
		out->f = strtod(t, NULL);
		out->num_kind = OK_FLOAT;
		break;
	case AT_STR:
		out->s = arena_strndup(a, t + 1, strlen(t) - 2);
		break;
	case AT_DTYPE: {
		DType dt = DT_F32;
		dtype_parse(t, &dt);
		out->i = dt;
		break;
	}
	default:
		ICE("default of attribute '%s' of an unsupported type", sp->name);
	}
}

/* A num attribute as a double: the integer when the literal was one. */
double
attr_num_f(const Attr *a)
{
	if (a->num_kind == OK_FLOAT)
		return a->f;
	return a->i ? (double)a->i : a->f;
}

/* A num attribute as an int64 (a float literal truncated, NaN as
 * INT64_MIN). */
int64_t
attr_num_i(const Attr *a)
{
	if (a->num_kind == OK_FLOAT)
		return isnan(a->f) ? INT64_MIN : (int64_t)a->f;
	return a->i ? a->i : (int64_t)a->f;
}

/* The arithmetic op an in-place op performs (ops.def's BASE). */
int
op_inplace_base(int op)
{
	return op < OP__N && op_table[op].has_base ? op_table[op].base : op;
}

/* The pointwise formula node n computes: its op's, or the one for
 * approximate="tanh"; NULL when the op has none. */
const PwFormula *
op_formula(const Node *n)
{
	const OpInfo *o = &op_table[n->op];
	if (o->pw_tanh.name) {
		const Attr *a = ir_attr(n, "approximate");
		if (a && a->s && strcmp(a->s, "tanh") == 0)
			return &o->pw_tanh;
	}
	return o->pw.name ? &o->pw : NULL;
}
