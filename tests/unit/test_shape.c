/*
 * test_shape.c - the shape and dtype rules of shape.c, op by op.
 *
 * Each test builds values of given types, a node of one op with operands
 * and attributes written as text ("%a %b dims=[0,-1] keepdim=true"), and
 * calls the op's rule from the op table, as sema does.  Expected types and
 * errors are PyTorch's: the tables below were printed by torch itself, the
 * other cases checked against torch by hand (see each comment).
 *
 * Operand text: `%name` a value, `1` `0.5` `true` scalar literals,
 * `key=value` an attribute (lists without spaces: `shape=[2,-1]`).  Each
 * token's column is its offset + 1, so messages can be checked for where
 * they point.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sgc.h"
#include "backend.h"
#include "interp.h"
#include "passes.h"

typedef struct {
	Module m;
	Graph *g;
	Diag d;
	char *buf;       /* diagnostics so far */
	size_t len;
	Node *n;         /* the node of the last run() */
	char text[2048]; /* res_text's */
} T;

/* ------------------------------------------------------------------ fixture */

static void
open_diag(T *t)
{
	diag_init(&t->d, "t.sg", NULL, 0);
	t->d.max_errors = 1 << 20;
	t->buf = NULL;
	t->len = 0;
	t->d.out = open_memstream(&t->buf, &t->len);
	assert_non_null(t->d.out);
}

static void
close_diag(T *t)
{
	fclose(t->d.out);
	free(t->buf);
	diag_fini(&t->d);
}

static int
setup(void **state)
{
	T *t = calloc(1, sizeof *t);
	ops_init();
	t->m.arena = arena_new();
	map_init(&t->m.dimmap);
	t->g = ir_graph_new(&t->m, "g", (Loc){1, 1, 1});
	open_diag(t);
	*state = t;
	return 0;
}

static int
teardown(void **state)
{
	T *t = *state;
	close_diag(t);
	module_free(&t->m);
	arena_free(t->m.arena);
	free(t);
	return 0;
}

/* The diagnostics written so far. */
static const char *
msgs(T *t)
{
	fflush(t->d.out);
	return t->buf ? t->buf : "";
}

/* Forgets the diagnostics so far. */
static void
clear(T *t)
{
	close_diag(t);
	open_diag(t);
}

/* ------------------------------------------------------------------ types as text */

/* "f32[2, 3]" (with "host " in front for host memory) -> Type. */
static Type
parse_type(const char *s)
{
	Type ty;
	char dt[16];
	DType x;
	memset(&ty, 0, sizeof ty);
	if (strncmp(s, "host ", 5) == 0) {
		ty.host = 1;
		s += 5;
	}
	size_t k = strcspn(s, "[");
	assert_true(k < sizeof dt);
	memcpy(dt, s, k);
	dt[k] = '\0';
	assert_true(dtype_parse(dt, &x));
	ty.dt = (uint8_t)x;
	s += k + 1;
	while (*s && *s != ']') {
		char *e;
		ty.d[ty.rank++] = strtoll(s, &e, 10);
		assert_true(e != s);
		s = e;
		while (*s == ',' || *s == ' ')
			s++;
	}
	for (int i = 0; i < SG_MAXRANK; i++)
		ty.sym[i] = -1;
	return ty;
}

/* Type -> "f32[2, 3]", appended to buf. */
static void
print_type(char *buf, size_t size, const Type *ty)
{
	size_t n = strlen(buf);
	if (ty->dt == DT_ERR) {
		snprintf(buf + n, size - n, "<err>");
		return;
	}
	n += (size_t)snprintf(buf + n, size - n, "%s%s[", ty->host ? "host " : "",
	                      dtype_name((DType)ty->dt));
	for (int i = 0; i < ty->rank; i++)
		n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "",
		                      (long long)ty->d[i]);
	snprintf(buf + n, size - n, "]");
}

/* Declares %name of the given type. */
static ValId
val(T *t, const char *name, const char *type)
{
	ValId v = ir_value_new(t->g, name, VK_INPUT, (Loc){0, 0, 0});
	t->g->vals.v[v].type = parse_type(type);
	return v;
}

/* The result types of the last run: "f32[2]; f32[1]". */
static const char *
res_text(T *t)
{
	t->text[0] = '\0';
	for (uint32_t i = 0; i < t->n->nres; i++) {
		if (i)
			strcat(t->text, "; ");
		print_type(t->text, sizeof t->text, &t->g->vals.v[t->n->res[i]].type);
	}
	return t->text;
}

/* ------------------------------------------------------------------ building nodes */

/* Parses an attribute value of type ty from text into a. */
static void
parse_attr(T *t, Attr *a, int ty, const char *v)
{
	Arena *ar = t->m.arena;
	DType dt;
	a->set = 1;
	a->type = (uint8_t)ty;
	switch (ty) {
	case AT_INT:
	case AT_STREAM:
	case AT_EVENT:
		a->i = strtoll(v, NULL, 10);
		break;
	case AT_FLOAT:
		a->f = strtod(v, NULL);
		break;
	case AT_NUM:
		if (!strcmp(v, "true") || !strcmp(v, "false")) {
			a->num_kind = OK_BOOL;
			a->f = !strcmp(v, "true");
		} else if (strpbrk(v, ".en")) {
			a->num_kind = OK_FLOAT;
			a->f = strtod(v, NULL);
		} else {
			a->num_kind = OK_INT;
			a->f = (double)strtoll(v, NULL, 10);
		}
		break;
	case AT_BOOL:
		a->i = !strcmp(v, "true");
		break;
	case AT_DTYPE:
		assert_true(dtype_parse(v, &dt));
		a->i = dt;
		break;
	case AT_INTS:
		assert_true(*v == '[');
		a->ints = arena_alloc(ar, 64 * sizeof *a->ints);
		for (v++; *v && *v != ']';) {
			char *e;
			assert_true(a->nints < 64);
			a->ints[a->nints++] = strtoll(v, &e, 10);
			assert_true(e != v);
			v = *e == ',' ? e + 1 : e;
		}
		break;
	default: /* AT_STR, AT_IDENT */
		if (*v == '"')
			a->s = arena_strndup(ar, v + 1, strlen(v) - 2);
		else
			a->s = arena_strdup(ar, v);
	}
}

/* Runs op's shape rule on a node built from args with nres results and
 * returns what the rule returned. */
static int
run(T *t, const char *opname, const char *args, int nres)
{
	int op = op_lookup(opname, strlen(opname));
	assert_true(op >= 0);
	const OpInfo *oi = &op_table[op];
	Arena *ar = t->m.arena;
	Node n;
	memset(&n, 0, sizeof n);
	n.op = (uint16_t)op;
	n.loc = (Loc){1, 1, (uint32_t)strlen(opname)};
	n.opnd = arena_alloc(ar, 32 * sizeof *n.opnd);
	n.attr = arena_alloc(ar, (oi->nattr + 1) * sizeof *n.attr);
	n.nattr = (uint16_t)oi->nattr;
	for (uint32_t j = 0; j < oi->nattr; j++) {
		n.attr[j].type = oi->attr[j].type;
		if (oi->attr[j].deflt)
			parse_attr(t, &n.attr[j], oi->attr[j].type, oi->attr[j].deflt);
	}
	for (const char *p = args; *p;) {
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		size_t len = strcspn(p, " ");
		char *tok = arena_strndup(ar, p, len);
		Loc loc = {2, (uint32_t)(p - args) + 1, (uint32_t)len};
		char *eq = strchr(tok, '=');
		if (eq) {
			*eq = '\0';
			int j = op_attr_index(op, tok);
			assert_true(j >= 0);
			parse_attr(t, &n.attr[j], oi->attr[j].type, eq + 1);
			n.attr[j].loc = loc;
		} else {
			Opnd *o = &n.opnd[n.nopnd++];
			o->loc = loc;
			if (tok[0] == '%') {
				uint32_t *v = map_get(&t->g->valmap, tok + 1, len - 1);
				assert_non_null(v);
				o->kind = OK_VAL;
				o->v = *v;
			} else if (!strcmp(tok, "true") || !strcmp(tok, "false")) {
				o->kind = OK_BOOL;
				o->i = !strcmp(tok, "true");
			} else if (strpbrk(tok, ".en")) {
				o->kind = OK_FLOAT;
				o->f = strtod(tok, NULL);
			} else {
				o->kind = OK_INT;
				o->i = strtoll(tok, NULL, 10);
			}
		}
		p += len;
	}
	n.nres = (uint16_t)nres;
	n.res = arena_alloc(ar, (size_t)(nres + 1) * sizeof *n.res);
	for (int i = 0; i < nres; i++)
		n.res[i] = ir_value_new(t->g, NULL, VK_NODE, n.loc);
	NodeId id = ir_node_add(t->g, &n);
	t->n = &t->g->nodes.v[id];
	return oi->shape(t->g, t->n, &t->d);
}

/* The number of types in "f32[2]; f32[1]" ("" is none). */
static int
count_types(const char *s)
{
	int n = *s != '\0';
	for (; *s; s++)
		n += *s == ';';
	return n;
}

/* Checks that op(args) succeeds quietly with results of types `want`. */
static void
expect_ok(T *t, const char *op, const char *args, const char *want,
          const char *file, int line)
{
	int ok = run(t, op, args, count_types(want));
	const char *got = res_text(t);
	if (ok && t->d.nerrors == 0 && strcmp(got, want) == 0)
		return;
	print_error("%s(%s): rule %s, results \"%s\", want \"%s\"\n%s", op, args,
	            ok ? "passed" : "failed", got, want, msgs(t));
	_fail(file, line);
}

/* Checks that op(args) with nres results fails with a message that holds
 * `needle`, poisoning its results; then forgets the diagnostics. */
static void
expect_err(T *t, const char *op, const char *args, int nres, const char *needle,
           const char *file, int line)
{
	int ok = run(t, op, args, nres);
	const char *got = res_text(t);
	int poisoned = 1;
	for (uint32_t i = 0; i < t->n->nres; i++)
		poisoned &= t->g->vals.v[t->n->res[i]].type.dt == DT_ERR;
	if (ok || t->d.nerrors == 0 || !strstr(msgs(t), needle) || !poisoned) {
		print_error("%s(%s): rule %s, results \"%s\", messages:\n%swant a message with: %s\n",
		            op, args, ok ? "passed" : "failed", got, msgs(t), needle);
		_fail(file, line);
	}
	clear(t);
}

#define OK(op, args, want) expect_ok(t, op, args, want, __FILE__, __LINE__)
#define ERR(op, args, needle) expect_err(t, op, args, 1, needle, __FILE__, __LINE__)
#define ERRN(op, args, nres, needle) expect_err(t, op, args, nres, needle, __FILE__, __LINE__)

/* ------------------------------------------------------------------ promotion */

