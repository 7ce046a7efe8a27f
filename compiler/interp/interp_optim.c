/*
 * interp_optim.c - the optimizer updates in the interpreter (sgd_update_,
 * adamw_update_) and their state.
 *
 * State is keyed by the param's name, under PyTorch's state names:
 *   opt.NAME.momentum_buffer            SGD with momentum != 0
 *   opt.NAME.exp_avg, opt.NAME.exp_avg_sq   AdamW (the param's dtype and shape)
 *   opt.NAME.step                       AdamW, f32 [] (as PyTorch keeps it)
 * It is read from --params when there (checked against the param), else
 * starts as a fresh torch.optim optimizer's does (no momentum buffer yet;
 * zero moments, step 0); it lives across --steps and is written to --out
 * once it exists, so that `--steps 3` equals three chained `--steps 1`.
 *
 * A graph with random ops (dropout, rand) has the generator's state too,
 * opt.rng (i64 [2]:
 * seed, offset; runtime/sgk/sgk_random.h): loaded the same way, else
 * (--seed, 0); every call advances the offset by 1 before it runs (it is
 * saved from the first call on).
 *
 * The updates follow torch.optim's single-tensor code op by op, each op
 * computed in the dtype's opmath (float for f32/f16/bf16, double for f64)
 * and rounded to the tensor's dtype, Python scalars (lr, betas, bias
 * corrections) computed in double and used at opmath precision:
 *
 *   SGD:   d = g + wd * p                     (when wd != 0)
 *          buf = d (first step) | buf * momentum + d   (when momentum != 0)
 *          p = p + (-lr) * buf (or d)
 *   AdamW: step += 1;  p = p * (1 - lr * wd)
 *          m = lerp(m, g, 1 - beta1);  v = v * beta2 + (1 - beta2) * g * g
 *          denom = sqrt(v) / sqrt(1 - beta2^step) + eps
 *          p = p + (-lr / (1 - beta1^step)) * m / denom
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "init.h"
#include "safetensors.h"
#include "sgk/sgk_pointwise.h"
#include "interp.h"

typedef struct {
	char *name;     /* opt.NAME.what, or SGRT_RNG_STATE */
	Tensor *t;
	int present;    /* loaded, or made by a step: saved */
} OptEntry;

struct OptimState {
	VEC(OptEntry) e;
	Map index;      /* name -> index in e */
};

/* The entry called name, or NULL. */
static OptEntry *
find(Interp *I, const char *name)
{
	if (!I->optim)
		return NULL;
	uint32_t *at = map_get(&I->optim->index, name, strlen(name));
	return at ? &I->optim->e.v[*at] : NULL;
}

/* Adds the (absent) entry opt.PARAM.what of a type, once. */
static void
declare(Interp *I, const char *param, const char *what, DType dt, int rank,
        const int64_t *shape)
{
	size_t len = strlen(param) + strlen(what) + 8;
	char *name = xmalloc(len);
	snprintf(name, len, "opt.%s.%s", param, what);
	if (find(I, name)) {
		free(name);
		return;
	}
	OptEntry e = {.name = name, .t = interp_tensor_new(NULL, dt, rank, shape)};
	e.t->keep = 1;
	vec_push(&I->optim->e, e);
	map_put(&I->optim->index, name, strlen(name), I->optim->e.n - 1);
}

/* Adds the (absent) generator state SGRT_RNG_STATE, once. */
static void
declare_rng(Interp *I)
{
	if (find(I, SGRT_RNG_STATE))
		return;
	int64_t two = 2;
	char *name = xmalloc(sizeof SGRT_RNG_STATE);
	memcpy(name, SGRT_RNG_STATE, sizeof SGRT_RNG_STATE);
	OptEntry e = {.name = name, .t = interp_tensor_new(NULL, DT_I64, 1, &two)};
	e.t->keep = 1;
	vec_push(&I->optim->e, e);
	map_put(&I->optim->index, e.name, strlen(e.name), I->optim->e.n - 1);
}

/* The state each update op of the graph needs, and the generator's when
 * it draws. */
