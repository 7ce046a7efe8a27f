/*
 * test_optable.c - the op table (compiler/ops.def) agrees with itself.
 *
 * Every op-specific fact lives in one row of ops.def; these checks make a
 * row that forgets one (a pointwise op without a formula, a reduction
 * without its combine step or fusion role, an in-place op whose base does
 * not exist) fail here rather than compile into something that silently
 * never fuses or computes the wrong thing.
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

/* The shape rules and interpreters ops.def names (as ops.c declares them). */
#define X(e, name, opnds, nres, attrs, shape, interp, flags, grad, emit, kernel) \
	int shape(Graph *g, Node *n, Diag *d);                                \
	int interp(struct Interp *I, Node *n, struct Tensor **in,             \
	           struct Tensor **out);
#include "ops.def"
#undef X

/* runtime/sgk/sgk_pointwise.h's text (the CUDA side of the formulas). */
static char header[1 << 16];

static void
read_header(void)
{
	const char *root = getenv("SGC_SOURCE_ROOT");
	char path[4096];
	assert_non_null(root);
	snprintf(path, sizeof path, "%s/runtime/sgk/sgk_pointwise.h", root);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t n = fread(header, 1, sizeof header - 1, f);
	assert_true(n > 0 && n < sizeof header - 1);
	header[n] = 0;
	fclose(f);
}

static const char *
fmt_combine(const char *name)
{
	static char buf[128];
	snprintf(buf, sizeof buf, "SGK_COMBINE(%s)", name);
	return buf;
}

static int
arity(const OpInfo *o)
{
	return (int)strlen(o->opnds);
}

/* Every op has a name, a shape rule, an interpreter and an emitter, and
 * op_lookup finds it by name. */
static void
test_every_op_complete(void **state)
{
	(void)state;
	for (int i = 0; i < OP__N; i++) {
		const OpInfo *o = &op_table[i];
		assert_non_null(o->name);
		assert_non_null(o->shape);
		assert_non_null(o->interp);
		assert_true(o->emit > EM_NONE && o->emit < EM__N);
		assert_int_equal(op_lookup(o->name, strlen(o->name)), i);
	}
}

/* A pointwise op is emitted by the pointwise family; each has a formula
 * of its arity (sgk_pointwise.h), except where, clamp and cast, whose
 * elements the emitter builds from their operands and attributes. */
static void
test_pointwise_formulas(void **state)
{
	(void)state;
	int checked = 0;
	for (int i = 0; i < OP__N; i++) {
		const OpInfo *o = &op_table[i];
		if (o->flags & OPF_POINTWISE)
			assert_int_equal(o->emit, EM_POINTWISE);
		if (o->interp == interp_unary || o->interp == interp_binary ||
		    o->interp == interp_gelu_backward)
			assert_true(o->flags & OPF_POINTWISE);
		if (!(o->flags & OPF_POINTWISE))
			continue;
		if (!o->pw.name) {
			assert_true(i == OP_WHERE || i == OP_CLAMP || i == OP_CAST);
			continue;
		}
		checked++;
		const PwFormula *forms[2] = {&o->pw, &o->pw_tanh};
		for (int k = 0; k < 2; k++) {
			const PwFormula *f = forms[k];
			if (k == 1 && !f->name)
				continue;
			/* the float and double forms come from one definition
			 * over SGK_T; the integer one is written out */
			char want[128];
			snprintf(want, sizeof want, "SGK_NAME(%s)(", f->name);
			assert_non_null(strstr(header, want));
			snprintf(want, sizeof want, "sgk_%s_i(", f->name);
			assert_int_equal(strstr(header, want) != NULL, f->i1 || f->i2);
			assert_int_equal(f->d1 != NULL, arity(o) == 1);
			assert_int_equal(f->d2 != NULL, arity(o) == 2);
			assert_null(arity(o) == 1 ? (void *)f->i2 : (void *)f->i1);
		}
		/* A rule that lets integers through needs an integer form;
		 * one that gives floats must not have one. */
		if (o->shape == shape_unary_same || o->shape == shape_compare)
			assert_true(o->pw.i1 || o->pw.i2);
		if (o->shape == shape_unary_float || o->shape == shape_unary_floatonly)
			assert_true(!o->pw.i1 && !o->pw.i2);
		/* An approximate= variant only where the attribute exists. */
		assert_int_equal(o->pw_tanh.name != NULL, op_attr_index(i, "approximate") >= 0);
	}
	assert_true(checked >= 30);
}