/* torch.promote_types over f64 f32 f16 bf16 i64 i32 bool (in DType order). */
static const char *promote_table[7][7] = {
	{"f64", "f64", "f64", "f64", "f64", "f64", "f64"},
	{"f64", "f32", "f32", "f32", "f32", "f32", "f32"},
	{"f64", "f32", "f16", "f32", "f16", "f16", "f16"},
	{"f64", "f32", "f32", "bf16", "bf16", "bf16", "bf16"},
	{"f64", "f32", "f16", "bf16", "i64", "i64", "i64"},
	{"f64", "f32", "f16", "bf16", "i64", "i32", "i32"},
	{"f64", "f32", "f16", "bf16", "i64", "i32", "bool"},
};

static void
test_dtype_promote(void **state)
{
	(void)state;
	for (int a = 0; a < DT__N; a++)
		for (int b = 0; b < DT__N; b++)
			assert_string_equal(dtype_name(dtype_promote((DType)a, (DType)b)),
			                    promote_table[a][b]);
	assert_int_equal(dtype_promote(DT_ERR, DT_I32), DT_I32);
	assert_int_equal(dtype_promote(DT_BF16, DT_ERR), DT_BF16);
}

/* torch.add(a, b).dtype (torch 1.13.0a0) */
static const char *add_table[][3] = {
	{"f64[2]", "f64[2]", "f64"}, {"f64[2]", "f32[2]", "f64"}, {"f64[2]", "f16[2]", "f64"}, {"f64[2]", "bf16[2]", "f64"},
	{"f64[2]", "i64[2]", "f64"}, {"f64[2]", "i32[2]", "f64"}, {"f64[2]", "bool[2]", "f64"}, {"f64[2]", "f64[]", "f64"},
	{"f64[2]", "f32[]", "f64"}, {"f64[2]", "f16[]", "f64"}, {"f64[2]", "bf16[]", "f64"}, {"f64[2]", "i64[]", "f64"},
	{"f64[2]", "i32[]", "f64"}, {"f64[2]", "bool[]", "f64"}, {"f64[2]", "1", "f64"}, {"f64[2]", "0.5", "f64"},
	{"f64[2]", "true", "f64"}, {"f32[2]", "f64[2]", "f64"}, {"f32[2]", "f32[2]", "f32"}, {"f32[2]", "f16[2]", "f32"},
	{"f32[2]", "bf16[2]", "f32"}, {"f32[2]", "i64[2]", "f32"}, {"f32[2]", "i32[2]", "f32"}, {"f32[2]", "bool[2]", "f32"},
	{"f32[2]", "f64[]", "f32"}, {"f32[2]", "f32[]", "f32"}, {"f32[2]", "f16[]", "f32"}, {"f32[2]", "bf16[]", "f32"},
	{"f32[2]", "i64[]", "f32"}, {"f32[2]", "i32[]", "f32"}, {"f32[2]", "bool[]", "f32"}, {"f32[2]", "1", "f32"},
	{"f32[2]", "0.5", "f32"}, {"f32[2]", "true", "f32"}, {"f16[2]", "f64[2]", "f64"}, {"f16[2]", "f32[2]", "f32"},
	{"f16[2]", "f16[2]", "f16"}, {"f16[2]", "bf16[2]", "f32"}, {"f16[2]", "i64[2]", "f16"}, {"f16[2]", "i32[2]", "f16"},
	{"f16[2]", "bool[2]", "f16"}, {"f16[2]", "f64[]", "f16"}, {"f16[2]", "f32[]", "f16"}, {"f16[2]", "f16[]", "f16"},
	{"f16[2]", "bf16[]", "f16"}, {"f16[2]", "i64[]", "f16"}, {"f16[2]", "i32[]", "f16"}, {"f16[2]", "bool[]", "f16"},
	{"f16[2]", "1", "f16"}, {"f16[2]", "0.5", "f16"}, {"f16[2]", "true", "f16"}, {"bf16[2]", "f64[2]", "f64"},
	{"bf16[2]", "f32[2]", "f32"}, {"bf16[2]", "f16[2]", "f32"}, {"bf16[2]", "bf16[2]", "bf16"}, {"bf16[2]", "i64[2]", "bf16"},
	{"bf16[2]", "i32[2]", "bf16"}, {"bf16[2]", "bool[2]", "bf16"}, {"bf16[2]", "f64[]", "bf16"}, {"bf16[2]", "f32[]", "bf16"},
	{"bf16[2]", "f16[]", "bf16"}, {"bf16[2]", "bf16[]", "bf16"}, {"bf16[2]", "i64[]", "bf16"}, {"bf16[2]", "i32[]", "bf16"},
	{"bf16[2]", "bool[]", "bf16"}, {"bf16[2]", "1", "bf16"}, {"bf16[2]", "0.5", "bf16"}, {"bf16[2]", "true", "bf16"},
	{"i64[2]", "f64[2]", "f64"}, {"i64[2]", "f32[2]", "f32"}, {"i64[2]", "f16[2]", "f16"}, {"i64[2]", "bf16[2]", "bf16"},
	{"i64[2]", "i64[2]", "i64"}, {"i64[2]", "i32[2]", "i64"}, {"i64[2]", "bool[2]", "i64"}, {"i64[2]", "f64[]", "f64"},
	{"i64[2]", "f32[]", "f32"}, {"i64[2]", "f16[]", "f16"}, {"i64[2]", "bf16[]", "bf16"}, {"i64[2]", "i64[]", "i64"},
	{"i64[2]", "i32[]", "i64"}, {"i64[2]", "bool[]", "i64"}, {"i64[2]", "1", "i64"}, {"i64[2]", "0.5", "f32"},
	{"i64[2]", "true", "i64"}, {"i32[2]", "f64[2]", "f64"}, {"i32[2]", "f32[2]", "f32"}, {"i32[2]", "f16[2]", "f16"},
	{"i32[2]", "bf16[2]", "bf16"}, {"i32[2]", "i64[2]", "i64"}, {"i32[2]", "i32[2]", "i32"}, {"i32[2]", "bool[2]", "i32"},
	{"i32[2]", "f64[]", "f64"}, {"i32[2]", "f32[]", "f32"}, {"i32[2]", "f16[]", "f16"}, {"i32[2]", "bf16[]", "bf16"},
	{"i32[2]", "i64[]", "i32"}, {"i32[2]", "i32[]", "i32"}, {"i32[2]", "bool[]", "i32"}, {"i32[2]", "1", "i32"},
	{"i32[2]", "0.5", "f32"}, {"i32[2]", "true", "i32"}, {"bool[2]", "f64[2]", "f64"}, {"bool[2]", "f32[2]", "f32"},
	{"bool[2]", "f16[2]", "f16"}, {"bool[2]", "bf16[2]", "bf16"}, {"bool[2]", "i64[2]", "i64"}, {"bool[2]", "i32[2]", "i32"},
	{"bool[2]", "bool[2]", "bool"}, {"bool[2]", "f64[]", "f64"}, {"bool[2]", "f32[]", "f32"}, {"bool[2]", "f16[]", "f16"},
	{"bool[2]", "bf16[]", "bf16"}, {"bool[2]", "i64[]", "i64"}, {"bool[2]", "i32[]", "i32"}, {"bool[2]", "bool[]", "bool"},
	{"bool[2]", "1", "i64"}, {"bool[2]", "0.5", "f32"}, {"bool[2]", "true", "bool"}, {"f64[]", "f64[2]", "f64"},
	{"f64[]", "f32[2]", "f32"}, {"f64[]", "f16[2]", "f16"}, {"f64[]", "bf16[2]", "bf16"}, {"f64[]", "i64[2]", "f64"},
	{"f64[]", "i32[2]", "f64"}, {"f64[]", "bool[2]", "f64"}, {"f64[]", "f64[]", "f64"}, {"f64[]", "f32[]", "f64"},
	{"f64[]", "f16[]", "f64"}, {"f64[]", "bf16[]", "f64"}, {"f64[]", "i64[]", "f64"}, {"f64[]", "i32[]", "f64"},
	{"f64[]", "bool[]", "f64"}, {"f64[]", "1", "f64"}, {"f64[]", "0.5", "f64"}, {"f64[]", "true", "f64"},
	{"f32[]", "f64[2]", "f64"}, {"f32[]", "f32[2]", "f32"}, {"f32[]", "f16[2]", "f16"}, {"f32[]", "bf16[2]", "bf16"},
	{"f32[]", "i64[2]", "f32"}, {"f32[]", "i32[2]", "f32"}, {"f32[]", "bool[2]", "f32"}, {"f32[]", "f64[]", "f64"},
	{"f32[]", "f32[]", "f32"}, {"f32[]", "f16[]", "f32"}, {"f32[]", "bf16[]", "f32"}, {"f32[]", "i64[]", "f32"},
	{"f32[]", "i32[]", "f32"}, {"f32[]", "bool[]", "f32"}, {"f32[]", "1", "f32"}, {"f32[]", "0.5", "f32"},
	{"f32[]", "true", "f32"}, {"f16[]", "f64[2]", "f64"}, {"f16[]", "f32[2]", "f32"}, {"f16[]", "f16[2]", "f16"},
	{"f16[]", "bf16[2]", "bf16"}, {"f16[]", "i64[2]", "f16"}, {"f16[]", "i32[2]", "f16"}, {"f16[]", "bool[2]", "f16"},
	{"f16[]", "f64[]", "f64"}, {"f16[]", "f32[]", "f32"}, {"f16[]", "f16[]", "f16"}, {"f16[]", "bf16[]", "f32"},
	{"f16[]", "i64[]", "f16"}, {"f16[]", "i32[]", "f16"}, {"f16[]", "bool[]", "f16"}, {"f16[]", "1", "f16"},
	{"f16[]", "0.5", "f16"}, {"f16[]", "true", "f16"}, {"bf16[]", "f64[2]", "f64"}, {"bf16[]", "f32[2]", "f32"},
	{"bf16[]", "f16[2]", "f16"}, {"bf16[]", "bf16[2]", "bf16"}, {"bf16[]", "i64[2]", "bf16"}, {"bf16[]", "i32[2]", "bf16"},
	{"bf16[]", "bool[2]", "bf16"}, {"bf16[]", "f64[]", "f64"}, {"bf16[]", "f32[]", "f32"}, {"bf16[]", "f16[]", "f32"},
	{"bf16[]", "bf16[]", "bf16"}, {"bf16[]", "i64[]", "bf16"}, {"bf16[]", "i32[]", "bf16"}, {"bf16[]", "bool[]", "bf16"},
	{"bf16[]", "1", "bf16"}, {"bf16[]", "0.5", "bf16"}, {"bf16[]", "true", "bf16"}, {"i64[]", "f64[2]", "f64"},
	{"i64[]", "f32[2]", "f32"}, {"i64[]", "f16[2]", "f16"}, {"i64[]", "bf16[2]", "bf16"}, {"i64[]", "i64[2]", "i64"},
	{"i64[]", "i32[2]", "i32"}, {"i64[]", "bool[2]", "i64"}, {"i64[]", "f64[]", "f64"}, {"i64[]", "f32[]", "f32"},
	{"i64[]", "f16[]", "f16"}, {"i64[]", "bf16[]", "bf16"}, {"i64[]", "i64[]", "i64"}, {"i64[]", "i32[]", "i64"},
	{"i64[]", "bool[]", "i64"}, {"i64[]", "1", "i64"}, {"i64[]", "0.5", "f32"}, {"i64[]", "true", "i64"},
	{"i32[]", "f64[2]", "f64"}, {"i32[]", "f32[2]", "f32"}, {"i32[]", "f16[2]", "f16"}, {"i32[]", "bf16[2]", "bf16"},
	{"i32[]", "i64[2]", "i64"}, {"i32[]", "i32[2]", "i32"}, {"i32[]", "bool[2]", "i32"}, {"i32[]", "f64[]", "f64"},
	{"i32[]", "f32[]", "f32"}, {"i32[]", "f16[]", "f16"}, {"i32[]", "bf16[]", "bf16"}, {"i32[]", "i64[]", "i64"},
	{"i32[]", "i32[]", "i32"}, {"i32[]", "bool[]", "i32"}, {"i32[]", "1", "i32"}, {"i32[]", "0.5", "f32"},
	{"i32[]", "true", "i32"}, {"bool[]", "f64[2]", "f64"}, {"bool[]", "f32[2]", "f32"}, {"bool[]", "f16[2]", "f16"},
	{"bool[]", "bf16[2]", "bf16"}, {"bool[]", "i64[2]", "i64"}, {"bool[]", "i32[2]", "i32"}, {"bool[]", "bool[2]", "bool"},
	{"bool[]", "f64[]", "f64"}, {"bool[]", "f32[]", "f32"}, {"bool[]", "f16[]", "f16"}, {"bool[]", "bf16[]", "bf16"},
	{"bool[]", "i64[]", "i64"}, {"bool[]", "i32[]", "i32"}, {"bool[]", "bool[]", "bool"}, {"bool[]", "1", "i64"},
	{"bool[]", "0.5", "f32"}, {"bool[]", "true", "bool"},
};
/* whether a.OP(b) is allowed by torch */
static const struct {
	const char *op, *a, *b;
	int ok;
} inplace_table[] = {
	{"add_", "f64[2]", "f64[2]", 1}, {"div_", "f64[2]", "f64[2]", 1}, {"add_", "f64[2]", "f32[2]", 1},
	{"div_", "f64[2]", "f32[2]", 1}, {"add_", "f64[2]", "f16[2]", 1}, {"div_", "f64[2]", "f16[2]", 1},
	{"add_", "f64[2]", "bf16[2]", 1}, {"div_", "f64[2]", "bf16[2]", 1}, {"add_", "f64[2]", "i64[2]", 1},
	{"div_", "f64[2]", "i64[2]", 1}, {"add_", "f64[2]", "i32[2]", 1}, {"div_", "f64[2]", "i32[2]", 1},
	{"add_", "f64[2]", "bool[2]", 1}, {"div_", "f64[2]", "bool[2]", 1}, {"add_", "f64[2]", "f64[]", 1},
	{"div_", "f64[2]", "f64[]", 1}, {"add_", "f64[2]", "f32[]", 1}, {"div_", "f64[2]", "f32[]", 1},
	{"add_", "f64[2]", "f16[]", 1}, {"div_", "f64[2]", "f16[]", 1}, {"add_", "f64[2]", "bf16[]", 1},
	{"div_", "f64[2]", "bf16[]", 1}, {"add_", "f64[2]", "i64[]", 1}, {"div_", "f64[2]", "i64[]", 1},
	{"add_", "f64[2]", "i32[]", 1}, {"div_", "f64[2]", "i32[]", 1}, {"add_", "f64[2]", "bool[]", 1},
	{"div_", "f64[2]", "bool[]", 1}, {"add_", "f64[2]", "1", 1}, {"div_", "f64[2]", "1", 1},
	{"add_", "f64[2]", "0.5", 1}, {"div_", "f64[2]", "0.5", 1}, {"add_", "f64[2]", "true", 1},
	{"div_", "f64[2]", "true", 1}, {"add_", "f32[2]", "f64[2]", 1}, {"div_", "f32[2]", "f64[2]", 1},
	{"add_", "f32[2]", "f32[2]", 1}, {"div_", "f32[2]", "f32[2]", 1}, {"add_", "f32[2]", "f16[2]", 1},
	{"div_", "f32[2]", "f16[2]", 1}, {"add_", "f32[2]", "bf16[2]", 1}, {"div_", "f32[2]", "bf16[2]", 1},
	{"add_", "f32[2]", "i64[2]", 1}, {"div_", "f32[2]", "i64[2]", 1}, {"add_", "f32[2]", "i32[2]", 1},
	{"div_", "f32[2]", "i32[2]", 1}, {"add_", "f32[2]", "bool[2]", 1}, {"div_", "f32[2]", "bool[2]", 1},
	{"add_", "f32[2]", "f64[]", 1}, {"div_", "f32[2]", "f64[]", 1}, {"add_", "f32[2]", "f32[]", 1},
	{"div_", "f32[2]", "f32[]", 1}, {"add_", "f32[2]", "f16[]", 1}, {"div_", "f32[2]", "f16[]", 1},
	{"add_", "f32[2]", "bf16[]", 1}, {"div_", "f32[2]", "bf16[]", 1}, {"add_", "f32[2]", "i64[]", 1},
	{"div_", "f32[2]", "i64[]", 1}, {"add_", "f32[2]", "i32[]", 1}, {"div_", "f32[2]", "i32[]", 1},
	{"add_", "f32[2]", "bool[]", 1}, {"div_", "f32[2]", "bool[]", 1}, {"add_", "f32[2]", "1", 1},
	{"div_", "f32[2]", "1", 1}, {"add_", "f32[2]", "0.5", 1}, {"div_", "f32[2]", "0.5", 1},
	{"add_", "f32[2]", "true", 1}, {"div_", "f32[2]", "true", 1}, {"add_", "f16[2]", "f64[2]", 1},
	{"div_", "f16[2]", "f64[2]", 1}, {"add_", "f16[2]", "f32[2]", 1}, {"div_", "f16[2]", "f32[2]", 1},
	{"add_", "f16[2]", "f16[2]", 1}, {"div_", "f16[2]", "f16[2]", 1}, {"add_", "f16[2]", "bf16[2]", 1},
	{"div_", "f16[2]", "bf16[2]", 1}, {"add_", "f16[2]", "i64[2]", 1}, {"div_", "f16[2]", "i64[2]", 1},
	{"add_", "f16[2]", "i32[2]", 1}, {"div_", "f16[2]", "i32[2]", 1}, {"add_", "f16[2]", "bool[2]", 1},
	{"div_", "f16[2]", "bool[2]", 1}, {"add_", "f16[2]", "f64[]", 1}, {"div_", "f16[2]", "f64[]", 1},
	{"add_", "f16[2]", "f32[]", 1}, {"div_", "f16[2]", "f32[]", 1}, {"add_", "f16[2]", "f16[]", 1},
	{"div_", "f16[2]", "f16[]", 1}, {"add_", "f16[2]", "bf16[]", 1}, {"div_", "f16[2]", "bf16[]", 1},
	{"add_", "f16[2]", "i64[]", 1}, {"div_", "f16[2]", "i64[]", 1}, {"add_", "f16[2]", "i32[]", 1},
	{"div_", "f16[2]", "i32[]", 1}, {"add_", "f16[2]", "bool[]", 1}, {"div_", "f16[2]", "bool[]", 1},
	{"add_", "f16[2]", "1", 1}, {"div_", "f16[2]", "1", 1}, {"add_", "f16[2]", "0.5", 1},
	{"div_", "f16[2]", "0.5", 1}, {"add_", "f16[2]", "true", 1}, {"div_", "f16[2]", "true", 1},
	{"add_", "bf16[2]", "f64[2]", 1}, {"div_", "bf16[2]", "f64[2]", 1}, {"add_", "bf16[2]", "f32[2]", 1},
	{"div_", "bf16[2]", "f32[2]", 1}, {"add_", "bf16[2]", "f16[2]", 1}, {"div_", "bf16[2]", "f16[2]", 1},
	{"add_", "bf16[2]", "bf16[2]", 1}, {"div_", "bf16[2]", "bf16[2]", 1}, {"add_", "bf16[2]", "i64[2]", 1},
	{"div_", "bf16[2]", "i64[2]", 1}, {"add_", "bf16[2]", "i32[2]", 1}, {"div_", "bf16[2]", "i32[2]", 1},
	{"add_", "bf16[2]", "bool[2]", 1}, {"div_", "bf16[2]", "bool[2]", 1}, {"add_", "bf16[2]", "f64[]", 1},
	{"div_", "bf16[2]", "f64[]", 1}, {"add_", "bf16[2]", "f32[]", 1}, {"div_", "bf16[2]", "f32[]", 1},
	{"add_", "bf16[2]", "f16[]", 1}, {"div_", "bf16[2]", "f16[]", 1}, {"add_", "bf16[2]", "bf16[]", 1},
	{"div_", "bf16[2]", "bf16[]", 1}, {"add_", "bf16[2]", "i64[]", 1}, {"div_", "bf16[2]", "i64[]", 1},
	{"add_", "bf16[2]", "i32[]", 1}, {"div_", "bf16[2]", "i32[]", 1}, {"add_", "bf16[2]", "bool[]", 1},
	{"div_", "bf16[2]", "bool[]", 1}, {"add_", "bf16[2]", "1", 1}, {"div_", "bf16[2]", "1", 1},
	{"add_", "bf16[2]", "0.5", 1}, {"div_", "bf16[2]", "0.5", 1}, {"add_", "bf16[2]", "true", 1},
	{"div_", "bf16[2]", "true", 1}, {"add_", "i64[2]", "f64[2]", 0}, {"div_", "i64[2]", "f64[2]", 0},
	{"add_", "i64[2]", "f32[2]", 0}, {"div_", "i64[2]", "f32[2]", 0}, {"add_", "i64[2]", "f16[2]", 0},
	{"div_", "i64[2]", "f16[2]", 0}, {"add_", "i64[2]", "bf16[2]", 0}, {"div_", "i64[2]", "bf16[2]", 0},
	{"add_", "i64[2]", "i64[2]", 1}, {"div_", "i64[2]", "i64[2]", 0}, {"add_", "i64[2]", "i32[2]", 1},
	{"div_", "i64[2]", "i32[2]", 0}, {"add_", "i64[2]", "bool[2]", 1}, {"div_", "i64[2]", "bool[2]", 0},
	{"add_", "i64[2]", "f64[]", 0}, {"div_", "i64[2]", "f64[]", 0}, {"add_", "i64[2]", "f32[]", 0},
	{"div_", "i64[2]", "f32[]", 0}, {"add_", "i64[2]", "f16[]", 0}, {"div_", "i64[2]", "f16[]", 0},
	{"add_", "i64[2]", "bf16[]", 0}, {"div_", "i64[2]", "bf16[]", 0}, {"add_", "i64[2]", "i64[]", 1},
	{"div_", "i64[2]", "i64[]", 0}, {"add_", "i64[2]", "i32[]", 1}, {"div_", "i64[2]", "i32[]", 0},
	{"add_", "i64[2]", "bool[]", 1}, {"div_", "i64[2]", "bool[]", 0}, {"add_", "i64[2]", "1", 1},
	{"div_", "i64[2]", "1", 0}, {"add_", "i64[2]", "0.5", 0}, {"div_", "i64[2]", "0.5", 0},
	{"add_", "i64[2]", "true", 1}, {"div_", "i64[2]", "true", 0}, {"add_", "i32[2]", "f64[2]", 0},
	{"div_", "i32[2]", "f64[2]", 0}, {"add_", "i32[2]", "f32[2]", 0}, {"div_", "i32[2]", "f32[2]", 0},
	{"add_", "i32[2]", "f16[2]", 0}, {"div_", "i32[2]", "f16[2]", 0}, {"add_", "i32[2]", "bf16[2]", 0},
	{"div_", "i32[2]", "bf16[2]", 0}, {"add_", "i32[2]", "i64[2]", 1}, {"div_", "i32[2]", "i64[2]", 0},
	{"add_", "i32[2]", "i32[2]", 1}, {"div_", "i32[2]", "i32[2]", 0}, {"add_", "i32[2]", "bool[2]", 1},
	{"div_", "i32[2]", "bool[2]", 0}, {"add_", "i32[2]", "f64[]", 0}, {"div_", "i32[2]", "f64[]", 0},
	{"add_", "i32[2]", "f32[]", 0}, {"div_", "i32[2]", "f32[]", 0}, {"add_", "i32[2]", "f16[]", 0},
	{"div_", "i32[2]", "f16[]", 0}, {"add_", "i32[2]", "bf16[]", 0}, {"div_", "i32[2]", "bf16[]", 0},
	{"add_", "i32[2]", "i64[]", 1}, {"div_", "i32[2]", "i64[]", 0}, {"add_", "i32[2]", "i32[]", 1},
	{"div_", "i32[2]", "i32[]", 0}, {"add_", "i32[2]", "bool[]", 1}, {"div_", "i32[2]", "bool[]", 0},
	{"add_", "i32[2]", "1", 1}, {"div_", "i32[2]", "1", 0}, {"add_", "i32[2]", "0.5", 0},
	{"div_", "i32[2]", "0.5", 0}, {"add_", "i32[2]", "true", 1}, {"div_", "i32[2]", "true", 0},
	{"add_", "bool[2]", "f64[2]", 0}, {"div_", "bool[2]", "f64[2]", 0}, {"add_", "bool[2]", "f32[2]", 0},
	{"div_", "bool[2]", "f32[2]", 0}, {"add_", "bool[2]", "f16[2]", 0}, {"div_", "bool[2]", "f16[2]", 0},
	{"add_", "bool[2]", "bf16[2]", 0}, {"div_", "bool[2]", "bf16[2]", 0}, {"add_", "bool[2]", "i64[2]", 0},
	{"div_", "bool[2]", "i64[2]", 0}, {"add_", "bool[2]", "i32[2]", 0}, {"div_", "bool[2]", "i32[2]", 0},
	{"add_", "bool[2]", "bool[2]", 1}, {"div_", "bool[2]", "bool[2]", 0}, {"add_", "bool[2]", "f64[]", 0},
	{"div_", "bool[2]", "f64[]", 0}, {"add_", "bool[2]", "f32[]", 0}, {"div_", "bool[2]", "f32[]", 0},
	{"add_", "bool[2]", "f16[]", 0}, {"div_", "bool[2]", "f16[]", 0}, {"add_", "bool[2]", "bf16[]", 0},
	{"div_", "bool[2]", "bf16[]", 0}, {"add_", "bool[2]", "i64[]", 0}, {"div_", "bool[2]", "i64[]", 0},
	{"add_", "bool[2]", "i32[]", 0}, {"div_", "bool[2]", "i32[]", 0}, {"add_", "bool[2]", "bool[]", 1},
	{"div_", "bool[2]", "bool[]", 0}, {"add_", "bool[2]", "1", 0}, {"div_", "bool[2]", "1", 0},
	{"add_", "bool[2]", "0.5", 0}, {"div_", "bool[2]", "0.5", 0}, {"add_", "bool[2]", "true", 1},
	{"div_", "bool[2]", "true", 0},
};