static void
declare_all(Interp *I)
{
	Graph *g = I->g;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (!(n->flags & NF_DEAD) && ir_draws(n))
			declare_rng(I);
		if ((n->flags & NF_DEAD) || (n->op != OP_SGD_UPDATE_ && n->op != OP_ADAMW_UPDATE_))
			continue;
		const Value *p = &g->vals.v[n->opnd[0].v];
		const Type *t = &p->type;
		if (n->op == OP_SGD_UPDATE_) {
			if (ir_attr_float(n, "momentum", 0) != 0)
				declare(I, p->name, "momentum_buffer", (DType)t->dt, t->rank, t->d);
			continue;
		}
		declare(I, p->name, "exp_avg", (DType)t->dt, t->rank, t->d);
		declare(I, p->name, "exp_avg_sq", (DType)t->dt, t->rank, t->d);
		declare(I, p->name, "step", DT_F32, 0, NULL);
	}
}

/* Declares the state the graph's updates use and loads what --params
 * holds of it. */
int
interp_optim_load(Interp *I, const RunOptions *ro)
{
	I->optim = calloc(1, sizeof *I->optim);
	if (!I->optim)
		out_of_memory(0);
	map_init(&I->optim->index);
	declare_all(I);
	OptEntry *rng = find(I, SGRT_RNG_STATE);
	if (rng) /* a fresh generator, unless loaded below */
		sgrt_init_rng(ro->seed, (int64_t *)rng->t->data);
	if (!ro->params || I->optim->e.n == 0)
		return 0;
	SgrtSafetensors f;
	char err[512];
	if (sgrt_st_read(ro->params, &f, err, sizeof err)) {
		fprintf(stderr, "sgc run: error: %s\n", err);
		return 3;
	}
	int rc = 0;
	const char **names = xmalloc((I->optim->e.n + 1) * sizeof *names);
	for (uint32_t i = 0; i < I->optim->e.n; i++)
		names[i] = I->optim->e.v[i].name;
	if (sgrt_st_check_state(ro->params, &f, names, I->optim->e.n, err, sizeof err)) {
		interp_report(I, I->g->opt.loc, "%s", err);
		rc = 1;
	}
	free(names);
	for (uint32_t i = 0; i < I->optim->e.n && !rc; i++) {
		OptEntry *e = &I->optim->e.v[i];
		const SgrtTensor *st = sgrt_st_find(&f, e->name);
		if (!st)
			continue;
		if (sgrt_st_check(ro->params, st, e->t->dt, e->t->rank, e->t->shape,
		                  err, sizeof err)) {
			interp_report(I, I->g->opt.loc, "%s", err);
			rc = 1;
			break;
		}
		memcpy(e->t->data, st->data, st->nbytes);
		e->present = 1;
	}
	sgrt_st_free(&f);
	return rc;
}

const char *
interp_optim_declared(const Interp *I, uint32_t i)
{
	return I->optim && i < I->optim->e.n ? I->optim->e.v[i].name : NULL;
}

const Tensor *
interp_optim_present(const Interp *I, uint32_t i)
{
	const OptEntry *e = I->optim && i < I->optim->e.n ? &I->optim->e.v[i] : NULL;
	return e && e->present ? e->t : NULL;
}

void
interp_rng_advance(Interp *I)
{
	OptEntry *e = find(I, SGRT_RNG_STATE);
	if (!e)
		return;
	((int64_t *)e->t->data)[1]++;
	e->present = 1;
}

void
interp_rng_state(Interp *I, uint64_t *seed, uint64_t *offset)
{
	OptEntry *e = find(I, SGRT_RNG_STATE);
	if (!e)
		ICE("no generator state %s", SGRT_RNG_STATE);
	*seed = (uint64_t)((int64_t *)e->t->data)[0];
	*offset = (uint64_t)((int64_t *)e->t->data)[1];
}

/* Frees the state at the end of the run. */
void
interp_optim_free(Interp *I)
{
	if (!I->optim)
		return;
	for (uint32_t i = 0; i < I->optim->e.n; i++) {
		free(I->optim->e.v[i].name);
		interp_tensor_free(I->optim->e.v[i].t);
	}
	vec_free(&I->optim->e);
	map_free(&I->optim->index);
	free(I->optim);
	I->optim = NULL;
}

/* ------------------------------------------------------------------ updates */

