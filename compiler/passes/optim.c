/*
 * optim.c - the optimizer's update of one param, as the autograd pass
 * places it: right after the param's gradient is final (fused, the
 * default), or at the end of backward in param order (fused=false).
 *
 *   optimizer sgd(lr=, momentum=0, weight_decay=0)
 *       -> sgd_update_(%w, %grad.w, lr=, momentum=, weight_decay=)
 *   optimizer adamw(lr=, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
 *       -> adamw_update_(%w, %grad.w, lr=, beta1=, beta2=, eps=, weight_decay=)
 *
 * The updates change the param in place with torch.optim.SGD's and
 * torch.optim.AdamW's rules (interp_optim.c has them step by step).  Their
 * state (opt.NAME.momentum_buffer; opt.NAME.exp_avg, opt.NAME.exp_avg_sq,
 * opt.NAME.step) is not an IR value: it is owned by the model, keyed by
 * the param's name, loaded and saved with the params.
 */
#include <string.h>

#include "passes.h"

/* The update node of param p from grad on stream s. */
void
optim_update(Grad *G, ValId p, ValId grad, uint32_t s)
{
	const Optimizer *o = &grad_graph(G)->opt;
	Opnd ops[2] = {grad_v(p), grad_v(grad)};
	int sgd = strcmp(o->name, "sgd") == 0;
	Node *n = grad_node(G, sgd ? OP_SGD_UPDATE_ : OP_ADAMW_UPDATE_, ops, 2);
	n->stream = s;
	grad_setf(n, "lr", o->lr);
	grad_setf(n, "weight_decay", o->weight_decay);
	if (sgd) {
		grad_setf(n, "momentum", o->momentum);
	} else {
		grad_setf(n, "beta1", o->beta1);
		grad_setf(n, "beta2", o->beta2);
		grad_setf(n, "eps", o->eps);
	}
	grad_end(G, n, 0);
}