/* Declares one value of each type that the tables name, called by it. */
static void
table_values(T *t)
{
	static const char *dt[] = {"f64", "f32", "f16", "bf16", "i64", "i32", "bool"};
	char name[16];
	for (int i = 0; i < 7; i++) {
		snprintf(name, sizeof name, "%s[2]", dt[i]);
		val(t, arena_strdup(t->m.arena, name), name);
		snprintf(name, sizeof name, "%s[]", dt[i]);
		val(t, arena_strdup(t->m.arena, name), name);
	}
}

/* "%f32[2]" for a value of the tables, the literal itself otherwise. */
static const char *
table_arg(char *buf, const char *s)
{
	snprintf(buf, 32, "%s%s", strchr(s, '[') ? "%" : "", s);
	return buf;
}

static void
test_result_type_table(void **state)
{
	T *t = *state;
	char a[32], b[32], args[80], want[32];
	table_values(t);
	for (size_t i = 0; i < sizeof add_table / sizeof *add_table; i++) {
		snprintf(args, sizeof args, "%s %s", table_arg(a, add_table[i][0]),
		         table_arg(b, add_table[i][1]));
		/* The shape: [2] unless both are 0-d. */
		snprintf(want, sizeof want, "%s[%s]", add_table[i][2],
		         strstr(args, "[2]") ? "2" : "");
		OK("add", args, want);
	}
}

