/*
 * sgc.h - the compiler's one internal header, a section per source file
 * (QBE style).  Every file of compiler/ and grammar/ includes it.
 *
 * Conventions:
 *   - Handles, not pointers: values and nodes are indices into their graph's
 *     arrays (ValId, NodeId).  NONE marks "no handle".
 *   - Memory: everything a compilation makes lives in one Arena, freed at
 *     once at exit (arena_free).
 *   - Exported functions carry their file's prefix (diag_, ast_, sema_, ...).
 */
#ifndef SGC_H
#define SGC_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SGC_VERSION "0.1.0"
#define SG_MAXRANK 8
#define NONE UINT32_MAX

typedef uint32_t ValId;
typedef uint32_t NodeId;

/* ------------------------------------------------------------------ util.c */

typedef struct Arena Arena;
Arena *arena_new(void);
void *arena_alloc(Arena *a, size_t n);          /* zeroed, 16-aligned */
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

/* Growable arrays: a struct with `T *v; uint32_t n, cap;` fields. */
#define VEC(T) struct { T *v; uint32_t n, cap; }
void vec_grow_(void **v, uint32_t *cap, uint32_t need, size_t elt);
#define vec_push(a, x)                                                       \
	do {                                                                  \
		if ((a)->n == (a)->cap)                                       \
			vec_grow_((void **)&(a)->v, &(a)->cap, (a)->n + 1,    \
			          sizeof(*(a)->v));                           \
		(a)->v[(a)->n++] = (x);                                       \
	} while (0)
#define vec_free(a) (free((a)->v), (a)->v = NULL, (a)->n = (a)->cap = 0)

/* A string -> uint32 hash map (open addressing).  Keys are not copied. */
typedef struct {
	const char **key;
	uint32_t *keylen;
	uint32_t *val;
	uint32_t n, cap;
} Map;
void map_init(Map *m);
void map_free(Map *m);
/* Returns a pointer to the value slot, or NULL when absent. */
uint32_t *map_get(Map *m, const char *key, size_t len);
/* Inserts (or overwrites) and returns the slot. */
uint32_t *map_put(Map *m, const char *key, size_t len, uint32_t val);