/* Comparisons: pointwise, bool results by shape_compare, integer forms. */
static void
test_compare(void **state)
{
	(void)state;
	for (int i = 0; i < OP__N; i++) {
		const OpInfo *o = &op_table[i];
		assert_int_equal((o->flags & OPF_COMPARE) != 0, o->shape == shape_compare);
		if (o->flags & OPF_COMPARE)
			assert_true((o->flags & OPF_POINTWISE) && o->pw.i2 && (o->flags & OPF_NOGRAD));
	}
}

/* Reductions: a combine step in every domain, an identity and a finish;
 * the reduction emitter; the fusion roles passes/fusion.c reads (a
 * pointwise producer computed in the kernel; a pointwise consumer too
 * when it has one result). */
static void
test_reductions(void **state)
{
	(void)state;
	int n = 0;
	for (int i = 0; i < OP__N; i++) {
		const OpInfo *o = &op_table[i];
		assert_int_equal(o->combine.name != NULL, o->emit == EM_REDUCE);
		if (o->emit != EM_REDUCE)
			continue;
		n++;
		assert_non_null(o->combine.d2);
		assert_non_null(o->combine.i2);
		assert_true(o->ident <= RED_HIGHEST && o->finish <= FIN_VAR);
		/* the combine step has its CUDA functor */
		assert_true(strstr(header, fmt_combine(o->combine.name)) != NULL);
		assert_true(o->shape == shape_reduce && o->interp == interp_reduce);
		assert_true(o->flags & OPF_PROLOGUE);
		assert_int_equal((o->flags & OPF_EPILOGUE) != 0, o->nres == 1);
		assert_int_equal(o->nres, o->finish == FIN_VAR && o->nres == 2 ? 2 : 1);
		assert_int_equal(arity(o), 1);
	}
	assert_true(n >= 6); /* sum mean amax amin var var_mean, at least */
	/* The fusion roles belong to kernels that read operand 0 through an
	 * input expression and write one result through a put statement. */
	for (int i = 0; i < OP__N; i++) {
		const OpInfo *o = &op_table[i];
		if (o->flags & (OPF_PROLOGUE | OPF_EPILOGUE))
			assert_false(o->flags & (OPF_POINTWISE | OPF_INPLACE));
		if (o->flags & OPF_EPILOGUE)
			assert_int_equal(o->nres, 1);
	}
}

/* In-place arithmetic: its base exists, is a pointwise op with a formula
 * of two operands and one result, and the in-place op takes the same
 * operands (the first a tensor: the one mutated), no results. */
static void
test_inplace_bases(void **state)
{
	(void)state;
	int n = 0;
	for (int i = 0; i < OP__N; i++) {
		const OpInfo *o = &op_table[i];
		if (!o->has_base) {
			assert_int_equal(op_inplace_base(i), i);
			continue;
		}
		n++;
		assert_true(o->flags & OPF_INPLACE);
		assert_true(o->base < OP__N && o->base != i);
		const OpInfo *b = &op_table[o->base];
		assert_true((b->flags & OPF_POINTWISE) && b->pw.d2);
		assert_int_equal(strlen(b->opnds), strlen(o->opnds));
		assert_int_equal(o->opnds[0], 't');
		assert_int_equal(b->nres, 1);
		assert_int_equal(o->nres, 0);
		assert_int_equal(o->emit, EM_POINTWISE);
		assert_int_equal(op_inplace_base(i), o->base);
		/* add_ is named after add */
		assert_int_equal(strlen(o->name), strlen(b->name) + 1);
		assert_memory_equal(o->name, b->name, strlen(b->name));
	}
	assert_true(n >= 4); /* add_ sub_ mul_ div_, at least */
}

/* Derivatives and the flags that speak of them agree; sync ops are host
 * statements; collectives go to the collective emitter. */
static void
test_flags_consistent(void **state)
{
	(void)state;
	for (int i = 0; i < OP__N; i++) {
		const OpInfo *o = &op_table[i];
		if (o->grad)
			assert_false(o->flags & OPF_NOGRAD);
		if (o->flags & OPF_SYNC)
			assert_int_equal(o->emit, EM_HOST);
		assert_int_equal((o->flags & OPF_COLLECTIVE) != 0, o->emit == EM_COLLECTIVE);
		if (o->flags & OPF_INPLACE)
			assert_int_equal(o->nres, 0);
		assert_false((o->flags & OPF_OPTRES) && (o->flags & OPF_VARRES));
	}
}

int
main(void)
{
	ops_init();
	read_header();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_op_complete),
		cmocka_unit_test(test_pointwise_formulas),
		cmocka_unit_test(test_compare),
		cmocka_unit_test(test_reductions),
		cmocka_unit_test(test_inplace_bases),
		cmocka_unit_test(test_flags_consistent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