/* The cases the spec names (each also in the table). */
static void
test_result_type_cases(void **state)
{
	T *t = *state;
	val(t, "bf", "bf16[3]");
	val(t, "l", "i64[3]");
	val(t, "i", "i32[3]");
	val(t, "b", "bool[3]");
	val(t, "h", "f16[3]");
	val(t, "f0", "f32[]");
	val(t, "i0", "i64[]");
	OK("add", "%bf 0.5", "bf16[3]");
	OK("add", "%l 0.5", "f32[3]");
	OK("add", "%i 1", "i32[3]");
	OK("add", "%b 1", "i64[3]");
	OK("add", "%h %bf", "f32[3]");
	OK("add", "%h %f0", "f16[3]");
	OK("add", "%l %f0", "f32[3]");
	OK("add", "%i0 0.5", "f32[]");
	OK("add", "0.5 %bf", "bf16[3]");
	OK("add", "1 2", "i64[]");
	OK("add", "true 0.5", "f32[]");
}

static void
test_result_type_direct(void **state)
{
	T *t = *state;
	val(t, "h", "f16[3]");
	val(t, "f0", "f32[]");
	val(t, "l", "i64[3]");
	val(t, "b", "bool[3]");
	/* where(%b, %h, %f0): result type over operands 1..2 */
	assert_int_equal(run(t, "where", "%b %h %f0", 1), 1);
	assert_int_equal(shape_result_type(t->g, t->n, 1, 2), DT_F16);
	assert_int_equal(shape_result_type(t->g, t->n, 0, 1), DT_BOOL);
	assert_int_equal(shape_result_type(t->g, t->n, 0, 0), DT_ERR);
	assert_int_equal(run(t, "add", "%l %f0", 1), 1);
	assert_int_equal(shape_result_type(t->g, t->n, 0, 2), DT_F32);
	assert_int_equal(run(t, "add", "1 0.5", 1), 1);
	assert_int_equal(shape_result_type(t->g, t->n, 0, 2), DT_F32);
	assert_int_equal(run(t, "add", "%b true", 1), 1);
	assert_int_equal(shape_result_type(t->g, t->n, 0, 2), DT_BOOL);
}

/* ------------------------------------------------------------------ pointwise */

static void
test_broadcast(void **state)
{
	T *t = *state;
	Type a = parse_type("f32[2, 1, 3]"), b = parse_type("i32[4, 1]"), r;
	char buf[64] = "";
	assert_true(shape_broadcast(&a, &b, &r));
	print_type(buf, sizeof buf, &r);
	assert_string_equal(buf, "f32[2, 4, 3]");
	a = parse_type("f32[0]");
	b = parse_type("f32[1]");
	assert_true(shape_broadcast(&a, &b, &r));
	assert_int_equal(r.d[0], 0);
	b = parse_type("f32[3]");
	assert_false(shape_broadcast(&a, &b, &r));
	assert_false(shape_broadcast(&b, &a, &r));

	val(t, "a", "f32[2, 3]");
	val(t, "v", "f32[4]");
	val(t, "c", "bool[2, 1]");
	val(t, "e", "f32[5, 1, 1]");
	OK("mul", "%a %e", "f32[5, 2, 3]");
	ERR("add", "%a %v",
	    "t.sg:2:4: error: add: shapes don't broadcast: '%a' (f32[2, 3]) and '%v' (f32[4])");
	ERR("where", "%c %a %v", "'%v' (f32[4]) against [2, 3], the shape of the operands before it");
}

static void
test_unary(void **state)
{
	T *t = *state;
	static const char *to_float[] = {"exp", "log", "log1p", "sqrt", "rsqrt", "reciprocal",
	                                 "sin", "cos", "tanh", "sigmoid", "erf"};
	val(t, "i", "i32[2, 3]");
	val(t, "b", "bool[2]");
	val(t, "h", "f16[2]");
	val(t, "l", "i64[]");
	/* torch.exp(int or bool tensor) is float32; float dtypes stay. */
	for (size_t k = 0; k < sizeof to_float / sizeof *to_float; k++) {
		OK(to_float[k], "%i", "f32[2, 3]");
		OK(to_float[k], "%b", "f32[2]");
		OK(to_float[k], "%h", "f16[2]");
		OK(to_float[k], "%l", "f32[]");
	}
	/* neg abs square relu sign floor keep integer dtypes. */
	OK("neg", "%i", "i32[2, 3]");
	OK("abs", "%l", "i64[]");
	OK("square", "%i", "i32[2, 3]");
	OK("relu", "%i", "i32[2, 3]");
	OK("sign", "%i", "i32[2, 3]");
	OK("floor", "%i", "i32[2, 3]");
	OK("floor", "%h", "f16[2]");
	/* Bool: torch.neg, abs, relu and floor refuse it; sign keeps it;
	 * square (pow(x, 2)) gives int64. */
	ERR("neg", "%b", "neg: bool tensors are not supported, and '%b' (bool[2]) is bool");
	ERR("abs", "%b", "abs: bool tensors are not supported");
	ERR("relu", "%b", "relu: bool tensors are not supported");
	ERR("floor", "%b", "floor: bool tensors are not supported");
	OK("sign", "%b", "bool[2]");
	OK("square", "%b", "i64[2]");
	/* gelu and silu have no integer kernels. */
	ERR("gelu", "%i", "gelu: expects a floating-point tensor, but '%i' (i32[2, 3]) is not");
	ERR("gelu", "%b", "gelu: expects a floating-point tensor");
	ERR("silu", "%l", "silu: expects a floating-point tensor");
	OK("gelu", "%h approximate=tanh", "f16[2]");
	OK("silu", "%h", "f16[2]");
}