/* The state entry opt.PARAM.what for update n. */
static OptEntry *
state(Interp *I, const Node *n, const char *what)
{
	char name[512];
	snprintf(name, sizeof name, "opt.%s.%s", I->g->vals.v[n->opnd[0].v].name, what);
	OptEntry *e = find(I, name);
	if (!e)
		ICE("no optimizer state %s", name);
	return e;
}

/* sgd_update_(p, g): torch.optim.SGD's step (see the top). */
int
interp_sgd_update(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)out;
	Tensor *p = in[0], *g = in[1];
	DType dt = (DType)p->dt;
	double lr = interp_opmath(dt, -ir_attr_float(n, "lr", 0));
	double mom = ir_attr_float(n, "momentum", 0);
	double wd = ir_attr_float(n, "weight_decay", 0);
	OptEntry *buf = mom != 0 ? state(I, n, "momentum_buffer") : NULL;
	double m = interp_opmath(dt, mom), w = interp_opmath(dt, wd);
	for (int64_t i = 0; i < p->numel; i++) {
		double pi = interp_getf(p, i), d = interp_getf(g, i);
		if (wd != 0)
			d = interp_round(dt, d + w * pi);
		if (buf) {
			if (buf->present)
				d = interp_round(dt, interp_round(dt, interp_getf(buf->t, i) * m) +
				                         d);
			interp_setf(buf->t, i, d);
		}
		interp_setf(p, i, sgk_sgd_step_d(pi, lr, d));
	}
	if (buf)
		buf->present = 1;
	return 0;
}

/* torch.lerp(a, b, w) as PyTorch's CPU kernel computes it. */
static double
lerp(double a, double b, double w)
{
	return fabs(w) < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w);
}

/* adamw_update_(p, g): torch.optim.AdamW's step (see the top). */
int
interp_adamw_update(Interp *I, Node *n, Tensor **in, Tensor **out)
{
	(void)out;
	Tensor *p = in[0], *g = in[1];
	DType dt = (DType)p->dt;
	double lr = ir_attr_float(n, "lr", 0), wd = ir_attr_float(n, "weight_decay", 0);
	double b1 = ir_attr_float(n, "beta1", 0.9), b2 = ir_attr_float(n, "beta2", 0.999);
	double eps = ir_attr_float(n, "eps", 1e-8);
	OptEntry *m = state(I, n, "exp_avg"), *v = state(I, n, "exp_avg_sq");
	OptEntry *st = state(I, n, "step");
	if (!st->present) {
		memset(m->t->data, 0, (size_t)m->t->numel * (size_t)dtype_size(m->t->dt));
		memset(v->t->data, 0, (size_t)v->t->numel * (size_t)dtype_size(v->t->dt));
		interp_setf(st->t, 0, 0);
	}
	m->present = v->present = st->present = 1;
	double step = (float)(interp_getf(st->t, 0) + 1);
	interp_setf(st->t, 0, step);
	double decay = interp_opmath(dt, 1 - lr * wd);
	double w1 = interp_opmath(dt, 1 - b1), c2 = interp_opmath(dt, 1 - b2);
	double bb2 = interp_opmath(dt, b2);
	double bc2 = interp_opmath(dt, sqrt(1 - pow(b2, step)));
	double size = interp_opmath(dt, -(lr / (1 - pow(b1, step))));
	double e = interp_opmath(dt, eps);
	for (int64_t i = 0; i < p->numel; i++) {
		double pi = interp_round(dt, interp_getf(p, i) * decay), gi = interp_getf(g, i);
		double mi = interp_round(dt, lerp(interp_getf(m->t, i), gi, w1));
		/* addcmul_: self + value * (t1 * t2), addcdiv_: self + value *
		 * (t1 / t2), each one op rounded once (in opmath within) */
		double gg = interp_opmath(dt, c2 * interp_opmath(dt, gi * gi));
		double vb = interp_round(dt, interp_getf(v->t, i) * bb2);
		double vi = interp_round(dt, interp_opmath(dt, vb + gg));
		double den = interp_round(dt, interp_round(dt, interp_round(dt, sqrt(vi)) / bc2) + e);
		double step_i = interp_opmath(dt, size * interp_opmath(dt, mi / den));
		interp_setf(m->t, i, mi);
		interp_setf(v->t, i, vi);
		interp_setf(p, i, interp_opmath(dt, pi + step_i));
	}
	return 0;
}
