/* shape.c - STUB: replaced by the shape-rule implementation. */
#include "sgc.h"
int shape_all_gather(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_all_to_all(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_arange(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_binary(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_cast(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_cat(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_chunk(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_clamp(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_compare(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_control_deps(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_creation(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_cross_entropy(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_embedding(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_expand(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_gather(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_identity(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_inplace(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_layer_norm(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_linear(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_matmul(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_mse_loss(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_none(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_permute(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_reduce(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_reduce_scatter(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_reshape(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_sdpa(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_slice(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_softmax(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_split(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_squeeze(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_to_device(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_to_host(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_transpose(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_unary_float(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_unary_floatonly(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_unary_same(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_unsqueeze(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
int shape_where(Graph *g, Node *n, Diag *d) { (void)g; (void)n; (void)d; return 1; }
DType dtype_promote(DType a, DType b) { return a > b ? b : a; }
int shape_broadcast(const Type *a, const Type *b, Type *out) { *out = a->rank > b->rank ? *a : *b; return 1; }
int shape_norm_dim(int64_t dim, int rank) { if (dim < 0) dim += rank; return dim < 0 || dim >= rank ? -1 : (int)dim; }
DType shape_result_type(Graph *g, const Node *n, int first, int count) { (void)g; (void)n; (void)first; (void)count; return DT_F32; }