static void
test_binary(void **state)
{
	T *t = *state;
	val(t, "l", "i64[2]");
	val(t, "i", "i32[2]");
	val(t, "b", "bool[2]");
	val(t, "h", "f16[2]");
	val(t, "f", "f32[2]");
	val(t, "f0", "f32[]");
	/* True division: torch.div(int, int) and div(bool, bool) are float32. */
	OK("div", "%l %l", "f32[2]");
	OK("div", "%b %b", "f32[2]");
	OK("div", "%i 2", "f32[2]");
	OK("div", "%h 2", "f16[2]");
	OK("div", "1 %l", "f32[2]");
	/* Subtraction refuses bool, even as a literal. */
	ERR("sub", "%b %b", "sub: subtraction with a bool operand is not supported: '%b' (bool[2]) is bool");
	ERR("sub", "%b 1", "subtraction with a bool operand");
	ERR("sub", "%l true", "subtraction with a bool operand is not supported: true is bool");
	ERR("sub", "1 %b", "t.sg:2:3: error: sub: subtraction with a bool operand");
	OK("sub", "1.0 %i", "f32[2]");
	/* pow: promotion; no bool result; no negative integer literal powers
	 * of integers. */
	OK("pow", "%b 2", "i64[2]");
	OK("pow", "%i 2", "i32[2]");
	OK("pow", "%i 0.5", "f32[2]");
	OK("pow", "2 %i", "i32[2]");
	OK("pow", "2.5 %i", "f32[2]");
	OK("pow", "%i %l", "i64[2]");
	OK("pow", "%f -1", "f32[2]");
	ERR("pow", "%b %b", "pow: not supported for bool");
	ERR("pow", "%i -1", "pow: integers to negative integer powers are not allowed");
	ERR("pow", "%b -2", "integers to negative integer powers are not allowed");
	/* maximum and minimum promote; bool is fine. */
	OK("maximum", "%b %b", "bool[2]");
	OK("minimum", "%l %f0", "f32[2]");
	OK("maximum", "%h %f", "f32[2]");
	OK("mul", "%b %b", "bool[2]");
	OK("add", "%b %b", "bool[2]");
}

static void
test_compare(void **state)
{
	T *t = *state;
	val(t, "a", "f32[2, 1]");
	val(t, "c", "i32[3]");
	val(t, "h", "f16[]");
	OK("eq", "%a %c", "bool[2, 3]");
	OK("ne", "%c 0.5", "bool[3]");
	OK("lt", "%h %h", "bool[]");
	OK("le", "1 %a", "bool[2, 1]");
	OK("gt", "%a %h", "bool[2, 1]");
	OK("ge", "%c %c", "bool[3]");
	val(t, "d", "f32[2]");
	ERR("eq", "%d %c", "eq: shapes don't broadcast");
}

static void
test_where(void **state)
{
	T *t = *state;
	val(t, "b", "bool[2]");
	val(t, "b0", "bool[]");
	val(t, "i", "i32[2]");
	val(t, "h", "f16[2]");
	val(t, "bf", "bf16[2]");
	val(t, "f", "f32[2]");
	val(t, "f0", "f32[]");
	val(t, "m", "f32[3, 1]");
	/* torch.where(b, 1.0, 0.0) is float32, where(b, 1, 0) int64 */
	OK("where", "%b 1.0 0.0", "f32[2]");
	OK("where", "%b 1 0", "i64[2]");
	OK("where", "%b %i 0.5", "f32[2]");
	OK("where", "%b %h %bf", "f32[2]");
	OK("where", "%b %h %f0", "f16[2]");
	OK("where", "%b0 %f %m", "f32[3, 2]");
	OK("where", "true %h 0.0", "f16[2]");
	ERR("where", "%i %f %f", "where: the condition must be bool, but '%i' (i32[2]) is not");
	ERR("where", "1 %f %f", "the condition must be bool, but 1 is not");
}

static void
test_clamp(void **state)
{
	T *t = *state;
	val(t, "i", "i32[2]");
	val(t, "l", "i64[2]");
	val(t, "b", "bool[2]");
	val(t, "bf", "bf16[2]");
	ERR("clamp", "%i", "clamp: at least one of min= and max= must be given");
	OK("clamp", "%i min=0.5", "f32[2]");
	OK("clamp", "%i min=0", "i32[2]");
	OK("clamp", "%i max=7", "i32[2]");
	OK("clamp", "%l min=0.5 max=2", "f32[2]");
	OK("clamp", "%b min=0", "i64[2]");
	OK("clamp", "%bf min=0.5", "bf16[2]");
	ERR("clamp", "%b min=true", "clamp: not supported for bool");
}

static void
test_cast(void **state)
{
	T *t = *state;
	val(t, "f", "f32[2, 3]");
	val(t, "b", "bool[]");
	OK("cast", "%f dtype=bf16", "bf16[2, 3]");
	OK("cast", "%f dtype=i32", "i32[2, 3]");
	OK("cast", "%b dtype=f64", "f64[]");
	OK("cast", "%f dtype=bool", "bool[2, 3]");
}

/* ------------------------------------------------------------------ reductions */

static void
test_reduce(void **state)
{
	T *t = *state;
	val(t, "f", "f32[2, 3, 4]");
	val(t, "b", "bool[2, 3]");
	val(t, "i", "i32[2, 3]");
	val(t, "h", "f16[5]");
	val(t, "s", "f32[]");
	val(t, "z", "f32[0, 3]");
	/* dtypes: sum of bool or int is int64; mean and var need floats. */
	OK("sum", "%b", "i64[]");
	OK("sum", "%i dims=[1]", "i64[2]");
	OK("sum", "%h", "f16[]");
	OK("amax", "%b", "bool[]");
	OK("amin", "%i dims=[0]", "i32[3]");
	OK("mean", "%h", "f16[]");
	ERR("mean", "%i", "mean: expects a floating-point tensor, but '%i' (i32[2, 3]) is not");
	ERR("var", "%i dims=[0]", "var: expects a floating-point tensor");
	ERRN("var_mean", "%b", 2, "var_mean: expects a floating-point tensor");
	/* dims: negative, keepdim, none or [] = all */
	OK("sum", "%f dims=[0,-1]", "f32[3]");
	OK("sum", "%f dims=[-1] keepdim=true", "f32[2, 3, 1]");
	OK("mean", "%f keepdim=true", "f32[1, 1, 1]");
	OK("var", "%f dims=[]", "f32[]");
	OK("amax", "%f dims=[1]", "f32[2, 4]");
	ERR("sum", "%f dims=[0,-3]", "sum: dim 0 appears more than once in dims [0, -3]");
	ERR("sum", "%f dims=[3]",
	    "t.sg:2:4: error: sum: dim 3 is out of range for '%f' (f32[2, 3, 4]): expected a dim in [-3, 2]");
	ERR("mean", "%f dims=[-4]", "expected a dim in [-3, 2]");
	/* 0-d: dims 0 and -1 are allowed (torch.sum(torch.tensor(1.), dim=[0])) */
	OK("sum", "%s dims=[0]", "f32[]");
	OK("amax", "%s dims=[-1] keepdim=true", "f32[]");
	ERR("sum", "%s dims=[1]", "expected a dim in [-1, 0]");
	ERR("sum", "%s dims=[0,0]", "appears more than once");
	/* amax/amin of an empty dim has no value. */
	ERR("amax", "%z dims=[0]", "amax: dim 0 of '%z' (f32[0, 3]) has size 0");
	ERR("amin", "%z", "dim 0 of '%z' (f32[0, 3]) has size 0");
	OK("amax", "%z dims=[1]", "f32[0]");
	OK("sum", "%z dims=[0]", "f32[3]");
	/* var_mean: variance then mean */
	OK("var_mean", "%f dims=[1]", "f32[2, 4]; f32[2, 4]");
	OK("var_mean", "%h keepdim=true", "f16[1]; f16[1]");
	ERRN("var_mean", "%f", 1, "var_mean: gives 2 results, but the statement names 1");
}

/* ------------------------------------------------------------------ normalisation */

static void
test_softmax(void **state)
{
	T *t = *state;
	val(t, "f", "f32[2, 3]");
	val(t, "l", "i64[3]");
	val(t, "s", "bf16[]");
	OK("softmax", "%f", "f32[2, 3]");
	OK("log_softmax", "%f dim=0", "f32[2, 3]");
	OK("softmax", "%s dim=0", "bf16[]");
	ERR("softmax", "%l", "softmax: expects a floating-point tensor");
	ERR("log_softmax", "%f dim=2", "log_softmax: dim 2 is out of range for '%f' (f32[2, 3])");
	ERR("softmax", "%s dim=1", "expected a dim in [-1, 0]");
}

static void
test_layer_norm(void **state)
{
	T *t = *state;
	val(t, "x", "f32[2, 5, 3]");
	val(t, "w", "f32[3]");
	val(t, "bias", "f32[3]");
	val(t, "w4", "f32[4]");
	val(t, "w13", "f32[1, 3]");
	val(t, "wh", "f16[3]");
	val(t, "l", "i64[2, 3]");
	val(t, "s", "f32[]");
	val(t, "hx", "bf16[4, 3]");
	val(t, "hw", "bf16[3]");
	OK("layer_norm", "%x %w %bias", "f32[2, 5, 3]");
	OK("layer_norm", "%x %w", "f32[2, 5, 3]");
	OK("layer_norm", "%x eps=0.001", "f32[2, 5, 3]");
	OK("layer_norm", "%hx %hw %hw", "bf16[4, 3]");
	OK("rms_norm", "%x %w", "f32[2, 5, 3]");
	OK("rms_norm", "%hx", "bf16[4, 3]");
	ERR("layer_norm", "%x %w4",
	    "layer_norm: the weight must have the shape [3] of the last dim of '%x' (f32[2, 5, 3]), but '%w4' (f32[4]) is not");
	ERR("layer_norm", "%x %w %w13", "the bias must have the shape [3]");
	ERR("rms_norm", "%x %w13", "rms_norm: the weight must have the shape [3]");
	ERR("layer_norm", "%x %wh", "the weight must have the dtype of '%x' (f32[2, 5, 3]), but '%wh' (f16[3]) does not");
	ERR("layer_norm", "%l", "layer_norm: expects a floating-point tensor");
	ERR("rms_norm", "%s", "rms_norm: expects a tensor with at least one dim, but '%s' (f32[]) is 0-d");
}

