/*
 * grad_conv.c - the derivative rules of conv2d, the 2-D pools and
 * batch_norm (ops.def's `grad` column; the backward ops' shape rules are
 * in conv.c, their kernels in interp_conv.c), as PyTorch's
 * derivatives.yaml:
 *
 *   conv2d:     dx = conv2d_backward_input(g, w), dw =
 *               conv2d_backward_weight(g, x), db = sum(g, dims=[0, 2, 3])
 *   max_pool2d: max_pool2d_backward(g, x) (the window maxima found again)
 *   avg_pool2d, adaptive_avg_pool2d: their backward ops from g alone
 *   batch_norm: %dx, %dw, %db = batch_norm_backward(g, x, w?) in training,
 *               batch_norm_backward(g, x, w, mean, var) in eval
 *
 * The running statistics get no gradient (PyTorch's buffers).
 */
#include "passes.h"

#define GRAD_RULE_DEF(f) int f(Grad *G, const Node *n, const ValId *gout, \
                               ValId *gin, const uint8_t *need)

/* Copies forward attribute `name` of n into m when n has it set. */
static void
copy_set(Node *m, const Node *n, const char *name)
{
	const Attr *a = ir_attr(n, name);
	if (a && a->set)
		grad_copyattr(m, name, a);
}

/* The conv attributes of n into backward node m, with shape=s. */
static void
conv_attrs(Grad *G, Node *m, const Node *n, const Type *s)
{
	static const char *const names[] = {"stride", "padding", "dilation", "groups",
	                                    "kernel_size"};
	for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
		if (op_attr_index(m->op, names[i]) >= 0 && op_attr_index(n->op, names[i]) >= 0)
			copy_set(m, n, names[i]);
	if (s)
		grad_setints(G, m, "shape", s->d, s->rank);
}

GRAD_RULE_DEF(grad_conv2d)
{
	ValId g = gout[0];
	Graph *gr = grad_graph(G);
	if (need[0]) {
		Type x = gr->vals.v[n->opnd[0].v].type;
		grad_target(G, n, 0);
		Opnd o[2] = {grad_v(g), grad_arg(G, n, 1)};
		Node *m = grad_node(G, OP_CONV2D_BACKWARD_INPUT, o, 2);
		conv_attrs(G, m, n, &x);
		gin[0] = grad_end(G, m, 1);
	}
	if (need[1]) {
		Type w = gr->vals.v[n->opnd[1].v].type;
		grad_target(G, n, 1);
		Opnd o[2] = {grad_v(g), grad_arg(G, n, 0)};
		Node *m = grad_node(G, OP_CONV2D_BACKWARD_WEIGHT, o, 2);
		conv_attrs(G, m, n, &w);
		gin[1] = grad_end(G, m, 1);
	}
	if (n->nopnd > 2 && need[2]) {
		grad_target(G, n, 2);
		gin[2] = grad_sum(G, g, 1u << 0 | 1u << 2 | 1u << 3, 0);
	}
	return 1;
}

GRAD_RULE_DEF(grad_pool2d)
{
	(void)need;
	Type x = grad_graph(G)->vals.v[n->opnd[0].v].type;
	Node *m;
	if (n->op == OP_MAX_POOL2D) {
		Opnd o[2] = {grad_v(gout[0]), grad_arg(G, n, 0)};
		m = grad_node(G, OP_MAX_POOL2D_BACKWARD, o, 2);
		conv_attrs(G, m, n, NULL);
	} else {
		Opnd o = grad_v(gout[0]);
		m = grad_node(G, n->op == OP_AVG_POOL2D ? OP_AVG_POOL2D_BACKWARD
		                                         : OP_ADAPTIVE_AVG_POOL2D_BACKWARD, &o, 1);
		conv_attrs(G, m, n, &x);
	}
	gin[0] = grad_end(G, m, 1);
	return 1;
}

GRAD_RULE_DEF(grad_batch_norm)
{
	if ((need[1] || need[2]) && !ir_attr_int(n, "training", 0))
		return grad_error(G, "batch_norm: the running mean and var get no gradient "
		                  "(they are buffers in PyTorch); make them consts");
	if (!need[0] && !(n->nopnd > 3 && need[3]) && !(n->nopnd > 4 && need[4]))
		return 1;
	int training = ir_attr_int(n, "training", 0) != 0;
	Opnd o[5] = {grad_v(gout[0]), grad_arg(G, n, 0)};
	int no = 2;
	grad_target(G, n, 0);
	if (n->nopnd > 3) {
		o[no++] = grad_arg(G, n, 3);
	} else if (!training) {
		Type x = grad_graph(G)->vals.v[n->opnd[0].v].type;
		int64_t c = x.d[1];
		Node *one = grad_node(G, OP_ONES, NULL, 0);
		grad_setints(G, one, "shape", &c, 1);
		grad_set(one, "dtype", x.dt);
		o[no++] = grad_v(grad_end(G, one, 1));
	}
	if (!training) {
		o[no++] = grad_arg(G, n, 1);
		o[no++] = grad_arg(G, n, 2);
	}
	Node *m = grad_node(G, OP_BATCH_NORM_BACKWARD, o, no);
	copy_set(m, n, "training");
	copy_set(m, n, "eps");
	grad_end(G, m, 3);
	if (need[0])
		gin[0] = m->res[0];
	if (n->nopnd > 3 && need[3])
		gin[3] = m->res[1];
	if (n->nopnd > 4 && need[4])
		gin[4] = m->res[2];
	return 1;
}
