/* interp_ops.c - STUB: replaced by the interpreter kernels. */
#include "sgc.h"
int interp_binary(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_cast(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_cat(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_clamp(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_collective(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_control_deps(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_copyview(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_creation(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_embedding(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_gather(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_inplace(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_layer_norm(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_linear(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_loss(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_matmul(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_reduce(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_sdpa(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_softmax(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_split(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_sync(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_unary(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
int interp_where(struct Interp *I, Node *n, struct Tensor **in, struct Tensor **out) { (void)I; (void)n; (void)in; (void)out; return 0; }