/* ------------------------------------------------------------------ linear algebra */

static void
test_matmul(void **state)
{
	T *t = *state;
	val(t, "v3", "f32[3]");
	val(t, "v4", "f32[4]");
	val(t, "m43", "f32[4, 3]");
	val(t, "m34", "f32[3, 4]");
	val(t, "b243", "f32[2, 4, 3]");
	val(t, "b234", "f32[2, 3, 4]");
	val(t, "b5143", "f32[5, 1, 4, 3]");
	val(t, "b236", "f32[2, 3, 6]");
	val(t, "b332", "f32[3, 3, 2]");
	val(t, "s", "f32[]");
	val(t, "d32", "f64[3, 2]");
	val(t, "l43", "i64[4, 3]");
	val(t, "l32", "i64[3, 2]");
	val(t, "a", "f32[4, 8]");
	val(t, "b", "f32[16, 2]");
	/* torch.matmul: dot, vm, mv, mm, batched with 1-D, batch broadcast */
	OK("matmul", "%v3 %v3", "f32[]");
	OK("matmul", "%v3 %m34", "f32[4]");
	OK("matmul", "%m43 %v3", "f32[4]");
	OK("matmul", "%m43 %m34", "f32[4, 4]");
	OK("matmul", "%b243 %v3", "f32[2, 4]");
	OK("matmul", "%v3 %b234", "f32[2, 4]");
	OK("matmul", "%b5143 %b236", "f32[5, 2, 4, 6]");
	OK("matmul", "%m43 %b236", "f32[2, 4, 6]");
	ERR("matmul", "%a %b",
	    "t.sg:2:4: error: matmul: inner dimensions differ: '%a' is f32[4, 8] and '%b' is f32[16, 2]");
	ERR("matmul", "%v3 %v4", "inner dimensions differ: '%v3' is f32[3] and '%v4' is f32[4]");
	ERR("matmul", "%b243 %b332", "matmul: batch dimensions don't broadcast");
	ERR("matmul", "%s %v3", "both operands need at least one dim");
	ERR("matmul", "%v3 %s", "both operands need at least one dim");
	/* torch: "expected scalar type Double but found Float" */
	ERR("matmul", "%m43 %d32", "operands must have the same dtype: '%m43' (f32[4, 3]) and '%d32' (f64[3, 2])");
	/* Documented: integer matmul is rejected. */
	ERR("matmul", "%l43 %l32", "expects floating-point operands (integer products are not supported)");
}

static void
test_linear(void **state)
{
	T *t = *state;
	val(t, "x", "f32[2, 5, 3]");
	val(t, "x1", "f32[3]");
	val(t, "w", "f32[4, 3]");
	val(t, "w2", "f32[4, 2]");
	val(t, "w1", "f32[3]");
	val(t, "b", "f32[4]");
	val(t, "b3", "f32[3]");
	val(t, "bh", "f16[4]");
	val(t, "s", "f32[]");
	val(t, "l", "i64[2, 3]");
	val(t, "lw", "i64[4, 3]");
	OK("linear", "%x %w", "f32[2, 5, 4]");
	OK("linear", "%x %w %b", "f32[2, 5, 4]");
	OK("linear", "%x1 %w", "f32[4]");
	ERR("linear", "%x %w2", "linear: inner dimensions differ: '%x' (f32[2, 5, 3]) and '%w2' (f32[4, 2])");
	ERR("linear", "%x %w %b3", "the bias must be [4] for weight '%w' (f32[4, 3]), but '%b3' (f32[3]) is not");
	ERR("linear", "%x %w1", "the weight must be [out, in]");
	ERR("linear", "%s %w", "expects a tensor with at least one dim");
	ERR("linear", "%x %w %bh", "operands must have the same dtype");
	ERR("linear", "%l %lw", "expects floating-point operands");
}

static void
test_sdpa(void **state)
{
	T *t = *state;
	val(t, "q", "f32[2, 4, 8, 16]");
	val(t, "k", "f32[2, 4, 10, 16]");
	val(t, "v", "f32[2, 4, 10, 32]");
	val(t, "q1", "f32[2, 1, 8, 16]");
	val(t, "k1", "f32[4, 10, 16]");
	val(t, "v1", "f32[1, 10, 32]");
	val(t, "q2", "f32[8, 16]");
	val(t, "k2", "f32[10, 16]");
	val(t, "v2", "f32[10, 16]");
	val(t, "kE", "f32[2, 4, 10, 12]");
	val(t, "vS", "f32[2, 4, 9, 32]");
	val(t, "kb", "f32[3, 10, 16]");
	val(t, "vh", "f16[2, 4, 10, 32]");
	val(t, "r1", "f32[16]");
	val(t, "lq", "i64[8, 16]");
	val(t, "kg", "f32[2, 2, 10, 16]");
	val(t, "vg", "f32[2, 2, 10, 32]");
	val(t, "mb", "bool[8, 10]");
	val(t, "mf", "f32[2, 1, 1, 10]");
	OK("scaled_dot_product_attention", "%q %k %v", "f32[2, 4, 8, 32]");
	OK("scaled_dot_product_attention", "%q %kg %vg enable_gqa=true", "f32[2, 4, 8, 32]");
	OK("scaled_dot_product_attention", "%q %k %v %mb", "f32[2, 4, 8, 32]");
	OK("scaled_dot_product_attention", "%q %kg %vg %mf enable_gqa=true", "f32[2, 4, 8, 32]");
	ERR("scaled_dot_product_attention", "%q %kg %vg", "the query has 4 heads (dim -3) and the key 2");
	ERR("scaled_dot_product_attention", "%q %kg %v enable_gqa=true", "different head counts");
	ERR("scaled_dot_product_attention", "%q %k %v %mb causal=true", "a mask and causal=true together");
	ERR("scaled_dot_product_attention", "%q %k %v %q", "does not broadcast to the scores' shape");
	OK("scaled_dot_product_attention", "%q %k %v causal=true scale=0.5", "f32[2, 4, 8, 32]");
	OK("scaled_dot_product_attention", "%q1 %k1 %v1", "f32[2, 4, 8, 32]");
	OK("scaled_dot_product_attention", "%q2 %k2 %v2", "f32[8, 16]");
	ERR("scaled_dot_product_attention", "%q %kE %v", "the query and key have different head dims");
	ERR("scaled_dot_product_attention", "%q %k %vS", "the key and value have different sequence lengths");
	ERR("scaled_dot_product_attention", "%q %kb %v", "batch dimensions don't broadcast");
	ERR("scaled_dot_product_attention", "%q %k %vh", "operands must have the same dtype");
	ERR("scaled_dot_product_attention", "%r1 %k %v", "need at least two dims, but '%r1' (f32[16]) has 1");
	ERR("scaled_dot_product_attention", "%lq %k2 %v2", "expects floating-point operands");
}

/* ------------------------------------------------------------------ shape ops */

static void
test_reshape(void **state)
{
	T *t = *state;
	val(t, "x", "f32[6]");
	val(t, "z", "f32[0]");
	val(t, "o", "i32[1]");
	val(t, "s", "f32[]");
	OK("reshape", "%x shape=[2,-1]", "f32[2, 3]");
	OK("reshape", "%x shape=[3,1,2]", "f32[3, 1, 2]");
	OK("reshape", "%z shape=[2,-1]", "f32[2, 0]");
	OK("reshape", "%o shape=[]", "i32[]");
	OK("reshape", "%s shape=[-1]", "f32[1]");
	ERR("reshape", "%x shape=[-1,-1]", "reshape: only one dim can be inferred (-1) in shape [-1, -1]");
	ERR("reshape", "%x shape=[4,-1]", "shape [4, -1] is invalid for '%x' (f32[6]) of 6 elements");
	ERR("reshape", "%x shape=[2,2]", "shape [2, 2] is invalid for '%x' (f32[6]) of 6 elements");
	ERR("reshape", "%x shape=[2,-2]", "invalid size -2 in shape [2, -2]");
	ERR("reshape", "%z shape=[0,-1]", "can't infer the -1 in shape [0, -1]");
	ERR("reshape", "%x shape=[1,1,1,1,1,1,1,1,6]", "the result would have 9 dims; at most 8 are supported");
	ERR("reshape", "%x shape=[4611686018427387904,4]", "shape [4611686018427387904, 4] is too large");
}

static void
test_transpose_permute(void **state)
{
	T *t = *state;
	val(t, "x", "f32[2, 3, 4]");
	val(t, "s", "f32[]");
	OK("transpose", "%x dim0=0 dim1=-1", "f32[4, 3, 2]");
	OK("transpose", "%x dim0=1 dim1=1", "f32[2, 3, 4]");
	OK("transpose", "%s dim0=0 dim1=-1", "f32[]");
	ERR("transpose", "%x dim0=0 dim1=3", "transpose: dim 3 is out of range for '%x' (f32[2, 3, 4]): expected a dim in [-3, 2]");
	OK("permute", "%x dims=[2,0,1]", "f32[4, 2, 3]");
	OK("permute", "%x dims=[-1,0,1]", "f32[4, 2, 3]");
	OK("permute", "%s dims=[]", "f32[]");
	ERR("permute", "%x dims=[0,0,1]", "permute: dims [0, 0, 1] is not a permutation: dim 0 appears twice");
	ERR("permute", "%x dims=[0,1]", "dims [0, 1] has 2 entries, but '%x' (f32[2, 3, 4]) has 3 dims");
	ERR("permute", "%x dims=[0,1,3]", "dim 3 is out of range");
}

static void
test_expand(void **state)
{
	T *t = *state;
	val(t, "x", "f32[2, 3]");
	val(t, "c", "f32[2, 1]");
	val(t, "s", "f32[]");
	OK("expand", "%x shape=[4,2,3]", "f32[4, 2, 3]");
	OK("expand", "%c shape=[-1,5]", "f32[2, 5]");
	OK("expand", "%c shape=[2,0]", "f32[2, 0]");
	OK("expand", "%c shape=[2,-1]", "f32[2, 1]");
	OK("expand", "%s shape=[3,2]", "f32[3, 2]");
	ERR("expand", "%c shape=[-1,-1,5]", "expand: size -1 isn't allowed in the new leading dim 0 of shape [-1, -1, 5]");
	ERR("expand", "%x shape=[2,4]",
	    "size 4 at dim 1 of shape [2, 4] doesn't match size 3 of '%x' (f32[2, 3]); only dims of size 1 expand");
	ERR("expand", "%x shape=[2,-2]", "size -2 at dim 1 of shape [2, -2] doesn't match");
	ERR("expand", "%x shape=[3]", "shape [3] has fewer dims than '%x' (f32[2, 3])");
}

