/*
 * interp_io.c - the interpreter's files: loading --params and --inputs
 * (checking each tensor against its declaration, initialising missing
 * params and consts with runtime/init.c), writing --out, and printing
 * returned values the way torch prints tensors.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "init.h"
#include "safetensors.h"
#include "interp.h"

enum { EXIT_MISMATCH = 1, EXIT_IO = 3 };

/* A diagnostic at a declaration when a Diag is there, else a plain line. */
void
interp_report(Interp *I, Loc at, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (I->m && I->m->diag) {
		diag_vreport(I->m->diag, "error", at, fmt, ap);
		I->m->diag->nerrors++;
	} else {
		fputs("sgc run: error: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}

/* The tensor of one declared value: from file f when it holds it (checked
 * against the declaration), else NULL in *out. */
static int
load_from(Interp *I, const char *path, const SgrtSafetensors *f, ValId v,
          Tensor **out)
{
	const Value *val = &I->g->vals.v[v];
	const Type *ty = &val->type;
	const SgrtTensor *st = f ? sgrt_st_find(f, val->name) : NULL;
	char err[512];
	*out = NULL;
	if (!st)
		return 0;
	if (sgrt_st_check(path, st, ty->dt, ty->rank, ty->d, err, sizeof err)) {
		interp_report(I, val->loc, "%s", err);
		return EXIT_MISMATCH;
	}
	Tensor *t = interp_tensor_new(NULL, (DType)ty->dt, ty->rank, ty->d);
	memcpy(t->data, st->data, st->nbytes);
	t->keep = 1;
	*out = t;
	return 0;
}

typedef VEC(const char *) NameList;

/* Appends the names of values vs[0..n). */
static void
add_names(NameList *l, const Graph *g, const ValId *vs, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		vec_push(l, g->vals.v[vs[i]].name);
}

/* An error when file f (of path; inputs: the --inputs file) holds a tensor
 * whose name is none of the graph's files' names: inputs, params, consts,
 * returned values, optimizer state (what the driver's table holds), so
 * that --out files chain into --params and --inputs. */
static int
check_extra(Interp *I, const RunOptions *ro, const char *path,
            const SgrtSafetensors *f, int inputs)
{
	const Graph *g = I->g;
	NameList known = {0}, want = {0};
	const char *s;
	char err[2048];
	if (!path || ro->allow_extra)
		return 0;
	if (inputs) {
		add_names(&want, g, g->inputs.v, g->inputs.n);
	} else {
		add_names(&want, g, g->params.v, g->params.n);
		add_names(&want, g, g->consts.v, g->consts.n);
		for (uint32_t i = 0; (s = interp_optim_declared(I, i)); i++)
			vec_push(&want, s);
	}
	for (uint32_t i = 0; i < want.n; i++)
		vec_push(&known, want.v[i]);
	if (inputs) {
		add_names(&known, g, g->params.v, g->params.n);
		add_names(&known, g, g->consts.v, g->consts.n);
		for (uint32_t i = 0; (s = interp_optim_declared(I, i)); i++)
			vec_push(&known, s);
	} else {
		add_names(&known, g, g->inputs.v, g->inputs.n);
	}
	add_names(&known, g, g->rets.v, g->rets.n);
	int rc = sgrt_st_check_extra(path, f, known.v, known.n, want.v, want.n,
	                             "--allow-extra ignores them", err, sizeof err);
	if (rc)
		fprintf(stderr, "sgc run: error: %s\n", err);
	vec_free(&known);
	vec_free(&want);
	return rc;
}

/* Params and consts: from --params, or initialised from --seed (with a
 * warning naming those a given --params file lacks). */
static int
load_model(Interp *I, const RunOptions *ro, const SgrtSafetensors *pf,
           Tensor **persist)
{
	Graph *g = I->g;
	NameList lack = {0};
	for (int pass = 0; pass < 2; pass++) {
		const ValId *vs = pass ? g->consts.v : g->params.v;
		uint32_t n = pass ? g->consts.n : g->params.n;
		for (uint32_t i = 0; i < n; i++) {
			ValId v = vs[i];
			int rc = load_from(I, ro->params, pf, v, &persist[v]);
			if (rc) {
				vec_free(&lack);
				return rc;
			}
			if (persist[v])
				continue;
			if (pf)
				vec_push(&lack, g->vals.v[v].name);
			const Type *ty = &g->vals.v[v].type;
			Tensor *t = interp_tensor_new(NULL, (DType)ty->dt, ty->rank, ty->d);
			sgrt_init_tensor(g->vals.v[v].name, ro->seed, ty->dt, ty->rank,
			                 ty->d, t->data);
			t->keep = 1;
			persist[v] = t;
		}
	}
	sgrt_warn_missing("sgc run", ro->params, lack.v, lack.n, ro->seed);
	vec_free(&lack);
	return 0;
}

/* Inputs: each must be in an --inputs file (the last that holds it). */
static int
load_inputs(Interp *I, const RunOptions *ro, const SgrtSafetensors *inf,
            Tensor **persist)
{
	Graph *g = I->g;
	for (uint32_t i = 0; i < g->inputs.n; i++) {
		ValId v = g->inputs.v[i];
		persist[v] = NULL;
		for (int k = ro->ninputs - 1; k >= 0 && !persist[v]; k--) {
			int rc = load_from(I, ro->inputs[k], &inf[k], v, &persist[v]);
			if (rc)
				return rc;
		}
		if (persist[v])
			continue;
		const Value *val = &g->vals.v[v];
		if (ro->seed_inputs) {
			const Type *ty = &val->type;
			Tensor *t = interp_tensor_new(NULL, (DType)ty->dt, ty->rank, ty->d);
			sgrt_init_tensor(val->name, ro->seed, ty->dt, ty->rank, ty->d, t->data);
			t->keep = 1;
			persist[v] = t;
			continue;
		}
		if (ro->ninputs > 1)
			interp_report(I, val->loc, "input '%%%s' is in none of the %d "
			       "--inputs files", val->name, ro->ninputs);
		else if (ro->ninputs)
			interp_report(I, val->loc, "input '%%%s' is missing from '%s'",
			       val->name, ro->inputs[0]);
		else
			interp_report(I, val->loc, "input '%%%s' is not given: pass a "
			       "safetensors file holding '%s' with --inputs",
			       val->name, val->name);
		return EXIT_MISMATCH;
	}
	return 0;
}

int
interp_load(Interp *I, const RunOptions *ro, Tensor **persist)
{
	SgrtSafetensors pf, inf[SGRT_MAX_INPUT_FILES];
	char err[512];
	int rc = 0, nread = 0;
	memset(&pf, 0, sizeof pf);
	memset(inf, 0, sizeof inf);
	if (ro->params && sgrt_st_read(ro->params, &pf, err, sizeof err)) {
		fprintf(stderr, "sgc run: error: %s\n", err);
		return EXIT_IO;
	}
	for (; nread < ro->ninputs && !rc; nread++)
		if (sgrt_st_read(ro->inputs[nread], &inf[nread], err, sizeof err)) {
			fprintf(stderr, "sgc run: error: %s\n", err);
			rc = EXIT_IO;
		}
	if (!rc)
		rc = check_extra(I, ro, ro->params, &pf, 0);
	for (int k = 0; k < ro->ninputs && !rc; k++)
		rc = check_extra(I, ro, ro->inputs[k], &inf[k], 1);
	if (!rc)
		rc = load_model(I, ro, ro->params ? &pf : NULL, persist);
	if (!rc)
		rc = load_inputs(I, ro, inf, persist);
	sgrt_st_free(&pf);
	for (int k = 0; k < nread; k++)
		sgrt_st_free(&inf[k]);
	return rc;
}

/* ------------------------------------------------------------------ --out */

typedef VEC(SgrtTensor) OutList;

/* Appends (name, t) unless the name is already there (seen: the names
 * appended so far). */
static void
add_out(OutList *l, Map *seen, const char *name, const Tensor *t)
{
	if (map_get(seen, name, strlen(name)))
		return;
	map_put(seen, name, strlen(name), 1);
	SgrtTensor st;
	memset(&st, 0, sizeof st);
	st.name = (char *)name;
	st.dtype = t->dt;
	st.rank = t->rank;
	for (int d = 0; d < t->rank; d++)
		st.shape[d] = t->shape[d];
	st.data = t->data;
	st.nbytes = (size_t)t->numel * (size_t)dtype_size((DType)t->dt);
	vec_push(l, st);
}

/* Returned values, then every param and const, then mutated inputs. */
static int
write_out(Interp *I, const char *path, Tensor **persist, Tensor **rets,
          const uint8_t *mutated)
{
	Graph *g = I->g;
	OutList l = {0};
	Map seen;
	map_init(&seen);
	for (uint32_t i = 0; i < g->rets.n; i++)
		add_out(&l, &seen, g->vals.v[g->rets.v[i]].name, rets[i]);
	for (uint32_t i = 0; i < g->params.n; i++)
		add_out(&l, &seen, g->vals.v[g->params.v[i]].name, persist[g->params.v[i]]);
	for (uint32_t i = 0; i < g->consts.n; i++)
		add_out(&l, &seen, g->vals.v[g->consts.v[i]].name, persist[g->consts.v[i]]);
	const char *s;
	const Tensor *st;
	for (uint32_t i = 0; (s = interp_optim_declared(I, i)); i++)
		if ((st = interp_optim_present(I, i)))
			add_out(&l, &seen, s, st);
	for (uint32_t i = 0; i < g->inputs.n; i++)
		if (mutated[g->inputs.v[i]])
			add_out(&l, &seen, g->vals.v[g->inputs.v[i]].name, persist[g->inputs.v[i]]);
	char err[512];
	int rc = sgrt_st_write(path, l.v, l.n, err, sizeof err);
	if (rc)
		fprintf(stderr, "sgc run: error: %s\n", err);
	vec_free(&l);
	map_free(&seen);
	return rc ? EXIT_IO : 0;
}

int
interp_save(Interp *I, const RunOptions *ro, Tensor **persist, Tensor **rets,
            const uint8_t *mutated)
{
	if (ro->out)
		return write_out(I, ro->out, persist, rets, mutated);
	Graph *g = I->g;
	FILE *f = ro->print ? ro->print : stdout;
	for (uint32_t i = 0; i < g->rets.n; i++)
		interp_print(f, g->vals.v[g->rets.v[i]].name, rets[i]);
	return 0;
}

/* ------------------------------------------------------------------ printing */

enum { EDGE = 3, THRESHOLD = 1000 };

typedef struct {
	FILE *f;
	const Tensor *t;
	int summarise;
	int width;
	char fmt[16];  /* for floats: "%.4f", "%.4e" or "%.0f." */
} Printer;

/* Element i as text. */
static void
elem_text(const Printer *p, int64_t i, char *buf, size_t len)
{
	const Tensor *t = p->t;
	if (t->dt == DT_BOOL) {
		snprintf(buf, len, "%s", interp_geti(t, i) ? "True" : "False");
	} else if (!dtype_is_float((DType)t->dt)) {
		snprintf(buf, len, "%" PRId64, interp_geti(t, i));
	} else {
		double v = interp_getf(t, i);
		if (isnan(v))
			snprintf(buf, len, "nan");
		else if (isinf(v))
			snprintf(buf, len, "%sinf", v < 0 ? "-" : "");
		else
			snprintf(buf, len, p->fmt, v);
	}
}

/* Whether index j of a dim of size n is shown (the rest become "..."). */
static int
shown(const Printer *p, int64_t j, int64_t n)
{
	return !p->summarise || n <= 2 * EDGE || j < EDGE || j >= n - EDGE;
}

/* Whether element i is shown. */
static int
elem_shown(const Printer *p, int64_t i, const int64_t *st)
{
	const Tensor *t = p->t;
	for (int d = 0; d < t->rank; d++)
		if (!shown(p, (i / st[d]) % t->shape[d], t->shape[d]))
			return 0;
	return 1;
}

/* Chooses the float format and the column width over the shown elements,
 * as torch does: fixed with 4 decimals, scientific for a wide range, no
 * decimals when every value is whole. */
static void
choose_format(Printer *p)
{
	const Tensor *t = p->t;
	double lo = INFINITY, hi = 0;
	int whole = 1;
	int64_t st[SG_MAXRANK];
	interp_strides(t->rank, t->shape, st);
	strcpy(p->fmt, "%.4f");
	for (int64_t i = 0; i < t->numel; i++) {
		if (!dtype_is_float((DType)t->dt) || !elem_shown(p, i, st))
			continue;
		double v = fabs(interp_getf(t, i));
		if (!isfinite(v))
			continue;
		whole &= v == floor(v);
		if (v > hi)
			hi = v;
		if (v != 0 && v < lo)
			lo = v;
	}
	if (whole && hi < 1e8)
		strcpy(p->fmt, "%.0f.");
	else if (hi >= 1e8 || (lo < 1e-4 && lo > 0) || (isfinite(lo) && hi / lo > 1000))
		strcpy(p->fmt, "%.4e");
	p->width = 1;
	char buf[64];
	for (int64_t i = 0; i < t->numel; i++) {
		if (!elem_shown(p, i, st))
			continue;
		elem_text(p, i, buf, sizeof buf);
		int w = (int)strlen(buf);
		if (w > p->width)
			p->width = w;
	}
}

/* Dim d of the tensor from element offset off; indent: the column the
 * opening bracket of this dim stands at. */
static void
print_dim(const Printer *p, int d, int64_t off, int64_t stride, int indent)
{
	const Tensor *t = p->t;
	int64_t n = t->shape[d];
	char buf[64];
	fputc('[', p->f);
	for (int64_t j = 0; j < n; j++) {
		if (!shown(p, j, n)) {
			if (j == EDGE) {
				if (d == t->rank - 1)
					fputs("...", p->f);
				else
					fprintf(p->f, "...,\n%*s", indent + 1, "");
				if (d == t->rank - 1)
					fputs(", ", p->f);
			}
			continue;
		}
		if (d == t->rank - 1) {
			elem_text(p, off + j, buf, sizeof buf);
			fprintf(p->f, "%*s", p->width, buf);
		} else {
			print_dim(p, d + 1, off + j * stride, stride / t->shape[d + 1],
			          indent + 1);
		}
		if (j + 1 < n) {
			fputc(',', p->f);
			if (d == t->rank - 1) {
				fputc(' ', p->f);
			} else {
				for (int k = d; k < t->rank - 2; k++)
					fputc('\n', p->f);
				fprintf(p->f, "\n%*s", indent + 1, "");
			}
		}
	}
	fputc(']', p->f);
}

/* "name: f32[2, 3]" and then the values as torch prints them. */
void
interp_print(FILE *f, const char *name, const Tensor *t)
{
	Printer p = {.f = f, .t = t, .summarise = t->numel > THRESHOLD};
	fprintf(f, "%s: %s[", name, dtype_name((DType)t->dt));
	for (int d = 0; d < t->rank; d++)
		fprintf(f, "%s%" PRId64, d ? ", " : "", t->shape[d]);
	fputs("]\n", f);
	choose_format(&p);
	fputs("tensor(", f);
	if (t->rank == 0) {
		char buf[64];
		elem_text(&p, 0, buf, sizeof buf);
		fputs(buf, f);
	} else if (t->numel == 0) {
		fputs("[]", f);
	} else {
		print_dim(&p, 0, 0, t->numel / t->shape[0], 7);
	}
	fputs(")\n", f);
}