void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
/* Internal compiler fault: message, then exit status 4 ("internal error"). */
_Noreturn void sgc_ice(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define ICE(...) sgc_ice(__FILE__, __LINE__, __VA_ARGS__)

/* Shortest decimal text that reads back as the same double ("1e-05",
 * "0.5", "inf", "-inf", "nan"); buf must hold 32 bytes. */
const char *fmt_double(char *buf, double d);

/* ------------------------------------------------------------------ types */

typedef enum {
	DT_F64, DT_F32, DT_F16, DT_BF16, DT_I64, DT_I32, DT_BOOL,
	DT__N,
	DT_ERR = 0xff, /* the type of a value whose statement failed to check */
} DType;

const char *dtype_name(DType t);            /* "f32" */
const char *dtype_st_name(DType t);         /* safetensors: "F32" */
int dtype_parse(const char *s, DType *out); /* 1 when s names a dtype */
int dtype_size(DType t);
int dtype_is_float(DType t);
int dtype_is_int(DType t); /* i64, i32 (not bool) */

typedef struct {
	uint8_t dt;      /* DType */
	uint8_t rank;
	uint8_t host;    /* 1: in pinned host memory (to_host's result) */
	int64_t d[SG_MAXRANK];
	int32_t sym[SG_MAXRANK]; /* dim-name index into Module.dims for a
	                            declared size, -1 otherwise (printing only) */
} Type;

int64_t type_numel(const Type *t);
int type_same_shape(const Type *a, const Type *b);

/* ------------------------------------------------------------------ diag.c */

typedef struct {
	uint32_t line, col; /* 1-based; line 0: no location */
	uint32_t len;       /* length of the token for the ~~~ underline */
} Loc;

typedef struct Diag {
	const char *path;    /* as given on the command line */
	const char *src;     /* the whole file, NUL-terminated copy */
	size_t srclen;
	uint32_t *linestart; /* offsets of each line start, built lazily */
	uint32_t nlines;
	int nerrors, nwarnings;
	int max_errors;      /* stop reporting after this many (default 20) */
	int color;
	FILE *out;           /* stderr */
} Diag;

void diag_init(Diag *d, const char *path, const char *src, size_t len);
void diag_fini(Diag *d);
/* "path:line:col: error: msg", the source line and a caret. */
void diag_error(Diag *d, Loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, Loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, Loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_vreport(Diag *d, const char *kind, Loc at, const char *fmt,
                  va_list ap);
/* True once max_errors was reached: callers stop producing work. */
int diag_full(const Diag *d);

/* ------------------------------------------------------------------ ast (parser.y, ast.c)
 * The parser produces a flat AST: one AstStmt per statement, in order.
 * Nesting (`with stream`, `backward {}`) is not a tree: each statement
 * records the innermost stream scope and whether it is inside a derived
 * backward block, so deep nesting costs no recursion anywhere.
 */

typedef enum {
	AA_VALUE,  /* %name            s = name without '%' */
	AA_INT,    /* i */
	AA_FLOAT,  /* f */
	AA_BOOL,   /* b */
	AA_STRING, /* s (escapes resolved) */
	AA_IDENT,  /* s: dtype, dim, stream, event or enum word */
	AA_LIST,   /* items, nitems (flat: items are not lists) */
} AstArgKind;

typedef struct AstArg {
	uint8_t kind;       /* AstArgKind */
	const char *key;    /* attribute name; NULL for a positional operand */
	Loc keyloc;
	Loc loc;            /* the value (a list: its '[') */
	const char *s;      /* AA_VALUE, AA_STRING, AA_IDENT */
	uint32_t slen;      /* length of s (strings may hold NUL) */
	int64_t i;          /* AA_INT */
	double f;           /* AA_FLOAT */
	int b;              /* AA_BOOL */
	struct AstArg *items; /* AA_LIST */
	uint32_t nitems;
} AstArg;

typedef struct {
	const char *name; /* a dim name, or NULL for a literal */
	int64_t n;        /* the literal */
	Loc loc;
} AstDim;

typedef struct {
	const char *dtype; /* as written, checked by sema */
	Loc dtloc;
	AstDim *dims;
	uint32_t ndims;
} AstType;

typedef enum {
	AS_INPUT, AS_PARAM, AS_CONST, /* name, type */
	AS_STREAM,        /* name (an ident), args: attributes (priority=) */
	AS_EVENT,         /* names */
	AS_EXTERN_EVENT,  /* names */
	AS_OP,            /* res (0..n), op, args */
	AS_DEL,           /* name (a value) */
	AS_OFFLOAD,       /* name (a value) */
	AS_BACKWARD,      /* args; has_block: a derived block follows */
	AS_BACKWARD_END,  /* the '}' closing a derived backward block */
	AS_OPTIMIZER,     /* op (the optimizer's name), args */
	AS_RETURN,        /* names (values) */
} AstStmtKind;

typedef struct AstStmt {
	uint8_t kind;       /* AstStmtKind */
	uint8_t has_block;  /* AS_BACKWARD: written with `{ ... }` */
	uint8_t in_backward;/* inside a derived `backward(...) { }` block */
	Loc loc;            /* first token of the statement */
	const char *name;   /* AS_INPUT/PARAM/CONST/STREAM/DEL/OFFLOAD */
	Loc nameloc;
	AstType type;       /* AS_INPUT/PARAM/CONST */
	const char **names; /* AS_EVENT, AS_EXTERN_EVENT, AS_RETURN, and the
	                       results of AS_OP */
	Loc *namelocs;
	uint32_t nnames;
	const char *op;     /* AS_OP, AS_OPTIMIZER */
	Loc oploc;
	AstArg *args;       /* AS_OP, AS_STREAM, AS_BACKWARD, AS_OPTIMIZER */
	uint32_t nargs;
	const char *stream; /* innermost `with stream(NAME)`; NULL: default */
	Loc streamloc;      /* the NAME in that `with stream(NAME)` */
} AstStmt;

typedef struct {
	const char *name;
	Loc loc;
	VEC(AstStmt) stmts;
} AstGraph;

typedef struct {
	const char *name;
	int64_t n;
	Loc loc;
} AstDimDecl;

typedef struct {
	VEC(AstDimDecl) dims;
	VEC(AstGraph) graphs;
} AstFile;

/* Parses src (which may hold NUL bytes and need not be UTF-8).  Syntax
 * errors are reported through d and counted; the AST holds every statement
 * that parsed.  Never recurses on the input's nesting depth. */
void parse_file(const char *src, size_t len, Diag *d, Arena *a, AstFile *out);

/* ------------------------------------------------------------------ ops.c (the op table)
 * ops.def lists every op once; see the comment at its top for the
 * operand, attribute and flag languages.
 */

typedef enum {
#define X(e, name, opnds, nres, attrs, shape, interp, flags) OP_##e,
#include "ops.def"
#undef X
	OP__N
} OpKind;

enum {
	OPF_POINTWISE = 1 << 0,  /* elementwise, broadcasting */
	OPF_INPLACE   = 1 << 1,  /* mutates its first operand */
	OPF_SYNC      = 1 << 2,  /* record/wait event, wait_stream, synchronize */
	OPF_COLLECTIVE= 1 << 3,  /* NCCL collective; 0 results: in place */
	OPF_REDUCTION = 1 << 4,
	OPF_VIEW      = 1 << 5,  /* shape op that PyTorch does as a view */
	OPF_COMPILER  = 1 << 6,  /* normally made by the compiler */
	OPF_OPTRES    = 1 << 7,  /* 0 or 1 results (0: in place) */
	OPF_VARRES    = 1 << 8,  /* result count fixed by the shape rule */
	OPF_NOGRAD    = 1 << 9,  /* has no derivative */
	OPF_CREATION  = 1 << 10,
	OPF_NOSCALAR  = 1 << 11, /* pointwise, but operand 0 must be a tensor */
};

typedef enum {
	AT_INT,    /* an integer or a dim name */
	AT_FLOAT,  /* a float or an integer */
	AT_NUM,    /* int, float or bool: a value for a tensor element */
	AT_BOOL,
	AT_STR,    /* a double-quoted string, one of `choices` when given */
	AT_INTS,   /* a list of integers (dim names allowed) */
	AT_DTYPE,
	AT_STREAM, /* a declared stream (or default) */
	AT_EVENT,  /* a declared event */
	AT_IDENT,  /* any identifier (control_deps' sync=) */
} AttrType;

typedef struct {
	const char *name;
	uint8_t type;       /* AttrType */
	uint8_t required;   /* no default, must be given */
	uint8_t optional;   /* no default, may be absent (`name:T?`) */
	const char *deflt;  /* default as text, NULL when none */
	const char *choices;/* AT_STR: "sum|avg|max|min" */
} AttrSpec;

typedef struct Graph Graph;
typedef struct Node Node;
typedef struct Sema Sema;

/* Shape and dtype rule: reads operand types and attributes of n, writes the
 * types of its results into g.  Reports problems through d and returns 0. */
typedef int (*ShapeFn)(Graph *g, Node *n, Diag *d);
struct Interp;
struct Tensor;
/* Interpreter kernel (interp_*.c): computes the results of n. */
typedef int (*InterpFn)(struct Interp *I, Node *n, struct Tensor **in,
                        struct Tensor **out);

typedef struct {
	const char *name;
	const char *opnds;  /* operand signature, see ops.def */
	int nres;           /* results (see OPF_OPTRES, OPF_VARRES) */
	const char *attrs;  /* attribute spec text */
	ShapeFn shape;
	InterpFn interp;
	uint32_t flags;
	AttrSpec *attr;     /* parsed from attrs by ops_init */
	uint32_t nattr;
} OpInfo;

extern OpInfo op_table[OP__N]; /* owned by ops.c; filled by ops_init() */
void ops_init(void);
int op_lookup(const char *name, size_t len); /* OpKind, or -1 */
/* Index of the attribute called name in op's spec, or -1. */
int op_attr_index(int op, const char *name);

/* ------------------------------------------------------------------ ir.c
 * A graph is a list of nodes in program order.  Values are SSA: defined
 * once, by a declaration (input/param/const) or by one result of a node.
 * Passes that insert nodes build a new node list (ir_rebuild).
 */

typedef enum { VK_INPUT, VK_PARAM, VK_CONST, VK_NODE } ValKind;

typedef struct {
	const char *name; /* without '%' */
	Type type;
	uint8_t kind;     /* ValKind */
	uint8_t saved;    /* saved for backward (autograd marks it) */
	uint8_t offload;  /* `offload %v` was given */
	NodeId def;       /* VK_NODE: defining node */
	uint16_t resno;   /* VK_NODE: which result of def */
	Loc loc;          /* where the name is defined */
} Value;

typedef enum {
	OK_VAL,    /* v: a value */
	OK_INT,    /* i: integer scalar literal */
	OK_FLOAT,  /* f: float scalar literal */
	OK_BOOL,   /* i: 0/1 */
	OK_STREAM, /* v: stream index (0 = default) */
	OK_EVENT,  /* v: event index */
} OpndKind;

typedef struct {
	uint8_t kind; /* OpndKind */
	uint32_t v;
	int64_t i;
	double f;
	Loc loc;
} Opnd;

/* After sema an attribute array holds one Attr per entry of the op's spec,
 * in spec order, defaults filled in (set = 0 for an absent optional one). */
typedef struct {
	uint8_t set;  /* given or defaulted */
	uint8_t type; /* AttrType of the spec */
	int64_t i;    /* AT_INT, AT_BOOL, AT_DTYPE, AT_STREAM, AT_EVENT */
	double f;     /* AT_FLOAT, AT_NUM */
	uint8_t num_kind; /* AT_NUM: OK_INT, OK_FLOAT or OK_BOOL */
	const char *s;/* AT_STR, AT_IDENT */
	int64_t *ints;/* AT_INTS */
	uint32_t nints;
	Loc loc;
} Attr;

/* control_deps carries extra attributes (the sync op's own); they sit after
 * the spec's attributes, with key set. */
typedef struct {
	const char *key;
	Attr a;
} ExtraAttr;

enum {
	NF_BACKWARD = 1 << 0, /* inside the derived backward block */
	NF_USER     = 1 << 1, /* written by the user (not compiler-made) */
	NF_DEAD     = 1 << 2, /* removed; skipped by everything, dropped on rebuild */
};

struct Node {
	uint16_t op;      /* OpKind, or one of the OP_* pseudo ops below */
	uint16_t nopnd, nres, nattr, nextra;
	uint32_t flags;   /* NF_* */
	uint32_t stream;  /* stream index; 0 = default */
	Opnd *opnd;
	ValId *res;
	Attr *attr;
	ExtraAttr *extra;
	Loc loc;          /* the statement */
};

typedef struct {
	const char *name; /* "default" for index 0 */
	int priority;
	uint8_t has_priority;
	Loc loc;
} Stream;

typedef struct {
	const char *name;
	uint8_t is_extern;
	Loc loc;
} Event;

typedef struct {
	const char *name; /* "sgd", "adamw"; NULL when none */
	double lr, momentum, weight_decay, beta1, beta2, eps;
	int fused;
	Loc loc;
} Optimizer;

struct Graph {
	const char *name;
	Loc loc;
	struct Module *mod;
	VEC(Value) vals;
	VEC(Node) nodes;
	VEC(Stream) streams;  /* [0] is default */
	VEC(Event) events;
	VEC(ValId) inputs, params, consts; /* declaration order */
	VEC(ValId) rets;
	Loc retloc;
	Optimizer opt;
	Map valmap;           /* name -> ValId */
	Map streammap, eventmap;
};

/* Pseudo ops: statements that are not ops of the table. */
enum {
	OP_DEL = OP__N,  /* opnd[0]: the value */
	OP_OFFLOAD,      /* opnd[0]: the value */
	OP_BACKWARD,     /* opnd[0]: the loss; attr 0 grad_sync (AT_STR, set or
	                    not); marks where backward stands. With
	                    NF_BACKWARD set on later nodes, it is derived. */
	OP_BACKWARD_END, /* closes a derived block */
	OP_TOTAL
};
const char *op_name(int op);

typedef struct {
	const char *name;
	int64_t n;
	Loc loc;
} DimDecl;

typedef struct Module {
	Arena *arena;
	Diag *diag;
	VEC(DimDecl) dims;
	VEC(Graph *) graphs;
	Map dimmap;
} Module;

Graph *ir_graph_new(Module *m, const char *name, Loc loc);
ValId ir_value_new(Graph *g, const char *name, ValKind k, Loc loc);
/* Appends a node; operands, results and attributes are arena copies. */
NodeId ir_node_add(Graph *g, const Node *proto);
/* Appends a value called `base` (made unique: base, base.1, ...) and
 * returns it: for compiler-made names. */
ValId ir_value_fresh(Graph *g, const char *base, Loc loc);
/* Finds an attribute of n by name: NULL when the op has no such attribute
 * or it is unset. */
const Attr *ir_attr(const Node *n, const char *name);
int64_t ir_attr_int(const Node *n, const char *name, int64_t dflt);
double ir_attr_float(const Node *n, const char *name, double dflt);
const Type *ir_type(const Graph *g, const Opnd *o); /* NULL unless OK_VAL */

/* ------------------------------------------------------------------ shape.c */

/* PyTorch's result_type over the operands of a pointwise op (tensors by
 * dimension class, scalars as Python scalars).  Returns DT_ERR if none. */
DType shape_result_type(Graph *g, const Node *n, int first, int count);
DType dtype_promote(DType a, DType b);
/* NumPy broadcast of a and b into out; 0 when incompatible. */
int shape_broadcast(const Type *a, const Type *b, Type *out);
/* Normalises a possibly negative dim against rank; -1 when out of range. */
int shape_norm_dim(int64_t dim, int rank);

/* ------------------------------------------------------------------ sema.c */

/* Builds checked IR graphs from the AST.  dims_override: -D values. */
typedef struct {
	const char *name;
	int64_t n;
	int used;
} DimOverride;

int sema_module(Module *m, AstFile *f, DimOverride *ov, int nov);

/* ------------------------------------------------------------------ verify.c */

/* Checks IR invariants; an invariant broken is an internal fault (ICE)
 * naming the pass that broke it. */
void verify_graph(Graph *g, const char *after_pass);

/* ------------------------------------------------------------------ print.c */

/* Prints the module as a .sg program that parses back to the same IR. */
void print_module(FILE *f, Module *m, const char *only_graph);
void print_graph(FILE *f, Graph *g);

/* ------------------------------------------------------------------ passes.c */

typedef struct {
	int allow_races;
	int opt_level;
	const char *dump_after; /* NULL, a pass name, or "all" */
} PassOptions;

/* Runs the pipeline (a straight list, verifier after each) over every
 * graph.  Returns 0 when a diagnostic error stopped it. */
int passes_run(Module *m, const PassOptions *po);
int passes_known(const char *name);

#endif /* SGC_H */