static void
test_slice(void **state)
{
	T *t = *state;
	val(t, "x", "f32[5]");
	val(t, "m", "f32[4, 6]");
	val(t, "s", "f32[]");
	/* Python slicing of a [5]: x[-10:3], x[3:1], x[-2:], x[2:100], x[7:9] */
	OK("slice", "%x dim=0 start=-10 end=3", "f32[3]");
	OK("slice", "%x dim=0 start=3 end=1", "f32[0]");
	OK("slice", "%x dim=0 start=-2", "f32[2]");
	OK("slice", "%x dim=0 start=2 end=100", "f32[3]");
	OK("slice", "%x dim=0 start=7 end=9", "f32[0]");
	OK("slice", "%x dim=0", "f32[5]");
	OK("slice", "%m dim=-1 start=1 end=-1", "f32[4, 4]");
	OK("slice", "%m dim=0 end=2", "f32[2, 6]");
	ERR("slice", "%m dim=2", "slice: dim 2 is out of range");
	ERR("slice", "%s dim=0", "slice: expects a tensor with at least one dim, but '%s' (f32[]) is 0-d");
}

static void
test_cat(void **state)
{
	T *t = *state;
	val(t, "a", "f32[2, 3]");
	val(t, "h", "f16[4, 3]");
	val(t, "e", "f32[0]");
	val(t, "el", "i64[0]");
	val(t, "w", "f32[2, 4]");
	val(t, "r3", "f32[2, 3, 1]");
	val(t, "l", "i64[2, 3]");
	val(t, "b", "bool[2, 3]");
	val(t, "s", "f32[]");
	OK("cat", "%a %h", "f32[6, 3]");
	OK("cat", "%a %a %a dim=1", "f32[2, 9]");
	OK("cat", "%a %w dim=-1", "f32[2, 7]");
	OK("cat", "%l %b dim=1", "i64[2, 6]");
	OK("cat", "%a", "f32[2, 3]");
	/* Legacy: 1-D empty tensors are skipped, but count for the dtype. */
	OK("cat", "%a %e", "f32[2, 3]");
	OK("cat", "%el %h", "f16[4, 3]");
	OK("cat", "%e %e", "f32[0]");
	ERR("cat", "%a %w", "cat: sizes must match except in dim 0: '%a' (f32[2, 3]) and '%w' (f32[2, 4])");
	ERR("cat", "%a %r3", "tensors must have the same number of dims");
	ERR("cat", "%s %s", "cat: 0-d '%s' (f32[]) can't be concatenated");
	ERR("cat", "%a %a dim=2", "dim 2 is out of range");
}

static void
test_chunk_split(void **state)
{
	T *t = *state;
	val(t, "x5", "f32[5]");
	val(t, "x6", "f32[6, 2]");
	val(t, "x1", "f32[1]");
	val(t, "x0", "f32[0]");
	val(t, "s", "f32[]");
	/* torch.chunk: Z(5).chunk(3) is [2, 2, 1]; Z(6).chunk(4) has three
	 * [2]s; Z(1).chunk(4) one [1]; Z(0).chunk(3) three [0]s. */
	OK("chunk", "%x5 chunks=3", "f32[2]; f32[2]; f32[1]");
	OK("chunk", "%x6 chunks=4", "f32[2, 2]; f32[2, 2]; f32[2, 2]");
	OK("chunk", "%x6 chunks=2 dim=-1", "f32[6, 1]; f32[6, 1]");
	OK("chunk", "%x1 chunks=4", "f32[1]");
	OK("chunk", "%x0 chunks=3", "f32[0]; f32[0]; f32[0]");
	ERRN("chunk", "%x6 chunks=4", 4,
	     "chunk: '%x6' (f32[6, 2]) splits into 3 chunks of size 2 along dim 0, but the statement names 4 results");
	ERRN("chunk", "%x5 chunks=0", 1, "chunks must be greater than 0, but is 0");
	ERRN("chunk", "%s chunks=2", 2, "expects a tensor with at least one dim");
	ERRN("chunk", "%x5 chunks=2 dim=1", 2, "dim 1 is out of range");
	OK("split", "%x5 sizes=[2,3]", "f32[2]; f32[3]");
	OK("split", "%x6 sizes=[1,1] dim=1", "f32[6, 1]; f32[6, 1]");
	OK("split", "%x0 sizes=[0,0]", "f32[0]; f32[0]");
	ERRN("split", "%x5 sizes=[2,2]", 2, "split: sizes [2, 2] must sum to 5, the size of dim 0 of '%x5' (f32[5])");
	ERRN("split", "%x5 sizes=[6,-1]", 2, "sizes [6, -1] must be non-negative");
	ERRN("split", "%x5 sizes=[2,3]", 3, "split: gives 2 results, but the statement names 3");
	ERRN("split", "%s sizes=[1]", 1, "expects a tensor with at least one dim");
}

static void
test_squeeze_unsqueeze(void **state)
{
	T *t = *state;
	val(t, "c", "f32[2, 1]");
	val(t, "x", "f32[2, 3]");
	val(t, "s", "f32[]");
	val(t, "r8", "f32[1, 1, 1, 1, 1, 1, 1, 1]");
	OK("squeeze", "%c dim=1", "f32[2]");
	OK("squeeze", "%c dim=-1", "f32[2]");
	OK("squeeze", "%x dim=1", "f32[2, 3]");
	OK("squeeze", "%s dim=0", "f32[]");
	OK("squeeze", "%s dim=-1", "f32[]");
	ERR("squeeze", "%s dim=1", "expected a dim in [-1, 0]");
	ERR("squeeze", "%x dim=-3", "squeeze: dim -3 is out of range for '%x' (f32[2, 3]): expected a dim in [-2, 1]");
	OK("unsqueeze", "%x dim=2", "f32[2, 3, 1]");
	OK("unsqueeze", "%x dim=-1", "f32[2, 3, 1]");
	OK("unsqueeze", "%x dim=-3", "f32[1, 2, 3]");
	OK("unsqueeze", "%s dim=0", "f32[1]");
	OK("unsqueeze", "%s dim=-1", "f32[1]");
	ERR("unsqueeze", "%x dim=3", "expected a dim in [-3, 2]");
	ERR("unsqueeze", "%r8 dim=0", "the result would have 9 dims");
	OK("contiguous", "%x", "f32[2, 3]");
}

/* ------------------------------------------------------------------ creation */

static void
test_creation(void **state)
{
	T *t = *state;
	OK("zeros", "shape=[2,3]", "f32[2, 3]");
	OK("ones", "shape=[] dtype=bf16", "bf16[]");
	OK("zeros", "shape=[0,4] dtype=i32", "i32[0, 4]");
	OK("full", "shape=[2] value=1.5", "f32[2]");
	OK("full", "shape=[2] value=true", "f32[2]");
	OK("full", "shape=[2] value=1.5 dtype=i64", "i64[2]");
	OK("full", "shape=[3] value=-inf dtype=f16", "f16[3]");
	OK("full", "shape=[3] value=65504.0 dtype=f16", "f16[3]");
	OK("full", "shape=[3] value=-2147483648 dtype=i32", "i32[3]");
	OK("full", "shape=[3] value=-1e10 dtype=bool", "bool[3]");
	OK("full", "shape=[3] value=3e38 dtype=bf16", "bf16[3]");
	ERR("zeros", "shape=[-1,3]", "zeros: negative size -1 in shape [-1, 3]");
	ERR("ones", "shape=[1,1,1,1,1,1,1,1,1]", "the result would have 9 dims");
	/* torch.full: "value cannot be converted to type ... without overflow" */
	ERR("full", "shape=[2] value=inf dtype=i64", "full: value inf can't be converted to i64 without overflow");
	ERR("full", "shape=[2] value=nan dtype=i32", "value nan can't be converted to i32");
	ERR("full", "shape=[2] value=2147483648 dtype=i32", "value 2147483648 can't be converted to i32");
	ERR("full", "shape=[2] value=65520.0 dtype=f16", "can't be converted to f16");
	ERR("full", "shape=[2] value=3.5e38 dtype=bf16", "can't be converted to bf16");
	ERR("full", "shape=[2] value=1e39", "value 1e+39 can't be converted to f32");
	OK("arange", "end=5", "i64[5]");
	OK("arange", "end=0", "i64[0]");
	OK("arange", "end=7 dtype=f16", "f16[7]");
	ERR("arange", "end=-1", "arange: end must not be negative, but is -1");
	ERR("arange", "end=3 dtype=bool", "arange: dtype bool is not supported");
}

/* ------------------------------------------------------------------ indexing, losses */

static void
test_embedding_gather(void **state)
{
	T *t = *state;
	val(t, "idx", "i64[2, 5]");
	val(t, "i32", "i32[2, 5]");
	val(t, "i0", "i64[]");
	val(t, "fi", "f32[2, 5]");
	val(t, "tab", "f32[10, 4]");
	val(t, "htab", "f16[10, 4]");
	val(t, "t1", "f32[10]");
	val(t, "i8", "i64[1, 1, 1, 1, 1, 1, 1, 1]");
	OK("embedding", "%idx %tab", "f32[2, 5, 4]");
	OK("embedding", "%i32 %htab", "f16[2, 5, 4]");
	OK("embedding", "%i0 %tab", "f32[4]");
	ERR("embedding", "%fi %tab", "embedding: the indices must be i64 or i32, but '%fi' (f32[2, 5]) is not");
	ERR("embedding", "%idx %t1", "the table must be 2-d [V, D], but '%t1' (f32[10]) is not");
	ERR("embedding", "%i8 %tab", "the result would have 9 dims");

	val(t, "x", "f32[2, 3]");
	val(t, "g53", "i64[5, 3]");
	val(t, "g52", "i64[5, 2]");
	val(t, "g25", "i64[2, 5]");
	val(t, "g2", "i64[2]");
	val(t, "gi", "i32[2, 2]");
	val(t, "s", "bf16[]");
	OK("gather", "%x %g53 dim=0", "f32[5, 3]");
	OK("gather", "%x %g52 dim=0", "f32[5, 2]");
	OK("gather", "%x %g25 dim=-1", "f32[2, 5]");
	OK("gather", "%s %i0 dim=0", "bf16[]");
	ERR("gather", "%x %g25 dim=0",
	    "the index must not be larger than the input except in dim 0: '%x' (f32[2, 3]) and '%g25' (i64[2, 5])");
	ERR("gather", "%x %g2 dim=1", "the index must have as many dims as the input");
	ERR("gather", "%x %gi dim=1", "gather: the index must be i64, but '%gi' (i32[2, 2]) is not");
	ERR("gather", "%x %g53 dim=2", "dim 2 is out of range");
}

static void
test_losses(void **state)
{
	T *t = *state;
	val(t, "f", "f32[2]");
	val(t, "d", "f64[2]");
	val(t, "l", "i64[2]");
	val(t, "m", "f32[3, 2]");
	val(t, "h", "f16[2]");
	val(t, "bf", "bf16[2]");
	val(t, "f3", "f32[3]");
	/* F.mse_loss(f32, f64) is f64; (f32, i64) f32; broadcasting allowed. */
	OK("mse_loss", "%f %f", "f32[]");
	OK("mse_loss", "%f %d", "f64[]");
	OK("mse_loss", "%f %l", "f32[]");
	OK("mse_loss", "%f %m", "f32[]");
	OK("mse_loss", "%h %bf", "f32[]");
	ERR("mse_loss", "%l %l", "mse_loss: expects floating-point operands");
	ERR("mse_loss", "%f %f3", "mse_loss: shapes don't broadcast");

	val(t, "lg", "f32[4, 3]");
	val(t, "lg1", "f32[3]");
	val(t, "lg3", "f32[4, 3, 5]");
	val(t, "hg", "f16[4, 3]");
	val(t, "ilg", "i64[4, 3]");
	val(t, "t4", "i64[4]");
	val(t, "t3", "i64[3]");
	val(t, "t0", "i64[]");
	val(t, "t45", "i64[4, 5]");
	val(t, "ti", "i32[4]");
	val(t, "tf", "f32[4, 3]");
	val(t, "s", "f32[]");
	OK("cross_entropy", "%lg %t4", "f32[]");
	OK("cross_entropy", "%lg1 %t0", "f32[]");
	OK("cross_entropy", "%lg3 %t45", "f32[]");
	OK("cross_entropy", "%hg %t4", "f16[]");
	ERR("cross_entropy", "%lg %ti", "cross_entropy: expects integer targets (i64 class indices), but '%ti' (i32[4]) is not");
	ERR("cross_entropy", "%lg %tf", "expects integer targets");
	ERR("cross_entropy", "%lg %t3", "the target must have shape [4] for logits '%lg' (f32[4, 3]), but '%t3' (i64[3]) is not");
	ERR("cross_entropy", "%lg1 %t4", "the target must have shape [] for logits");
	ERR("cross_entropy", "%ilg %t4", "cross_entropy: expects a floating-point tensor");
	ERR("cross_entropy", "%s %t0", "expects a tensor with at least one dim");
}

/* ------------------------------------------------------------------ memory, in place */

static void
test_memory(void **state)
{
	T *t = *state;
	val(t, "x", "bf16[2, 3]");
	val(t, "hx", "host bf16[2, 3]");
	OK("to_host", "%x", "host bf16[2, 3]");
	OK("to_device", "%hx", "bf16[2, 3]");
	ERR("to_host", "%hx", "to_host: '%hx' (bf16[2, 3]) is already in host memory");
	ERR("to_device", "%x", "to_device: '%x' (bf16[2, 3]) is already in device memory");
}

static void
test_inplace_table(void **state)
{
	T *t = *state;
	char a[32], b[32], args[80];
	table_values(t);
	for (size_t i = 0; i < sizeof inplace_table / sizeof *inplace_table; i++) {
		snprintf(args, sizeof args, "%s %s", table_arg(a, inplace_table[i].a),
		         table_arg(b, inplace_table[i].b));
		int ok = run(t, inplace_table[i].op, args, 0);
		if (ok != inplace_table[i].ok) {
			print_error("%s(%s): rule gives %d, torch %d\n%s", inplace_table[i].op, args,
			            ok, inplace_table[i].ok, msgs(t));
			fail();
		}
		assert_int_equal(t->d.nerrors != 0, !ok);
		clear(t);
	}
}

static void
test_inplace(void **state)
{
	T *t = *state;
	val(t, "f", "f32[2]");
	val(t, "l", "i64[2]");
	val(t, "i", "i32[2]");
	val(t, "b", "bool[2]");
	val(t, "h", "f16[2]");
	val(t, "d", "f64[2]");
	val(t, "m", "f32[3, 2]");
	val(t, "f0", "f32[]");
	OK("add_", "%m %f", "");
	OK("mul_", "%h %d", "");
	OK("sub_", "%i %l", "");
	OK("div_", "%f 2", "");
	ERR("add_", "%f %m", "add_: output '%f' (f32[2]) doesn't match the broadcast shape [3, 2]");
	ERR("add_", "%i 0.5", "add_: result type f32 can't be cast to the desired output type i32");
	ERR("add_", "%l %f0", "result type f32 can't be cast to the desired output type i64");
	ERR("div_", "%l %l", "div_: result type f32 can't be cast to the desired output type i64");
	ERR("add_", "%b 1", "result type i64 can't be cast to the desired output type bool");
	ERR("sub_", "%f %b", "sub_: subtraction with a bool operand");
	/* copy_: any dtypes, a source that broadcasts to the destination */
	OK("copy_", "%l %f", "");
	OK("copy_", "%m %f", "");
	OK("copy_", "%b %f0", "");
	ERR("copy_", "%f %m", "copy_: the source '%m' (f32[3, 2]) doesn't broadcast to the shape of '%f' (f32[2])");
	OK("zero_", "%b", "");
	OK("fill_", "%l value=1.5", "");
	OK("fill_", "%b value=2.5", "");
	OK("fill_", "%i value=true", "");
	ERR("fill_", "%l value=inf", "fill_: value inf can't be converted to i64 without overflow");
	ERR("fill_", "%i value=1099511627776", "value 1099511627776 can't be converted to i32");
	ERR("fill_", "%h value=1000000", "value 1000000 can't be converted to f16");
}

/* ------------------------------------------------------------------ streams, collectives */

/* Sets the dim WORLD of the module. */
static void
set_world(T *t, int64_t n)
{
	DimDecl dd = {.name = "WORLD", .n = n};
	uint32_t *i = map_get(&t->m.dimmap, "WORLD", 5);
	if (i) {
		t->m.dims.v[*i].n = n;
		return;
	}
	vec_push(&t->m.dims, dd);
	map_put(&t->m.dimmap, "WORLD", 5, t->m.dims.n - 1);
}

static void
test_collectives(void **state)
{
	T *t = *state;
	val(t, "x", "f32[8, 6]");
	val(t, "y", "bf16[6, 3]");
	val(t, "s", "f32[]");
	/* Without a WORLD dim: 1 rank. */
	OK("all_gather", "%x", "f32[8, 6]");
	set_world(t, 4);
	OK("all_reduce", "%x op=avg", "f32[8, 6]");
	OK("all_reduce", "%x", "");
	OK("broadcast", "%y root=1", "bf16[6, 3]");
	OK("broadcast", "%y", "");
	OK("all_gather", "%x", "f32[32, 6]");
	OK("all_gather", "%y dim=-1", "bf16[6, 12]");
	OK("reduce_scatter", "%x", "f32[2, 6]");
	OK("reduce_scatter", "%x dim=-2 op=max", "f32[2, 6]");
	OK("all_to_all", "%x", "f32[8, 6]");
	OK("all_to_all", "%x", "");
	ERR("reduce_scatter", "%y", "reduce_scatter: size 6 of dim 0 of '%y' (bf16[6, 3]) is not divisible by WORLD = 4");
	ERR("all_to_all", "%y dim=1", "size 3 of dim 1 of '%y' (bf16[6, 3]) is not divisible by WORLD = 4");
	ERRN("all_to_all", "%y", 0, "is not divisible by WORLD = 4");
	ERR("all_gather", "%s", "all_gather: expects a tensor with at least one dim");
	ERR("all_gather", "%x dim=2", "dim 2 is out of range");
	set_world(t, 0);
	ERR("all_gather", "%x", "WORLD is 0, but there must be at least one rank");
}

static void
test_sync_and_control(void **state)
{
	T *t = *state;
	val(t, "a", "f32[2]");
	val(t, "b", "host i64[3, 1]");
	OK("synchronize", "", "");
	OK("record_event", "", "");
	OK("sync_dealloc", "%a", "");
	OK("control_deps", "%a %b sync=wait_event", "f32[2]; host i64[3, 1]");
	OK("control_deps", "%b sync=record_event", "host i64[3, 1]");
	ERRN("control_deps", "%a %b sync=wait_event", 3,
	     "control_deps: gives 2 results, but the statement names 3");
}

/* ------------------------------------------------------------------ sizes */

static void
test_too_large(void **state)
{
	T *t = *state;
	/* 2^62 bytes is the limit: f32[2^60] is just that, f32[2^60 + 1]
	 * is over, bool[2^62] fits, a product that wraps int64 is an error. */
	OK("zeros", "shape=[1152921504606846976]", "f32[1152921504606846976]");
	OK("zeros", "shape=[4611686018427387904] dtype=bool", "bool[4611686018427387904]");
	ERR("zeros", "shape=[1152921504606846977]",
	    "t.sg:1:1: error: zeros: result f32[1152921504606846977] is too large (over 2^62 bytes)");
	ERR("ones", "shape=[4294967296,4294967296] dtype=bool", "ones: result bool[4294967296, 4294967296] is too large");
	ERR("full", "shape=[3037000500,3037000500,2] value=1", "is too large");
	val(t, "x", "f64[1073741824]");
	val(t, "w", "f64[1073741824, 1]");
	ERR("expand", "%w shape=[1073741824,1073741824]", "expand: result f64[1073741824, 1073741824] is too large");
	ERR("matmul", "%w %w", "inner dimensions differ");
	ERR("mul", "%x %w", "mul: result f64[1073741824, 1073741824] is too large");
}

int
main(void)
{
#define TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
		TEST(test_dtype_promote),
		TEST(test_result_type_table),
		TEST(test_result_type_cases),
		TEST(test_result_type_direct),
		TEST(test_broadcast),
		TEST(test_unary),
		TEST(test_binary),
		TEST(test_compare),
		TEST(test_where),
		TEST(test_clamp),
		TEST(test_cast),
		TEST(test_reduce),
		TEST(test_softmax),
		TEST(test_layer_norm),
		TEST(test_matmul),
		TEST(test_linear),
		TEST(test_sdpa),
		TEST(test_reshape),
		TEST(test_transpose_permute),
		TEST(test_expand),
		TEST(test_slice),
		TEST(test_cat),
		TEST(test_chunk_split),
		TEST(test_squeeze_unsqueeze),
		TEST(test_creation),
		TEST(test_embedding_gather),
		TEST(test_losses),
		TEST(test_memory),
		TEST(test_inplace_table),
		TEST(test_inplace),
		TEST(test_collectives),
		TEST(test_sync_and_control),
		TEST(test_too_large),
	};
	return cmocka_run_group_tests_name("shape", tests, NULL, NULL);
}
